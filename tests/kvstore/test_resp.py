"""The Redis front end against redis-py, redis-cli and redis-benchmark, over the
in-memory fake backend (``resp_fake``): the front end is tested without any
replication."""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
import redis
import redis.asyncio

from kvstore.resp import Deferred, RespLimits, encode_reply
from kvstore.resp.reader import count_problem, wire_len, wire_total
from kvstore.values import OK, Error, Simple
from sdpaxos.runtime.certs import make_cluster_certs
from tests.kvstore.resp_fake import BatchFakeBackend, FakeBackend, running_server


def test_ping_echo_set_get() -> None:
    with running_server() as server:
        r = redis.Redis(port=server.port)
        assert r.ping() is True
        assert r.echo("hi") == b"hi"
        assert r.set("k", "v") is True
        assert r.get("k") == b"v"
        assert r.get("missing") is None
        assert r.incr("n") == 1
        assert r.delete("k", "n") == 2
        with pytest.raises(redis.ResponseError, match="unknown command"):
            r.execute_command("NOSUCH")


@pytest.mark.parametrize("batch", [False, True], ids=["execute", "execute_many"])
@pytest.mark.parametrize("deferred", [False, True], ids=["futures", "deferred"])
@pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_pipeline_of_1000_answers_in_order_while_the_backend_finishes_out_of_order(
    use_uvloop: bool, deferred: bool, batch: bool
) -> None:
    backend = (BatchFakeBackend if batch else FakeBackend)(seed=11, deferred=deferred)
    with running_server(backend, use_uvloop=use_uvloop) as server:
        r = redis.Redis(port=server.port)
        pipe = r.pipeline(transaction=False)
        for i in range(1000):
            if i % 3 == 0:
                pipe.set(f"slow:{i}", str(i))
            elif i % 3 == 1:
                pipe.get(f"slow:{i - 1}")
            else:
                pipe.incr("counter")
        replies = pipe.execute()
        expected: list[object] = []
        counter = 0
        for i in range(1000):
            if i % 3 == 0:
                expected.append(True)
            elif i % 3 == 1:
                expected.append(str(i - 1).encode())
            else:
                counter += 1
                expected.append(counter)
        assert replies == expected
        assert backend.out_of_order > 0  # the backend really did finish them shuffled
        if isinstance(backend, BatchFakeBackend):
            assert max(backend.runs) > 1  # runs really went through execute_many


def test_pipeline_past_the_in_flight_bound_still_answers_everything_in_order() -> None:
    limits = RespLimits(pipeline_pending_max=8)
    with running_server(FakeBackend(seed=3), limits=limits) as server:
        r = redis.Redis(port=server.port)
        pipe = r.pipeline(transaction=False)
        for i in range(500):
            pipe.echo(str(i)) if i % 2 else pipe.set(f"slow:{i}", str(i))
        replies = pipe.execute()
        assert replies == [str(i).encode() if i % 2 else True for i in range(500)]


def test_asyncio_client_pipeline_and_concurrent_commands() -> None:
    with running_server(FakeBackend(seed=5)) as server:

        async def main() -> None:
            r = redis.asyncio.Redis(port=server.port)
            try:
                await asyncio.gather(*(r.set(f"slow:{i}", str(i)) for i in range(50)))
                values = await asyncio.gather(*(r.get(f"slow:{i}") for i in range(50)))
                assert values == [str(i).encode() for i in range(50)]
                async with r.pipeline(transaction=False) as pipe:
                    for i in range(200):
                        pipe.get(f"slow:{i % 50}")
                    got = await pipe.execute()
                assert got == [str(i % 50).encode() for i in range(200)]
            finally:
                await r.aclose()

        asyncio.run(main())


def test_hello_3_switches_to_resp3() -> None:
    with running_server() as server:
        r = redis.Redis(port=server.port, protocol=3)
        assert r.ping() is True
        assert r.get("nothing") is None
        r.set("k", "v")
        assert r.get("k") == b"v"
        hello = r.execute_command("HELLO", "3")
        assert hello[b"proto"] == 3
        assert hello[b"role"] == b"master"
        raw = redis.Redis(port=server.port)
        with pytest.raises(redis.ResponseError, match="NOPROTO"):
            raw.execute_command("HELLO", "4")


def test_resp3_nil_and_map_encoding() -> None:
    assert encode_reply(None, resp3=False) == b"$-1\r\n"
    assert encode_reply(None, resp3=True) == b"_\r\n"
    assert encode_reply([b"a", 1, None, OK, Error("ERR x")]) == (
        b"*5\r\n$1\r\na\r\n:1\r\n$-1\r\n+OK\r\n-ERR x\r\n"
    )
    assert encode_reply(Simple("line\r\nbreak")) == b"+line  break\r\n"


def _no_retry(**kw: object) -> redis.Redis:
    """A client that reports a refused AUTH at once (redis-py 6+ retries a
    connection error three times with backoff by default)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis(retry=Retry(NoBackoff(), 0), **kw)


def test_auth_required_wrong_password_and_noauth() -> None:
    with running_server(users={"default": "sesame", "alice": "wonder"}) as server:
        anon = _no_retry(port=server.port)
        with pytest.raises(redis.AuthenticationError):
            anon.get("k")  # NOAUTH Authentication required.
        with pytest.raises(redis.AuthenticationError):
            _no_retry(port=server.port, password="wrong").ping()
        with pytest.raises(redis.AuthenticationError):
            _no_retry(port=server.port, username="alice", password="sesame").ping()
        assert _no_retry(port=server.port, password="sesame").ping() is True
        alice = _no_retry(port=server.port, username="alice", password="wonder", protocol=3)
        assert alice.set("k", "v") is True
        assert alice.get("k") == b"v"
        # A raw connection sees Redis' exact words.
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
            assert exchange(raw, b"GET k\r\n") == b"-NOAUTH Authentication required.\r\n"
            assert exchange(raw, b"AUTH nope\r\n") == (
                b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
            )
            assert exchange(raw, b"HELLO 3\r\n").startswith(b"-NOAUTH HELLO must be called")
            assert exchange(raw, b"AUTH alice wonder\r\n") == b"+OK\r\n"
            assert exchange(raw, b"GET k\r\n") == b"$1\r\nv\r\n"


def exchange(sock: socket.socket, request: bytes) -> bytes:
    """Send one request and read its one-line (or one small bulk) reply."""
    sock.sendall(request)
    data = b""
    while not data.endswith(b"\r\n") or (data.startswith(b"$") and data.count(b"\r\n") < 2):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_tls(tmp_path: Path) -> None:
    make_cluster_certs(tmp_path, nodes=1, clients=0)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "node0.pem", tmp_path / "node0.key")
    with running_server(ssl=context, users={"default": "pw"}) as server:
        r = redis.Redis(
            host="localhost",
            port=server.port,
            ssl=True,
            ssl_ca_certs=str(tmp_path / "ca.pem"),
            password="pw",
        )
        assert r.set("k", "v") is True
        assert r.get("k") == b"v"
        pipe = r.pipeline(transaction=False)
        for i in range(300):
            pipe.set(f"slow:{i}", str(i))
            pipe.get(f"slow:{i}")
        assert pipe.execute() == [v for i in range(300) for v in (True, str(i).encode())]
        plain = redis.Redis(port=server.port, socket_timeout=5)
        with pytest.raises(redis.ConnectionError):
            plain.ping()  # the port speaks only TLS


def test_select_client_and_quit() -> None:
    with running_server() as server:
        r = redis.Redis(port=server.port, single_connection_client=True)
        assert r.execute_command("SELECT", "0") is True
        with pytest.raises(redis.ResponseError, match="DB index is out of range"):
            r.execute_command("SELECT", "1")
        assert r.client_setname("worker-1") is True
        assert r.client_getname() == "worker-1"
        client_id = r.client_id()
        assert isinstance(client_id, int) and client_id > 0
        info = r.client_info()
        assert info["name"] == "worker-1"
        assert int(info["id"]) == client_id
        assert r.execute_command("QUIT") is True
        # redis-py reconnects on the next command; the id is a new one.
        assert r.client_id() != client_id


def test_info_parsed_by_redis_py() -> None:
    with running_server() as server:
        r = redis.Redis(port=server.port)
        everything = r.info()
        assert everything["role"] == "master"
        assert everything["view"] == 3
        assert everything["redis_version"]
        replication = r.info("replication")
        assert set(replication) == {"role", "view", "sequencer", "lag"}


def test_readonly_toggles_stale_reads() -> None:
    with running_server() as server:
        r = redis.Redis(port=server.port, single_connection_client=True)
        assert r.execute_command("STALE?") == 0
        assert r.execute_command("READONLY") is True
        assert r.execute_command("STALE?") == 1
        other = redis.Redis(port=server.port)
        assert other.execute_command("STALE?") == 0  # per connection
        assert r.execute_command("READWRITE") is True
        assert r.execute_command("STALE?") == 0


def test_command_count_info_docs() -> None:
    with running_server() as server:
        r = redis.Redis(port=server.port)
        count = r.command_count()
        table = r.command()
        assert count == len(table) and count >= 4
        assert table["get"]["arity"] == 2
        info = r.execute_command("COMMAND INFO", "get", "nosuch")
        assert info[0][:6] == [b"get", 2, [b"readonly", b"fast"], 1, 1, 1]
        assert info[1] is None
        docs = redis.Redis(port=server.port, protocol=3).execute_command("COMMAND DOCS", "set")
        assert docs[b"set"][b"summary"] == b"Sets the value of a key."


def test_backend_exception_answers_internal_error_and_keeps_serving() -> None:
    with running_server() as server:
        r = redis.Redis(port=server.port, single_connection_client=True)
        with pytest.raises(redis.ResponseError, match="internal error"):
            r.execute_command("BOOM")
        with pytest.raises(redis.ResponseError, match="internal error"):
            r.execute_command("ABOOM")
        assert r.ping() is True
        assert server.stats["internal_errors"] == 2


redis_tools = pytest.mark.skipif(
    shutil.which("redis-cli") is None or shutil.which("redis-benchmark") is None,
    reason="redis-cli / redis-benchmark not installed (apt-get install redis-tools)",
)


@redis_tools
def test_redis_cli_and_redis_benchmark() -> None:
    with running_server() as server:
        port = str(server.port)

        def cli(*args: str) -> str:
            done = subprocess.run(
                ["redis-cli", "-p", port, *args], capture_output=True, text=True, timeout=30
            )
            assert done.returncode == 0, done
            return done.stdout.strip()

        assert cli("ping") == "PONG"
        assert cli("SET", "a", "b") == "OK"
        assert cli("GET", "a") == "b"
        bench = subprocess.run(
            ["redis-benchmark", "-p", port, "-t", "set,get", "-n", "2000", "-q"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert bench.returncode == 0, bench
        assert "SET:" in bench.stdout and "GET:" in bench.stdout
        assert "WARNING" not in bench.stdout + bench.stderr
        assert server.stats["protocol_errors"] == 0


def test_wire_total_counts_what_wire_len_counts() -> None:
    """The bulk byte count (every request of a read at once, or one alone) is
    exact: the bytes of the requests as a client sends them."""
    rng = random.Random(5)
    sizes = [0, 1, 9, 10, 99, 100, 999, 1000, 12345, 100000]
    for _ in range(300):
        requests = [
            [b"x" * rng.choice(sizes) for _ in range(rng.randrange(0, 14))]
            for _ in range(rng.randrange(0, 5))
        ]
        wire = [
            b"*%d\r\n" % len(r) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in r)
            for r in requests
        ]
        assert [wire_len(r) for r in requests] == list(map(len, wire))
        assert wire_total(requests) == sum(map(len, wire))


@pytest.mark.parametrize("limit", [0, 9, 10, 99, 1000, 1048576, 999999])
def test_a_multibulk_count_is_refused_exactly_when_over_the_limit(limit: int) -> None:
    """Short ``*N`` lines skip the parse; the answer is the same as parsing."""
    limits = RespLimits(multibulk_max=limit)
    for n in [*range(0, 1200), *range(limit - 3, limit + 4), 10**7, 4 * 10**9, -1]:
        if n < -1:
            continue
        expected = "invalid multibulk length" if n > limit else None
        assert count_problem(b"*%d\r\n$3\r\n" % n, limits) == expected, n


def test_a_deferred_takes_one_callback_and_is_set_once() -> None:
    """The one kind of promise: set once to its replies, read by one callback
    (added before or after it is set)."""
    got: list[object] = []
    part = Deferred(2)
    part.add_callback(got.append)
    with pytest.raises(RuntimeError):
        part.add_callback(got.append)
    assert got == [] and not part.done
    part.set([OK, b"x"])
    part.set([b"later"])  # ignored
    assert got == [[OK, b"x"]] and part.done and part.value == [OK, b"x"]
    known = Deferred()
    known.set([None])
    known.add_callback(got.append)
    assert got[-1] == [None] and known.count == 1
