"""The protocols SDPaxos is measured against, as pure cores like :mod:`sdpaxos.core`.

Each module is one protocol with the replica driving API of
:class:`sdpaxos.core.replica.Replica` and is reached by name through
:func:`sdpaxos.protocols.protocol`; the rules of the core hold here too (no
I/O, no clock, no randomness but the ``rng`` given, never awaits).
"""
