"""The Trio driver around `GroupCoordinator`: clock, timers and held requests.

Request handlers call the synchronous methods in request order; a held JoinGroup/SyncGroup
comes back as a `Waiter` the handler awaits in its Pending coroutine. One task (`run`) sleeps
until the core's next deadline or until a call may have moved it, then ticks the core. All
core calls happen on the Trio thread, so the core needs no locks.

Another (`run_retention`) sweeps expired offsets and groups (`vdl.groups.retention`) while
this node coordinates: on one node the decision and its one synced batch of deletes are made
in one synchronous step, so no commit or join comes between them; on a cluster each group's
expiry is a metadata-group command, and the group is held Dead until it is applied.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

import trio

from vdl.backends.api import MetaStore
from vdl.groups.coordinator import (
    GroupConfig,
    GroupCoordinator,
    Held,
    JoinRequest,
    JoinResult,
    Result,
    SyncResult,
    random_member_id,
)
from vdl.groups.group import Group, GroupState
from vdl.groups.group_record import GroupRecord, GroupRecordStore
from vdl.groups.offsets import CommittedOffset, OffsetStore, TopicPartition
from vdl.groups.retention import (
    Expiry,
    TopicConsumers,
    decide,
    droppable_record,
    has_members,
    stale_offset_keys,
    standing,
)
from vdl.groups.subscription import CONSUMER_PROTOCOL, group_subscriptions
from vdl.log.error_codes import ErrorCode

log = logging.getLogger(__name__)

# Extra time a handler waits beyond the core's own deadline before giving up on a held
# request; the core always answers first unless something is badly wrong.
_HELD_SLACK_S = 5.0


class Waiter:
    """The future answer of one held request."""

    __slots__ = ("_event", "_result", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        self._event = trio.Event()
        self._result: Result | None = None
        self.timeout_s = timeout_s

    def set(self, result: Result) -> None:
        self._result = result
        self._event.set()

    async def wait(self) -> Result | None:
        """The result, or None if the core did not answer in time."""
        with trio.move_on_after(self.timeout_s):
            await self._event.wait()
        return self._result


class OffsetReplicator(Protocol):
    """Where a cluster sends commits (vdl.cluster.offset_commands): `submit` fixes their
    order at once; awaiting what it returns gives NONE once the commit is applied.
    `expire` proposes an expiry the same way and gives NONE once every node may apply it."""

    def submit(
        self, group: str, offsets: Mapping[TopicPartition, CommittedOffset]
    ) -> Callable[[], Awaitable[ErrorCode]]: ...

    async def expire(self, expiry: Expiry) -> ErrorCode: ...


class GroupService:
    def __init__(
        self,
        meta: MetaStore,
        config: GroupConfig | None = None,
        *,
        wall_clock_ms: Callable[[], int],
        new_member_id: Callable[[str], str] = random_member_id,
    ) -> None:
        self.coordinator = GroupCoordinator(config, new_member_id)
        self._meta = meta
        self.offsets = OffsetStore(meta)
        # Group records live in this node's MetaStore; on a cluster they get there through
        # the metadata group, so the node sets `persist` to propose them instead.
        self.records = GroupRecordStore(meta)
        self.persist: Callable[[GroupRecord], None] = self.records.put
        self._wall_clock_ms = wall_clock_ms
        # Only tickets not yet answered; every ticket is eventually answered by the core
        # (deadline, expiry or close), so nothing accumulates here.
        self._waiters: dict[int, Waiter] = {}
        self._wake = trio.Event()
        self._stopped = False
        # On a cluster (set by the node): whether this node coordinates groups now (NONE,
        # NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), and where commits go instead of
        # straight into the local store.
        self.role: Callable[[], ErrorCode] | None = None
        self.replicator: OffsetReplicator | None = None

    @staticmethod
    def now_ms() -> int:
        # Trio's clock, not the wall clock: monotonic, and MockClock drives it in tests.
        return math.floor(trio.current_time() * 1000)

    # -- the driver task -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fire the core's timers until `stop()`."""
        task_status.started()
        while not self._stopped:
            wake = self._wake
            deadline = self.coordinator.next_deadline_ms()
            # Half a millisecond late, so that now_ms() has surely reached the deadline.
            at = math.inf if deadline is None else (deadline + 0.5) / 1000
            with trio.move_on_at(at):
                await wake.wait()
            if wake.is_set():
                self._wake = trio.Event()
            self.coordinator.tick(self.now_ms())
            self._deliver()

    def stop(self) -> None:
        """Answer every held request (clients look for the coordinator again) and end `run`."""
        self.coordinator.close()
        self._deliver()
        self._stopped = True
        self._wake.set()

    def coordinator_error(self) -> ErrorCode:
        """NONE if this node may serve group requests now (always, on one node)."""
        return ErrorCode.NONE if self.role is None else self.role()

    def unload(self) -> None:
        """Another node coordinates now: answer held requests, forget every group."""
        self.coordinator.unload()
        self._after_call()

    def _after_call(self) -> None:
        self._deliver()
        # The call may have moved the next deadline earlier; let the driver recompute.
        self._wake.set()

    def load(self) -> int:
        """Take over every stored group (at start, or on becoming the coordinator);
        returns how many were loaded."""
        now = self.now_ms()
        loaded = sum(self.coordinator.load(now, record) for record in self.records.records())
        self._after_call()
        return loaded

    def _deliver(self) -> None:
        for record in self.coordinator.take_records(self._wall_clock_ms()):
            self.persist(record)
        for ticket, result in self.coordinator.take_completions():
            waiter = self._waiters.pop(ticket, None)
            if waiter is not None:
                waiter.set(result)

    def _register(self, held: Held) -> Waiter:
        waiter = Waiter(held.timeout_ms / 1000 + _HELD_SLACK_S)
        self._waiters[held.ticket] = waiter
        return waiter

    # -- group membership ------------------------------------------------------------------

    def join(self, request: JoinRequest) -> JoinResult | Waiter:
        outcome = self.coordinator.join(self.now_ms(), request)
        # Register before delivering: the join that completes a rebalance is answered at once.
        answer = self._register(outcome) if isinstance(outcome, Held) else outcome
        self._after_call()
        return answer

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        assignments: Mapping[str, bytes],
        protocol_type: str | None = None,
        protocol: str | None = None,
        group_instance_id: str | None = None,
    ) -> SyncResult | Waiter:
        outcome = self.coordinator.sync(
            self.now_ms(),
            group_id,
            member_id,
            generation,
            assignments,
            protocol_type,
            protocol,
            group_instance_id,
        )
        answer = self._register(outcome) if isinstance(outcome, Held) else outcome
        self._after_call()
        return answer

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        # No _after_call: a heartbeat only moves a session deadline later and answers no
        # held request, so the driver need not wake (the most frequent call stays cheap).
        return self.coordinator.heartbeat(
            self.now_ms(), group_id, member_id, generation, group_instance_id
        )

    def leave(
        self,
        group_id: str,
        member_ids: Sequence[str],
        instance_ids: Sequence[str | None] | None = None,
    ) -> list[ErrorCode]:
        errors = self.coordinator.leave(self.now_ms(), group_id, member_ids, instance_ids)
        self._after_call()
        return errors

    def group(self, group_id: str) -> Group | None:
        return self.coordinator.group(group_id)

    def groups(self) -> list[Group]:
        return list(self.coordinator.groups())

    # -- committed offsets -----------------------------------------------------------------

    def check_commit(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        # Like a heartbeat: at most a session deadline moves later.
        return self.coordinator.check_commit(
            self.now_ms(), group_id, member_id, generation, group_instance_id
        )

    def commit_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, tuple[int, str, int]]
    ) -> Callable[[], Awaitable[ErrorCode]] | None:
        """Store (offset, metadata, leader epoch) per partition, stamped with the wall clock.

        Validate first with `check_commit`. On one node this writes synchronously (one
        synced batch) and returns None; on a cluster it queues the commit for the metadata
        group and returns what to await for its outcome. Either way commits from one
        connection are stored in the order they were sent.
        """
        now = self._wall_clock_ms()
        committed = {
            tp: CommittedOffset(offset, metadata, epoch, now)
            for tp, (offset, metadata, epoch) in offsets.items()
        }
        if self.replicator is not None:
            return self.replicator.submit(group_id, committed)
        self.offsets.commit(group_id, committed)
        return None

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """Committed offsets of the given partitions (None: not committed), or of every
        partition the group has committed when `partitions` is None."""
        if partitions is None:
            return dict(self.offsets.fetch_all(group_id))
        return self.offsets.fetch(group_id, partitions)

    # -- deleting groups and offsets (DeleteGroups, OffsetDelete) ---------------------------

    def _known(self, group_id: str) -> tuple[Group | None, bool]:
        """The coordinator's group (None if it holds none), and whether the group exists:
        held in memory and not Dead, or stored (a record or committed offsets)."""
        group = self.coordinator.group(group_id)
        if group is not None:
            return group, group.state is not GroupState.DEAD
        exists = self.records.get(group_id) is not None or bool(self.offsets.fetch_all(group_id))
        return None, exists

    async def delete_group(self, group_id: str) -> ErrorCode:
        """Delete a group without members and every offset it committed (Kafka's
        DeleteGroups): NONE once done (on a cluster, applied through the metadata group),
        GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, or a retriable error. The group is held Dead
        meanwhile, as for an expiry, so nobody joins or commits to it half-deleted."""
        group, exists = self._known(group_id)
        if not exists:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group is not None and has_members(group):
            return ErrorCode.NON_EMPTY_GROUP
        # The newest generation known: the coordinator's record of it may still be on its
        # way to the store (on a cluster, through the metadata group).
        record = self.records.get(group_id)
        generations = [r.generation for r in (group, record) if r is not None]
        expiry = Expiry(
            group_id=group_id,
            offsets=tuple(
                (topic, partition, committed.commit_time_ms)
                for (topic, partition), committed in self.offsets.fetch_all(group_id).items()
            ),
            drop_group=True,
            record_generation=max(generations, default=None),
        )
        if not self.coordinator.begin_expiry(group_id):
            return ErrorCode.NON_EMPTY_GROUP
        error = ErrorCode.NONE
        try:
            if self.replicator is None:
                self._store_deletes(expiry)
            elif not expiry.stores_nothing:
                error = await self.replicator.expire(expiry)
        finally:
            # Not deleted: a group this coordinator held is Empty again; one it did not
            # hold was held only for the proposal.
            self.coordinator.end_expiry(group_id, forget=group is None or error == ErrorCode.NONE)
            self._after_call()
        if error == ErrorCode.NONE:
            log.info("group %r deleted with %d committed offsets", group_id, len(expiry.offsets))
        return error

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """Delete the group's committed offsets of `partitions` (Kafka's OffsetDelete,
        KIP-496): a group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP for a group
        with members that does not use the consumer protocol), else one error per
        partition, GROUP_SUBSCRIBED_TO_TOPIC where an active member subscribes to its
        topic. A partition with no committed offset is NONE: nothing to delete."""
        group, exists = self._known(group_id)
        if not exists:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        subscribed: frozenset[str] = frozenset()
        if group is not None and has_members(group):
            if group.protocol_type != CONSUMER_PROTOCOL:
                return ErrorCode.NON_EMPTY_GROUP, {}
            subscribed = group_subscriptions(group)
        errors = {
            tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if tp[0] in subscribed else ErrorCode.NONE
            for tp in partitions
        }
        stored = self.offsets.fetch(group_id, [tp for tp, e in errors.items() if not e])
        # With the commit time seen now: a commit made after this request stays.
        expiry = Expiry(
            group_id=group_id,
            offsets=tuple(
                (topic, partition, committed.commit_time_ms)
                for (topic, partition), committed in stored.items()
                if committed is not None
            ),
            drop_group=False,
        )
        if not expiry.offsets:
            return ErrorCode.NONE, errors
        if self.replicator is None:
            self._store_deletes(expiry)
            return ErrorCode.NONE, errors
        error = await self.replicator.expire(expiry)
        if error != ErrorCode.NONE:
            for topic, partition, _ in expiry.offsets:
                errors[(topic, partition)] = error
        return ErrorCode.NONE, errors

    def _store_deletes(self, expiry: Expiry) -> None:
        """On one node: delete what `expiry` names from the store, in one synced batch."""
        deletes = stale_offset_keys(expiry, self._meta.get)
        record = droppable_record(expiry, self._meta.get)
        if record is not None:
            deletes.append(record)
        if deletes:
            self._meta.write_batch({}, deletes)

    # -- offset retention ------------------------------------------------------------------

    async def run_retention(
        self,
        topics: Callable[[], TopicConsumers],
        retention_ms: int,
        check_interval_ms: int,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Sweep every `check_interval_ms` until cancelled or stopped. `topics` gives every
        topic with the YDB consumers declared on it."""
        task_status.started()
        while not self._stopped:
            await trio.sleep(check_interval_ms / 1000)
            if not self._stopped:
                await self.sweep(topics(), retention_ms)

    def decide_expiries(self, topics: TopicConsumers, retention_ms: int) -> list[Expiry]:
        """What expires now, of every group this node knows of in memory, by a stored
        record or by committed offsets."""
        now = self._wall_clock_ms()
        offsets = self.offsets.all_groups()
        records = {record.group_id: record for record in self.records.records()}
        names = set(offsets) | set(records) | {g.group_id for g in self.coordinator.groups()}
        expiries: list[Expiry] = []
        for name in sorted(names):
            group = standing(
                name, self.coordinator.group(name), records.get(name), offsets.get(name, {})
            )
            expiry = None if group is None else decide(group, topics, now, retention_ms)
            if expiry is not None:
                expiries.append(expiry)
        return expiries

    def _decide_group(
        self, group_id: str, topics: TopicConsumers, retention_ms: int
    ) -> Expiry | None:
        group = standing(
            group_id,
            self.coordinator.group(group_id),
            self.records.get(group_id),
            self.offsets.fetch_all(group_id),
        )
        return None if group is None else decide(group, topics, self._wall_clock_ms(), retention_ms)

    async def sweep(self, topics: TopicConsumers, retention_ms: int) -> list[Expiry]:
        """One sweep, if this node coordinates; returns what it decided to expire."""
        if self._stopped or self.coordinator_error() != ErrorCode.NONE:
            return []
        expiries = self.decide_expiries(topics, retention_ms)
        if self.replicator is None:
            self._expire_here(expiries)
        else:
            decided, expiries = expiries, []
            for each in decided:
                # Earlier proposals took time: decide again on what the group is now.
                again = self._decide_group(each.group_id, topics, retention_ms)
                if again is not None:
                    await self._expire_replicated(self.replicator, again)
                    expiries.append(again)
        if expiries:
            log.info(
                "offset retention: %d offsets expired, %d groups deleted",
                sum(len(e.offsets) for e in expiries),
                sum(e.drop_group for e in expiries),
            )
        return expiries

    def _expire_here(self, expiries: Sequence[Expiry]) -> None:
        # Called in the same synchronous step as the decision: the checks against the
        # store cannot find anything newer, but they cost little and keep one rule.
        get = self._meta.get
        deletes: list[bytes] = []
        for expiry in expiries:
            deletes.extend(stale_offset_keys(expiry, get))
            record = droppable_record(expiry, get)
            if record is not None:
                deletes.append(record)
        if deletes:
            # One synced batch per sweep rather than one per group.
            self._meta.write_batch({}, deletes)
        for expiry in expiries:
            if expiry.drop_group and self.coordinator.begin_expiry(expiry.group_id):
                self.coordinator.end_expiry(expiry.group_id, forget=True)

    async def _expire_replicated(self, replicator: OffsetReplicator, expiry: Expiry) -> None:
        known = self.coordinator.group(expiry.group_id) is not None
        # Fails (and nothing is held) for a group with members: only offsets of deleted
        # topics expire then, which no member can be using.
        held = self.coordinator.begin_expiry(expiry.group_id)
        error = ErrorCode.NONE
        try:
            if not expiry.stores_nothing:
                error = await replicator.expire(expiry)
        finally:
            if held:
                # A group this coordinator did not hold was held only for the proposal.
                forget = not known or (expiry.drop_group and error == ErrorCode.NONE)
                self.coordinator.end_expiry(expiry.group_id, forget)
        if error != ErrorCode.NONE:
            log.info("group %r: expiry not applied (%s); next sweep", expiry.group_id, error.name)
