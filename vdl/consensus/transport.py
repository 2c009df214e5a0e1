"""TCP between Raft nodes: one connection per peer pair carries every group (multi-raft).

`RaftTransport` is the node's `Outbox` (frames go to the peer's link, never blocking a
driver) and runs the raft listener; inbound frames go to the `GroupRouter`. Peers come and
go with the cluster's membership (`add_peer`, `remove_peer`). A connection whose hello
names node 0 is an admin client: its forward frames are handed to `GroupRouter.on_admin`.
With a `PeerTls` every connection, both ways, is mutually authenticated TLS and each is
authorized by the role its certificate names (`peer_tls.py`): a hello as a member needs
that member's certificate, a snapshot pull any member's, admin commands an operator's.
A record read (`record_reads.py`) is a one-off connection like a snapshot pull, answered
from `record_source` (the partition replicas this node holds).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import trio

from vdl.backends.api import SnapshotStaging
from vdl.consensus.frames import (
    FORWARD_GROUP,
    HELLO,
    Beat,
    FrameError,
    FrameReader,
    decode_hello,
    encode_beat,
    encode_forward,
    encode_frame,
    encode_gossip,
    encode_hello,
)
from vdl.consensus.messages import Heartbeat, HeartbeatResponse, Message
from vdl.consensus.peer_link import OnBeat, PeerLink
from vdl.consensus.peer_tls import (
    PeerTls,
    open_raft_stream,
    peer_is_operator,
    peer_nodes,
    remote_address,
)
from vdl.consensus.record_reads import (
    RECORDS_MAGIC,
    REQUEST_HEAD,
    RecordReadError,
    RecordRequest,
    Records,
    RecordSource,
    fetch_records,
    serve_records,
    topic_length,
)
from vdl.consensus.router import GroupRouter
from vdl.consensus.snapshot_transfer import (
    REQUEST,
    SNAPSHOT_MAGIC,
    SnapshotData,
    SnapshotError,
    fetch_snapshot,
    serve_snapshot,
)
from vdl.consensus.snapshot_wire import decode_request
from vdl.consensus.state import SnapshotMeta
from vdl.net.limits import ConnectionLimits, peer_host, refuse
from vdl.net.listen import open_listeners

log = logging.getLogger(__name__)

_HELLO_TIMEOUT_S = 5.0
_ADMIN_TIMEOUT_S = 10.0
_SNAPSHOT_TIMEOUT_S = 300.0
_RECORDS_TIMEOUT_S = 30.0  # a record read's whole exchange, its long poll included
ADMIN_NODE = 0
_BEAT_ITEMS = 65536  # heartbeats waiting for one peer's next beat; more are dropped


class RaftTransport:
    def __init__(
        self,
        node_id: int,
        listen: tuple[str, int],
        peers: Mapping[int, tuple[str, int]],
        router: GroupRouter,
        *,
        queue_limit: int = 4096,
        tls: PeerTls | None = None,
        limits: ConnectionLimits | None = None,
        incarnation: int = 0,
        on_beat: OnBeat | None = None,
    ) -> None:
        """`incarnation` tells this process from an earlier one of the same node in its
        beats; `on_beat(peer, incarnation)` hears every peer's (node liveness)."""
        self.node_id = node_id
        self.incarnation = incarnation
        self._on_beat = on_beat
        # Heartbeats of all groups for each peer, sent together as one beat (clock.py).
        self._beats: dict[int, list[tuple[int, Beat]]] = {}
        self._beat_soon = trio.Event()
        self.beats_sent = 0
        self.limits = limits or ConnectionLimits("raft")
        self._tls = tls
        self._listen = listen
        self._router = router
        self._queue_limit = queue_limit
        self.links: dict[int, PeerLink] = {}
        self._scopes: dict[int, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        for peer, address in peers.items():
            self.add_peer(peer, address)
        self.port: int | None = None
        # Answers other nodes' record reads; None: this node answers none.
        self.record_source: RecordSource | None = None

    def add_peer(self, peer: int, address: tuple[str, int]) -> None:
        """Keep a link to `peer` (a new member); a known peer keeps its link."""
        if peer == self.node_id or peer in self.links:
            return
        link = PeerLink(
            self.node_id,
            peer,
            address,
            self._router.deliver,
            queue_limit=self._queue_limit,
            tls=self._tls,
            on_beat=self._on_beat,
        )
        self.links[peer] = link
        if self._nursery is not None:
            self._nursery.start_soon(self._run_link, peer, link)

    def remove_peer(self, peer: int) -> None:
        """Drop the link to a node that left the cluster."""
        self.links.pop(peer, None)
        scope = self._scopes.pop(peer, None)
        if scope is not None:
            scope.cancel()

    async def _run_link(self, peer: int, link: PeerLink) -> None:
        with trio.CancelScope() as scope:
            self._scopes[peer] = scope
            await link.run()

    def send(self, group_id: int, message: Message) -> None:
        link = self.links.get(message.dst)
        if link is None:
            return
        if not link.connected:
            link.dropped += 1  # without encoding: a dead peer costs nothing per message
            return
        if isinstance(message, (Heartbeat, HeartbeatResponse)):
            waiting = self._beats.setdefault(message.dst, [])
            if len(waiting) >= _BEAT_ITEMS:
                link.dropped += 1
                return
            waiting.append((group_id, message))
            self._beat_soon.set()
            return
        link.send(encode_frame(group_id, message))

    def beat(self) -> None:
        """Send every connected peer a beat, with the heartbeats waiting for it."""
        beats, self._beats = self._beats, {}
        for peer, link in self.links.items():
            if link.connected:
                link.send(encode_beat(self.incarnation, beats.get(peer, ())))
                self.beats_sent += 1

    async def _send_beats(self) -> None:
        """Heartbeats leave soon after they are made, but together: the groups a clock
        tick woke all run before this task does (they were scheduled first), so their
        heartbeats for one peer share one beat."""
        while True:
            await self._beat_soon.wait()
            self._beat_soon = trio.Event()
            await trio.lowlevel.checkpoint()
            beats, self._beats = self._beats, {}
            for peer, items in beats.items():
                link = self.links.get(peer)
                if link is not None and link.connected and items:
                    link.send(encode_beat(self.incarnation, items))
                    self.beats_sent += 1

    def forward(self, node_id: int, command: bytes) -> None:
        """Ask `node_id` (the metadata leader) to propose `command`; best effort."""
        link = self.links.get(node_id)
        if link is not None:
            link.send(encode_forward(command))

    def gossip(self, body: bytes) -> None:
        """Send `body` to every connected peer as gossip; best effort."""
        frame = encode_gossip(body)
        for link in self.links.values():
            if link.connected:
                link.send(frame)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        host, port = self._listen
        listeners = await open_listeners(host, port, "raft")
        self.port = int(listeners[0].socket.getsockname()[1])
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._send_beats)
            for peer, link in self.links.items():
                nursery.start_soon(self._run_link, peer, link)
            for listener in listeners:
                nursery.start_soon(trio.serve_listeners, self._accept, [listener])
            log.info("raft listener on %s:%d", host, self.port)
            task_status.started(self.port)

    async def _accept(self, tcp: trio.SocketStream) -> None:
        host = peer_host(tcp)
        if not self.limits.admit(host):
            await refuse(tcp)
            return
        try:
            await self._serve_connection(tcp)
        except Exception:
            # Whatever one connection's bytes make go wrong costs that connection, never
            # the listener and with it the node (as on the Kafka listener).
            log.exception("raft connection from %s failed", remote_address(tcp))
            with trio.CancelScope(shield=True):
                await tcp.aclose()
        finally:
            self.limits.release(host)

    async def _serve_connection(self, tcp: trio.SocketStream) -> None:
        stream: trio.abc.Stream = tcp
        snapshot_request: bytes | None = None
        records_request: bytes | None = None
        try:
            with trio.fail_after(_HELLO_TIMEOUT_S):
                if self._tls is not None:
                    # Any certificate of the raft CA may pull a snapshot or send admin
                    # commands; none at all, or another CA's, ends here.
                    stream = await self._tls.accept(tcp)
                hello = await _receive_exactly(stream, HELLO.size)
                if hello[:4] == SNAPSHOT_MAGIC.to_bytes(4, "big"):
                    hello += await _receive_exactly(stream, REQUEST.size - HELLO.size)
                    snapshot_request = hello
                elif hello[:4] == RECORDS_MAGIC.to_bytes(4, "big"):
                    head = hello + await _receive_exactly(stream, REQUEST_HEAD.size - HELLO.size)
                    records_request = head + await _receive_exactly(stream, topic_length(head))
            if snapshot_request is None and records_request is None:
                peer = decode_hello(hello)
        except (
            trio.TooSlowError,
            FrameError,
            ValueError,
            trio.BrokenResourceError,
            OSError,
            EOFError,
        ) as exc:
            if isinstance(exc, ValueError) and not isinstance(exc, FrameError):
                log.warning(
                    "refusing a malformed record read from %s: %s", remote_address(tcp), exc
                )
            await stream.aclose()
            return
        tls = self._tls
        if records_request is not None:
            if tls is not None and not tls.admits_member(stream, self.links, "a record read"):
                await stream.aclose()
                return
            await self._serve_records(stream, records_request)
            return
        if snapshot_request is not None:
            if tls is not None and not tls.admits_member(stream, self.links, "a snapshot pull"):
                await stream.aclose()
                return
            # Outside the hello's deadline: serving a snapshot has its own, much longer one.
            await self._serve_snapshot(stream, snapshot_request)
            return
        if tls is not None and peer != ADMIN_NODE and not tls.admits(stream, peer):
            await stream.aclose()
            return
        if peer == ADMIN_NODE:
            joining: frozenset[int] | None = None  # any admin command
            if tls is not None and not peer_is_operator(stream):
                # A node's certificate: it may only ask to add itself (`--join`).
                joining = frozenset(peer_nodes(stream))
                if not joining:
                    reason = "admin commands need an operator's certificate (DNS:vdl-operator-*)"
                    tls.refuse(stream, "admin", reason)
                    await stream.aclose()
                    return
            await self._serve_admin(stream, joining)
            return
        link = self.links.get(peer)
        if link is None or link.dials:
            log.warning("refusing raft connection from unknown or dialed node %d", peer)
            await stream.aclose()
            return
        await link.serve_connection(stream)

    async def _serve_snapshot(self, stream: trio.abc.Stream, request: bytes) -> None:
        group_id, upto, takes_files = decode_request(request)  # its magic was checked
        source = self._router.snapshot_source(group_id)
        try:
            if source is not None:
                with trio.move_on_after(_SNAPSHOT_TIMEOUT_S):
                    await serve_snapshot(stream, source, upto, takes_files=takes_files)
        except Exception as exc:  # a store read or the connection failed: the follower retries
            log.warning("serving a snapshot of group %d failed: %s", group_id, exc)
        finally:
            await stream.aclose()

    async def _serve_records(self, stream: trio.abc.Stream, request: bytes) -> None:
        source = self.record_source
        try:
            if source is not None:
                with trio.move_on_after(_RECORDS_TIMEOUT_S):
                    await serve_records(stream, source, request)
        except (trio.BrokenResourceError, OSError) as exc:  # the reader went away
            log.debug("a record read ended early: %s", exc)
        except Exception as exc:  # the replica went (moved away, closed): the reader retries
            log.warning("serving a record read failed: %s", exc)
        finally:
            await stream.aclose()

    async def fetch_records(self, node: int, request: RecordRequest) -> Records:
        """Read committed records of a partition from node `node` (it holds a replica);
        RecordReadError if that fails."""
        link = self.links.get(node)
        if link is None:
            raise RecordReadError(f"no address for node {node}")
        with trio.move_on_after(_RECORDS_TIMEOUT_S):
            return await fetch_records(link.address, request, tls=self._tls, node_id=node)
        raise RecordReadError(f"a record read from node {node} timed out")

    async def fetch_snapshot(
        self, leader: int, group_id: int, snapshot: SnapshotMeta, staging: SnapshotStaging
    ) -> SnapshotData:
        """Pull group `group_id`'s log up to the snapshot from node `leader` into
        `staging` (a follower's part of a snapshot)."""
        link = self.links.get(leader)
        if link is None:
            raise SnapshotError(f"no address for node {leader}")
        with trio.move_on_after(_SNAPSHOT_TIMEOUT_S):
            return await fetch_snapshot(
                link.address, group_id, snapshot, staging, tls=self._tls, node_id=leader
            )
        raise SnapshotError("the snapshot transfer timed out")

    async def _serve_admin(self, stream: trio.abc.Stream, joining: frozenset[int] | None) -> None:
        reader = FrameReader()
        try:
            with trio.move_on_after(_ADMIN_TIMEOUT_S):
                while data := await stream.receive_some(64 * 1024):
                    for group_id, body in reader.feed(data):
                        handler = self._router.on_admin
                        if group_id == FORWARD_GROUP and isinstance(body, bytes) and handler:
                            handler(body, joining)
        except (FrameError, trio.BrokenResourceError, OSError) as exc:
            log.warning("dropping admin connection: %s", exc)
        finally:
            await stream.aclose()


async def send_admin_command(
    address: tuple[str, int],
    command: bytes,
    *,
    tls: PeerTls | None = None,
    node_id: int | None = None,
) -> None:
    """Hand one metadata command to the node at raft `address` (it passes it on to the
    metadata group's leader). Best effort: check its effect in the cluster's state. With
    `tls` the node must present a certificate for `node_id` (None: for any node)."""
    stream = await open_raft_stream(address, tls, node_id)
    try:
        await stream.send_all(encode_hello(ADMIN_NODE) + encode_forward(command))
    finally:
        await stream.aclose()


async def _receive_exactly(stream: trio.abc.Stream, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.receive_some(n - len(buf))
        if not chunk:
            raise EOFError("connection closed during hello")
        buf += chunk
    return bytes(buf)
