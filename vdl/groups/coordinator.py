"""The classic consumer-group protocol as a sans-I/O state machine.

Every call takes `now_ms`; nothing here reads a clock, sleeps or touches I/O. A request that
must wait (JoinGroup until the rebalance completes, a follower's SyncGroup until the leader's
assignment) gets a `Held` ticket; when it can be answered, `(ticket, result)` is queued and
the driver collects it with `take_completions()`. The driver also calls `tick(now_ms)` at
`next_deadline_ms()`, which is where sessions expire and rebalances time out.

Because the outcome depends only on the sequence of calls, the same machine can later be
driven from a replicated log (one command per call) without changing it.

Static membership (KIP-345, JoinGroup v5+): a member that names a `group_instance_id` keeps
its place across restarts. Rejoining with an empty member id replaces its old member id
(the old incarnation is fenced with FENCED_INSTANCE_ID) and, in a Stable group whose chosen
assignor stays the same, gets the current generation and assignment back with no
rebalance; a static member that has not rejoined when a rebalance completes keeps its
place (and its share of the assignment) until its session expires.

What must survive a coordinator change is taken as a `GroupRecord` when a generation's
assignment is settled, when a group becomes Empty and when a static member is replaced
(`take_records`); `load` puts such a record back on the next coordinator.

Offset retention (`vdl.groups.retention`) is decided by the driver; while it stores the
removal of a group's expired offsets, `begin_expiry` holds the group as Dead so that no
member can join a group whose offsets are going, and `end_expiry` lets it go or restores it.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from vdl.groups.group import Group, GroupState, Member, Protocols
from vdl.groups.group_record import GroupRecord, MemberRecord
from vdl.log.error_codes import ErrorCode
from vdl.metrics.stages import STAGES

_PREPARING = GroupState.PREPARING_REBALANCE
# Rebalances begun on this coordinator, for the node's metrics.
_REBALANCES = STAGES.counter("kafka_group_rebalances")
_COMPLETING = GroupState.COMPLETING_REBALANCE


@dataclass(frozen=True, slots=True)
class GroupConfig:
    # Kafka's group.initial.rebalance.delay.ms: a new group waits this long to batch joins.
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    # True for clients that understand MEMBER_ID_REQUIRED (Kafka JoinGroup v4+).
    require_known_member_id: bool
    # Static membership (JoinGroup v5+); None or "" for a dynamic member.
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    # Every member's (id, group instance id, metadata for the chosen protocol); only the
    # leader gets them.
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol: str | None = None


@dataclass(frozen=True, slots=True)
class Held:
    """The request waits; its result arrives as a completion with this ticket."""

    ticket: int
    # The longest the core can take to complete it (the rebalance deadline); drivers use it
    # as a safety bound.
    timeout_ms: int


Result = JoinResult | SyncResult
Completion = tuple[int, Result]


def random_member_id(client_id: str) -> str:
    # Kafka's format, so ids look familiar in client logs.
    return f"{client_id}-{uuid.uuid4()}"


class GroupCoordinator:
    def __init__(
        self,
        config: GroupConfig | None = None,
        new_member_id: Callable[[str], str] = random_member_id,
    ) -> None:
        self.config = config or GroupConfig()
        self._new_member_id = new_member_id
        self._groups: dict[str, Group] = {}
        self._next_ticket = 1
        self._completions: list[Completion] = []
        # Records to store, by group (a later change of a group replaces an earlier one).
        self._records: dict[str, GroupRecord] = {}
        self._closed = False

    # -- queries ---------------------------------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def groups(self) -> Iterator[Group]:
        return iter(list(self._groups.values()))

    def take_completions(self) -> list[Completion]:
        completions, self._completions = self._completions, []
        return completions

    def take_records(self, wall_ms: int | None = None) -> list[GroupRecord]:
        """Group records to store since the last call, at most one per group.

        `wall_ms` is the wall-clock time now: a group that has just become Empty is stamped
        with it (`empty_since_ms`), which must outlive restarts, hence not the monotonic
        time of the other calls. The driver takes records right after each call, so it is
        the time of the change.
        """
        records: list[GroupRecord] = []
        for record in self._records.values():
            if wall_ms is not None and not record.members and record.empty_since_ms is None:
                record = dataclasses.replace(record, empty_since_ms=wall_ms)
                group = self._groups.get(record.group_id)
                if group is not None and group.state is GroupState.EMPTY:
                    group.empty_since_ms = wall_ms
            records.append(record)
        self._records.clear()
        return records

    def next_deadline_ms(self) -> int | None:
        deadlines = (g.next_deadline_ms() for g in self._groups.values())
        return min((d for d in deadlines if d is not None), default=None)

    # -- JoinGroup -------------------------------------------------------------------------

    def join(self, now_ms: int, req: JoinRequest) -> JoinResult | Held:
        def fail(error: ErrorCode) -> JoinResult:
            return JoinResult(error, member_id=req.member_id)

        if self._closed:
            return fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not req.group_id:
            return fail(ErrorCode.INVALID_GROUP_ID)
        config = self.config
        if (
            not config.min_session_timeout_ms
            <= req.session_timeout_ms
            <= (config.max_session_timeout_ms)
        ):
            return fail(ErrorCode.INVALID_SESSION_TIMEOUT)
        group = self._groups.get(req.group_id)
        if group is None:
            if req.member_id:
                return fail(ErrorCode.UNKNOWN_MEMBER_ID)
            group = self._groups[req.group_id] = Group(req.group_id)
        elif group.state is GroupState.DEAD:
            # Its expired offsets are being removed; the client retries in a moment.
            return fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        instance = req.group_instance_id or None
        # A static member rejoining afresh is judged without its own old incarnation.
        joiner = req.member_id or (group.static_members.get(instance, "") if instance else "")
        names = [name for name, _ in req.protocols]
        if not req.protocol_type or not group.accepts(req.protocol_type, names, joiner):
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)

        if not req.member_id:
            if instance is not None:
                old_id = group.static_members.get(instance)
                if old_id is not None:
                    return self._replace_static(now_ms, group, old_id, req)
                # A static member's id is bound to its instance id: no MEMBER_ID_REQUIRED
                # round trip, as in Kafka.
                return self._add_member(now_ms, group, self._new_member_id(req.client_id), req)
            member_id = self._new_member_id(req.client_id)
            if req.require_known_member_id:
                # KIP-394: no state for this member until it proves it got the id.
                group.pending[member_id] = now_ms + req.session_timeout_ms
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id)
            return self._add_member(now_ms, group, member_id, req)
        if req.member_id in group.pending:
            del group.pending[req.member_id]
            return self._add_member(now_ms, group, req.member_id, req)
        if group.is_fenced(instance, req.member_id):
            return fail(ErrorCode.FENCED_INSTANCE_ID)
        member = group.members.get(req.member_id)
        if member is None or (instance is not None and instance not in group.static_members):
            return fail(ErrorCode.UNKNOWN_MEMBER_ID)

        changed = member.protocols != req.protocols or member.protocol_type != req.protocol_type
        is_leader = group.is_leader(member.member_id)
        if not changed and (
            group.state is _COMPLETING or (group.state is GroupState.STABLE and not is_leader)
        ):
            # A retried join: the answer of this generation still holds.
            member.renew_session(now_ms)
            return self._join_result(group, member)
        # Anything else (the leader rejoining, new subscriptions, a rejoin while preparing)
        # goes through a rebalance; the leader's rejoin is how it asks for one.
        self._update_member(now_ms, member, req)
        if len(group.members) == 1:
            group.protocol_type = req.protocol_type
        held = self._hold_join(group, member)
        if group.state is not _PREPARING:
            self._prepare_rebalance(now_ms, group)
        self._maybe_complete_join(now_ms, group)
        return held

    def _add_member(self, now_ms: int, group: Group, member_id: str, req: JoinRequest) -> Held:
        member = Member(
            member_id=member_id,
            client_id=req.client_id,
            client_host=req.client_host,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            session_deadline_ms=now_ms + req.session_timeout_ms,
            group_instance_id=req.group_instance_id or None,
        )
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        if member.group_instance_id is not None:
            group.static_members[member.group_instance_id] = member_id
        held = self._hold_join(group, member)
        if group.state is _PREPARING:
            if group.initial_delay_cap_ms is not None:
                # Each newcomer during the initial delay buys the others a little more time.
                group.join_deadline_ms = min(
                    now_ms + self.config.initial_rebalance_delay_ms, group.initial_delay_cap_ms
                )
        else:
            self._prepare_rebalance(now_ms, group)
        self._maybe_complete_join(now_ms, group)
        return held

    def _replace_static(
        self, now_ms: int, group: Group, old_id: str, req: JoinRequest
    ) -> JoinResult | Held:
        """A known static instance joins afresh (typically restarted): it takes over its
        old place under a new member id, and the old incarnation is fenced."""
        member = group.remove(old_id)
        if member.join_ticket is not None:
            ticket, member.join_ticket = member.join_ticket, None
            self._complete(ticket, JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id))
        if member.sync_ticket is not None:
            ticket, member.sync_ticket = member.sync_ticket, None
            self._complete(ticket, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = self._new_member_id(req.client_id)
        group.members[member.member_id] = member
        assert member.group_instance_id is not None
        group.static_members[member.group_instance_id] = member.member_id
        if group.leader == old_id:
            group.leader = member.member_id
        self._update_member(now_ms, member, req)
        if group.state is GroupState.STABLE and group.select_protocol() == group.protocol:
            # Nothing the assignment depends on changed: carry on in this generation.
            self._take_record(group)
            return self._join_result(group, member)
        # In CompletingRebalance the leader may be assigning to the old id; rebalance so
        # the assignment names the new one (as Kafka does).
        held = self._hold_join(group, member)
        if group.state is not _PREPARING:
            self._prepare_rebalance(now_ms, group)
        self._maybe_complete_join(now_ms, group)
        return held

    def _update_member(self, now_ms: int, member: Member, req: JoinRequest) -> None:
        member.client_id = req.client_id
        member.client_host = req.client_host
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.protocol_type = req.protocol_type
        member.protocols = req.protocols
        member.renew_session(now_ms)

    def _hold_join(self, group: Group, member: Member) -> Held:
        if member.join_ticket is not None:
            # The client gave up on its earlier join and sent another; answer the old one.
            self._complete(member.join_ticket, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.join_ticket = self._ticket()
        timeout = max(group.max_rebalance_timeout_ms(), self.config.initial_rebalance_delay_ms)
        return Held(member.join_ticket, timeout)

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        protocol = group.protocol or ""
        if group.is_leader(member.member_id):
            members = tuple(
                (m.member_id, m.group_instance_id, m.metadata_for(protocol))
                for m in group.members.values()
            )
        return JoinResult(
            ErrorCode.NONE,
            member_id=member.member_id,
            generation=group.generation,
            protocol_type=group.protocol_type,
            protocol=group.protocol,
            leader=group.leader or "",
            members=members,
        )

    # -- rebalance -------------------------------------------------------------------------

    def _prepare_rebalance(self, now_ms: int, group: Group) -> None:
        _REBALANCES.inc()
        if group.state is _COMPLETING:
            # Followers waiting for an assignment of a generation that will never be.
            self._fail_syncs(group, ErrorCode.REBALANCE_IN_PROGRESS)
        initial = group.state is GroupState.EMPTY
        group.state = _PREPARING
        group.empty_since_ms = None
        group.sync_deadline_ms = None
        rebalance_timeout = group.max_rebalance_timeout_ms()
        if initial:
            delay = min(self.config.initial_rebalance_delay_ms, rebalance_timeout)
            group.join_deadline_ms = now_ms + delay
            group.initial_delay_cap_ms = now_ms + max(rebalance_timeout, delay)
        else:
            group.join_deadline_ms = now_ms + rebalance_timeout
            group.initial_delay_cap_ms = None

    def _maybe_complete_join(self, now_ms: int, group: Group) -> None:
        if group.state is not _PREPARING:
            return
        assert group.join_deadline_ms is not None
        if group.initial_delay_cap_ms is not None:
            # The delay batches first joins; nobody left to batch means nothing to wait for.
            if now_ms >= group.join_deadline_ms or not group.members:
                self._complete_join(now_ms, group)
        elif group.all_rejoined() or now_ms >= group.join_deadline_ms:
            self._complete_join(now_ms, group)

    def _complete_join(self, now_ms: int, group: Group) -> None:
        for member in list(group.members.values()):
            if member.join_ticket is None and member.group_instance_id is None:
                # Did not rejoin within the rebalance timeout: out of the group. A static
                # member keeps its place until its session runs out.
                self._drop(group, member)
        joined = [m.member_id for m in group.members.values() if m.join_ticket is not None]
        if group.members and not joined:
            # Only absent static members are left: wait another round for one of them (or
            # for their sessions to end) rather than form a generation nobody hears of.
            group.join_deadline_ms = now_ms + group.max_rebalance_timeout_ms()
            group.initial_delay_cap_ms = None
            return
        group.join_deadline_ms = None
        group.initial_delay_cap_ms = None
        group.generation += 1
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol = None
            group.leader = None
            # Stamped by take_records, with the wall clock.
            group.empty_since_ms = None
            self._take_record(group)
            return
        group.protocol = group.select_protocol()
        if group.leader not in joined:
            # The leader must hear of the generation to assign it.
            group.leader = joined[0]
        group.state = _COMPLETING
        group.sync_deadline_ms = now_ms + group.max_rebalance_timeout_ms()
        for member in group.members.values():
            ticket = member.join_ticket
            member.join_ticket = None
            member.assignment = b""
            member.renew_session(now_ms)
            if ticket is not None:
                self._complete(ticket, self._join_result(group, member))

    # -- SyncGroup -------------------------------------------------------------------------

    def sync(
        self,
        now_ms: int,
        group_id: str,
        member_id: str,
        generation: int,
        assignments: Mapping[str, bytes],
        protocol_type: str | None = None,
        protocol: str | None = None,
        group_instance_id: str | None = None,
    ) -> SyncResult | Held:
        """`assignments` are used only from the leader; followers send none."""
        group = self._groups.get(group_id)
        if self._closed or (group is not None and group.state is GroupState.DEAD):
            return SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if group is None or group.state is GroupState.EMPTY:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_fenced(group_instance_id, member_id):
            return SyncResult(ErrorCode.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if generation != group.generation:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol is not None and protocol != group.protocol
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.state is _PREPARING:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        member.renew_session(now_ms)
        if group.state is GroupState.STABLE:
            return self._sync_result(group, member)
        # CompletingRebalance
        if member.sync_ticket is not None:
            self._complete(member.sync_ticket, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            member.sync_ticket = None
        if not group.is_leader(member_id):
            member.sync_ticket = self._ticket()
            assert group.sync_deadline_ms is not None
            return Held(member.sync_ticket, max(0, group.sync_deadline_ms - now_ms))
        for each in group.members.values():
            each.assignment = assignments.get(each.member_id, b"")
        group.state = GroupState.STABLE
        group.sync_deadline_ms = None
        self._take_record(group)
        for each in group.members.values():
            if each.sync_ticket is not None:
                ticket, each.sync_ticket = each.sync_ticket, None
                each.renew_session(now_ms)
                self._complete(ticket, self._sync_result(group, each))
        return self._sync_result(group, member)

    def _sync_result(self, group: Group, member: Member) -> SyncResult:
        return SyncResult(
            ErrorCode.NONE,
            assignment=member.assignment,
            protocol_type=group.protocol_type,
            protocol=group.protocol,
        )

    def _fail_syncs(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            if member.sync_ticket is not None:
                ticket, member.sync_ticket = member.sync_ticket, None
                self._complete(ticket, SyncResult(error))

    # -- Heartbeat, LeaveGroup -------------------------------------------------------------

    def heartbeat(
        self,
        now_ms: int,
        group_id: str,
        member_id: str,
        generation: int,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        group = self._groups.get(group_id)
        if self._closed or (group is not None and group.state is GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group is None or group.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_fenced(group_instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        member.renew_session(now_ms)
        if group.state is _PREPARING:
            # How members learn they must rejoin.
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(
        self,
        now_ms: int,
        group_id: str,
        member_ids: Sequence[str],
        instance_ids: Sequence[str | None] | None = None,
    ) -> list[ErrorCode]:
        """Per-member errors, in the order given. A member named by its group instance id
        (LeaveGroup v3+) may leave with an empty member id; a member id that no longer
        belongs to that instance is fenced."""
        group = self._groups.get(group_id)
        if self._closed or (group is not None and group.state is GroupState.DEAD):
            return [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(member_ids)
        if group is None:
            return [ErrorCode.UNKNOWN_MEMBER_ID] * len(member_ids)
        instances = list(instance_ids) if instance_ids is not None else [None] * len(member_ids)
        errors: list[ErrorCode] = []
        removed = False
        for member_id, instance in zip(member_ids, instances, strict=True):
            if instance:
                current = group.static_members.get(instance)
                if current is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                elif member_id and member_id != current:
                    errors.append(ErrorCode.FENCED_INSTANCE_ID)
                else:
                    self._drop(group, group.members[current])
                    removed = True
                    errors.append(ErrorCode.NONE)
            elif group.pending.pop(member_id, None) is not None:
                # Never part of a generation, so nobody needs to rebalance for it.
                errors.append(ErrorCode.NONE)
            elif member_id in group.members:
                self._drop(group, group.members[member_id])
                removed = True
                errors.append(ErrorCode.NONE)
            else:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
        if removed:
            self._after_removal(now_ms, group)
        else:
            # A join may have been waiting only for the pending ids that just left.
            self._maybe_complete_join(now_ms, group)
        return errors

    def _drop(self, group: Group, member: Member) -> None:
        """Remove a member and answer whatever it has held; the caller rebalances."""
        group.remove(member.member_id)
        if member.join_ticket is not None:
            self._complete(
                member.join_ticket,
                JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member.member_id),
            )
        if member.sync_ticket is not None:
            self._complete(member.sync_ticket, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))

    def _after_removal(self, now_ms: int, group: Group) -> None:
        if group.state in (GroupState.STABLE, _COMPLETING):
            self._prepare_rebalance(now_ms, group)
        self._maybe_complete_join(now_ms, group)

    # -- OffsetCommit --------------------------------------------------------------------

    def check_commit(
        self,
        now_ms: int,
        group_id: str,
        member_id: str,
        generation: int,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        """May this member commit offsets for the group now? Renews its session if so.

        Generation -1 is a standalone commit (the client assigns partitions itself); it is
        accepted while the group has no members.
        """
        if self._closed:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        group = self._groups.get(group_id)
        if group is None:
            if generation >= 0:
                # A generation of a group this coordinator does not know (e.g. from before a
                # restart): make the member rejoin.
                return ErrorCode.ILLEGAL_GENERATION
            # Listed as Empty from now on, as Kafka does for standalone committers.
            group = self._groups[group_id] = Group(group_id)
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.NONE
        if group.is_fenced(group_instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if group.state is _COMPLETING:
            return ErrorCode.REBALANCE_IN_PROGRESS
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        member.renew_session(now_ms)
        return ErrorCode.NONE

    # -- time ------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Apply every deadline that has passed: pending ids, sessions, rebalance timeouts."""
        for group in list(self._groups.values()):
            self._tick_group(now_ms, group)

    def _tick_group(self, now_ms: int, group: Group) -> None:
        expired_pending = [m for m, deadline in group.pending.items() if deadline <= now_ms]
        for member_id in expired_pending:
            del group.pending[member_id]
        expired = [
            m
            for m in group.members.values()
            if m.join_ticket is None and m.sync_ticket is None and m.session_deadline_ms <= now_ms
        ]
        for member in expired:
            self._drop(group, member)
        if expired:
            self._after_removal(now_ms, group)
        if group.state is _COMPLETING:
            assert group.sync_deadline_ms is not None
            if now_ms >= group.sync_deadline_ms:
                # The leader never sent its assignment; whoever did not sync is out.
                for member in list(group.members.values()):
                    if member.sync_ticket is None:
                        self._drop(group, member)
                self._prepare_rebalance(now_ms, group)
        self._maybe_complete_join(now_ms, group)

    # -- records ---------------------------------------------------------------------------

    def _take_record(self, group: Group) -> None:
        self._records[group.group_id] = GroupRecord(
            group_id=group.group_id,
            generation=group.generation,
            protocol_type=group.protocol_type,
            protocol=group.protocol,
            leader=group.leader,
            members=tuple(
                MemberRecord(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    session_timeout_ms=m.session_timeout_ms,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    protocol_type=m.protocol_type,
                    protocols=m.protocols,
                    assignment=m.assignment,
                )
                for m in group.members.values()
            ),
            empty_since_ms=None if group.members else group.empty_since_ms,
        )

    def load(self, now_ms: int, record: GroupRecord) -> bool:
        """Take over a group from its stored record (a new coordinator, or a restart): its
        members carry on in the stored generation, each with a fresh session. A group this
        coordinator already holds is left alone (it is newer). True if loaded."""
        if self._closed or record.group_id in self._groups:
            return False
        group = Group(
            record.group_id,
            state=GroupState.STABLE if record.members else GroupState.EMPTY,
            generation=record.generation,
            protocol_type=record.protocol_type,
            protocol=record.protocol if record.members else None,
            leader=record.leader if record.members else None,
            empty_since_ms=None if record.members else record.empty_since_ms,
        )
        for m in record.members:
            group.members[m.member_id] = Member(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                protocol_type=m.protocol_type,
                protocols=m.protocols,
                session_deadline_ms=now_ms + m.session_timeout_ms,
                group_instance_id=m.group_instance_id,
                assignment=m.assignment,
            )
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        self._groups[record.group_id] = group
        return True

    # -- offset retention ------------------------------------------------------------------

    def begin_expiry(self, group_id: str) -> bool:
        """The driver is about to remove expired offsets of this group (and perhaps the
        group): until `end_expiry`, the group is Dead, so joins and commits get
        COORDINATOR_NOT_AVAILABLE (clients retry) and nobody becomes a member of a group
        whose offsets are going. False, and nothing changes, if the group is not Empty or
        has members about to join; a group this coordinator does not know is held too."""
        if self._closed:
            return False
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = Group(group_id)
        if group.state is not GroupState.EMPTY or group.members or group.pending:
            return False
        group.state = GroupState.DEAD
        return True

    def end_expiry(self, group_id: str, forget: bool) -> None:
        """The removal is stored (or failed): forget the group, or make it Empty again."""
        group = self._groups.get(group_id)
        # Not Dead: the groups were unloaded and loaded again meanwhile; that state stands.
        if group is None or group.state is not GroupState.DEAD or self._closed:
            return
        if forget:
            del self._groups[group_id]
        else:
            group.state = GroupState.EMPTY

    # -- shutdown --------------------------------------------------------------------------

    def close(self) -> None:
        """The coordinator stops serving: held requests are answered so clients look for
        the coordinator again, and every later call gets COORDINATOR_NOT_AVAILABLE."""
        self._closed = True
        self._release_all(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    def unload(self) -> None:
        """This node stopped coordinating (another node took the groups over): held requests
        get NOT_COORDINATOR, so clients find the new coordinator, and every group is
        forgotten. Membership is rebuilt there by rejoining; committed offsets are not
        kept here, so nothing of value is lost."""
        self._release_all(ErrorCode.NOT_COORDINATOR)
        self._groups.clear()

    def _release_all(self, error: ErrorCode) -> None:
        for group in self._groups.values():
            for member in group.members.values():
                if member.join_ticket is not None:
                    ticket, member.join_ticket = member.join_ticket, None
                    self._complete(ticket, JoinResult(error))
                if member.sync_ticket is not None:
                    ticket, member.sync_ticket = member.sync_ticket, None
                    self._complete(ticket, SyncResult(error))
            group.state = GroupState.DEAD
            group.join_deadline_ms = group.sync_deadline_ms = group.initial_delay_cap_ms = None
            group.pending.clear()
            group.members.clear()

    # -- helpers ---------------------------------------------------------------------------

    def _ticket(self) -> int:
        ticket = self._next_ticket
        self._next_ticket += 1
        return ticket

    def _complete(self, ticket: int, result: Result) -> None:
        self._completions.append((ticket, result))
