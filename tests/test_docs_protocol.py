"""docs/protocol.md describes the protocol with names that exist (docs that cannot rot).

Every name is read from the code and the spec at test time: the message classes
(``MESSAGE_TYPES``), the durable records (``Record``), ``ClusterConfig``'s
dataclass fields, the trace events (the string each ``out.trace("...")`` call in
``sdpaxos/core`` passes), the public names of ``sdpaxos.core``, and the
definitions, constants and variables of ``tla/*.tla``. Checked:

- the messages table (section 4) has one row per message class, listing exactly
  its fields beyond ``src`` and ``view``; the records table (section 13) likewise
  for every durable record;
- every name the document writes in code font exists, and none is private (handler
  methods are being renamed; the document names messages, events, records, config
  fields, public API and spec names only);
- in the names table (section 15) the "trace events" column names only events
  the core emits and the "TLA+" column only names of the spec; every event the
  core emits is named somewhere in the document;
- every "pitfall N" in the repository is an item of section 14, and every
  "docs/protocol.md section N" (and every section the document cites of itself)
  exists;
- no file in the repository cites the research note that docs/protocol.md
  replaces (``ALLOWED_CITERS`` is the explicit exception list; it is empty).

The last tests break names and copies of the document and check that each
breakage is reported.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import keyword
import os
import pkgutil
import re
from collections.abc import Callable, Iterator
from dataclasses import fields, is_dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import sdpaxos.core
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.messages import MESSAGE_TYPES
from sdpaxos.core.storage import Record

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "protocol.md"
CORE = ROOT / "sdpaxos" / "core"

MESSAGES_SECTION = "4"
RECORDS_SECTION = "13"
PITFALLS_SECTION = "14"
NAMES_SECTION = "15"

#: Fields every message has; the messages table lists the others.
COMMON_FIELDS = {"src", "view"}

#: The retired note's file name, split so that this file does not cite it.
RETIRED_NOTE = "PROTOCOL" + ".md"
#: Files allowed to cite it, with the reason. Empty: nothing in the repository may.
#: (sdpaxos/core/replica.py and tla/README.md, which this branch may not edit, would
#: go here while they still cited it; neither does.)
ALLOWED_CITERS: frozenset[str] = frozenset()
#: Directories that are not part of the repository's content (see .gitignore).
SKIP_DIRS = frozenset(
    {
        ".git",
        "__pycache__",
        ".venv",
        "venv",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
        "build",
        "dist",
        "node_modules",
    }
)
SKIP_PATHS = frozenset({"tla/states", "bench/results"})
TEXT_SUFFIXES = frozenset({".py", ".md", ".tla", ".cfg", ".toml", ".sh", ".txt", ".json"})

IDENT = r"[A-Za-z_]\w*"
NAME_RE = re.compile(rf"^{IDENT}(?:\.{IDENT})*$")
CALL_RE = re.compile(rf"^(?P<head>{IDENT}(?:\.{IDENT})*)\((?P<args>[^()]*)\)$")
PATH_RE = re.compile(r"^[\w.-]+(?:/[\w.-]+)+/?$")
IDENT_RE = re.compile(rf"\b{IDENT}\b")
from tests.test_docs_recovery import _spans  # noqa: E402  (one span reader for both docs)
from tests.test_tla_names import TRACE_CALL  # noqa: E402  (one pattern for both checks)

PITFALL_REF = re.compile(r"\bpitfalls?\s+#?(\d+)", re.IGNORECASE)
SECTION_REF = re.compile(r"protocol\.md`{0,2}\s+sections?\s+(\d+(?:\.\d+)?)")
OWN_SECTION_REF = re.compile(r"\bsections?\s+(\d+(?:\.\d+)?)", re.IGNORECASE)
MATH_WORDS = frozenset({"None", "True", "False"})


# ------------------------------------------------------------------ the document


def _doc() -> str:
    return DOC.read_text()


def _sections(text: str) -> dict[str, str]:
    """Section number ("5", "5.4") -> its text, heading included; a top-level
    section includes its subsections."""
    out: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines(keepends=True):
        m = re.match(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", line)
        if m:
            current = m.group(1)
            out[current] = ""
        elif line.startswith("## "):
            current = None
        if current is not None:
            out[current] += line
            top = current.split(".")[0]
            if top != current:
                out[top] += line
    return out


def _tables(text: str) -> list[list[list[str]]]:
    """Markdown tables as rows of cells (header first, the dash row dropped)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def _table(section: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the table whose first header cell is ``first_header``."""
    for table in _tables(section):
        if table[0][0] == first_header:
            header = table[0]
            return [dict(zip(header, row, strict=True)) for row in table[1:]]
    raise AssertionError(f"no table headed {first_header!r}")


def _code_names(cell: str) -> list[str]:
    return [s.strip() for s in re.findall(r"`([^`\n]+)`", cell)]


# ------------------------------------------------------------------ what exists


@cache
def _core_modules() -> tuple[ModuleType, ...]:
    """Every module of sdpaxos.core, subpackages included (they may be split)."""
    modules = [sdpaxos.core]
    for info in pkgutil.walk_packages(sdpaxos.core.__path__, "sdpaxos.core."):
        modules.append(importlib.import_module(info.name))
    return tuple(modules)


def _core_files() -> Iterator[Path]:
    return (p for p in sorted(CORE.rglob("*.py")) if "__pycache__" not in p.parts)


@cache
def _trace_events() -> frozenset[str]:
    events: set[str] = set()
    for path in _core_files():
        events |= set(TRACE_CALL.findall(path.read_text()))
    assert events, "no trace(...) call found in sdpaxos/core"
    return frozenset(events)


@cache
def _public_toplevel() -> dict[str, Any]:
    """Public names defined (not imported) at the top level of a core module."""
    defined: set[str] = set(sdpaxos.core.__all__)
    for path in _core_files():
        for node in ast.parse(path.read_text()).body:
            targets: list[ast.expr] = []
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign):
                targets = [node.target]
            defined |= {t.id for t in targets if isinstance(t, ast.Name)}
    out: dict[str, Any] = {}
    for module in _core_modules():
        for name in defined:
            if not name.startswith("_") and name in vars(module):
                out.setdefault(name, vars(module)[name])
    return out


@cache
def _classes() -> dict[str, type]:
    return {n: o for n, o in _public_toplevel().items() if inspect.isclass(o)}


def _members(cls: type) -> set[str]:
    """Dataclass fields and public attributes of ``cls``."""
    names = {f.name for f in fields(cls)} if is_dataclass(cls) else set()
    return names | {n for n in dir(cls) if not n.startswith("_")}


def _params(fn: Callable[..., Any]) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters) - {"self"}
    except (TypeError, ValueError):
        return set()


@cache
def _tla_names() -> frozenset[str]:
    """Definitions, constants and variables of every module under tla/."""
    names: set[str] = set()
    for module in ROOT.glob("tla/*.tla"):
        text = module.read_text()
        names |= set(re.findall(r"^([A-Za-z]\w*)\s*(?:\([^)]*\))?\s*==", text, flags=re.M))
        for block in re.findall(r"^(?:CONSTANTS?|VARIABLES?)\b(.*?)(?=^\S)", text, re.M | re.S):
            names |= set(re.findall(r"^\s+([A-Za-z]\w*)", block, flags=re.M))
    return frozenset(names)


@cache
def _known() -> frozenset[str]:
    """Every name the document may write in code font."""
    names: set[str] = set(_public_toplevel()) | _trace_events() | _tla_names()
    names |= {f.name for f in fields(ClusterConfig)}
    for obj in _public_toplevel().values():
        if inspect.isclass(obj):
            names |= _members(obj)
            for member_name, member in vars(obj).items():
                if inspect.isfunction(member) and (
                    member_name == "__init__" or not member_name.startswith("_")
                ):
                    names |= _params(member)
        elif inspect.isfunction(obj):
            names |= _params(obj)
    return frozenset(names)


def _resolve_dotted(name: str) -> str | None:
    """Why the dotted ``name`` does not exist, or None."""
    head, *rest = name.split(".")
    if head == "sdpaxos":
        return _resolve_in_module(name)
    cls = _classes().get(head)
    if cls is None:
        return f"{head} is not a public class of sdpaxos.core"
    obj: Any = cls
    for part in rest:
        if part.startswith("_") or part not in _members(obj if inspect.isclass(obj) else type(obj)):
            return f"{name}: no public member {part!r}"
        obj = getattr(obj, part, None)
    return None


def _resolve_in_module(name: str) -> str | None:
    """Why ``name`` (a module, or a module then attributes: ``sdpaxos.profiles.uniform``)
    does not exist, or None."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        module = ".".join(parts[:k])
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent is a module, not a package
            found = False
        if found:
            break
    else:
        return f"no module {name}"
    obj: Any = importlib.import_module(module)
    for part in parts[k:]:
        if part.startswith("_") or not hasattr(obj, part):
            return f"{name}: no public {part!r} in {module}"
        obj = getattr(obj, part)
    return None


def _problem(span: str) -> str | None:
    """Why the code span ``span`` names something that does not exist, or None."""
    private = [n for n in IDENT_RE.findall(span) if n.startswith("_")]
    if private:
        return f"{span}: private name {private} (name messages, events, records, API)"
    if PATH_RE.match(span):
        return None if (ROOT / span.rstrip("/")).exists() else f"no file {span}"
    call = CALL_RE.match(span)
    if call:
        head = call.group("head")
        if "." in head:
            why = _resolve_dotted(head)
            if why:
                return why
        target: Any = _classes().get(head) or _public_toplevel().get(head)
        if target is None:
            return f"{span}: {head} is not a public class or function of sdpaxos.core"
        known = _params(target) | (_members(target) if inspect.isclass(target) else set())
        args = [a.split("=")[0].strip() for a in call.group("args").split(",")]
        missing = [a for a in args if re.fullmatch(IDENT, a) and a not in known]
        return f"{span}: {head} has no {missing}" if missing else None
    if NAME_RE.match(span) and ("." in span or span == "sdpaxos"):
        return _resolve_dotted(span)
    unknown = [
        n
        for n in IDENT_RE.findall(span)
        if len(n) > 1  # single letters are mathematics (N, F, j)
        and n not in _known()
        and n not in MATH_WORDS
        and not keyword.iskeyword(n)
    ]
    return f"{span}: unknown {unknown}" if unknown else None


# ------------------------------------------------------------------ the checks


def _name_problems(text: str) -> list[str]:
    return sorted({p for s in _spans(text) if (p := _problem(s))})


def _row_problems(
    text: str, section: str, first_header: str, classes: dict[str, type], drop: set[str]
) -> list[str]:
    rows = _table(_sections(text)[section], first_header)
    problems: list[str] = []
    seen: set[str] = set()
    for row in rows:
        names = _code_names(row[first_header])
        if len(names) != 1 or names[0] not in classes:
            problems.append(f"section {section}: row {row[first_header]!r} names no known class")
            continue
        name = names[0]
        seen.add(name)
        want = {f.name for f in fields(classes[name])} - drop
        listed = set(_code_names(row["fields"]))
        if listed != want:
            problems.append(
                f"section {section}: {name} lists {sorted(listed)}, its fields are {sorted(want)}"
            )
    missing = sorted(set(classes) - seen)
    if missing:
        problems.append(f"section {section}: no row for {missing}")
    return problems


def _message_table_problems(text: str) -> list[str]:
    classes = {cls.__name__: cls for cls in MESSAGE_TYPES}
    return _row_problems(text, MESSAGES_SECTION, "message", classes, COMMON_FIELDS)


def _record_table_problems(text: str) -> list[str]:
    classes = {cls.__name__: cls for cls in Record.__args__}
    return _row_problems(text, RECORDS_SECTION, "record", classes, set())


def _names_table_problems(text: str) -> list[str]:
    rows = _table(_sections(text)[NAMES_SECTION], "paper")
    problems: list[str] = []
    for row in rows:
        for event in _code_names(row["trace events"]):
            if event not in _trace_events():
                problems.append(f"names table: {event!r} is not a trace event the core emits")
        for name in _code_names(row["TLA+"]):
            if name not in _tla_names():
                problems.append(f"names table: {name!r} is not a name of tla/*.tla")
    return problems


def _event_coverage_problems(text: str) -> list[str]:
    named = set(_spans(text))
    return [f"trace event {e!r} is never named" for e in sorted(_trace_events() - named)]


def _pitfall_numbers(text: str) -> list[int]:
    section = _sections(text)[PITFALLS_SECTION]
    return [int(n) for n in re.findall(r"^(\d+)\. \*\*", section, flags=re.M)]


def _text_files() -> Iterator[Path]:
    """Every file of the repository outside .git and ignored caches."""
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel = Path(dirpath).relative_to(ROOT)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in SKIP_DIRS
            and not d.endswith(".egg-info")
            and (rel / d).as_posix() not in SKIP_PATHS
        )
        for name in sorted(filenames):
            yield Path(dirpath) / name


def _repo_text() -> Iterator[tuple[str, str]]:
    """Text files, this one left out: its self-tests hold deliberately dangling references."""
    for path in _text_files():
        if path.suffix in TEXT_SUFFIXES and path != Path(__file__).resolve():
            yield path.relative_to(ROOT).as_posix(), path.read_text(errors="replace")


def _pitfall_problems(text: str, corpus: list[tuple[str, str]]) -> list[str]:
    numbers = _pitfall_numbers(text)
    problems = []
    if numbers != list(range(1, len(numbers) + 1)):
        problems.append(f"section {PITFALLS_SECTION}: pitfalls numbered {numbers}, not 1..n")
    for where, content in corpus:
        for m in PITFALL_REF.finditer(content):
            if int(m.group(1)) not in numbers:
                problems.append(f"{where} cites pitfall {m.group(1)}, which is not an item")
    return problems


def _section_ref_problems(text: str, corpus: list[tuple[str, str]]) -> list[str]:
    sections = _sections(text)
    problems = []
    for where, content in corpus:
        flat = re.sub(r"\s+", " ", content)
        for m in SECTION_REF.finditer(flat):
            if m.group(1) not in sections:
                problems.append(f"{where} cites docs/protocol.md section {m.group(1)}")
    # The document's references to its own sections (not the paper's, not recovery.md's).
    flat = re.sub(r"\s+", " ", text)
    for m in OWN_SECTION_REF.finditer(flat):
        before = flat[max(0, m.start() - 25) : m.start()]
        after = flat[m.end() : m.end() + 14]
        if "paper" in before or "recovery.md" in before or after.startswith(" of the paper"):
            continue
        if m.group(1) not in sections:
            problems.append(f"docs/protocol.md cites its own section {m.group(1)}")
    return problems


def _citers() -> dict[str, int]:
    """Files that cite the retired note -> how many times."""
    needle = RETIRED_NOTE.encode()
    found = {}
    for path in _text_files():
        count = path.read_bytes().count(needle)
        if count:
            found[path.relative_to(ROOT).as_posix()] = count
    return found


# ------------------------------------------------------------------------- tests


def test_every_message_class_has_a_row_listing_its_fields() -> None:
    problems = _message_table_problems(_doc())
    assert not problems, "\n".join(problems)


def test_every_durable_record_has_a_row_listing_its_fields() -> None:
    problems = _record_table_problems(_doc())
    assert not problems, "\n".join(problems)


def test_every_name_in_code_font_exists_and_none_is_private() -> None:
    problems = _name_problems(_doc())
    assert not problems, "docs/protocol.md names things that do not exist:\n" + "\n".join(problems)


def test_the_names_table_columns_hold_events_and_spec_names() -> None:
    problems = _names_table_problems(_doc())
    assert not problems, "\n".join(problems)


def test_every_trace_event_the_core_emits_is_named() -> None:
    problems = _event_coverage_problems(_doc())
    assert not problems, "\n".join(problems)


def test_config_fields_named_are_config_fields() -> None:
    """Names shaped like configuration (``*_ms``, ``*_max``, ...) are ClusterConfig fields."""
    shaped = re.compile(r"^[a-z][a-z0-9_]*_(?:ms|ppm|pct|max|min|rtts|strikes)$")
    other = {f.name for cls in [*MESSAGE_TYPES, *Record.__args__] for f in fields(cls)}
    other |= {"now_ms"}  # the driver's time, a parameter of step/tick/read
    named = {s for s in _spans(_doc()) if shaped.match(s)} - other
    config = {f.name for f in fields(ClusterConfig)}
    assert named, "the document names no ClusterConfig field"
    assert named <= config, f"not ClusterConfig fields: {sorted(named - config)}"


def test_pitfall_references_resolve() -> None:
    problems = _pitfall_problems(_doc(), list(_repo_text()))
    assert not problems, "\n".join(problems)


def test_section_references_resolve() -> None:
    problems = _section_ref_problems(_doc(), list(_repo_text()))
    assert not problems, "\n".join(problems)


def test_nothing_cites_the_retired_research_note() -> None:
    citers = _citers()
    stale = sorted(ALLOWED_CITERS - set(citers))
    assert not stale, f"allowed to cite {RETIRED_NOTE} but no longer do (remove them): {stale}"
    offending = {f: n for f, n in citers.items() if f not in ALLOWED_CITERS}
    assert not offending, (
        f"cite {RETIRED_NOTE}, which is not in the repository; cite docs/protocol.md"
        f" (a section) or the paper (section, figure) instead: {offending}"
    )


# ------------------------------------------------------- the checks catch breakage


def test_the_checker_catches_a_broken_name() -> None:
    for bad in (
        "CAcept",
        "OAccept.no_such_field",
        "Vote(o_from, no_such_field)",
        "Replica.no_such_method",
        "Replica(no_such_argument=...)",
        "no_such_config_ms",
        "HandleNoSuchEvent",
        "tla/NoSuch.tla",
        "lease_ms + no_such_margin_ms",
        "_handle_c_accept",
        "Replica._restore",
        "sdpaxos.no_such_module",
    ):
        assert _problem(bad), f"{bad!r} was accepted"
    for good in (
        "OAccept.rebuilt",
        "Vote(o_from)",
        "Replica(records=...)",
        "Replica.transfer_sequencer",
        "Wait.EXECUTED",
        "lease_hold_ms",
        "AllocateO",
        "BuildLog",
        "cAccV",
        "tla/SDPaxos.tla",
    ):
        assert _problem(good) is None, _problem(good)


@pytest.mark.parametrize(
    ("old", "new", "check"),
    [
        # a message renamed in its row
        ("| `CAccept` | C-accept", "| `CAcceptX` | C-accept", _message_table_problems),
        # a field left out of a message's row
        ("`executed`, `snapshot` |", "`executed` |", _message_table_problems),
        # a record's field renamed
        ("| `ViewPromised` | `view` |", "| `ViewPromised` | `views` |", _record_table_problems),
        # a spec name where a trace event belongs
        ("| `StragglerSuspect`, `StragglerViewChange` |", "| `BuildLog` |", _names_table_problems),
        # a trace event where a spec name belongs
        ("| `Resync` | `Resync` |", "| `Resync` | `Reject` |", _names_table_problems),
        # a trace event never named any more
        ("`IgnoreVRequest`", "ignoring the request", _event_coverage_problems),
        # a misspelt event, record and config field; a private handler
        ("`AllocateO`", "`AllocateOs`", _name_problems),
        ("`CPromised`", "`CPromise_d`", _name_problems),
        ("`learn_ms`", "`learn_timeout_ms`", _name_problems),
        ("`Replica.propose`", "`Replica._start_c_instances`", _name_problems),
        # a function of a module that is not there
        (
            "`sdpaxos.profiles.sdpaxos_commit_ms`",
            "`sdpaxos.profiles.sdpaxos_commit_s`",
            _name_problems,
        ),
        # a section reference to nowhere
        ("(section 11)", "(section 21)", lambda t: _section_ref_problems(t, [])),
    ],
)
def test_a_broken_document_is_reported(
    old: str, new: str, check: Callable[[str], list[str]]
) -> None:
    text = _doc()
    assert old in text, f"the breakage {old!r} no longer applies: update this test"
    assert not check(text)
    assert check(text.replace(old, new)), f"replacing {old!r} by {new!r} went unnoticed"


def test_a_dangling_pitfall_or_citation_is_reported() -> None:
    text = _doc()
    assert _pitfall_problems(text, [("x.py", "see pitfall 11")])
    assert _pitfall_problems(text.replace("\n5. **View fencing", "\n6. **View fencing"), [])
    assert _section_ref_problems(text, [("x.py", "``docs/protocol.md`` section 99")])
    assert RETIRED_NOTE.encode() not in DOC.read_bytes()
