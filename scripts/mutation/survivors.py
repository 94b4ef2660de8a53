"""List a cosmic-ray session's mutants by outcome, one line each with its source line.

Usage (from the repository root): ``python scripts/mutation/survivors.py SESSION.sqlite
[OUTCOME]``; OUTCOME is ``survived`` (the default), ``killed``, ``incompetent`` or
``all``. Prints ``line:col operator occurrence | the line as it is now`` so each
survivor can be looked at without the full ``cr-report --show-diff`` output.
"""

import sqlite3
import sys
from pathlib import Path


def main() -> None:
    db, outcome = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "survived")
    rows = sqlite3.connect(db).execute(
        "SELECT s.module_path, s.start_pos_row, s.start_pos_col, s.operator_name,"
        " s.occurrence, r.test_outcome, r.worker_outcome FROM mutation_specs s"
        " JOIN work_results r ON r.job_id = s.job_id ORDER BY s.start_pos_row, s.start_pos_col"
    )
    for path, row, col, operator, occurrence, test_outcome, worker_outcome in rows:
        if outcome != "all" and outcome.upper() not in (test_outcome or "", worker_outcome or ""):
            continue
        line = Path(path).read_text().splitlines()[row - 1].strip()
        name = operator.removeprefix("core/")
        print(f"{row}:{col} {name} #{occurrence} [{test_outcome}] | {line}")


if __name__ == "__main__":
    main()
