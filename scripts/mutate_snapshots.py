"""Break each snapshot rule in turn and check that its test fails (the review lesson:
delete the line a test claims to test and watch it fail). Run from the repository root:
``python scripts/mutate_snapshots.py``; every line must say CAUGHT."""

import subprocess
import sys
from pathlib import Path

MUTS = [
    (
        "sdpaxos/core/acceptor.py",
        "        if start < floor:\n            return CPromise(",
        "        if False:\n            return CPromise(",
        "tests/core/test_snapshots.py::test_a_compacted_acceptor_answers_compacted_and_the_recoverer_installs",
    ),
    (
        "sdpaxos/core/election.py",
        "        if m.snapshot > c.o_from:",
        "        if False:",
        "tests/core/roles/test_snapshot_roles.py",
    ),
    (
        "sdpaxos/core/learner.py",
        "        if 0 <= o_from < olog.base or",
        "        if False and",
        "tests/core/roles/test_snapshot_roles.py",
    ),
    (
        "sdpaxos/core/snapshots.py",
        "captured.slot <= self.majority_executed",
        "True",
        "tests/core/test_snapshots.py::test_no_compaction_below_what_a_majority_executed",
    ),
    (
        "sdpaxos/core/snapshots.py",
        "        if t is not None and now - t.asked_ms >= self.s.config.learn_ms:",
        "        if False:",
        "tests/core/test_snapshots.py::test_a_lost_chunk_is_asked_for_again_from_where_the_transfer_stopped",
    ),
    (
        "sdpaxos/core/replica.py",
        "        if snapshot is not None:\n            self.snapshots.restart_from(snapshot)",
        "        if False:\n            self.snapshots.restart_from(snapshot)",
        "tests/core/test_snapshots.py::test_a_restart_starts_from_the_snapshot_not_slot_zero",
    ),
    (
        "sdpaxos/core/recovery.py",
        "        if m.compacted > rec.start:",
        "        if False:",
        "tests/core/test_snapshots.py::test_a_compacted_acceptor_answers_compacted_and_the_recoverer_installs",
    ),
    (
        "sdpaxos/core/storage.py",
        "            if rec.index >= executed[rec.owner]:\n                kept.append(rec)",
        "            kept.append(rec)",
        "tests/core/test_snapshots.py::test_compaction_frees_the_logs_and_truncates_the_records",
    ),
    (
        "sdpaxos/core/storage.py",
        "                if established is not None:\n                    kept.extend(",
        "                if False:\n                    kept.extend(",
        "tests/core/test_snapshots.py",
    ),
    (
        "sdpaxos/core/storage.py",
        "    cut = max(0, slot - start)\n    if cut >= len(values):",
        "    cut = len(values)\n    if cut >= len(values):",
        "tests/sim/test_snapshot_storage.py",
    ),
]
missed = 0
for path, old, new, test in MUTS:
    src = Path(path).read_text()
    assert src.count(old) == 1, (path, old)
    Path(path).write_text(src.replace(old, new))
    try:
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", test],
            capture_output=True,
            text=True,
            timeout=600,
        )
        print("CAUGHT" if r.returncode else "MISSED", path, old.strip()[:60])
        missed += r.returncode == 0
    finally:
        Path(path).write_text(src)
sys.exit(1 if missed else 0)
