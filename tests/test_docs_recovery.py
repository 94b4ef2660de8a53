"""docs/recovery.md names only what exists (docs that cannot rot).

Every name the design document writes in code font must resolve to something
real: a ``Replica`` method or attribute, a message or record class and its
dataclass fields, a ``ClusterConfig`` field, a name in an ``sdpaxos.core``
module, a definition in ``tla/SDPaxos.tla``, a regression test, or a file. The
bugs table must cover bugs 1-14 and every regression test; the model's actions
must all be mapped; names of the old design may appear only in the bugs table;
and every "docs/recovery.md section N" reference in the code and the spec must
point at a section that exists.
"""

from __future__ import annotations

import importlib
import inspect
import random
import re
from dataclasses import fields, is_dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.replica import Replica

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "recovery.md"
SPEC = ROOT / "tla" / "SDPaxos.tla"
BUGS = ROOT / "tests" / "core" / "test_recovery_bugs.py"

MODULES: dict[str, ModuleType] = {
    name: importlib.import_module(f"sdpaxos.core.{name}")
    for name in (
        "config",
        "errors",
        "messages",
        "ready",
        "replica",
        "storage",
        "types",
        "view_change",
        # The shared pieces and the roles of the split core.
        "app",
        "clog",
        "olog",
        "quorum",
        "outbox",
        "validate",
        "context",
        "views",
        "proximity",
        "reactions",
        "command_leader",
        "acceptor",
        "sequencer",
        "learner",
        "executor",
        "election",
        "recovery",
        "reads",
        "straggler",
        "restore",
        "snapshots",
        "sessions",
    )
}
MESSAGES = {cls.__name__: cls for cls in MODULES["messages"].MESSAGE_TYPES}
RECORDS = {cls.__name__: cls for cls in MODULES["storage"].Record.__args__}

#: Names of the old design: allowed only in the bugs table (section 14), as history.
OLD_NAMES = (
    "_bases",
    "_o_known_upto",
    "_adopt_view",
    "_ticks",
    "trim",
    "per-view base",
    "OAccepted.base",
    "ViewPromised(v, seq)",
    "ViewPromised(v, -1)",
    "ViewPromised(view, sequencer)",
)
BUGS_SECTION = "14"
MODEL_SECTION = "15"

IDENT = r"[A-Za-z_]\w*"
NAME_RE = re.compile(rf"^{IDENT}(?:\.{IDENT})*$")
CALL_RE = re.compile(rf"^(?P<head>{IDENT}(?:\.{IDENT})*)\((?P<args>[^()]*)\)$")
PATH_RE = re.compile(r"^[\w.-]+(?:/[\w.-]+)+/?$")
CAMEL_RE = re.compile(r"^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")
CONST_RE = re.compile(r"^[A-Z]{2,}(?:_[A-Z]{2,})+$")
SNAKE_RE = re.compile(r"^[a-z_][a-z0-9_]*$")
#: Lower-case names with an underscore inside a formula, e.g. ``lease_ms + ...``.
FORMULA_NAME_RE = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
#: Replica members inside a formula, e.g. ``o_from = _exec_slot``.
FORMULA_MEMBER_RE = re.compile(r"(?<![\w.])_[a-z]\w*")


class _NoApp:
    def apply(self, payload: bytes) -> bytes:
        return payload


# ------------------------------------------------------------------ the document


def _doc() -> str:
    return DOC.read_text()


def _sections(text: str) -> dict[str, str]:
    """Section number ("2", "2.3") -> its text, headings included."""
    out: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines(keepends=True):
        m = re.match(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", line)
        if m:
            current = m.group(1)
            out[current] = ""
            top = current.split(".")[0]
            if top != current:
                out.setdefault(top, "")
        if current is not None:
            out[current] += line
            top = current.split(".")[0]
            if top != current:
                out[top] += line
    return out


def _spans(text: str) -> list[str]:
    """Inline code spans, outside fenced blocks."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [s.strip() for s in re.findall(r"`([^`\n]+)`", text)]


# ------------------------------------------------------------------ what exists


@cache
def _replica() -> Replica:
    return Replica(ClusterConfig(replicas=5), 0, _NoApp(), rng=random.Random(0))


@cache
def _live_parts() -> dict[type, Any]:
    """Class -> a live instance of it inside a replica (roles and shared pieces),
    so that ``Election.candidate`` (an attribute set in ``__init__``) resolves."""
    rep = _replica()
    parts: dict[type, Any] = {}
    for value in [*vars(rep).values(), *(getattr(rep.ctx, n) for n in type(rep.ctx).__slots__)]:
        parts.setdefault(type(value), value)
    return parts


def _replica_member(name: str) -> bool:
    return hasattr(Replica, name) or name in vars(_replica())


def _members(cls: type) -> set[str]:
    """Dataclass or named-tuple fields and properties of ``cls``."""
    names = {f.name for f in fields(cls)} if is_dataclass(cls) else set()
    names |= set(getattr(cls, "_fields", ()))
    names |= {n for n, v in vars(cls).items() if isinstance(v, property)}
    return names


@cache
def _core_classes() -> dict[str, type]:
    return {
        name: obj
        for module in MODULES.values()
        for name, obj in vars(module).items()
        if inspect.isclass(obj) and obj.__module__.startswith("sdpaxos.core")
    }


@cache
def _tla_names() -> set[str]:
    """Every definition and declared constant in any module under tla/ (the spec,
    the trace-constrained wrapper, the scenarios)."""
    names: set[str] = set()
    for module in ROOT.glob("tla/*.tla"):
        text = module.read_text()
        names |= set(re.findall(r"^([A-Za-z]\w*)\s*(?:\([^)]*\))?\s*==", text, flags=re.M))
        for block in re.findall(r"^CONSTANTS?\b(.*?)(?=^\S)", text, flags=re.M | re.S):
            names |= set(re.findall(r"^\s+([A-Za-z]\w*)", block, flags=re.M))
    return names


@cache
def _tla_definitions() -> dict[str, str]:
    """Every top-level definition of the spec -> its body."""
    text = SPEC.read_text()
    heads = list(re.finditer(r"^([A-Za-z]\w*)\s*(?:\([^)]*\))?\s*==", text, flags=re.M))
    return {
        m.group(1): text[m.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        for i, m in enumerate(heads)
    }


def _params(fn: Any) -> set[str]:
    return set(inspect.signature(fn).parameters) - {"self"}


@cache
def _snake_names() -> set[str]:
    """Lower-case names the document may use bare."""
    names = {f.name for f in fields(ClusterConfig)}
    names |= set(dir(Replica)) | set(vars(_replica()))
    for cls in _core_classes().values():
        if is_dataclass(cls) or hasattr(cls, "_fields"):
            names |= _members(cls)
    for module in MODULES.values():
        names |= set(vars(module))
        for obj in vars(module).values():
            if inspect.isfunction(obj) and obj.__module__ == module.__name__:
                names |= _params(obj)
    for name, member in vars(Replica).items():
        if inspect.isfunction(member) and (name == "__init__" or not name.startswith("_")):
            names |= _params(member)
    return names


def _resolve(name: str) -> Any:
    """The object a dotted name in the document stands for; raises LookupError."""
    head, *rest = name.split(".")
    classes = _core_classes()
    if head in classes:
        cls = classes[head]
        if not rest:
            return cls
        if len(rest) == 1 and is_dataclass(cls):
            if rest[0] not in _members(cls):
                raise LookupError(f"{head} has no field {rest[0]!r}")
            return getattr(cls, rest[0], None)
        if len(rest) == 1 and hasattr(cls, rest[0]):
            return getattr(cls, rest[0])
        if len(rest) == 1 and cls is Replica and rest[0] in vars(_replica()):
            return getattr(_replica(), rest[0])
        live = _live_parts().get(cls)
        if len(rest) == 1 and live is not None and hasattr(live, rest[0]):
            return getattr(live, rest[0])
        raise LookupError(f"{name} does not exist")
    if head == "sdpaxos":
        try:
            return importlib.import_module(name)
        except ImportError:
            raise LookupError(f"no module {name}") from None
    if head in MODULES and rest:
        obj: Any = MODULES[head]
        for part in rest:
            if not hasattr(obj, part):
                raise LookupError(f"{name} does not exist")
            obj = getattr(obj, part)
        return obj
    if head.startswith("_"):
        if not _replica_member(head):
            raise LookupError(f"Replica has no member {head!r}")
        obj = getattr(_replica(), head)
        for part in rest:
            if not hasattr(obj, part):
                raise LookupError(f"{name} does not exist")
            obj = getattr(obj, part)
        return obj
    if rest:  # e.g. stats.invariant_alarms: a path from a replica
        obj = _replica()
        for part in [head, *rest]:
            if not hasattr(obj, part):
                raise LookupError(f"{name} does not exist")
            obj = getattr(obj, part)
        return obj
    if CAMEL_RE.match(head):
        if head in _tla_definitions():
            return _tla_definitions()[head]
        if head in _tla_names():
            return head
        raise LookupError(f"{head} is neither a core class nor a TLA+ definition")
    if CONST_RE.match(head):
        for module in MODULES.values():
            if head in vars(module):
                return vars(module)[head]
        raise LookupError(f"no core module defines {head}")
    if SNAKE_RE.match(head) and len(head) > 1:  # single letters are math
        if head in _snake_names():
            for module in MODULES.values():
                if head in vars(module):
                    return vars(module)[head]
            return getattr(_replica(), head, None)
        raise LookupError(f"{head!r} is not a config field, replica member or core name")
    return None  # math such as ``W`` or ``S_W``: not a name


def _problem(span: str) -> str | None:
    """Why ``span`` names something that does not exist, or None."""
    if span.startswith("test_"):
        defined = re.findall(r"^def (test_\w+)", BUGS.read_text(), flags=re.M)
        return None if span in defined else f"no regression test {span}"
    if PATH_RE.match(span):
        return None if (ROOT / span).exists() else f"no file {span}"
    try:
        call = CALL_RE.match(span)
        if call:
            target = _resolve(call.group("head"))
            args = [a.split("=")[0].strip() for a in call.group("args").split(",")]
            args = [a for a in args if re.fullmatch(IDENT, a)]
            if inspect.isclass(target) and is_dataclass(target):
                known = _members(target)
            elif callable(target):
                known = _params(target)
            else:
                return f"{span}: {call.group('head')} is not a class or function"
            missing = [a for a in args if a not in known]
            return f"{span}: no {missing}" if missing else None
        if NAME_RE.match(span):
            _resolve(span)
            return None
        unknown = [n for n in FORMULA_NAME_RE.findall(span) if n not in _snake_names()]
        unknown += [n for n in FORMULA_MEMBER_RE.findall(span) if not _replica_member(n)]
        return f"{span}: unknown {unknown}" if unknown else None
    except LookupError as exc:
        return f"{span}: {exc}"


# ------------------------------------------------------------------------- tests


def test_every_name_in_code_font_exists() -> None:
    problems = sorted({p for s in _spans(_doc()) if (p := _problem(s))})
    assert not problems, "docs/recovery.md names things that do not exist:\n" + "\n".join(problems)


def test_messages_records_and_their_fields_exist() -> None:
    """The named classes are checked field by field (the generic check covers them;
    this one makes sure the document does name them all)."""
    spans = set(_spans(_doc()))
    heads = {m.group("head") for s in spans if (m := CALL_RE.match(s))}
    heads |= {s.split(".")[0] for s in spans if NAME_RE.match(s)}
    assert set(MESSAGES) <= heads, f"messages never named: {set(MESSAGES) - heads}"
    assert set(RECORDS) <= heads, f"records never named: {set(RECORDS) - heads}"
    for span in spans:
        m = re.match(rf"^({IDENT})\.({IDENT})$", span)
        if m and m.group(1) in {**MESSAGES, **RECORDS}:
            cls = {**MESSAGES, **RECORDS}[m.group(1)]
            assert m.group(2) in _members(cls), f"{span}: not a field"


def test_config_fields_named_exist() -> None:
    config_like = re.compile(r"^[a-z][a-z0-9_]*_(?:ms|ppm|pct|max|min|rtts|strikes)$")
    spans = [s for s in _spans(_doc()) if not s.startswith("test_")]
    names = {n for s in spans for n in FORMULA_NAME_RE.findall(s)}
    other = {n for cls in [*MESSAGES.values(), *RECORDS.values()] for n in _members(cls)}
    other |= {"now_ms"}  # the driver's time, a parameter of tick/step/read
    # Members of the roles and shared pieces (``Election.lease_until_ms``) are not config.
    other |= {
        n
        for part in _live_parts().values()
        if not isinstance(part, ClusterConfig)
        for n in dir(part)
    }
    named = {n for n in names if config_like.match(n) and not _replica_member(n)} - other
    config_fields = {f.name for f in fields(ClusterConfig)}
    assert named, "the document names no ClusterConfig field"
    assert named <= config_fields, f"not ClusterConfig fields: {sorted(named - config_fields)}"


def test_bugs_table_covers_bugs_1_to_14_and_every_regression_test() -> None:
    """The review's thirteen, and the fourteenth found after the redesign."""
    section = _sections(_doc())[BUGS_SECTION]
    assert "thirteen review bugs" in section.splitlines()[0]
    rows = {int(m.group(1)): m.group(0) for m in re.finditer(r"^\| (\d+) \|.*$", section, re.M)}
    assert sorted(rows) == list(range(1, 15)), f"bug rows: {sorted(rows)}"
    for bug, row in rows.items():
        assert f"`test_bug{bug:02d}" in row, f"bug {bug}'s row names no test_bug{bug:02d}_..."
    defined = set(re.findall(r"^def (test_bug\w+)", BUGS.read_text(), flags=re.M))
    named = set(re.findall(r"`(test_bug\w+)`", section))
    assert defined == named, f"unnamed: {defined - named}; not defined: {named - defined}"


def test_old_design_names_only_in_the_bugs_table() -> None:
    sections = _sections(_doc())
    for number, text in sections.items():
        if number == BUGS_SECTION or number.startswith(BUGS_SECTION + "."):
            continue
        if "." not in number:  # top-level sections include their subsections
            for old in OLD_NAMES:
                assert old not in text, f"section {number} mentions {old!r}"
    preamble = _doc().split("\n## ", 1)[0]
    for old in OLD_NAMES:
        assert old not in preamble, f"the preamble mentions {old!r}"


def test_model_names_are_tla_definitions_and_every_action_is_mapped() -> None:
    section = _sections(_doc())[MODEL_SECTION]
    defs = _tla_definitions()
    first_column = {
        name
        for row in re.findall(r"^\| ([^|]+) \|", section, flags=re.M)
        for name in re.findall(r"`(\w+)`", row)
    }
    assert first_column, "the model section has no tables"
    missing = sorted(n for n in first_column if n not in defs)
    assert not missing, f"not defined in tla/SDPaxos.tla: {missing}"
    next_body = defs["Next"]
    actions = {
        name
        for name in re.findall(r"\b([A-Z]\w*)\b", next_body)
        if name in defs and "'" in defs[name]
    }
    unmapped = sorted(actions - first_column)
    assert not unmapped, f"actions of Next not in section {MODEL_SECTION}: {unmapped}"


def _references() -> list[tuple[str, str]]:
    found = []
    pattern = re.compile(r"recovery\.md`{0,2}\s+section\s+(\d+(?:\.\d+)?)")
    files = [*ROOT.glob("sdpaxos/**/*.py"), *ROOT.glob("tla/*.tla"), *ROOT.glob("tla/*.md")]
    for path in [*files, ROOT / "README.md"]:
        text = re.sub(r"\s+", " ", path.read_text())
        found += [(str(path.relative_to(ROOT)), m.group(1)) for m in pattern.finditer(text)]
    return found


@pytest.mark.parametrize(("where", "number"), _references())
def test_references_into_the_document_resolve(where: str, number: str) -> None:
    assert number in _sections(_doc()), f"{where} cites docs/recovery.md section {number}"


def test_the_checker_catches_a_broken_name() -> None:
    """A name that does not exist is reported, whatever kind of name it is."""
    for bad in (
        "_no_such_method",
        "Replica.no_such_thing",
        "OAccept.no_such_field",
        "Vote(o_from, no_such_field)",
        "ViewPromised(view, sequencer)",
        "no_such_config_ms",
        "HandleNoSuchThing",
        "test_bug99_nothing",
        "tla/NoSuch.tla",
        "lease_ms + no_such_margin_ms",
        "o_from = _no_such_slot",
    ):
        assert _problem(bad), f"{bad!r} was accepted"
    for good in ("OAccept.rebuilt", "Vote.est_base", "tick(now_ms)", "ReadyIsDurable"):
        assert _problem(good) is None, _problem(good)
