"""A coordinator that loses its role answers held requests with NOT_COORDINATOR (so
clients find the new one) and forgets its groups, yet keeps serving afterwards."""

from __future__ import annotations

from vdl.groups.coordinator import GroupConfig, GroupCoordinator, Held, JoinRequest, JoinResult
from vdl.log.error_codes import ErrorCode


def _join(member_id: str = "") -> JoinRequest:
    return JoinRequest(
        group_id="g",
        member_id=member_id,
        client_id="c",
        client_host="",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=(("range", b""),),
        require_known_member_id=False,
    )


def test_unload_answers_held_joins_and_forgets_groups() -> None:
    core = GroupCoordinator(GroupConfig(initial_rebalance_delay_ms=3000), lambda c: f"{c}-1")
    held = core.join(0, _join())
    assert isinstance(held, Held)
    core.unload()
    assert core.take_completions() == [(held.ticket, JoinResult(ErrorCode.NOT_COORDINATOR))]
    assert core.group("g") is None
    # A member of the old generation is unknown here now; a fresh join starts over.
    assert core.heartbeat(10, "g", "c-1", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert isinstance(core.join(10, _join()), Held)
