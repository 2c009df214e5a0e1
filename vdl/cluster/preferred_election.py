"""Preferred elections on request (Kafka's ElectLeaders, KIP-460): the partition's leader
hands leadership to its preferred replica now, with leader balancing on or off.

Any node takes the request (KIP-590). It acts itself when it leads the partition, else it
sends `{"op": "elect_preferred", "topic": ..., "partition": ...}` to the leader it knows
as a forward frame on the raft connection, which the leader takes whether or not it leads
group 0 (`ClusterManager.forward_handlers`); best effort, like every forward: the caller
watches the partition's leader and asks again. The leader decides as the leader-balancing
loop does (`preferred_leader.leader_target`: the preferred replica must be a voter in
contact holding every committed entry, and a topic's preferred DC wins) and starts a Raft
leadership transfer. A leader refuses proposals while a transfer runs, so each group gets
at most one attempt per `RETRY_S`, however often it is asked.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

import trio

from vdl.cluster.commands import Command
from vdl.cluster.placement_leader import preferred_dc
from vdl.cluster.preferred_leader import leader_target
from vdl.consensus.errors import ConsensusError

if TYPE_CHECKING:
    from vdl.cluster.manager import ClusterManager

log = logging.getLogger(__name__)

ELECT_PREFERRED = "elect_preferred"
# The leader-balancing loop's retry interval (placement_leader.LeaderPlacement): a
# transfer the target cannot finish is abandoned by Raft after an election timeout.
RETRY_S = 3.0


class PreferredElections:
    def __init__(self, manager: ClusterManager) -> None:
        self._manager = manager
        self._attempts: dict[int, float] = {}  # group id -> when its last transfer started
        manager.forward_handlers[ELECT_PREFERRED] = self._on_request

    def request(self, topic: str, partition: int) -> None:
        """Move the partition's leadership to its preferred replica, here or through the
        leader this node knows; nothing while no leader is known."""
        manager = self._manager
        leader, _ = manager.leader_term(topic, partition)
        if leader == manager.node_id:
            self._transfer(topic, partition)
        elif leader > 0:
            message = {"op": ELECT_PREFERRED, "topic": topic, "partition": partition}
            manager.transport.forward(leader, json.dumps(message).encode())

    def _on_request(self, command: Command) -> None:
        topic, partition = command.get("topic"), command.get("partition")
        if (
            not isinstance(topic, str)
            or not isinstance(partition, int)
            or isinstance(partition, bool)
        ):
            log.warning("ignoring an %s request without a topic and partition", ELECT_PREFERRED)
            return
        self._transfer(topic, partition)

    def _transfer(self, name: str, partition: int) -> None:
        manager = self._manager
        driver = manager.hosted_driver(name, partition)
        topic = manager.state.topics.get(name)
        placement = manager.state.placements.get(name)
        if driver is None or not driver.is_leader or topic is None or placement is None:
            return  # not (or no longer) the leader: the requester asks again
        now = trio.current_time()
        for group, started in list(self._attempts.items()):
            if now - started >= RETRY_S:
                del self._attempts[group]
        if driver.group_id in self._attempts:
            return
        replicas = placement.replicas[partition]
        target = leader_target(
            leader=driver.node_id,
            replicas=replicas,
            preferred=preferred_dc(topic),
            dcs={node: address.dc for node, address in manager.state.nodes.items()},
            voters=driver.voters,
            in_contact=driver.in_contact(),
            match=driver.match(),
            commit_index=driver.commit_index,
        )
        if target is None:
            return
        self._attempts[driver.group_id] = now
        try:
            driver.transfer_leader(target)
        except (ConsensusError, ValueError) as exc:
            log.info("%s-%d: no transfer to node %d: %s", name, partition, target, exc)
            return
        log.info(
            "%s-%d: ElectLeaders hands leadership to node %d (replicas %s)",
            name,
            partition,
            target,
            list(replicas),
        )
