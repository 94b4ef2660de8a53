"""History readers: semantics of each format, and errors that name the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdpaxos.check import UNKNOWN, CasRegister, KeyValue, Operation, Verdict, check
from sdpaxos.check.edn import EdnError, Keyword, Symbol, read_all, read_sequence
from sdpaxos.check.formats import FormatError, load, parse, to_jsonl, write_jsonl

ETCD = """\
INFO  jepsen.util - 0\t:invoke\t:write\t1
INFO  jepsen.util - 0\t:ok\t:write\t1
INFO  jepsen.util - 1\t:invoke\t:cas\t[1 2]
INFO  jepsen.util - 2\t:invoke\t:read\tnil
INFO  jepsen.util - 1\t:fail\t:cas\t[1 2]
INFO  jepsen.util - 2\t:fail\t:read\t:timed-out
INFO  jepsen.util - 3\t:invoke\t:write\t4
INFO  jepsen.util - 3\t:info\t:write\t:timed-out
WARN  jepsen.core - some other logger's line
INFO  jepsen.util - 4   :invoke   :read   nil
INFO  jepsen.util - 4   :ok   :read   nil
INFO  jepsen.util - 5\t:invoke\t:cas\t[0 3]
"""


def test_etcd_semantics() -> None:
    loaded = parse(ETCD, "etcd")
    assert isinstance(loaded.model, CasRegister) and loaded.model.initial is None
    by_line = {op.invoke: op for op in loaded.history}
    assert by_line[1] == Operation(0, ("write", 1), None, 1, 2)
    assert by_line[3].output is False and by_line[3].complete == 5  # the cas ran, compare failed
    assert by_line[4].output is UNKNOWN and by_line[4].complete == 6  # timed-out read
    assert by_line[7].is_open and by_line[7].output is UNKNOWN  # :info
    assert by_line[10].output is None and by_line[10].complete == 11  # ok read nil: empty
    assert by_line[12].is_open  # never completed
    # The cas [1 2] failed although 1 was written: the write must not have
    # happened before it... but it completed first, so this is not linearizable.
    assert check(loaded.history, loaded.model).verdict is Verdict.NOT_LINEARIZABLE


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("INFO  jepsen.util - 0\t:ok\t:read\t1\n", 1, "never invoked"),
        (
            "INFO  jepsen.util - 0 :invoke :read nil\nINFO  jepsen.util - 0 :invoke :read nil\n",
            2,
            "invokes again",
        ),
        (
            "INFO  jepsen.util - 0 :invoke :read nil\nINFO  jepsen.util - 0 :ok :write 1\n",
            2,
            "was :read",
        ),
        ("INFO  jepsen.util - 0 :invoke :frob 1\n", 1, "unknown operation"),
        ("INFO  jepsen.util - 0 :invoke :cas 1\n", 1, "must be \\[old new\\]"),
        ("INFO  jepsen.util - x :invoke :read nil\n", 1, "process must be an integer"),
        ("INFO  jepsen.util - 0 :invoke :write [1\n", 1, "bad value"),
        ("\n\nhello world\n", 3, "not a Jepsen log line"),
    ],
)
def test_etcd_errors_name_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(FormatError, match=message) as e:
        parse(text, "etcd", "h.log")
    assert e.value.line == line and str(e.value).startswith(f"h.log:{line}: ")


KV = """\
{:process 0, :type :invoke, :f :put, :key "a", :value "x"}
{:process 1, :type :invoke, :f :get, :key "a", :value nil}
{:process 0, :type :ok, :f :put, :key "a", :value "x"}
{:process 1, :type :ok, :f :get, :key "a", :value "x"}
{:process 2, :type :invoke, :f :append, :key "b", :value "y"}
{:process 2, :type :ok, :f :append, :key "b", :value "y"}
{:process 3, :type :invoke, :f :get, :key "b", :value nil}
{:process 3, :type :ok, :f :get, :key "b", :value "y"}
{:process 4, :type :invoke, :f :get, :key "c", :value nil}
{:process 4, :type :ok, :f :get, :key "c", :value ""}
"""


def test_kv_lines_semantics() -> None:
    loaded = parse(KV, "kv-edn-lines")
    assert isinstance(loaded.model, KeyValue) and loaded.model.missing == ""
    inputs = [op.input for op in loaded.history]
    assert inputs == [
        ("put", "a", "x"),
        ("get", "a"),
        ("append", "b", "y"),
        ("get", "b"),
        ("get", "c"),
    ]
    assert [op.output for op in loaded.history] == [None, "x", None, "y", ""]
    assert check(loaded.history, loaded.model).ok


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('{:process 0, :type :invoke, :f :get, :key "a" :value nil\n', 1, "expected"),
        ("{:process 0, :type :invoke, :f :get, :value nil}\n", 1, "missing :key"),
        ('\n{:process 0, :type :begin, :f :get, :key "a", :value nil}\n', 2, ":type must be"),
        ("[1 2 3]\n", 1, "expected a map"),
    ],
)
def test_kv_errors_name_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(FormatError, match=message) as e:
        parse(text, "kv", "c.txt")
    assert e.value.line == line


KNOSSOS = """\
; a Knossos history: :fail did not happen, :info is open, an :ok nil read is unconstrained
[{:process 0, :type :invoke, :f :write, :value 1}
 {:process 0, :type :ok, :f :write, :value 1}
 {:process :nemesis, :type :info, :f :start, :value nil}
 {:process 1, :type :invoke, :f :cas, :value [1 2]}
 {:process 1, :type :fail, :f :cas, :value [1 2]}
 {:process 2, :type :invoke, :f :cas, :value [1 3]}
 {:process 2, :type :info, :f :cas, :value [1 3]}
 {:process 3, :type :invoke, :f :read, :value nil}
 {:process 3, :type :ok, :f :read, :value nil}
 {:process 4, :type :invoke, :f :read, :value nil, :time 123}
 {:process 4, :type :ok, :f :read, :value 3}]
"""


def test_knossos_edn_semantics() -> None:
    loaded = parse(KNOSSOS, "edn")
    assert isinstance(loaded.model, CasRegister)
    ops = sorted(loaded.history, key=lambda op: op.invoke)
    assert [op.input for op in ops] == [
        ("write", 1),
        ("cas", (1, 3)),
        ("read", None),
        ("read", None),
    ]
    assert ops[0].output is None and ops[0].meta == "lines 2-3"
    assert ops[1].is_open
    assert ops[2].output is UNKNOWN  # :ok read of nil: unconstrained
    assert check(ops, loaded.model).ok  # the in-doubt cas explains the read of 3


def test_edn_errors_name_the_line() -> None:
    with pytest.raises(FormatError, match="'\\]' expected \\(opened on line 1\\)") as e:
        parse("[{:process 0, :type :invoke, :f :read, :value nil}\n\n", "edn", "k.edn")
    assert e.value.line == 3
    with pytest.raises(
        FormatError, match=r"k\.edn:2: process 0 completes an operation it never invoked"
    ):
        parse("[\n{:process 0, :type :ok, :f :read, :value 1}]", "edn", "k.edn")


def test_the_edn_reader() -> None:
    forms = read_all(
        'nil true 12 -3 1.5 42N "a\\"b\\n" \\c :k sym [1 (2)] {:a 1} #{1} #_ 9 #inst "x" ; c'
    )
    values = [f for f, _ in forms]
    assert values == [
        None,
        True,
        12,
        -3,
        1.5,
        42,
        'a"b\n',
        "c",
        Keyword("k"),
        Symbol("sym"),
        (1, (2,)),
        {Keyword("a"): 1},
        frozenset({1}),
        "x",
    ]
    assert [line for _, line in read_sequence("[1\n2\n\n3]")] == [1, 2, 4]
    for bad, line in [("(1 2", 1), ('"abc', 1), ("{:a}", 1), ("\n)", 2), ("1.2.3", 1)]:
        with pytest.raises(EdnError) as e:
            read_all(bad)
        assert e.value.line == line, bad


def test_jsonl_round_trip_and_schema(tmp_path: Path) -> None:
    history = [
        Operation(1, ("put", "k", "v"), None, 0.5, 1.5),
        Operation("c2", ("get", "k"), "v", 1, 2, "first read"),
        Operation(3, ("cas", "k", ("v", "w")), UNKNOWN, 2, None),
        Operation(3, ("get", "k"), UNKNOWN, 3, 4),
    ]
    path = write_jsonl(history, tmp_path / "h.jsonl")
    loaded = load(path, "jsonl")
    assert [(o.client, o.input, o.output, o.invoke, o.complete) for o in loaded.history] == [
        (o.client, o.input, o.output, o.invoke, o.complete) for o in history
    ]
    assert loaded.history[1].meta == "first read" and loaded.history[0].meta == "line 1"
    text = to_jsonl(history).splitlines()[2]
    assert '"status": "info"' in text and "output" not in text
    failed = (
        '{"client": 1, "input": ["put", "k", "x"], "invoke": 0, "complete": 1, "status": "fail"}\n'
    )
    assert len(parse(failed + to_jsonl(history), "jsonl").history) == 4  # fail: did not happen


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "bad JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"input": ["get", "k"], "invoke": 0}', "missing 'client'"),
        ('{"client": 1, "input": ["get", "k"], "invoke": "0"}', "'invoke' must be a finite number"),
        ('{"client": 1, "input": ["get"], "invoke": 2, "complete": 1}', "before it is invoked"),
        ('{"client": 1, "input": ["get"], "invoke": 0, "status": "ok"}', "needs a 'complete'"),
        (
            '{"client": 1, "input": ["get"], "invoke": 0, "complete": 1, "status": "meh"}',
            "'status' must be",
        ),
        ('{"client": 1, "input": ["get"], "invoke": 0, "extra": 1}', "unknown field"),
        ('{"client": true, "input": ["get"], "invoke": 0}', "'client' must be"),
    ],
)
def test_jsonl_errors_name_the_line(line: str, message: str) -> None:
    good = '{"client": 0, "input": ["get", "k"], "output": null, "invoke": 0, "complete": 1}\n'
    with pytest.raises(FormatError, match=message) as e:
        parse(good + "\n" + line + "\n", "jsonl", "h.jsonl")
    assert e.value.line == 3 and str(e.value).startswith("h.jsonl:3: ")


def test_unreadable_files_and_unknown_formats(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="No such file"):
        load(tmp_path / "missing.log", "etcd")
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(FormatError, match="not UTF-8"):
        load(tmp_path / "bin", "etcd")
    with pytest.raises(FormatError, match="unknown format 'xml'"):
        parse("", "xml")
    assert parse("\n", "jsonl", "empty.jsonl").history == []  # empty, not an error
