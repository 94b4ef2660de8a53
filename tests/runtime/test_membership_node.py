"""Membership changes through the embedding API, in one event loop: a new node
waits, ``add_replica`` makes it a member, ``remove_replica`` and
``replace_replica`` change the members, and bad input is refused with a clear
message and changes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sdpaxos.core.membership import MEMBERSHIP_PREFIX
from sdpaxos.runtime.apps import PayloadLog
from sdpaxos.runtime.certs import issue_node_cert
from sdpaxos.runtime.changes import ChangeRefused
from sdpaxos.runtime.client import Client, ClientError
from sdpaxos.runtime.config import load_config
from sdpaxos.runtime.errors import NotMember
from sdpaxos.runtime.local import client_tls, free_ports
from sdpaxos.runtime.node import Node

from .helpers import eventually, in_process


def _new_node(path: Path, node_id: int) -> tuple[Node, str]:
    issue_node_cert(path.parent / "certs", node_id)  # from the cluster's CA
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    config = load_config(path, node_id, address=address, region=f"R{node_id}")
    return Node(config, PayloadLog(), fsync=False), address


def _ids(membership: dict[str, object]) -> list[int]:
    return [n["id"] for n in membership["members"]]  # type: ignore[attr-defined,index]


def test_add_remove_and_bad_input_through_the_embedding_api(tmp_path: Path) -> None:
    async def main() -> None:
        async with in_process(tmp_path, 3, PayloadLog) as (path, nodes):
            await nodes[0].submit(b"before", wait="executed", timeout_s=20)
            new, address = _new_node(path, 3)
            await new.start()
            try:
                assert new.status().role == "waiting to be added as a learner"
                with pytest.raises(NotMember, match="no member"):
                    await new.submit(b"x", timeout_s=5)
                # Bad input: refused, nothing changes.
                epoch = nodes[0].status().epoch
                with pytest.raises(ChangeRefused, match="already a member"):
                    await nodes[0].add_replica(1, "127.0.0.1:1", "R1")
                with pytest.raises(ChangeRefused, match="neither a member nor a learner"):
                    await nodes[0].remove_replica(9)
                with pytest.raises(ChangeRefused, match="host:port"):
                    await nodes[0].add_replica(3, "no-port", "R3")
                with pytest.raises(ChangeRefused, match="no member"):
                    await new.add_replica(4, "127.0.0.1:2", "R4")
                # A client cannot send a membership change of its own.
                forged = MEMBERSHIP_PREFIX + b"anything"
                with pytest.raises(ValueError, match="membership prefix"):
                    await nodes[0].submit(forged)
                r0 = nodes[0].config.me
                async with Client([(r0.host, r0.port)], tls=client_tls(path)) as client:
                    with pytest.raises(ClientError, match="membership prefix"):
                        await client.submit(forged, timeout_s=10)
                st = nodes[0].status()
                assert (st.epoch, [m["id"] for m in st.members], st.learners) == (
                    epoch,
                    [0, 1, 2],
                    (),
                )

                added = await nodes[0].add_replica(3, address, "R3", timeout_s=30)
                assert _ids(added) == [0, 1, 2, 3] and added["epoch"] == 1
                await eventually(lambda: new.status().role == "member", what="node 3 a member")
                await new.submit(b"after", wait="executed", timeout_s=20)
                everyone = [*nodes, new]
                await eventually(
                    lambda: all(
                        n.state_machine.payloads == [b"before", b"after"] for n in everyone
                    ),
                    what="before and after everywhere",
                )
                # A second add of the same id: a member already.
                with pytest.raises(ChangeRefused, match="already a member"):
                    await nodes[1].add_replica(3, address, "R3")

                removed = await nodes[0].remove_replica(2, timeout_s=30)
                assert _ids(removed) == [0, 1, 3] and removed["epoch"] == 2
                await eventually(lambda: nodes[2].status().role == "removed", what="removed")
                with pytest.raises(NotMember, match="removed"):
                    await nodes[2].submit(b"x", timeout_s=5)
                await nodes[3 - 2].submit(b"last", wait="executed", timeout_s=20)
                await eventually(
                    lambda: new.state_machine.payloads == [b"before", b"after", b"last"],
                    what="the last write at node 3",
                )
            finally:
                await new.stop()

    asyncio.run(main())


def test_a_second_change_and_a_change_that_leaves_too_few_live_members_are_refused(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with in_process(tmp_path, 3, PayloadLog) as (path, nodes):
            await nodes[0].submit(b"x", wait="executed", timeout_s=20)
            new, address = _new_node(path, 3)
            await new.start()
            try:
                adding = asyncio.ensure_future(nodes[0].add_replica(3, address, "R3"))
                await asyncio.sleep(0)  # the add is under way at node 0
                with pytest.raises(ChangeRefused, match="add-replica 3 is in progress"):
                    await nodes[0].remove_replica(1)
                added = await adding
                assert _ids(added) == [0, 1, 2, 3]
                # Nodes 2 and 3 down: removing 1 would leave {0, 2, 3} with
                # one live member, fewer than a majority of four (three).
                await nodes[2].stop()
                await new.stop()
                await eventually(
                    lambda: (
                        not nodes[0].peers.is_connected(2)  # type: ignore[union-attr]
                        and not nodes[0].peers.is_connected(3)
                    ),  # type: ignore[union-attr]
                    what="node 0 sees 2 and 3 down",
                )
                with pytest.raises(ChangeRefused, match=r"fewer than a majority.*down: \[2, 3\]"):
                    await nodes[0].remove_replica(1)
                st = nodes[0].status()
                assert (st.epoch, [m["id"] for m in st.members]) == (1, [0, 1, 2, 3])
            finally:
                await new.stop()

    asyncio.run(main())
