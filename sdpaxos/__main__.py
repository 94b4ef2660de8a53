"""``python -m sdpaxos <command>``: the library's commands.

* ``certs``: a cluster CA and node and client certificates for mutual TLS
  (:mod:`sdpaxos.runtime.certs`; ``python -m sdpaxos certs --help``).
* ``node``, ``local``, ``status``, ``admin``: run and inspect nodes
  (:mod:`sdpaxos.runtime.cli`).
* ``fuzz``: throw random and mutated frames at a live node and check that it
  keeps serving and agreeing with its peers (:mod:`sdpaxos.testing.fuzz`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

_USAGE = "usage: python -m sdpaxos {certs,node,local,status,admin,fuzz} [--help | options]"
_RUNTIME_COMMANDS = frozenset({"node", "local", "status", "admin"})


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "certs":
        from sdpaxos.runtime.certs import main as certs_main

        return certs_main(args[1:])
    if args and args[0] == "fuzz":
        from sdpaxos.testing.fuzz import main as fuzz_main

        return fuzz_main(args[1:])
    if args and args[0] in _RUNTIME_COMMANDS:
        from sdpaxos.runtime.cli import main as cli_main

        return cli_main(args)
    print(_USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
