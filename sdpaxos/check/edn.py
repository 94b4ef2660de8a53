"""A small EDN reader: enough of the format for Jepsen and Knossos histories.

Reads nil, booleans, integers (with an optional ``N`` suffix), floats,
strings, characters, keywords, symbols, lists, vectors, maps, sets, ``;``
comments, ``#_`` discards and tagged values (``#inst "..."`` reads as the
tagged value itself). Vectors and lists become tuples, sets frozensets, maps
dicts, keywords :class:`Keyword`. Every error names the line.

Pure: parses text, does no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final


class EdnError(ValueError):
    """Malformed EDN; ``line`` is 1-based."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True, slots=True)
class Keyword:
    """An EDN keyword such as ``:ok`` (``name`` is ``"ok"``)."""

    name: str

    def __repr__(self) -> str:
        return ":" + self.name


@dataclass(frozen=True, slots=True)
class Symbol:
    """An EDN symbol."""

    name: str

    def __repr__(self) -> str:
        return self.name


_DELIMITERS: Final = frozenset('()[]{}";')
_WHITESPACE: Final = frozenset(" \t\r\n,")
_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "b": "\b", "f": "\f"}
_CHARS: Final = {"newline": "\n", "space": " ", "tab": "\t", "return": "\r"}
_CLOSE: Final = {"(": ")", "[": "]", "{": "}"}


class _Reader:
    def __init__(self, text: str, first_line: int) -> None:
        self.text = text
        self.pos = 0
        self.line = first_line

    def error(self, message: str) -> EdnError:
        return EdnError(message, self.line)

    def skip_space(self) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c == "\n":
                self.line += 1
                self.pos += 1
            elif c in _WHITESPACE:
                self.pos += 1
            elif c == ";":
                while self.pos < n and text[self.pos] != "\n":
                    self.pos += 1
            elif text.startswith("#_", self.pos):
                self.pos += 2
                self.read()
            else:
                return

    def at_end(self) -> bool:
        self.skip_space()
        return self.pos >= len(self.text)

    def read(self) -> Any:
        self.skip_space()
        if self.pos >= len(self.text):
            raise self.error("unexpected end of input")
        c = self.text[self.pos]
        if c in _CLOSE:
            self.pos += 1
            items = self.read_until(_CLOSE[c])
            if c == "{":
                if len(items) % 2:
                    raise self.error("a map needs an even number of forms")
                try:
                    return {items[k]: items[k + 1] for k in range(0, len(items), 2)}
                except TypeError as e:
                    raise self.error(f"unhashable map key: {e}") from None
            return tuple(items)
        if c in ")]}":
            raise self.error(f"unexpected {c!r}")
        if c == '"':
            return self.read_string()
        if c == "#":
            return self.read_dispatch()
        if c == "\\":
            return self.read_char()
        return self.read_atom()

    def read_until(self, close: str) -> list[Any]:
        items: list[Any] = []
        start = self.line
        while True:
            self.skip_space()
            if self.pos >= len(self.text):
                raise EdnError(f"{close!r} expected (opened on line {start})", self.line)
            if self.text[self.pos] == close:
                self.pos += 1
                return items
            items.append(self.read())

    def read_string(self) -> str:
        self.pos += 1
        out: list[str] = []
        text, n = self.text, len(self.text)
        start = self.line
        while self.pos < n:
            c = text[self.pos]
            self.pos += 1
            if c == '"':
                return "".join(out)
            if c == "\n":
                self.line += 1
            if c == "\\":
                if self.pos >= n:
                    break
                e = text[self.pos]
                self.pos += 1
                if e == "u":
                    code = text[self.pos : self.pos + 4]
                    try:
                        out.append(chr(int(code, 16)))
                    except ValueError:
                        raise self.error(f"bad unicode escape \\u{code}") from None
                    self.pos += 4
                elif e in _ESCAPES:
                    out.append(_ESCAPES[e])
                else:
                    raise self.error(f"unknown string escape \\{e}")
            else:
                out.append(c)
        raise EdnError(f"unterminated string (opened on line {start})", start)

    def token(self) -> str:
        start = self.pos
        text, n = self.text, len(self.text)
        while (
            self.pos < n and text[self.pos] not in _WHITESPACE and text[self.pos] not in _DELIMITERS
        ):
            self.pos += 1
        return text[start : self.pos]

    def read_char(self) -> str:
        self.pos += 1
        tok = self.token()
        if not tok and self.pos < len(self.text):
            tok = self.text[self.pos]
            self.pos += 1
        if len(tok) == 1:
            return tok
        if tok in _CHARS:
            return _CHARS[tok]
        raise self.error(f"unknown character literal \\{tok}")

    def read_dispatch(self) -> Any:
        if self.text.startswith("#{", self.pos):
            self.pos += 2
            try:
                return frozenset(self.read_until("}"))
            except TypeError as e:
                raise self.error(f"unhashable set element: {e}") from None
        self.pos += 1
        tag = self.token()
        if not tag:
            raise self.error("'#' must be followed by '{', '_' or a tag")
        return self.read()  # a tagged value reads as the value itself

    def read_atom(self) -> Any:
        tok = self.token()
        if not tok:
            raise self.error(f"unexpected {self.text[self.pos]!r}")
        if tok == "nil":
            return None
        if tok == "true":
            return True
        if tok == "false":
            return False
        if tok[0] == ":":
            if len(tok) == 1:
                raise self.error("empty keyword")
            return Keyword(tok[1:])
        if tok[0].isdigit() or (tok[0] in "+-" and len(tok) > 1 and tok[1].isdigit()):
            return self.number(tok)
        return Symbol(tok)

    def number(self, tok: str) -> int | float:
        body = tok[:-1] if tok[-1] in "NM" else tok
        try:
            return int(body)
        except ValueError:
            pass
        try:
            return float(body)
        except ValueError:
            raise self.error(f"bad number {tok!r}") from None


def read_all(text: str, first_line: int = 1) -> list[tuple[Any, int]]:
    """Every top-level form in ``text`` with the line it starts on."""
    reader = _Reader(text, first_line)
    forms = []
    while not reader.at_end():
        line = reader.line
        forms.append((reader.read(), line))
    return forms


def read_sequence(text: str) -> list[tuple[Any, int]]:
    """The elements of a history file with the line each starts on: the items
    of one top-level vector or list, or else the top-level forms themselves."""
    reader = _Reader(text, 1)
    if reader.at_end() or text[reader.pos] not in "[(":
        return read_all(text)
    close = "]" if text[reader.pos] == "[" else ")"
    reader.pos += 1
    start = reader.line
    items = []
    while True:
        reader.skip_space()
        if reader.pos >= len(text):
            raise EdnError(f"{close!r} expected (opened on line {start})", reader.line)
        if text[reader.pos] == close:
            reader.pos += 1
            break
        line = reader.line
        items.append((reader.read(), line))
    if not reader.at_end():
        raise reader.error("unexpected text after the history's closing bracket")
    return items


def read_one(text: str, line: int = 1) -> Any:
    """Exactly one form (e.g. one line of a one-map-per-line file)."""
    forms = read_all(text, line)
    if len(forms) != 1:
        raise EdnError(f"expected one EDN form, found {len(forms)}", line)
    return forms[0][0]
