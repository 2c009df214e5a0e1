"""Leaders in the preferred data centre (VDL 3.2).

A topic may name a preferred data centre (its `preferred.dc` config, or a YDB attribute of
that name); nodes carry a `--dc` label registered through the metadata group. Clients are
served by partition leaders, so a topic's leaders should sit where its clients are. An
election may put a leader anywhere (the preferred nodes were down, or lost the race); the
leader of each partition group therefore checks now and then whether a voter of the
preferred DC is healthy again and, if so, hands leadership to it.

`transfer_target` is the decision, a pure function; `LeaderPlacement` is the thin loop that
applies it to the groups this node leads. Flapping is ruled out twice: a leader already in
the preferred DC never moves, and each group gets at most one attempt per `retry_s` (a
transfer the target cannot finish is abandoned by the core after an election timeout, and
proposals are refused while it runs, so repeated attempts would cost writes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

import trio

from vdl.broker.topics import Topic
from vdl.consensus.driver import GroupDriver
from vdl.consensus.errors import ConsensusError

log = logging.getLogger(__name__)

PREFERRED_DC = "preferred.dc"


def preferred_dc(topic: Topic) -> str:
    """The topic's preferred DC, "" for none. The Kafka config wins over a YDB attribute
    (YDB clients set attributes, not configs)."""
    return topic.configs.get(PREFERRED_DC) or topic.attributes.get(PREFERRED_DC, "")


def transfer_target(
    *,
    leader: int,
    preferred: str,
    dcs: Mapping[int, str],
    voters: frozenset[int],
    in_contact: frozenset[int],
    match: Mapping[int, int],
    commit_index: int,
) -> int | None:
    """The voter leadership should move to, or None to stay.

    Healthy means heard from within an election timeout (`in_contact`) and holding every
    committed entry (`match`), so it can take over at once and its election cannot fail for
    a stale log. Among several, the most caught-up one (then the lowest id) is picked.
    """
    if not preferred or dcs.get(leader, "") == preferred:
        return None
    healthy = [
        node
        for node in voters
        if node != leader
        and dcs.get(node, "") == preferred
        and node in in_contact
        and match.get(node, 0) >= commit_index
    ]
    if not healthy:
        return None
    return min(healthy, key=lambda node: (-match.get(node, 0), node))


# Per led group: its driver and the preferred DC of its topic.
LedGroups = Callable[[], Iterable[tuple[GroupDriver, str]]]


class LeaderPlacement:
    """Runs `transfer_target` over the partition groups this node leads."""

    def __init__(
        self,
        led: LedGroups,
        dcs: Callable[[], Mapping[int, str]],
        *,
        check_s: float = 0.5,
        retry_s: float = 3.0,
    ) -> None:
        self._led = led
        self._dcs = dcs
        self._check_s = check_s
        self._retry_s = retry_s
        self._attempts: dict[int, float] = {}  # group id -> when its last transfer started
        self.transfers = 0

    async def run(self) -> None:
        while True:
            await trio.sleep(self._check_s)
            self.step(trio.current_time())

    def step(self, now: float) -> list[tuple[int, int]]:
        """One pass; the (group, target) transfers started."""
        dcs = self._dcs()
        started = []
        for driver, preferred in self._led():
            if not driver.is_leader:
                continue
            group = driver.group_id
            last = self._attempts.get(group)
            if last is not None and now - last < self._retry_s:
                continue
            target = transfer_target(
                leader=driver.node_id,
                preferred=preferred,
                dcs=dcs,
                voters=driver.voters,
                in_contact=driver.in_contact(),
                match=driver.match(),
                commit_index=driver.commit_index,
            )
            if target is None:
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
                "group %d: leadership to node %d, in preferred dc %r", group, target, preferred
            )
        # Attempts older than the retry interval no longer limit anything (and groups
        # deleted since must not pile up here).
        for group in [g for g, t in self._attempts.items() if now - t >= self._retry_s]:
            del self._attempts[group]
        return started
