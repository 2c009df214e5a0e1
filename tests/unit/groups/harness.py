"""A driver's bookkeeping around the pure group coordinator, shared by its unit tests."""

from __future__ import annotations

import itertools

from vdl.groups.coordinator import (
    GroupConfig,
    GroupCoordinator,
    Held,
    JoinRequest,
    JoinResult,
    Result,
    SyncResult,
)
from vdl.groups.group import GroupState
from vdl.log.error_codes import ErrorCode

SESSION = 10_000
REBALANCE = 30_000
DELAY = 100
GROUP = "g"


class Harness:
    """A coordinator plus the bookkeeping a driver would do: tickets -> results."""

    def __init__(self, delay: int = DELAY) -> None:
        counter = itertools.count(1)
        self.core = GroupCoordinator(
            GroupConfig(initial_rebalance_delay_ms=delay),
            new_member_id=lambda client: f"{client}-{next(counter)}",
        )
        self.answers: dict[int, Result] = {}

    def collect(self) -> None:
        for ticket, result in self.core.take_completions():
            assert ticket not in self.answers, "a ticket is answered once"
            self.answers[ticket] = result

    def join(
        self,
        now: int,
        member_id: str = "",
        *,
        client: str = "c",
        protocols: tuple[tuple[str, bytes], ...] = (("range", b"m"),),
        protocol_type: str = "consumer",
        session: int = SESSION,
        rebalance: int = REBALANCE,
        v4: bool = True,
        instance: str | None = None,
    ) -> JoinResult | Held:
        outcome = self.core.join(
            now,
            JoinRequest(
                group_id=GROUP,
                member_id=member_id,
                client_id=client,
                client_host="",
                session_timeout_ms=session,
                rebalance_timeout_ms=rebalance,
                protocol_type=protocol_type,
                protocols=protocols,
                require_known_member_id=v4,
                group_instance_id=instance,
            ),
        )
        self.collect()
        return outcome

    def new_member(self, now: int, client: str = "c", **kwargs: object) -> Held:
        """MEMBER_ID_REQUIRED then the rejoin with the id, as v4+ clients do."""
        first = self.join(now, client=client, **kwargs)  # type: ignore[arg-type]
        assert isinstance(first, JoinResult)
        assert first.error == ErrorCode.MEMBER_ID_REQUIRED
        second = self.join(now, first.member_id, client=client, **kwargs)  # type: ignore[arg-type]
        assert isinstance(second, Held)
        return second

    def answer(self, held: JoinResult | SyncResult | Held) -> Result:
        if isinstance(held, Held):
            return self.answers[held.ticket]
        return held

    def join_answer(self, held: JoinResult | Held) -> JoinResult:
        result = self.answer(held)
        assert isinstance(result, JoinResult)
        return result

    def sync(
        self,
        now: int,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        instance: str | None = None,
    ) -> SyncResult | Held:
        outcome = self.core.sync(
            now, GROUP, member_id, generation, assignments or {}, group_instance_id=instance
        )
        self.collect()
        return outcome

    def tick(self, now: int) -> None:
        self.core.tick(now)
        self.collect()

    def state(self) -> GroupState:
        group = self.core.group(GROUP)
        assert group is not None
        return group.state


def stable_group(h: Harness, n: int, now: int = 0) -> tuple[list[str], int]:
    """n members, joined, synced; returns (member ids in join order, generation)."""
    helds = [h.new_member(now, client=f"c{i}") for i in range(n)]
    h.tick(now + DELAY)
    results = [h.join_answer(held) for held in helds]
    ids = [r.member_id for r in results]
    generation = results[0].generation
    leader = results[0].leader
    followers = [h.sync(now + DELAY, m, generation) for m in ids if m != leader]
    assignments = {m: m.encode() for m in ids}
    assert isinstance(h.sync(now + DELAY, leader, generation, assignments), SyncResult)
    for f in followers:
        assert isinstance(h.answer(f), SyncResult)
    assert h.state() is GroupState.STABLE
    return ids, generation
