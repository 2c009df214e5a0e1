"""Moving leaders to where they should be: the loop, and a topic's preferred DC.

A topic may name a preferred data centre (its `preferred.dc` config, or a YDB attribute of
that name); nodes carry a `--dc` label registered through the metadata group. Clients are
served by partition leaders, so a topic's leaders should sit where its clients are, and
(leader balancing) each partition should be led by its preferred replica so leaders spread
over the nodes. An election may put a leader anywhere (the preferred nodes were down, or
lost the race); the leader of each group therefore checks now and then whether the replica
that should lead is healthy and, if so, hands leadership to it. The metadata group takes
part too, with the node's `--metadata-dc` as its preferred DC and no balancing.

The decision is `preferred_leader.leader_target`, a pure function; `LeaderPlacement` is the
thin loop that applies it to the groups this node leads. Flapping is ruled out twice: a
leader already where it should be never moves (and every move strictly improves the
leader's rank), and each group gets at most one attempt per `retry_s` (a transfer the
target cannot finish is abandoned by the core after an election timeout, and proposals are
refused while it runs, so repeated attempts would cost writes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

import trio

from vdl.broker.topics import Topic
from vdl.cluster.preferred_leader import leader_target
from vdl.consensus.driver import GroupDriver
from vdl.consensus.errors import ConsensusError

log = logging.getLogger(__name__)

PREFERRED_DC = "preferred.dc"


def preferred_dc(topic: Topic) -> str:
    """The topic's preferred DC, "" for none. The Kafka config wins over a YDB attribute
    (YDB clients set attributes, not configs)."""
    return topic.configs.get(PREFERRED_DC) or topic.attributes.get(PREFERRED_DC, "")


class LedGroup(NamedTuple):
    """A group this node leads, with what decides where its leader belongs."""

    driver: GroupDriver
    preferred_dc: str = ""  # "" for none
    # The assignment in order, its first replica the preferred leader; () for no balancing.
    replicas: tuple[int, ...] = ()


LedGroups = Callable[[], Iterable[LedGroup]]


class LeaderPlacement:
    """Runs `leader_target` over the groups this node leads."""

    def __init__(
        self,
        led: LedGroups,
        dcs: Callable[[], Mapping[int, str]],
        *,
        check_s: float = 0.5,
        retry_s: float = 3.0,
        quiet: Callable[[], object | None] | None = None,
    ) -> None:
        """`quiet()` (optional): a value that stays the same while nothing this loop looks
        at can have changed, None when it cannot tell; a pass is skipped when it would
        look at exactly what the last one did and no transfer is waiting for a retry."""
        self._led = led
        self._quiet = quiet
        self._last_quiet: object | None = None
        self._dcs = dcs
        self._check_s = check_s
        self._retry_s = retry_s
        self._attempts: dict[int, float] = {}  # group id -> when its last transfer started
        # Quiesced groups found where they belong, with what that was decided from: they
        # are not looked at again until something of it changes.
        self._settled: dict[int, tuple[object, ...]] = {}
        self.transfers = 0

    async def run(self) -> None:
        while True:
            await trio.sleep(self._check_s)
            key = None if self._quiet is None else self._quiet()
            if key is not None and key == self._last_quiet and not self._attempts:
                continue
            self.step(trio.current_time())
            self._last_quiet = key

    def step(self, now: float) -> list[tuple[int, int]]:
        """One pass; the (group, target) transfers started."""
        dcs = self._dcs()
        dcs_key = tuple(sorted(dcs.items()))
        settled: dict[int, tuple[object, ...]] = {}
        started = []
        for driver, preferred, replicas in self._led():
            if not driver.is_leader:
                continue
            group = driver.group_id
            quiet = driver.settled()
            key = (quiet, preferred, replicas, dcs_key)
            if quiet is not None and self._settled.get(group) == key:
                settled[group] = key
                continue
            last = self._attempts.get(group)
            if last is not None and now - last < self._retry_s:
                continue
            target = leader_target(
                leader=driver.node_id,
                replicas=replicas,
                preferred=preferred,
                dcs=dcs,
                voters=driver.voters,
                in_contact=driver.in_contact(),
                match=driver.match(),
                commit_index=driver.commit_index,
            )
            if target is None:
                if quiet is not None:
                    settled[group] = key
                continue
            self._attempts[group] = now
            try:
                # The core queues TimeoutNow (or catch-up appends first); the driver sends
                # them on its next turn, at the latest one tick from now.
                driver.transfer_leader(target)
            except (ConsensusError, ValueError) as exc:
                log.debug("group %d: no transfer to node %d: %s", group, target, exc)
                continue
            self.transfers += 1
            started.append((group, target))
            log.info(
                "group %d: leadership to node %d (replicas %s, preferred dc %r)",
                group,
                target,
                list(replicas),
                preferred,
            )
        # Attempts older than the retry interval no longer limit anything (and groups
        # deleted since must not pile up here).
        for group in [g for g, t in self._attempts.items() if now - t >= self._retry_s]:
            del self._attempts[group]
        self._settled = settled
        return started
