"""The dispatch table: every command's spec (:data:`kvstore.commands.COMMANDS`)
paired with the handler that runs it, from the module of its data type.

Pure. The table is built once from the one command table, so a command has
one name, arity and kind everywhere (parsing at the node, dispatch here,
``COMMAND`` at the front end); building it fails at import if a spec has no
handler or a handler no spec. A new data type adds its module's ``HANDLERS``
to :data:`MODULE_HANDLERS` and its specs to the command table.

Speed: :func:`execute` finds the entry in a dict keyed by the command's bytes
(lowercase and uppercase spellings both present, so the common cases need no
``.lower()``), checks arity, refuses a write when asked to, and calls the
handler: the same checks as :func:`kvstore.commands.parse` (and the same
answers: MSET's even count is checked by its handler), with one lookup into
a flat tuple instead of a spec's fields.
"""

from __future__ import annotations

from kvstore import keyspace, strings
from kvstore.commands import COMMANDS, unknown_command, wrong_arity
from kvstore.keyspace import Handler, Keyspace
from kvstore.values import Error, Value

__all__ = ["ERR_MALFORMED", "MODULE_HANDLERS", "TABLE", "execute"]

ERR_MALFORMED = Error("ERR malformed command: expected a msgpack array of byte strings")

#: Each data type's handlers, by command name.
MODULE_HANDLERS: tuple[dict[str, Handler], ...] = (keyspace.HANDLERS, strings.HANDLERS)

#: A command's entry: its arity, whether it writes, its name and its handler.
Entry = tuple[int, bool, str, Handler]


def _build() -> dict[bytes, Entry]:
    handlers: dict[str, Handler] = {}
    for module in MODULE_HANDLERS:
        twice = handlers.keys() & module.keys()
        if twice:
            raise RuntimeError(f"commands handled twice: {sorted(twice)}")
        handlers.update(module)
    if handlers.keys() != COMMANDS.keys():
        raise RuntimeError(
            f"specs without a handler: {sorted(COMMANDS.keys() - handlers.keys())}, "
            f"handlers without a spec: {sorted(handlers.keys() - COMMANDS.keys())}"
        )
    table: dict[bytes, Entry] = {}
    for spec in COMMANDS.values():
        entry = (spec.arity, spec.kind == "write", spec.name, handlers[spec.name])
        table[spec.name.encode()] = entry
        table[spec.name.upper().encode()] = entry
    return table


#: Every command, by its name in lowercase and in uppercase bytes.
TABLE: dict[bytes, Entry] = _build()


def execute(ks: Keyspace, args: object, writes: bool = True) -> Value:
    """Run a decoded command on ``ks`` (``writes=False``: refuse writes). Never raises.

    Every handler validates everything before it changes anything, so an
    error answer always means "nothing changed".
    """
    if type(args) is not list or not args:
        return ERR_MALFORMED
    for arg in args:
        if type(arg) is not bytes:
            return ERR_MALFORMED
    entry = TABLE.get(args[0])
    if entry is None:
        entry = TABLE.get(args[0].lower())
        if entry is None:
            return unknown_command(args)
    arity, is_write, name, handler = entry
    n = len(args)
    if (n != arity) if arity > 0 else (n < -arity):
        return wrong_arity(name)
    if is_write and not writes:
        return Error(f"ERR '{name}' is a write command: it must go through the log")
    try:
        return handler(ks, args)
    except Exception as exc:  # a bug; answer it rather than crash every replica
        return Error(f"ERR internal error in '{name}': {type(exc).__name__}")
