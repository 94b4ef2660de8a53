"""The Redis protocol (RESP2/RESP3) front end of the replicated key-value store.

It owns the socket side only, cut the way h11 cuts HTTP/1.1:

* :mod:`~kvstore.resp.reader`: bytes to requests (``hiredis.Reader``, inline
  lines, and the limits Redis enforces that hiredis does not);
* :mod:`~kvstore.resp.writer`: reply values to RESP bytes;
* :mod:`~kvstore.resp.connection`: one connection's state: running requests,
  replies in request order, the pipeline bound, back-pressure;
* :mod:`~kvstore.resp.front`: the connection commands it answers itself
  (PING, ECHO, HELLO, AUTH, CLIENT, SELECT, QUIT, RESET, READONLY/READWRITE,
  INFO, COMMAND, CONFIG GET), specs from the one command table
  (:class:`kvstore.commands.CommandSpec`);
* :mod:`~kvstore.resp.backend` and :mod:`~kvstore.resp.pending`: what the
  node implements (:class:`Backend`), and the one kind of promise it
  answers with (:class:`Deferred`);
* :mod:`~kvstore.resp.server`: listening, and what connections share.

Every other command goes to the :class:`Backend`, which the replicated node
implements; the front end never knows about replication, so it can be tested
against an in-memory fake.

Measured on a 2-core VM, uvloop, the server and redis-benchmark 7.0 on the same
machine, against the fake backend of ``tests/kvstore/resp_fake.py`` (answers
synchronously), ``redis-benchmark -t set,get -n 200000 -P 16 -q``, three runs:
SET 171k-249k requests/s, GET 224k-267k requests/s; without pipelining
(``-n 100000``, 50 clients) SET 56k, GET 63k requests/s. The replicated backend
will be the bottleneck, not this front end.
"""

from __future__ import annotations

from kvstore.commands import CommandSpec
from kvstore.resp.backend import Backend, BatchBackend, ConnState
from kvstore.resp.connection import RespConnection
from kvstore.resp.limits import RespLimits
from kvstore.resp.pending import Deferred
from kvstore.resp.server import RespServer, serve_resp
from kvstore.resp.writer import OkList, encode_reply

__all__ = [
    "BENCH_NOTE",
    "Backend",
    "BatchBackend",
    "CommandSpec",
    "ConnState",
    "Deferred",
    "OkList",
    "RespConnection",
    "RespLimits",
    "RespServer",
    "encode_reply",
    "serve_resp",
]

#: What ``redis-benchmark -t set,get -n 200000 -P 16 -q`` measured against the
#: fake backend with uvloop; see the package docstring.
BENCH_NOTE = "SET 171k-249k/s, GET 224k-267k/s (-P 16, 2-core VM, uvloop, fake backend)"
