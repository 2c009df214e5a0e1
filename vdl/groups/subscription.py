"""The topics a consumer-protocol member subscribes to, read from its JoinGroup metadata.

Kafka's consumer protocol (protocol type "consumer") encodes each member's subscription as
ConsumerProtocolSubscription: an int16 version, then an array (int32 count) of topic names
(int16 length, UTF-8), then fields this module does not need. Every version starts so.
OffsetDelete (KIP-496) refuses to delete offsets of a topic an active member subscribes to.
"""

from __future__ import annotations

import struct

from vdl.groups.group import Group

CONSUMER_PROTOCOL = "consumer"

_VERSION = struct.Struct(">h")
_COUNT = struct.Struct(">i")
_LENGTH = struct.Struct(">h")


def subscribed_topics(metadata: bytes) -> frozenset[str]:
    """The topic names of one member's subscription; empty if it does not parse (such a
    member could not have been given partitions by a consumer-protocol assignor)."""
    try:
        pos = _VERSION.size
        (count,) = _COUNT.unpack_from(metadata, pos)
        pos += _COUNT.size
        topics: set[str] = set()
        for _ in range(max(count, 0)):
            (size,) = _LENGTH.unpack_from(metadata, pos)
            pos += _LENGTH.size
            if size < 0 or pos + size > len(metadata):
                return frozenset()
            topics.add(metadata[pos : pos + size].decode())
            pos += size
    except (struct.error, UnicodeDecodeError):
        return frozenset()
    return frozenset(topics)


def group_subscriptions(group: Group) -> frozenset[str]:
    """Every topic some member of a consumer-protocol group subscribes to: by the chosen
    protocol's metadata once there is one, else by every protocol a member offered."""
    topics: set[str] = set()
    for member in group.members.values():
        if group.protocol is not None:
            topics |= subscribed_topics(member.metadata_for(group.protocol))
        else:
            for _, metadata in member.protocols:
                topics |= subscribed_topics(metadata)
    return frozenset(topics)
