"""Benchmarks for sdpaxos. Nothing in ``sdpaxos`` may import this package."""
