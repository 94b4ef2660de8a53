"""History file formats: Jepsen etcd logs, kv lines, Knossos EDN, and our JSON lines.

Each reader turns text into a list of :class:`~sdpaxos.check.Operation` and
names the model the format implies. Every problem raises :class:`FormatError`
naming the file and line. A file with no operation (empty, or only a nemesis's
events, or only failed operations) is an empty history, not an error: it is
linearizable, as Knossos and Porcupine say.

``etcd`` (also ``jepsen-etcd-log``)
    Jepsen log lines ``INFO  jepsen.util - <process> <type> <f> <value>`` for
    one compare-and-set register starting at ``nil``. ``:fail :cas`` means
    the cas ran and its compare failed; ``:fail :read :timed-out`` is a read
    with an unknown result; other ``:fail`` lines did not happen; ``:info``
    lines and invocations never completed are open to the end. Other log
    lines (another logger) are skipped. Times are line numbers.

``kv`` (also ``kv-edn-lines``)
    One EDN map per line, ``{:process P, :type :invoke|:ok|:fail|:info, :f
    :get|:put|:append|:delete|:cas, :key K, :value V}``, checked against a
    map in which an absent key reads as ``""``. Times are line numbers.

``edn``
    A Knossos/Jepsen history: an EDN vector or list of maps (or the maps one
    after another) with ``:process``, ``:type``, ``:f`` and ``:value`` (and
    ``:key`` for maps). Knossos conventions: ``:fail`` means the operation
    did not happen, ``:info`` is open to the end, an ``:ok`` read of ``nil``
    is unconstrained, ``:nemesis`` operations are skipped. Times are the
    positions of the events.

``jsonl``
    The project's own format, one JSON object per line::

        {"client": 3, "input": ["put", "k", "v"], "output": null,
         "invoke": 0.0125, "complete": 0.0131, "status": "ok"}

    ``client`` (string or integer) and ``input`` (JSON arrays become tuples)
    are required; ``invoke`` is a number; ``complete`` is a number, or null
    or absent for an operation whose outcome is unknown; ``status`` is
    ``"ok"`` (the default when ``complete`` is set), ``"info"`` (outcome
    unknown: open to the end, whatever ``complete`` says) or ``"fail"`` (did
    not happen: skipped); ``output`` is any JSON value, and absent means
    unknown. ``"meta"`` (string) is optional. Blank lines are skipped. Times
    are in any unit, only their order matters.

:func:`parse` works on text (pure); :func:`load` and :func:`write_jsonl`
touch files.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sdpaxos.check.edn import EdnError, Keyword, read_one, read_sequence
from sdpaxos.check.history import UNKNOWN, Operation
from sdpaxos.check.model import Model
from sdpaxos.check.models import CasRegister, KeyValue

FORMATS: Final = ("etcd", "kv", "edn", "jsonl")
ALIASES: Final = {"jepsen-etcd-log": "etcd", "kv-edn-lines": "kv", "json-lines": "jsonl"}


class FormatError(ValueError):
    """A history file that cannot be read: ``source`` and 1-based ``line`` say where."""

    def __init__(self, source: str, line: int | None, message: str) -> None:
        where = source if line is None else f"{source}:{line}"
        super().__init__(f"{where}: {message}")
        self.source = source
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Loaded:
    """A history read from a file, with the model its format implies."""

    history: list[Operation]
    model: Model[Any]
    format: str


def _hashable(value: Any) -> Any:
    """EDN/JSON values as hashable Python values (lists become tuples)."""
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return frozenset((_hashable(k), _hashable(v)) for k, v in value.items())
    if isinstance(value, Keyword):
        return value.name
    return value


class _Pairing:
    """Matches completions to invocations per process and builds operations."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.pending: dict[Any, tuple[int, str, Any, int]] = {}
        self.ops: list[Operation] = []
        self.keyed = False

    def invoke(self, process: Any, f: str, value: Any, time: int, line: int) -> None:
        if process in self.pending:
            prev = self.pending[process][3]
            raise FormatError(
                self.source,
                line,
                f"process {process} invokes again before its operation from line {prev} completed",
            )
        self.pending[process] = (time, f, value, line)

    def complete(self, process: Any, f: str, line: int) -> tuple[int, str, Any, int]:
        if process not in self.pending:
            raise FormatError(
                self.source, line, f"process {process} completes an operation it never invoked"
            )
        call = self.pending.pop(process)
        if call[1] != f:
            raise FormatError(
                self.source,
                line,
                f"completes :{f} but the invocation on line {call[3]} was :{call[1]}",
            )
        return call

    def add(
        self, process: Any, inp: Any, out: Any, invoke: int, complete: int | None, meta: str
    ) -> None:
        self.ops.append(Operation(process, inp, out, invoke, complete, meta))

    def finish(self, make_input: Any) -> list[Operation]:
        """Invocations never completed stay open to the end."""
        for process, (time, f, value, line) in self.pending.items():
            self.add(process, make_input(f, value, line), UNKNOWN, time, None, "never completed")
        self.pending.clear()
        return self.ops


# --- etcd -----------------------------------------------------------------

_ETCD_MARK: Final = "jepsen.util -"
_ETCD_FS: Final = ("read", "write", "cas")


def parse_etcd(text: str, source: str = "<text>") -> Loaded:
    """Read a Jepsen etcd log (see the module docstring for the semantics)."""
    pairing = _Pairing(source)

    def make_input(f: str, value: Any, line: int) -> Any:
        if f == "read":
            return ("read", None)
        if f == "write":
            return ("write", value)
        if not (isinstance(value, tuple) and len(value) == 2):
            raise FormatError(source, line, f"a cas value must be [old new], got {value!r}")
        return ("cas", value)

    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        mark = raw.find(_ETCD_MARK)
        if mark < 0:
            if raw.split(None, 1)[0] in ("INFO", "WARN", "DEBUG", "ERROR", "TRACE"):
                continue  # another logger's line
            raise FormatError(source, n, f"not a Jepsen log line: {raw.strip()[:60]!r}")
        fields = raw[mark + len(_ETCD_MARK) :].split(None, 3)
        if len(fields) < 4:
            raise FormatError(
                source, n, "expected '<process> <type> <f> <value>' after 'jepsen.util -'"
            )
        proc_text, type_text, f_text, value_text = fields
        if proc_text == ":nemesis":
            continue
        try:
            process: Any = int(proc_text)
        except ValueError:
            raise FormatError(
                source, n, f"the process must be an integer, got {proc_text!r}"
            ) from None
        kind = type_text.lstrip(":")
        f = f_text.lstrip(":")
        if kind not in ("invoke", "ok", "fail", "info"):
            raise FormatError(
                source, n, f"unknown type {type_text!r} (expected :invoke, :ok, :fail or :info)"
            )
        if f not in _ETCD_FS:
            raise FormatError(
                source, n, f"unknown operation {f_text!r} (expected :read, :write or :cas)"
            )
        try:
            value = _hashable(read_one(value_text, n))
        except EdnError as e:
            raise FormatError(source, n, f"bad value {value_text.strip()!r}: {e}") from None
        if kind == "invoke":
            make_input(f, value, n)  # validate now, on the invocation's line
            pairing.invoke(process, f, value, n, n)
            continue
        time, _, call_value, call_line = pairing.complete(process, f, n)
        inp = make_input(f, call_value, call_line)
        meta = ""
        if kind == "info":
            pairing.add(process, inp, UNKNOWN, time, None, f":info on line {n}")
        elif kind == "ok":
            out = value if f == "read" else (True if f == "cas" else None)
            pairing.add(process, inp, out, time, n, meta)
        elif f == "cas":  # :fail :cas — it ran and the compare failed
            pairing.add(process, inp, False, time, n, meta)
        elif f == "read" and value == "timed-out":
            pairing.add(process, inp, UNKNOWN, time, n, meta)
        # any other :fail did not happen
    ops = pairing.finish(make_input)
    return Loaded(ops, CasRegister(), "etcd")


# --- EDN maps (kv lines and Knossos histories) -----------------------------


_ECHOING: Final = frozenset({"write", "put", "append"})


def _op_from_map(
    pairing: _Pairing, form: Any, n: int, index: int, *, nil_read_unknown: bool
) -> None:
    source = pairing.source
    if not isinstance(form, dict):
        raise FormatError(
            source, n, f"expected a map like {{:process 0, :type :invoke, ...}}, got {form!r}"
        )
    try:
        process = form[Keyword("process")]
        kind_kw = form[Keyword("type")]
        f_kw = form[Keyword("f")]
    except KeyError as e:
        raise FormatError(source, n, f"missing {e.args[0]!r}") from None
    if process == Keyword("nemesis"):
        return
    if not isinstance(kind_kw, Keyword) or kind_kw.name not in ("invoke", "ok", "fail", "info"):
        raise FormatError(source, n, f":type must be :invoke, :ok, :fail or :info, got {kind_kw!r}")
    if not isinstance(f_kw, Keyword | str):
        raise FormatError(source, n, f":f must be a keyword, got {f_kw!r}")
    try:
        hash(process)
    except TypeError:
        raise FormatError(
            source, n, f":process must be a number or name, got {process!r}"
        ) from None
    kind = kind_kw.name
    f = f_kw.name if isinstance(f_kw, Keyword) else f_kw
    value = _hashable(form.get(Keyword("value")))
    has_key = Keyword("key") in form
    key = _hashable(form.get(Keyword("key")))
    if kind == "invoke":
        pairing.keyed = pairing.keyed or has_key
        pairing.invoke(process, f, (has_key, key, value), index, n)
        return
    time, _, payload, call_line = pairing.complete(process, f, n)
    inp = _edn_input(f, payload)
    if kind == "fail":
        return
    if kind == "info":
        pairing.add(process, inp, UNKNOWN, time, None, f":info on line {n}")
        return
    if f in ("read", "get"):
        out = UNKNOWN if (nil_read_unknown and value is None) else value
    elif f == "cas":
        out = True
    elif f in _ECHOING:
        out = None  # the completion only echoes what was written
    else:
        out = value
    pairing.add(process, inp, out, time, index, "" if index == n else f"lines {call_line}-{n}")


def _edn_input(f: str, payload: Any, line: int = 0) -> Any:
    """The model input for an EDN invocation; ``payload`` is ``(has_key, key, value)``."""
    has_key, key, value = payload
    if has_key:
        return (f, key) if f == "get" else (f, key, value)
    return (f, value)


def parse_kv_lines(text: str, source: str = "<text>") -> Loaded:
    """Read kv lines: one EDN map per line (see the module docstring)."""
    pairing = _Pairing(source)
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            form = read_one(raw, n)
        except EdnError as e:
            raise FormatError(source, n, f"bad EDN: {e}") from None
        if isinstance(form, dict) and Keyword("key") not in form:
            raise FormatError(source, n, "missing :key (kv lines are key-value operations)")
        _op_from_map(pairing, form, n, n, nil_read_unknown=False)
    return Loaded(pairing.finish(_edn_input), KeyValue(missing=""), "kv")


def parse_edn(text: str, source: str = "<text>") -> Loaded:
    """Read a Knossos/Jepsen EDN history (see the module docstring)."""
    try:
        forms = read_sequence(text)
    except EdnError as e:
        raise FormatError(source, e.line, f"bad EDN: {e}") from None
    pairing = _Pairing(source)
    for index, (form, n) in enumerate(forms):
        _op_from_map(pairing, form, n, index, nil_read_unknown=True)
    ops = pairing.finish(_edn_input)
    model: Model[Any] = KeyValue() if pairing.keyed else CasRegister()
    return Loaded(ops, model, "edn")


# --- JSON lines -------------------------------------------------------------

_JSONL_FIELDS: Final = frozenset(
    {"client", "input", "output", "invoke", "complete", "status", "meta"}
)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse_jsonl(text: str, source: str = "<text>") -> Loaded:
    """Read the project's JSON-lines format (schema in the module docstring)."""
    ops: list[Operation] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise FormatError(source, n, f"bad JSON: {e.msg} (column {e.colno})") from None
        if not isinstance(obj, dict):
            raise FormatError(source, n, "expected a JSON object")
        unknown = set(obj) - _JSONL_FIELDS
        if unknown:
            raise FormatError(source, n, f"unknown field(s) {sorted(unknown)}")
        for name in ("client", "input", "invoke"):
            if name not in obj:
                raise FormatError(source, n, f"missing {name!r}")
        client = obj["client"]
        if not isinstance(client, str | int) or isinstance(client, bool):
            raise FormatError(source, n, f"'client' must be a string or an integer, got {client!r}")
        invoke, complete = obj["invoke"], obj.get("complete")
        if not _number(invoke):
            raise FormatError(source, n, f"'invoke' must be a finite number, got {invoke!r}")
        if complete is not None and not _number(complete):
            raise FormatError(
                source, n, f"'complete' must be a finite number or null, got {complete!r}"
            )
        status = obj.get("status", "ok" if complete is not None else "info")
        if status not in ("ok", "info", "fail"):
            raise FormatError(
                source, n, f'\'status\' must be "ok", "info" or "fail", got {status!r}'
            )
        if status == "ok" and complete is None:
            raise FormatError(source, n, "status \"ok\" needs a 'complete' time")
        if complete is not None and complete < invoke:
            raise FormatError(source, n, f"completes ({complete}) before it is invoked ({invoke})")
        meta = obj.get("meta", f"line {n}")
        if not isinstance(meta, str):
            raise FormatError(source, n, "'meta' must be a string")
        if status == "fail":
            continue
        inp = _hashable(obj["input"])
        if status == "info":
            ops.append(Operation(client, inp, UNKNOWN, invoke, None, meta))
        else:
            out = _hashable(obj["output"]) if "output" in obj else UNKNOWN
            ops.append(Operation(client, inp, out, invoke, complete, meta))
    return Loaded(ops, KeyValue(), "jsonl")


def _json_value(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]
    if isinstance(value, frozenset | set):
        items = [_json_value(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    return value


def to_jsonl(history: Iterable[Operation]) -> str:
    """``history`` in the JSON-lines format (what :func:`parse_jsonl` reads back)."""
    lines = []
    for op in history:
        obj: dict[str, Any] = {"client": op.client, "input": _json_value(op.input)}
        if op.output is not UNKNOWN:
            obj["output"] = _json_value(op.output)
        obj["invoke"] = op.invoke
        obj["complete"] = op.complete
        obj["status"] = "info" if op.complete is None else "ok"
        if op.meta:
            obj["meta"] = op.meta
        lines.append(json.dumps(obj, separators=(", ", ": ")))
    return "\n".join(lines) + "\n"


_PARSERS: Final = {"etcd": parse_etcd, "kv": parse_kv_lines, "edn": parse_edn, "jsonl": parse_jsonl}


def parse(text: str, fmt: str, source: str = "<text>") -> Loaded:
    """Read ``text`` in format ``fmt`` (a name in :data:`FORMATS` or :data:`ALIASES`)."""
    name = ALIASES.get(fmt, fmt)
    if name not in _PARSERS:
        raise FormatError(source, None, f"unknown format {fmt!r} (known: {', '.join(FORMATS)})")
    return _PARSERS[name](text, source)


def load(path: str | Path, fmt: str) -> Loaded:
    """Read the history file at ``path`` in format ``fmt``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(str(p), None, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise FormatError(str(p), None, e.strerror or str(e)) from None
    return parse(text, fmt, str(p))


def write_jsonl(history: Sequence[Operation], path: str | Path) -> Path:
    """Write ``history`` to ``path`` in the JSON-lines format; returns the path."""
    p = Path(path)
    p.write_text(to_jsonl(history), encoding="utf-8")
    return p
