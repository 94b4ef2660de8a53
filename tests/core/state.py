"""The whole state of a replica, as one comparable value.

"Bad input changes nothing" is checked on *every* field of every role and
shared piece, found by walking the objects, not on a chosen subset: a field
added later is covered without anyone remembering to list it. Only the
counters a refusal is meant to move (``stats.steps``, ``stats.rejected``) are
left out.
"""

import random
from collections import deque
from dataclasses import is_dataclass
from enum import Enum
from types import BuiltinFunctionType, FunctionType, MethodType
from typing import Any

from sdpaxos.core import Replica

#: Counters a refused message moves by design.
_MOVED_BY_A_REFUSAL = frozenset({"steps", "rejected"})


def whole_state(replica: Replica) -> Any:
    return _freeze(replica, set(), "")


def _freeze(value: Any, seen: set[int], name: str) -> Any:
    if value is None or isinstance(value, int | float | str | bytes | bool | Enum):
        return value
    if isinstance(value, bytearray):
        return ("bytearray", bytes(value))
    if isinstance(value, type):
        return ("type", value.__name__)
    if isinstance(value, random.Random):
        return ("rng", value.getstate())
    if isinstance(value, MethodType | FunctionType | BuiltinFunctionType):
        return ("callable", getattr(value, "__qualname__", ""))
    if isinstance(value, tuple | list | deque):
        return (type(value).__name__, tuple(_freeze(v, seen, name) for v in value))
    if isinstance(value, set | frozenset):
        return ("set", tuple(sorted((_freeze(v, seen, name) for v in value), key=repr)))
    if isinstance(value, dict):
        items = tuple((_freeze(k, seen, name), _freeze(v, seen, name)) for k, v in value.items())
        return ("dict", items)
    if is_dataclass(value) and type(value).__dataclass_params__.frozen:  # type: ignore[attr-defined]
        return ("value", repr(value))  # messages, records, commands: immutable values
    if id(value) in seen:
        return ("seen", type(value).__name__)
    seen.add(id(value))
    attrs: dict[str, Any] = {}
    for cls in type(value).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if hasattr(value, slot):
                attrs[slot] = getattr(value, slot)
    attrs.update(getattr(value, "__dict__", {}))
    if not attrs:
        raise TypeError(f"whole_state cannot see inside {type(value).__name__} ({name})")
    out = []
    for key in sorted(attrs):
        if type(value).__name__ == "Stats" and key in _MOVED_BY_A_REFUSAL:
            continue
        out.append((key, _freeze(attrs[key], seen, key)))
    return (type(value).__name__, tuple(out))
