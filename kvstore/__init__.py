"""Replicated key-value store built on SDPaxos."""
