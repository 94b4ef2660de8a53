"""Hostile bytes at the Redis front end, over raw sockets: each gets Redis'
protocol-error reply (where Redis gives one) and its connection closed, the
error is counted, and a healthy client is served afterwards."""

from __future__ import annotations

import asyncio
import socket

import pytest
import redis

from kvstore.resp import RespConnection, RespLimits, RespServer
from tests.kvstore.resp_fake import BatchFakeBackend, FakeBackend, running_server

LIMITS = RespLimits(
    request_bytes_max=64 * 1024, bulk_bytes_max=32 * 1024, multibulk_max=1000, inline_bytes_max=4096
)


def send_and_read_to_close(port: int, chunks: list[bytes], half_close: bool = False) -> bytes:
    """Send ``chunks``; read until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for chunk in chunks:
            sock.sendall(chunk)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        received = b""
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            received += data
        return received


def healthy(server: RespServer) -> None:
    r = redis.Redis(port=server.port, protocol=2)
    assert r.set("after", "ok") is True
    assert r.get("after") == b"ok"


@pytest.mark.parametrize(
    ("chunks", "reply"),
    [
        pytest.param(
            [b"\x00\x01\x02garbage-not-resp\r\n*1\r\n$4\r\nPING\r\n*x\r\n"],
            b"-ERR unknown command",  # inline, as Redis reads it, then a bad multibulk
            id="garbage",
        ),
        pytest.param(
            [b"*1\r\n$999999999999\r\n"],
            b"-ERR Protocol error: invalid bulk length\r\n",
            id="bulk-999999999999",
        ),
        pytest.param(
            [b"*2\r\n$3\r\nGET\r\n$40000\r\n", b"x" * 100],
            b"-ERR Protocol error: invalid bulk length\r\n",
            id="bulk-over-limit",
        ),
        pytest.param(
            [b"*4000000000\r\n"],
            b"-ERR Protocol error: invalid multibulk length\r\n",
            id="huge-multibulk-count",
        ),
        pytest.param(
            [b"*1\r\n$4\r\nPING\r\n*5000\r\n"],
            b"+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n",
            id="huge-count-after-a-good-request",
        ),
        pytest.param(
            [b"*1\r\n$4\r\nPING\r\n*1\r\n:12\r\n"],
            b"+PONG\r\n-ERR Protocol error: expected '$', got ':'\r\n",
            id="integer-argument",
        ),
        pytest.param(
            [b"*1\r\n$-5\r\n"], b"-ERR Protocol error: invalid bulk length\r\n", id="negative-bulk"
        ),
        pytest.param(
            [b"*2\r\n$3\r\nGET\r\n:12\r\n"],
            b"-ERR Protocol error: expected '$', got ':'\r\n",
            id="integer-argument-alone",
        ),
        pytest.param(
            [
                b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n" * 3
                + b"*2\r\n$3\r\nGET\r\n*1\r\n$1\r\na\r\n"
                + b"*1\r\n$4\r\nPING\r\n"
            ],
            b"+OK\r\n+OK\r\n+OK\r\n-ERR Protocol error: expected '$', got '*'\r\n",
            id="array-argument-after-a-pipeline",
        ),
        pytest.param(
            [b"P" * 5000], b"-ERR Protocol error: too big inline request\r\n", id="inline-too-long"
        ),
        pytest.param(
            [
                b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$30000\r\n" + b"x" * 30000 + b"\r\n",
                b"*4\r\n$3\r\nDEL\r\n" + b"$30000\r\n" + b"y" * 30000 + b"\r\n",
                b"$30000\r\n" + b"z" * 30000 + b"\r\n$30000\r\n" + b"w" * 10000,
            ],
            b"+OK\r\n-ERR Protocol error: too big request\r\n",
            id="request-too-big",
        ),
        pytest.param(
            [b"*1\r\n" + b"$" + b"9" * 40],
            b"-ERR Protocol error: too big bulk count string\r\n",
            id="header-line-too-long",
        ),
    ],
)
def test_hostile_input_gets_an_error_and_a_close(chunks: list[bytes], reply: bytes) -> None:
    with running_server(limits=LIMITS) as server:
        received = send_and_read_to_close(server.port, chunks)
        assert received.startswith(reply) or reply in received, received[:200]
        assert server.stats["protocol_errors"] == 1
        healthy(server)


def test_truncated_frame_then_close_leaves_the_server_serving() -> None:
    with running_server(limits=LIMITS) as server:
        received = send_and_read_to_close(
            server.port, [b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nabc"], half_close=True
        )
        assert received == b""  # no complete request, nothing to answer
        healthy(server)
        assert server.stats["protocol_errors"] == 0


def test_inline_commands_work_like_telnet() -> None:
    with (
        running_server() as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock,
    ):
        sock.sendall(b"PING\r\nSET k v\nGET k\r\n*1\r\n$4\r\nPING\r\n  \r\nQUIT\r\n")
        received = b""
        while data := sock.recv(65536):
            received += data
        assert received == b"+PONG\r\n+OK\r\n$1\r\nv\r\n+PONG\r\n+OK\r\n"
        assert server.stats["protocol_errors"] == 0


class FakeTransport(asyncio.Transport):
    """Collects what the connection writes, so a test can feed reads by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False
        self.paused = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 1)


PIPELINE = (
    b"PING\r\n"
    + b"".join(
        b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(v), v)
        for k, v in ((b"k%d" % i, b"v" * (i * 7)) for i in range(12))
    )
    + b"*-1\r\n*0\r\n*2\r\n$3\r\nGET\r\n$3\r\nk11\r\n*1\r\n$4\r\nQUIT\r\n"
)
EXPECTED = b"+PONG\r\n" + b"+OK\r\n" * 12 + b"$77\r\n" + b"v" * 77 + b"\r\n+OK\r\n"


def feed(chunks: list[bytes], backend: FakeBackend | None = None) -> FakeTransport:
    server = RespServer(backend or FakeBackend(), limits=LIMITS)
    conn = RespConnection(server)
    transport = FakeTransport()
    conn.connection_made(transport)
    for chunk in chunks:
        conn.data_received(chunk)
    assert server.stats["protocol_errors"] == 0
    return transport


def test_a_pipeline_fed_one_byte_at_a_time_is_framed_correctly() -> None:
    """The limit checks on the incomplete request never misfire, whatever the cuts."""
    transport = feed([PIPELINE[i : i + 1] for i in range(len(PIPELINE))])
    assert transport.written == EXPECTED
    assert transport.closed


@pytest.mark.parametrize("batch", [False, True], ids=["execute", "execute_many"])
@pytest.mark.parametrize("cut", range(1, len(PIPELINE)))
def test_a_pipeline_cut_anywhere_in_two_is_framed_correctly(cut: int, batch: bool) -> None:
    backend = BatchFakeBackend() if batch else FakeBackend()
    transport = feed([PIPELINE[:cut], PIPELINE[cut:]], backend)
    assert transport.written == EXPECTED
    assert transport.closed


def test_execute_many_gets_each_reads_run_of_data_commands_in_one_call() -> None:
    """PING, 12 SETs, ``*-1``, ``*0``, GET, QUIT in one read: the SETs and the
    GET are one run (the empty requests do not end it); PING and QUIT are the
    front end's."""
    backend = BatchFakeBackend()
    transport = feed([PIPELINE], backend)
    assert transport.written == EXPECTED
    assert backend.runs == [13]


def test_a_connection_command_in_any_case_ends_a_run() -> None:
    """A read of data commands is one run; ``ping`` in lower case between them
    is the front end's (it splits the run), as ``PING`` is."""
    backend = BatchFakeBackend()
    sets = b"".join(b"*3\r\n$3\r\nSET\r\n$1\r\n%d\r\n$1\r\nv\r\n" % i for i in range(5))
    transport = feed([sets, sets + b"*1\r\n$4\r\nping\r\n" + sets], backend)
    assert transport.written == b"+OK\r\n" * 10 + b"+PONG\r\n" + b"+OK\r\n" * 5
    assert backend.runs == [5, 5, 5]


def test_a_bulk_longer_than_declared_is_framed_as_redis_frames_it() -> None:
    """Redis (and hiredis) take the declared length and skip two bytes for the
    CRLF without looking at them; what follows is read as the next request."""
    with (
        running_server() as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock,
    ):
        sock.sendall(b"*2\r\n$4\r\nECHO\r\n$3\r\nabcdef\r\n*1\r\n$4\r\nQUIT\r\n")
        received = b""
        while data := sock.recv(65536):
            received += data
        assert received == b"$3\r\nabc\r\n-ERR unknown command 'f'\r\n+OK\r\n"


def test_the_in_flight_bound_pauses_reading_and_resumes_when_answered() -> None:
    """20 late-answered requests with room for 8: reading pauses at 8 in flight,
    the rest stay in hiredis, and everything is answered in order once the
    backend catches up."""

    async def main() -> None:
        server = RespServer(FakeBackend(seed=2), limits=RespLimits(pipeline_pending_max=8))
        conn = RespConnection(server)
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.data_received(
            b"".join(
                b"*3\r\n$3\r\nSET\r\n$7\r\nslow:%02d\r\n$2\r\n%02d\r\n" % (i, i) for i in range(20)
            )
        )
        assert transport.paused and len(conn.slots) == 8
        assert transport.written == b""
        for _ in range(20):  # let the fake release its batches
            await asyncio.sleep(0)
        assert not transport.paused
        assert transport.written == b"+OK\r\n" * 20

    asyncio.run(main())


def test_a_bulk_over_the_limit_after_a_header_cut_between_reads() -> None:
    """The walk resumes exactly after a header line cut in two by the reads."""
    server = RespServer(FakeBackend(), limits=LIMITS)
    conn = RespConnection(server)
    transport = FakeTransport()
    conn.connection_made(transport)
    conn.data_received(b"*3\r\n$3\r\nGET\r\n$1")
    conn.data_received(b"\r\nk\r\n$40000\r\n")
    assert transport.written == b"-ERR Protocol error: invalid bulk length\r\n"
    assert transport.closed
    assert server.stats["protocol_errors"] == 1
