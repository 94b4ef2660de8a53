"""The command table against Redis 7.0's COMMAND INFO, and parse/keys_of/write_key.

The expected rows were read from ``redis-server`` 7.0.15 (``COMMAND INFO``),
so a front end that serves ``COMMAND`` from this table tells clients what
Redis would.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.commands import COMMANDS, CommandSpec, keys_of, parse, unknown_command, write_key
from kvstore.values import Error

# name: (arity, flags, first_key, last_key, key_step), from Redis 7.0.15 COMMAND INFO.
REDIS_7_INFO = {
    "get": (2, ("readonly", "fast"), 1, 1, 1),
    "set": (-3, ("write", "denyoom"), 1, 1, 1),
    "del": (-2, ("write",), 1, -1, 1),
    "exists": (-2, ("readonly", "fast"), 1, -1, 1),
    "incr": (2, ("write", "denyoom", "fast"), 1, 1, 1),
    "incrby": (3, ("write", "denyoom", "fast"), 1, 1, 1),
    "decr": (2, ("write", "denyoom", "fast"), 1, 1, 1),
    "decrby": (3, ("write", "denyoom", "fast"), 1, 1, 1),
    "append": (3, ("write", "denyoom", "fast"), 1, 1, 1),
    "strlen": (2, ("readonly", "fast"), 1, 1, 1),
    "mget": (-2, ("readonly", "fast"), 1, -1, 1),
    "mset": (-3, ("write", "denyoom"), 1, -1, 2),
    "msetnx": (-3, ("write", "denyoom"), 1, -1, 2),
    "getset": (3, ("write", "denyoom", "fast"), 1, 1, 1),
    "getdel": (2, ("write", "fast"), 1, 1, 1),
    "setnx": (3, ("write", "denyoom", "fast"), 1, 1, 1),
    "dbsize": (1, ("readonly", "fast"), 0, 0, 0),
    "scan": (-2, ("readonly",), 0, 0, 0),
    "keys": (2, ("readonly",), 0, 0, 0),
    "flushdb": (-1, ("write",), 0, 0, 0),
    "flushall": (-1, ("write",), 0, 0, 0),
}


def test_the_table_names_exactly_the_commands_of_the_brief() -> None:
    assert set(COMMANDS) == set(REDIS_7_INFO) | {"cas"}


@pytest.mark.parametrize("name", sorted(REDIS_7_INFO))
def test_each_entry_matches_redis_command_info(name: str) -> None:
    spec = COMMANDS[name]
    assert (spec.arity, spec.flags, spec.first_key, spec.last_key, spec.key_step) == (
        REDIS_7_INFO[name]
    )


@pytest.mark.parametrize("spec", list(COMMANDS.values()), ids=lambda s: s.name)
def test_kind_agrees_with_flags_and_every_entry_is_documented(spec: CommandSpec) -> None:
    assert spec.name == spec.name.lower()
    assert spec.kind == ("write" if "write" in spec.flags else "read")
    assert ("readonly" in spec.flags) == (spec.kind == "read")
    assert spec.summary and "\n" not in spec.summary


def test_cas_is_a_single_key_write_of_four_arguments() -> None:
    assert COMMANDS["cas"][:6] == ("cas", 4, "write", 1, 1, 1)


def test_parse_is_case_insensitive_and_hands_back_the_arguments() -> None:
    for name in (b"get", b"GET", b"Get", b"gEt"):
        parsed = parse([name, b"k"])
        assert parsed == (COMMANDS["get"], [name, b"k"])


def test_unknown_command_text_is_redis_7s() -> None:
    assert parse([b"foo", b"a", b"b"]) == Error(
        "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
    )
    assert parse([b"foo"]) == Error("ERR unknown command 'foo', with args beginning with: ")
    # Redis keeps the name's case in this message.
    assert parse([b"FOO", b"x"]) == Error(
        "ERR unknown command 'FOO', with args beginning with: 'x' "
    )


def test_unknown_command_lists_arguments_up_to_128_bytes_as_redis() -> None:
    # Checked against redis-server 7.0.15: the first argument quoted whole (103 bytes with
    # quotes and space), the second cut to the 25 bytes left, the third not listed.
    err = unknown_command([b"foo", b"x" * 100, b"y" * 50, b"zzz"])
    assert err == Error(
        f"ERR unknown command 'foo', with args beginning with: '{'x' * 100}' '{'y' * 25}' "
    )
    long_name = unknown_command([b"n" * 300])
    assert long_name.text == f"ERR unknown command '{'n' * 128}', with args beginning with: "


def test_unknown_command_keeps_the_error_on_one_line() -> None:
    err = unknown_command([b"fo\r\no", b"a\nb", b"c\0d"])
    assert err == Error("ERR unknown command 'fo  o', with args beginning with: 'a b' 'c' ")


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ([b"get"], "get"),
        ([b"GET", b"a", b"b"], "get"),
        ([b"set", b"k"], "set"),
        ([b"del"], "del"),
        ([b"dbsize", b"x"], "dbsize"),
        ([b"cas", b"k", b"v"], "cas"),
        ([b"mset", b"a"], "mset"),
        ([b"mset", b"a", b"1", b"b"], "mset"),
        ([b"MSETNX", b"a", b"1", b"b"], "msetnx"),
        ([b"scan"], "scan"),
        ([b"keys"], "keys"),
    ],
)
def test_wrong_arity_names_the_command_in_lowercase(args: list[bytes], name: str) -> None:
    assert parse(args) == Error(f"ERR wrong number of arguments for '{name}' command")


def test_arity_accepts_what_redis_accepts() -> None:
    for args in (
        [b"set", b"k", b"v", b"nx", b"get"],
        [b"del", b"a", b"b", b"c"],
        [b"mset", b"a", b"1", b"b", b"2"],
        [b"flushdb"],
        [b"flushall", b"async"],
        [b"scan", b"0", b"count", b"5"],
    ):
        assert not isinstance(parse(args), Error), args


def test_keys_of_follows_the_key_positions() -> None:
    def keys(*args: bytes) -> list[bytes]:
        parsed = parse(list(args))
        assert not isinstance(parsed, Error)
        return keys_of(*parsed)

    assert keys(b"get", b"k") == [b"k"]
    assert keys(b"set", b"k", b"v", b"nx") == [b"k"]
    assert keys(b"del", b"a", b"b", b"c") == [b"a", b"b", b"c"]
    assert keys(b"mset", b"a", b"1", b"b", b"2") == [b"a", b"b"]
    assert keys(b"msetnx", b"a", b"1") == [b"a"]
    assert keys(b"cas", b"k", b"old", b"new") == [b"k"]
    assert keys(b"scan", b"0", b"match", b"*") == []
    assert keys(b"keys", b"*") == []
    assert keys(b"flushdb") == []


def test_write_key_is_the_key_of_a_single_key_write_only() -> None:
    assert write_key([b"SET", b"k", b"v"]) == b"k"
    assert write_key([b"incr", b"n"]) == b"n"
    assert write_key([b"cas", b"k", b"a", b"b"]) == b"k"
    assert write_key([b"del", b"k"]) == b"k"
    assert write_key([b"mset", b"k", b"v"]) == b"k"
    # Several keys, no key, a read, or nonsense: None ("any key").
    assert write_key([b"del", b"a", b"b"]) is None
    assert write_key([b"mset", b"a", b"1", b"b", b"2"]) is None
    assert write_key([b"flushall"]) is None
    assert write_key([b"get", b"k"]) is None
    assert write_key([b"nope", b"k"]) is None
    assert write_key([b"set", b"k"]) is None
    assert write_key([]) is None


@settings(derandomize=True, max_examples=200)
@given(st.lists(st.binary(max_size=12), max_size=6))
def test_parse_never_raises_and_answers_a_spec_or_an_error(args: list[bytes]) -> None:
    parsed = parse(args)
    if isinstance(parsed, Error):
        assert parsed.text.startswith("ERR ")
        assert "\n" not in parsed.text and "\r" not in parsed.text
    else:
        spec, same = parsed
        assert same is args
        assert spec is COMMANDS[args[0].lower().decode()]


def test_one_command_spec_serves_parsing_dispatch_and_the_front_end() -> None:
    """The front end's COMMAND answers from the same specs (its own connection
    commands are specs of kind ``connection``, none of them a data command);
    COMMAND DOCS' group is "string" for a command that names keys."""
    from kvstore.resp import CommandSpec as FrontSpec
    from kvstore.resp.front import FRONT, FRONT_SPECS

    assert FrontSpec is CommandSpec
    assert {s.kind for s in FRONT_SPECS} == {"connection"}
    assert {s.name.upper().encode() for s in FRONT_SPECS} == set(FRONT)
    assert not {s.name for s in FRONT_SPECS} & set(COMMANDS)
    assert {s.group for s in FRONT_SPECS} == {"connection", "server"}
    for spec in COMMANDS.values():
        assert spec.group == ("string" if spec.first_key else "generic")
