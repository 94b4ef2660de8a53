"""``python -m sdpaxos.check FILE --format FORMAT``: is this history linearizable?

Examples::

    python -m sdpaxos.check etcd_001.log --format etcd
    python -m sdpaxos.check c50-bad.txt --format kv --timeout 60 --png c50-bad.png
    python -m sdpaxos.check history.jsonl --format jsonl --model kv --html history.html
    python -m sdpaxos.check knossos.edn --format edn --model cas-register --initial 0
    python -m sdpaxos.check h.jsonl --format jsonl --model mypackage.models:Counter

Prints the verdict on the first line (``linearizable``, ``not linearizable``
or ``unknown``), then a summary and, for a failure, the witness.

Exit status: 0 linearizable, 1 not linearizable, 2 unknown (the deadline
passed first), 3 the history could not be checked (bad arguments, unreadable
or malformed file, a model that cannot be loaded, a picture that cannot be
written); the message names the file and line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from sdpaxos.check.checker import ModelError, Verdict, check
from sdpaxos.check.formats import ALIASES, FORMATS, FormatError, load
from sdpaxos.check.history import HistoryError
from sdpaxos.check.model import Model
from sdpaxos.check.models import MODELS, Register

EXIT_LINEARIZABLE = 0
EXIT_NOT_LINEARIZABLE = 1
EXIT_UNKNOWN = 2
EXIT_ERROR = 3

_EXIT = {
    Verdict.LINEARIZABLE: EXIT_LINEARIZABLE,
    Verdict.NOT_LINEARIZABLE: EXIT_NOT_LINEARIZABLE,
    Verdict.UNKNOWN: EXIT_UNKNOWN,
}


class _Usage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, which would read as "unknown": use 3."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise _Usage(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m sdpaxos.check",
        description="Check a history of concurrent operations for linearizability.",
        epilog="Exit status: 0 linearizable, 1 not linearizable, 2 unknown, 3 error.",
    )
    p.add_argument("file", help="the history file")
    p.add_argument(
        "--format",
        required=True,
        choices=[*FORMATS, *ALIASES],
        help="etcd (Jepsen etcd log), kv (kv EDN lines), edn (Knossos history), jsonl (ours)",
    )
    p.add_argument(
        "--model",
        help=f"one of {', '.join(MODELS)}, or module:Class for your own "
        "(default: the format's: etcd cas-register, kv kv, edn cas-register or kv, jsonl kv)",
    )
    p.add_argument(
        "--initial",
        metavar="JSON",
        help="initial value of a register or cas-register, as a JSON literal (default null)",
    )
    p.add_argument("--timeout", type=float, metavar="S", help="give up after S seconds: unknown")
    p.add_argument(
        "--processes",
        type=int,
        metavar="N",
        help="worker processes (default: this process first, workers if it takes over 0.5 s)",
    )
    p.add_argument(
        "--all", action="store_true", help="check every sub-history even after one fails"
    )
    p.add_argument("--html", metavar="OUT.html", help="write the picture as a self-contained page")
    p.add_argument("--png", metavar="OUT.png", help="write the picture as a PNG (needs matplotlib)")
    return p


def _model(spec: str | None, initial: str | None, default: Model[Any]) -> Model[Any]:
    if spec is None and initial is None:
        return default
    value: Any = None
    if initial is not None:
        try:
            value = json.loads(initial)
        except json.JSONDecodeError as e:
            raise _Usage(f"--initial: not a JSON literal: {e.msg}") from None
    if spec is None:
        if not isinstance(default, Register):
            raise _Usage("--initial only applies to register and cas-register")
        return type(default)(value)
    if spec in MODELS:
        factory = MODELS[spec]
        if initial is not None:
            if not (isinstance(factory, type) and issubclass(factory, Register)):
                raise _Usage("--initial only applies to register and cas-register")
            return factory(value)
        return factory()
    if ":" not in spec:
        raise _Usage(
            f"--model: unknown model {spec!r} (known: {', '.join(MODELS)}, or module:Class)"
        )
    module_name, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise _Usage(f"--model {spec}: cannot load it: {e}") from None
    model = obj() if isinstance(obj, type) else obj
    if not isinstance(model, Model):
        raise _Usage(f"--model {spec}: not a sdpaxos.check.Model")
    return model


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        loaded = load(args.file, args.format)
        model = _model(args.model, args.initial, loaded.model)
        if args.timeout is not None and args.timeout <= 0:
            raise _Usage("--timeout must be positive")
        if args.processes is not None and args.processes < 1:
            raise _Usage("--processes must be at least 1")
    except _Usage as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except FormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    try:
        result = check(
            loaded.history,
            model,
            timeout_s=args.timeout,
            processes=args.processes,
            stop_on_failure=not args.all,
        )
    except (HistoryError, ModelError) as e:
        print(f"error: {args.file}: {e}", file=sys.stderr)
        return EXIT_ERROR
    print(result.describe())
    try:
        if args.html:
            from sdpaxos.check.render import write_html

            print(f"picture: {write_html(result, args.html)}")
        if args.png:
            from sdpaxos.check.render import write_png

            print(f"picture: {write_png(result, args.png)}")
    except (OSError, ImportError) as e:
        print(f"error: cannot write the picture: {e}", file=sys.stderr)
        return EXIT_ERROR
    return _EXIT[result.verdict]


if __name__ == "__main__":
    sys.exit(main())
