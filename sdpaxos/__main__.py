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

_COMMANDS = {
    "certs": "a cluster CA, and node and client certificates for mutual TLS",
    "node": "run one replica",
    "local": "a cluster of node processes on this machine",
    "status": "every node's status",
    "admin": "partition, heal, snapshot, transfer-sequencer",
    "fuzz": "hostile frames at a live node, which must keep serving and agreeing",
}
_RUNTIME_COMMANDS = frozenset({"node", "local", "status", "admin"})
_HELP = "\n".join(
    [
        "usage: python -m sdpaxos COMMAND [--help | options]",
        "",
        "commands:",
        *(f"  {name:<8} {what}" for name, what in _COMMANDS.items()),
        "",
        "python -m sdpaxos COMMAND --help: that command's options.",
    ]
)


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
    if args and args[0] in ("-h", "--help"):
        print(_HELP)
        return 0
    what = f"unknown command {args[0]!r}" if args else "a command is needed"
    print(
        f"python -m sdpaxos: error: {what}: one of {', '.join(_COMMANDS)} (see --help)",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
