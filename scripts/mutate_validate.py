"""Mutation check of ``sdpaxos/core/validate.py``: every refusal has a test.

Deletes each ``raise PeerMessageError(...)`` in turn (replacing it with ``pass``),
runs the core tests, and lists the raises whose deletion no test noticed. Run
from the repository root: ``python scripts/mutate_validate.py`` (a few minutes).
The file is restored after each mutant, also on interruption.
"""

import re
import subprocess
import sys
from pathlib import Path

TARGET = Path("sdpaxos/core/validate.py")
TESTS = [
    "tests/core/test_rules.py",
    "tests/core/roles",
    "tests/core/test_recovery.py",
    "tests/core/test_reads_and_roles.py",
    "tests/core/test_recovery_bugs.py",
    "tests/unit",
]
TIMEOUT_S = 600


def statement_end(lines: list[str], first: int) -> int:
    """The last line of the (possibly multi-line) statement starting at ``first``."""
    depth = lines[first].count("(") - lines[first].count(")")
    last = first
    while depth > 0:
        last += 1
        depth += lines[last].count("(") - lines[last].count(")")
    return last


def main() -> int:
    source = TARGET.read_text()
    lines = source.split("\n")
    raises = [i for i, line in enumerate(lines) if "raise PeerMessageError(" in line]
    survivors = []
    for k, first in enumerate(raises, 1):
        last = statement_end(lines, first)
        indent = re.match(r"^(\s*)", lines[first]).group(1)  # type: ignore[union-attr]
        mutant = [*lines[:first], indent + "pass  # mutant", *[""] * (last - first)]
        TARGET.write_text("\n".join([*mutant, *lines[last + 1 :]]))
        try:
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TESTS],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
        finally:
            TARGET.write_text(source)
        verdict = "killed" if run.returncode != 0 else "SURVIVED"
        print(f"[{k}/{len(raises)}] line {first + 1}: {verdict}: {lines[first].strip()[:80]}")
        if run.returncode == 0:
            survivors.append(first + 1)
    print(f"survivors: {survivors}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
