"""``python -m sdpaxos <command>``: the library's commands.

* ``certs``: a cluster CA and node and client certificates for mutual TLS
  (:mod:`sdpaxos.runtime.certs`; ``python -m sdpaxos certs --help``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

_USAGE = "usage: python -m sdpaxos certs [--help | options]"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "certs":
        from sdpaxos.runtime.certs import main as certs_main

        return certs_main(args[1:])
    print(_USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
