"""tla/README.md's table "Spec action = handler = trace event" matches the spec and the code.

The table ties each action of the TLA+ spec to the ``Replica`` code that carries
the step out and to the trace event the core emits for it; trace validation of
simulator runs translates events through it. Everything is read at test time
(the spec, the core's ``_trace("Event", ...)`` calls, ``docs/recovery.md``), so
the table cannot drift from any of them unnoticed:

- every action in the table is defined in ``tla/SDPaxos.tla`` and is an action of
  its ``Next`` (or, like ``TickTo``, exists only in ``tla/TraceSDPaxos.tla``), and
  every action of ``Next`` has a row; the rows are the trace vocabulary of
  ``TraceSDPaxos.tla``;
- every handler exists, and a row without one says why in a footnote;
- every trace event in the table is emitted in ``sdpaxos/core/``, and every event
  emitted there is either in the table or in the list "Trace events with no spec
  action" (which names only emitted events);
- ``docs/recovery.md`` section 15 names, for each action, the README's handler
  among its own (the two tables never contradict each other).

The last test breaks a copy of the table in several ways and checks that each
breakage is reported.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from sdpaxos.core.replica import Replica

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "tla" / "README.md"
SPEC = ROOT / "tla" / "SDPaxos.tla"
TRACE_SPEC = ROOT / "tla" / "TraceSDPaxos.tla"
CORE = ROOT / "sdpaxos" / "core"
DOC = ROOT / "docs" / "recovery.md"

TABLE_SECTION = "Spec action = handler = trace event"
NO_ACTION_HEADING = "### Trace events with no spec action"
HEADER = "| spec action | handler | trace event |"
DASH = "—"
DOC_SECTION = "15"

FOOTNOTE_REF = re.compile(r"\[\^([\w-]+)\](?!:)")
NAME_CELL = re.compile(r"^`([A-Za-z_][\w.]*)`$")
IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
#: ``_trace("Event"`` or ``self._trace(\n    "Event"``, whatever the spacing.
TRACE_CALL = re.compile(r"""(?:\b_trace|\.trace)\(\s*["']([A-Za-z]\w*)["']""")


@dataclass(frozen=True)
class Row:
    action: str
    handler: str | None
    event: str | None
    handler_notes: tuple[str, ...]


# ----------------------------------------------------------------- parsing


def _section(text: str, heading: str) -> str:
    """The text under the level-2 heading ``## heading``, up to the next one."""
    m = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert m, f"no section '## {heading}'"
    return m.group(1)


def _tables(text: str) -> list[list[str]]:
    """Markdown tables: runs of lines starting with ``|``."""
    tables: list[list[str]] = []
    current: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line.rstrip())
        elif current:
            tables.append(current)
            current = []
    return tables


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _cell_name(cell: str, where: str) -> tuple[str | None, tuple[str, ...]]:
    """(the one name in backticks, or None for a dash; the footnote labels)."""
    notes = tuple(FOOTNOTE_REF.findall(cell))
    bare = FOOTNOTE_REF.sub("", cell).strip()
    if bare == DASH:
        return None, notes
    m = NAME_CELL.match(bare)
    assert m, f"{where}: {cell!r} is neither one name in backticks nor {DASH}"
    return m.group(1), notes


def parse_table(readme: str) -> list[Row]:
    section = _section(readme, TABLE_SECTION)
    tables = [t for t in _tables(section) if t[0] == HEADER]
    assert len(tables) == 1, f"section '{TABLE_SECTION}' needs exactly one table {HEADER}"
    lines = tables[0]
    assert re.fullmatch(r"\|(\s*:?-+:?\s*\|){3}", lines[1]), "bad separator line"
    rows = []
    for line in lines[2:]:
        cells = _cells(line)
        assert len(cells) == 3, f"row {line!r} does not have three cells"
        action, _ = _cell_name(cells[0], line)
        assert action is not None, f"row {line!r} names no action"
        handler, notes = _cell_name(cells[1], line)
        event, _ = _cell_name(cells[2], line)
        rows.append(Row(action, handler, event, notes))
    return rows


def parse_no_action_events(readme: str) -> dict[str, str]:
    """The list "Trace events with no spec action": event -> reason."""
    section = _section(readme, TABLE_SECTION)
    assert NO_ACTION_HEADING in section, f"no '{NO_ACTION_HEADING}' under '{TABLE_SECTION}'"
    text = section.split(NO_ACTION_HEADING, 1)[1]
    items = re.findall(r"^- `(\w+)`:(.*(?:\n {2,}.*)*)", text, flags=re.M)
    return {name: " ".join(reason.split()) for name, reason in items}


def _footnote_definitions(readme: str) -> set[str]:
    return set(re.findall(r"^\[\^([\w-]+)\]:", readme, flags=re.M))


def _strip_tla_comments(text: str) -> str:
    text = re.sub(r"\(\*.*?\*\)", " ", text, flags=re.S)
    return re.sub(r"\\\*.*$", "", text, flags=re.M)


def tla_definitions(text: str) -> dict[str, str]:
    """Top-level definitions of a TLA+ module -> their bodies, comments removed."""
    text = _strip_tla_comments(text)
    heads = list(re.finditer(r"^([A-Za-z]\w*)\s*(?:\([^)]*\))?\s*==", text, flags=re.M))
    return {
        m.group(1): text[m.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        for i, m in enumerate(heads)
    }


def next_actions(defs: dict[str, str]) -> set[str]:
    """The actions ``Next`` is made of: the definitions it names that are actions
    (their body primes a variable, or names another action)."""
    actions = {name for name, body in defs.items() if "'" in body}
    grown = True
    while grown:
        grown = False
        for name, body in defs.items():
            if name not in actions and actions & set(IDENT.findall(body)):
                actions.add(name)
                grown = True
    return {name for name in IDENT.findall(defs["Next"]) if name in actions and name != "Next"}


def trace_cases(trace_spec: str) -> set[str]:
    """The actions ``TraceSDPaxos``'s ``Act`` maps an event to (its ``e.a = "Name"``
    cases; pseudo-events handled outside ``Act``, such as "Sent", are not actions)."""
    return set(re.findall(r'\be\.a\s*=\s*"(\w+)"', tla_definitions(trace_spec)["Act"]))


def emitted_events(sources: list[str]) -> set[str]:
    return {event for text in sources for event in TRACE_CALL.findall(text)}


# ------------------------------------------------------------------ checks


def spec_problems(rows: list[Row], spec: str, trace_spec: str) -> list[str]:
    defs = tla_definitions(spec)
    in_next = next_actions(defs)
    cases = trace_cases(trace_spec)
    trace_only = cases - set(defs)
    problems = []
    actions = [r.action for r in rows]
    twice = {a for a in actions if actions.count(a) > 1}
    problems += [f"{a}: more than one row" for a in sorted(twice)]
    for a in actions:
        if a in trace_only:
            continue
        if a not in defs:
            problems.append(f"{a}: not defined in tla/SDPaxos.tla")
        elif a not in in_next:
            problems.append(f"{a}: not an action of Next in tla/SDPaxos.tla")
    problems += [f"{a}: an action of Next without a row" for a in sorted(in_next - set(actions))]
    problems += [
        f"{a}: TraceSDPaxos.tla's Act has no case for it" for a in sorted(set(actions) - cases)
    ]
    problems += [
        f"{a}: a case of TraceSDPaxos.tla's Act without a row" for a in sorted(cases - set(actions))
    ]
    return problems


def _resolve_handler(name: str) -> object:
    """``Replica.method`` or ``module.function`` of ``sdpaxos.core``; raises LookupError."""
    head, *rest = name.split(".")
    if not rest:
        raise LookupError(f"{name}: write Replica.{name} or module.{name}")
    obj: object
    if head == "Replica":
        obj = Replica
    else:
        try:
            obj = importlib.import_module(f"sdpaxos.core.{head}")
        except ImportError:
            raise LookupError(f"{name}: no module sdpaxos.core.{head}") from None
    for part in rest:
        if not hasattr(obj, part):
            raise LookupError(f"{name}: {part} does not exist")
        obj = getattr(obj, part)
    if not callable(obj):
        raise LookupError(f"{name}: not callable")
    return obj


def handler_problems(rows: list[Row], readme: str) -> list[str]:
    problems = []
    defined = _footnote_definitions(readme)
    for r in rows:
        if r.handler is None:
            if not r.handler_notes:
                problems.append(f"{r.action}: no handler and no footnote saying why")
        else:
            try:
                _resolve_handler(r.handler)
            except LookupError as exc:
                problems.append(f"{r.action}: {exc}")
    table = _section(readme, TABLE_SECTION)
    used = set(FOOTNOTE_REF.findall(table))
    problems += [f"footnote [^{n}] is used but not defined" for n in sorted(used - defined)]
    return problems


def event_problems(rows: list[Row], no_action: dict[str, str], emitted: set[str]) -> list[str]:
    problems = []
    in_table = {r.event for r in rows if r.event is not None}
    problems += [
        f"{e}: in the table, but sdpaxos/core/ never emits it" for e in sorted(in_table - emitted)
    ]
    problems += [
        f"{e}: in 'Trace events with no spec action', but sdpaxos/core/ never emits it"
        for e in sorted(set(no_action) - emitted)
    ]
    problems += [
        f"{e}: both in the table and in 'Trace events with no spec action'"
        for e in sorted(in_table & set(no_action))
    ]
    problems += [f"{e}: listed without a reason" for e, why in sorted(no_action.items()) if not why]
    problems += [
        f"{e}: emitted by sdpaxos/core/, but neither in the table nor in"
        " 'Trace events with no spec action'"
        for e in sorted(emitted - in_table - set(no_action))
    ]
    return problems


def doc_problems(rows: list[Row], doc: str, in_next: set[str]) -> list[str]:
    """docs/recovery.md section 15 and the README table must not contradict each other."""
    m = re.search(rf"^## {DOC_SECTION}\. .*?(?=^## |\Z)", doc, flags=re.M | re.S)
    assert m, f"docs/recovery.md has no section {DOC_SECTION}"
    tables = [t for t in _tables(m.group(0)) if "action" in t[0]]
    assert len(tables) == 1, f"docs/recovery.md section {DOC_SECTION}: no action table"
    by_action = {r.action: r for r in rows}
    named: dict[str, set[str]] = {}
    for line in tables[0][2:]:
        first, second = _cells(line)[:2]
        code = set(re.findall(r"`([^`]+)`", second))
        for action in re.findall(r"`(\w+)`", first):
            named.setdefault(action, set()).update(code)
    problems = []
    for action, code in sorted(named.items()):
        row = by_action.get(action)
        if row is None:
            problems.append(
                f"{action}: in docs/recovery.md section {DOC_SECTION}, not in the README"
            )
        elif (
            row.handler is not None
            and not {
                ".".join(row.handler.split(".")[-2:]),  # Class.method
                row.handler.split(".")[-1],
            }
            & code
        ):
            problems.append(
                f"{action}: the README's handler {row.handler} is not among"
                f" docs/recovery.md section {DOC_SECTION}'s {sorted(code)}"
            )
    problems += [
        f"{a}: an action of Next missing from docs/recovery.md section {DOC_SECTION}"
        for a in sorted(in_next - set(named))
    ]
    return problems


# ------------------------------------------------------------------- inputs


@cache
def _readme() -> str:
    return README.read_text()


@cache
def _emitted() -> set[str]:
    return emitted_events([p.read_text() for p in sorted(CORE.rglob("*.py"))])


def _all_problems(readme: str) -> list[str]:
    rows = parse_table(readme)
    spec = SPEC.read_text()
    return [
        *spec_problems(rows, spec, TRACE_SPEC.read_text()),
        *handler_problems(rows, readme),
        *event_problems(rows, parse_no_action_events(readme), _emitted()),
        *doc_problems(rows, DOC.read_text(), next_actions(tla_definitions(spec))),
    ]


# -------------------------------------------------------------------- tests


def test_the_table_has_a_row_per_action_of_next() -> None:
    rows = parse_table(_readme())
    problems = spec_problems(rows, SPEC.read_text(), TRACE_SPEC.read_text())
    assert not problems, "tla/README.md table vs the spec:\n" + "\n".join(problems)


def test_every_handler_exists() -> None:
    problems = handler_problems(parse_table(_readme()), _readme())
    assert not problems, "tla/README.md handlers:\n" + "\n".join(problems)


def test_every_trace_event_is_accounted_for() -> None:
    emitted = _emitted()
    assert {"Propose", "HandleCAccept", "Restart"} <= emitted, f"the scan found only {emitted}"
    problems = event_problems(parse_table(_readme()), parse_no_action_events(_readme()), emitted)
    assert not problems, "tla/README.md trace events vs sdpaxos/core/:\n" + "\n".join(problems)


def test_recovery_md_section_15_agrees_with_the_table() -> None:
    rows = parse_table(_readme())
    in_next = next_actions(tla_definitions(SPEC.read_text()))
    problems = doc_problems(rows, DOC.read_text(), in_next)
    assert not problems, "docs/recovery.md vs tla/README.md:\n" + "\n".join(problems)


def test_the_trace_scan_tolerates_line_breaks() -> None:
    source = 'self._trace(\n    "Split",\n    x=1,\n)\nself._trace("One")\ndef _trace(self, e): ...'
    assert emitted_events([source]) == {"Split", "One"}


BREAKAGES = [
    (
        "a renamed handler",
        "`acceptor.Acceptor.handle_c_accept` |",
        "`acceptor.Acceptor.handle_c_acept` |",
    ),
    (
        "a handler of another module",
        "`executor.Executor.execute` |",
        "`view_change.no_such_function` |",
    ),
    (
        "a dropped row",
        "| `HandleCPromise` | `recovery.Recovery.handle_c_promise` | `HandleCPromise` |\n",
        "",
    ),
    ("an unknown action", "| `Tick` |", "| `NoSuchAction` |"),
    (
        "a dropped membership row",
        "| `AllocateStop` | `sequencer.Sequencer.allocate` | `AllocateStop`[^epoch] |\n",
        "",
    ),
    (
        "a membership event renamed",
        "| `InstallEpoch` | `member.Member` | `InstallEpoch`[^epoch] |",
        "| `InstallEpoch` | `member.Member` | `InstallBase`[^epoch] |",
    ),
    ("an event the core never emits", "| `Ready` |\n", "| `Readyy` |\n"),
    ("an emitted event left out", "- `Stale`:", "- `NotStale`:"),
    ("a handler dash without a footnote", "| —[^crash] |", "| — |"),
    ("an event in both places", "| `Ready` |\n", "| `Stale` |\n"),
]


@pytest.mark.parametrize(("what", "old", "new"), BREAKAGES, ids=[b[0] for b in BREAKAGES])
def test_a_broken_table_is_reported(what: str, old: str, new: str) -> None:
    readme = _readme()
    assert not _all_problems(readme)
    assert readme.count(old) == 1, f"{what}: {old!r} is not in the README once"
    broken = readme.replace(old, new)
    assert _all_problems(broken), f"{what} was not reported"


# ---------------------------------------------- what trace validation records


def recorded_problems(rows: list[Row], pairs: set[tuple[str, str]]) -> list[str]:
    """Each (spec action, code event) a recorder turned an event into must be a row."""
    table = {(r.action, r.event) for r in rows}
    return [
        f"trace validation records the core's {event} as {action}, which no row says"
        for action, event in sorted(pairs - table)
    ]


def _recorded_pairs() -> set[tuple[str, str]]:
    """(action, event) of every step the change runs of trace validation took from a
    core event (not ``Sent``, ``TickTo``, crashes, restarts, nor the STOP's commit
    the recorder stands in for: their origin names no event)."""
    from sdpaxos.sim.member_trace import CHANGES, CHANGES_EVEN, run_change

    emitted = _emitted()
    pairs = set()
    for name in [*CHANGES, *CHANGES_EVEN]:
        for step in run_change(name).recorder.steps:
            event = step.origin.split(" ", 1)[0]
            if step.action not in ("Sent", "TickTo") and event in emitted:
                pairs.add((step.action, event))
    return pairs


def test_the_table_names_what_trace_validation_records() -> None:
    """The change runs' steps (tests/sim/test_trace_validation_members.py) are the
    table's: the change steps (AllocateStop, StartEpoch, InstallEpoch) included."""
    pairs = _recorded_pairs()
    assert {("AllocateStop", "AllocateStop"), ("StartEpoch", "StartEpoch")} <= pairs
    assert ("InstallEpoch", "InstallEpoch") in pairs
    problems = recorded_problems(parse_table(_readme()), pairs)
    assert not problems, "\n".join(problems)
    # Teeth: a row renamed on either side is reported.
    broken = _readme().replace(
        "| `StartEpoch` | `member.Member` | `StartEpoch`[^epoch] |",
        "| `StartEpoch` | `member.Member` | `BeginEpoch`[^epoch] |",
    )
    assert recorded_problems(parse_table(broken), pairs)
