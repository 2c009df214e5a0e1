"""The raft transport on loopback: framing, one shared connection, reconnects, overflow."""

from __future__ import annotations

import pytest
import trio

from tests.integration.node_process import free_port
from vdl.backends.api import Entry, EntryType
from vdl.consensus.frames import (
    BEAT_GROUP,
    FrameError,
    FrameReader,
    decode_beat,
    encode_beat,
    encode_frame,
)
from vdl.consensus.messages import (
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    Message,
)
from vdl.consensus.router import GroupRouter
from vdl.consensus.transport import RaftTransport
from vdl.net.limits import ConnectionLimits


class Box:
    def __init__(self) -> None:
        self.got: list[Message] = []

    def deliver(self, message: Message) -> None:
        self.got.append(message)


def test_frames_split_anywhere_decode_the_same() -> None:
    entries = (Entry(3, 5, EntryType.DATA, b"payload"),)
    messages: list[Message] = [AppendEntries(1, 2, 3, 4, 3, 2, entries), Heartbeat(1, 2, 3, 4)]
    data = b"".join(encode_frame(10 + i, m) for i, m in enumerate(messages))
    for cut in range(len(data)):
        reader = FrameReader()
        got = reader.feed(data[:cut]) + reader.feed(data[cut:])
        assert got == [(10, messages[0]), (11, messages[1])]


def test_a_garbage_frame_is_an_error() -> None:
    with pytest.raises(FrameError):
        FrameReader().feed(b"\x00\x00\x00\x01" + b"\x00" * 16)


def test_a_beat_carries_the_heartbeats_of_many_groups_in_one_frame() -> None:
    items = [
        (5, Heartbeat(1, 2, 3, 9)),
        (6, Heartbeat(1, 2, 4, 0, quiesce=True)),
        (7, HeartbeatResponse(1, 2, 8)),
    ]
    [(group, body)] = FrameReader().feed(encode_beat(42, items))
    assert group == BEAT_GROUP and isinstance(body, bytes)
    assert decode_beat(body, 1, 2) == (42, items)
    assert decode_beat(encode_beat(7, [])[12:], 1, 2) == (7, [])
    for bad in (body[:-1], body + b"\x00", body[:16] + b"\x09" + body[17:]):
        with pytest.raises(FrameError):
            decode_beat(bad, 1, 2)


class Node:
    def __init__(self, node_id: int, ports: dict[int, int], groups: int = 2) -> None:
        self.router = GroupRouter()
        self.boxes = {g: Box() for g in range(1, groups + 1)}
        for group, box in self.boxes.items():
            self.router.add(group, box)
        peers = {n: ("127.0.0.1", p) for n, p in ports.items()}
        self.beats: list[tuple[int, int]] = []
        self.transport = RaftTransport(
            node_id,
            ("127.0.0.1", ports[node_id]),
            peers,
            self.router,
            incarnation=100 + node_id,
            on_beat=lambda peer, inc: self.beats.append((peer, inc)),
        )
        self.scope = trio.CancelScope()

    async def start(self, nursery: trio.Nursery) -> None:
        async def run(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
            with self.scope:
                await self.transport.serve(task_status=task_status)

        await nursery.start(run)


async def _until(predicate: object, timeout: float = 10.0) -> None:
    assert callable(predicate)
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


async def test_messages_of_many_groups_flow_both_ways_over_one_connection() -> None:
    ports = {1: free_port(), 2: free_port(), 3: free_port()}
    nodes = {i: Node(i, ports) for i in ports}
    async with trio.open_nursery() as nursery:
        for node in nodes.values():
            await node.start(nursery)
        for node in nodes.values():
            for link in node.transport.links.values():
                with trio.fail_after(10):
                    await link.wait_connected()
        for src in nodes:
            for dst in nodes:
                if src != dst:
                    for group in (1, 2):
                        nodes[src].transport.send(group, Heartbeat(src, dst, group, 0))
        await _until(lambda: all(len(b.got) == 2 for n in nodes.values() for b in n.boxes.values()))
        for node_id, node in nodes.items():
            for group, box in node.boxes.items():
                assert {m.src for m in box.got} == set(ports) - {node_id}
                assert all(m.term == group for m in box.got)
        # One connection per pair: the higher id never dialled.
        assert all(
            link.connects == 1 for n in nodes.values() for link in n.transport.links.values()
        )
        nursery.cancel_scope.cancel()


async def test_heartbeats_of_all_groups_travel_to_a_peer_as_one_beat() -> None:
    """What a tick makes the groups say to one peer leaves as one frame, which is also
    the sender's liveness beat (with its incarnation)."""
    ports = {1: free_port(), 2: free_port()}
    a, b = Node(1, ports, groups=50), Node(2, ports, groups=50)
    async with trio.open_nursery() as nursery:
        await a.start(nursery)
        await b.start(nursery)
        await a.transport.links[2].wait_connected()
        await b.transport.links[1].wait_connected()
        before = a.transport.beats_sent
        for group in range(1, 51):
            a.transport.send(group, Heartbeat(1, 2, group, group, quiesce=group % 2 == 0))
        await _until(lambda: all(box.got for box in b.boxes.values()))
        assert a.transport.beats_sent == before + 1
        for group, box in b.boxes.items():
            assert box.got == [Heartbeat(1, 2, group, group, quiesce=group % 2 == 0)]
        assert b.beats == [(1, 101)]
        # The clock's beat reaches every connected peer even with nothing to carry.
        b.transport.beat()
        await _until(lambda: a.beats == [(2, 102)])
        nursery.cancel_scope.cancel()


async def test_a_restarted_peer_is_reconnected() -> None:
    ports = {1: free_port(), 2: free_port()}
    a, b = Node(1, ports), Node(2, ports)
    async with trio.open_nursery() as nursery:
        await a.start(nursery)
        await b.start(nursery)
        await a.transport.links[2].wait_connected()
        b.scope.cancel()
        await _until(lambda: not a.transport.links[2].connected)
        # While the peer is gone, sends are dropped at once rather than blocking.
        for i in range(100):
            a.transport.send(1, Heartbeat(1, 2, 1, i))
        assert a.transport.links[2].dropped >= 100
        b = Node(2, ports)
        await b.start(nursery)
        await _until(lambda: a.transport.links[2].connected and b.transport.links[1].connected)
        a.transport.send(1, Heartbeat(1, 2, 1, 999))
        b.transport.send(2, Heartbeat(2, 1, 2, 998))
        await _until(lambda: b.boxes[1].got and a.boxes[2].got)
        assert b.boxes[1].got[-1] == Heartbeat(1, 2, 1, 999)
        nursery.cancel_scope.cancel()


async def test_a_full_queue_drops_instead_of_blocking() -> None:
    ports = {1: free_port(), 2: free_port()}
    a = Node(1, ports)
    # Node 2 accepts the connection but never reads: its socket buffers fill up.
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", ports[2]))
    listener.listen()
    async with trio.open_nursery() as nursery:
        await a.start(nursery)
        conn, _ = await listener.accept()
        await a.transport.links[2].wait_connected()
        big = AppendEntries(1, 2, 1, 0, 0, 0, (Entry(1, 1, EntryType.NOOP, b"x" * 60_000),))
        with trio.fail_after(5):
            for _ in range(20_000):
                a.transport.send(1, big)
        assert a.transport.links[2].dropped > 0
        nursery.cancel_scope.cancel()
    conn.close()
    listener.close()


async def test_frames_stay_in_order_when_the_socket_takes_only_part_of_one() -> None:
    # Small frames go straight to the socket; one far larger than the kernel's buffer is
    # written partly there and finished by the writer task, and the frames sent after it
    # must queue behind its tail rather than overtake it.
    ports = {1: free_port(), 2: free_port()}
    a, b = Node(1, ports), Node(2, ports)
    async with trio.open_nursery() as nursery:
        await a.start(nursery)
        await b.start(nursery)
        await a.transport.links[2].wait_connected()
        await b.transport.links[1].wait_connected()
        big = AppendEntries(1, 2, 1, 0, 0, 0, (Entry(1, 1, EntryType.NOOP, b"x" * 16_000_000),))
        sent: list[Message] = [AppendResponse(1, 2, 1, 0), big]
        sent += [AppendResponse(1, 2, 1, i) for i in range(1, 200)]
        for message in sent:
            a.transport.send(1, message)
        await _until(lambda: len(b.boxes[1].got) == len(sent), timeout=30)
        assert b.boxes[1].got == sent
        assert a.transport.links[2].dropped == 0
        nursery.cancel_scope.cancel()


async def test_the_raft_listener_keeps_its_connection_limits() -> None:
    """`--max-connections-per-ip` covers the raft port too: over the limit, a connection
    is closed at once (before any hello); once one goes, the next is admitted again."""
    port = free_port()
    transport = RaftTransport(
        1,
        ("127.0.0.1", port),
        {},
        GroupRouter(),
        limits=ConnectionLimits("raft", max_connections=10, max_connections_per_ip=2),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(transport.serve)
        held = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(2)]
        await _until(lambda: transport.limits.open == 2)
        extra = await trio.open_tcp_stream("127.0.0.1", port)
        with trio.fail_after(10):
            try:
                assert await extra.receive_some(1) == b""
            except trio.BrokenResourceError:
                pass  # reset rather than closed: refused all the same
        await extra.aclose()
        await held.pop().aclose()
        await _until(lambda: transport.limits.open == 1)
        again = await trio.open_tcp_stream("127.0.0.1", port)
        await _until(lambda: transport.limits.open == 2)
        for stream in (*held, again):
            await stream.aclose()
        nursery.cancel_scope.cancel()
