"""The next single-server membership change that moves a group towards its wanted members.

The metadata group says who should replicate each group (group 0: every member; a
partition: its placement's replicas). Each group's leader compares that with the
configuration in force and takes one step at a time (the core allows one uncommitted change):

1. a wanted node that is not a member joins as a learner (it catches up without voting,
   so it never stalls commits);
2. a learner that has caught up is promoted to voter;
3. only then is a voter that is no longer wanted removed, so the voter count never dips
   below what it was while a replacement is on its way.
"""

from __future__ import annotations

from collections.abc import Mapping

from vdl.consensus.membership import ConfChange, ConfChangeType, Config


def next_change(
    config: Config, wanted: frozenset[int], match: Mapping[int, int], commit_index: int
) -> ConfChange | None:
    """`match`: how far each follower's log matches the leader's (the leader's progress)."""
    for node in sorted(wanted - config.members):
        return ConfChange(ConfChangeType.ADD_LEARNER, node)
    for node in sorted(config.learners & wanted):
        if match.get(node, 0) >= commit_index:
            return ConfChange(ConfChangeType.PROMOTE, node)
    if config.learners & wanted:
        return None  # wait for the learners before removing anyone
    for node in sorted(config.learners - wanted):
        return ConfChange(ConfChangeType.REMOVE, node)
    unwanted = sorted(config.voters - wanted)
    if unwanted and len(config.voters) > 1:
        return ConfChange(ConfChangeType.REMOVE, unwanted[0])
    return None
