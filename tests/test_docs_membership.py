"""docs/membership.md names only what exists, by the rules of docs/protocol.md.

Every name in code font must be a message, record, configuration field, public
name of ``sdpaxos.core`` (or of ``sdpaxos.core.member`` and
``sdpaxos.core.membership``), trace event, spec name or file, as
``tests/test_docs_protocol.py`` checks for the protocol document.
"""

from __future__ import annotations

from pathlib import Path

from tests.test_docs_protocol import _name_problems

DOC = Path(__file__).resolve().parent.parent / "docs" / "membership.md"


def test_every_name_in_code_font_exists() -> None:
    problems = _name_problems(DOC.read_text())
    assert not problems, "docs/membership.md names things that do not exist:\n" + "\n".join(
        problems
    )


def test_a_broken_name_is_reported() -> None:
    assert _name_problems("the `NoSuchMemberThing` rule") != []
