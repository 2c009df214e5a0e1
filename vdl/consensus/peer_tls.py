"""Mutual TLS on raft connections: peer links, snapshot pulls and admin commands.

With `--raft-tls-cert/--raft-tls-key/--raft-tls-ca` every connection to a raft port is TLS
1.2+ and both ends present a certificate the raft CA signed; nothing else is trusted (not
the system's CAs). A node's certificate names it in a subjectAltName DNS entry
`vdl-node-<id>`, and that name, not the address in `--peers`, is what both sides check:

- the dialer sends SNI `vdl-node-<id>` and accepts the server only if its certificate names
  the node it meant to reach (a stale address now served by another member is refused);
- the listener takes the hello's claimed node id only if the client's certificate names
  it and that node is a current member (it has a link here), so a certificate for node 2
  cannot open node 3's link, nor one for a removed node any link;
- a snapshot pull needs a certificate naming a current member (group 0's log holds the
  users, ACLs and token key);
- a hello of node 0 (admin commands: add or remove nodes, move replicas) needs an
  operator's certificate, one whose subjectAltName DNS entry is `vdl-operator` or
  `vdl-operator-<name>`; a node's certificate there may only ask to add that very node
  (a node started with `--join`), which the cluster manager checks.

Roles are names under the one raft CA rather than a second CA, so one file configures a
node and operators' certificates differ from nodes' only in their name; whoever signs
with the raft CA decides who is a node and who an operator.

Names rather than addresses keep certificates valid across readdressing (NAT, containers)
and let one certificate per node serve both directions. The check is ours, after the
handshake, rather than OpenSSL's hostname check, so both directions follow one rule
(subjectAltName DNS entries only, never the subject CN).

The wrapping is `trio.SSLStream`; in `https_compatible` mode so that `aclose` closes the
socket at once instead of first trying to send close_notify: a peer link closes (shielded)
connections to dead peers, where that send could wait forever. Losing close_notify costs
nothing here: frames are length-prefixed and a snapshot checks it got every entry. (Not
the gRPC front end's `TlsStream`: consensus does not import from front ends.) A TLS link
goes through the peer link's writer task for every frame, as the direct socket write is
for plain TCP only; fine for now, a cost to measure before making TLS the default.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Collection
from pathlib import Path
from typing import Any

import trio

from vdl.security.tls import TlsConfigError, server_context

log = logging.getLogger(__name__)

NODE_NAME_PREFIX = "vdl-node-"
OPERATOR_NAME = "vdl-operator"
HANDSHAKE_TIMEOUT_S = 5.0


def node_name(node_id: int) -> str:
    """The subjectAltName DNS entry that identifies node `node_id`."""
    return f"{NODE_NAME_PREFIX}{node_id}"


def certificate_nodes(peer_cert: dict[str, Any] | None) -> set[int]:
    """The node ids a verified certificate (``getpeercert()``) names."""
    nodes: set[int] = set()
    for kind, value in (peer_cert or {}).get("subjectAltName", ()):
        if kind == "DNS" and isinstance(value, str) and value.startswith(NODE_NAME_PREFIX):
            digits = value[len(NODE_NAME_PREFIX) :]
            # ASCII only: int() rejects some of what str.isdigit accepts ("²").
            if digits.isascii() and digits.isdigit() and digits[0] != "0":
                nodes.add(int(digits))
    return nodes


def certificate_is_operator(peer_cert: dict[str, Any] | None) -> bool:
    """Whether a verified certificate names an operator: a subjectAltName DNS entry
    `vdl-operator` or `vdl-operator-<anything>` (the part after the dash is free, to tell
    operators apart in logs)."""
    for kind, value in (peer_cert or {}).get("subjectAltName", ()):
        if kind == "DNS" and isinstance(value, str):
            if value == OPERATOR_NAME or value.startswith(OPERATOR_NAME + "-"):
                return True
    return False


def peer_is_operator(stream: trio.abc.Stream) -> bool:
    """Whether the peer's certificate names an operator; False for a plaintext stream."""
    if not isinstance(stream, trio.SSLStream):
        return False
    cert: dict[str, Any] | None = stream.getpeercert()
    return certificate_is_operator(cert)


def peer_nodes(stream: trio.abc.Stream) -> set[int]:
    """The node ids the peer's certificate names; empty for a plaintext stream."""
    if not isinstance(stream, trio.SSLStream):
        return set()
    cert: dict[str, Any] | None = stream.getpeercert()
    return certificate_nodes(cert)


class PeerTls:
    """The two halves of a node's raft TLS: listening and dialing, same certificate."""

    def __init__(self, server: ssl.SSLContext, client: ssl.SSLContext) -> None:
        self.server = server
        self.client = client
        self._refusals = _RefusalLog()

    @classmethod
    def from_files(
        cls, cert: Path, key: Path, ca: Path, *, node_id: int | None = None, operator: bool = False
    ) -> PeerTls:
        """Raises TlsConfigError (one line, naming the file) for an unusable file; with
        `node_id` (a node's own files), also for a certificate the CA did not sign or that
        does not name that node, which every peer would refuse; with `operator` (an admin
        client's), likewise for one that does not name an operator."""
        # The listener's context validates all three files with the usual messages; the
        # dialer's loads the same files, so it can only fail where that one did not on
        # something odd (a file replaced in between), still reported as one line.
        server = server_context(cert, key, client_ca=ca)
        # No TLS 1.3 session tickets (nothing resumes raft sessions): unread tickets would
        # make an admin client, which sends and closes without reading, reset the
        # connection, and a reset can discard the command before the node has read it.
        server.num_tickets = 0
        try:
            # cafile given: the system's default CAs are not loaded, only the raft CA.
            client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
            client.load_cert_chain(cert, key)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise TlsConfigError(f"cannot use raft TLS files {cert}, {key}, {ca}: {exc}") from None
        client.minimum_version = ssl.TLSVersion.TLSv1_2
        client.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
        # The chain is still verified (CERT_REQUIRED); the name is checked by `connect`.
        client.check_hostname = False
        tls = cls(server, client)
        if node_id is not None or operator:
            try:
                seen = _handshake_with_itself(server, client)
            except ssl.SSLError as exc:
                raise TlsConfigError(
                    f"raft TLS certificate {cert} is not usable with CA {ca}: "
                    f"{getattr(exc, 'verify_message', None) or exc.reason or exc}"
                ) from None
            names = certificate_nodes(seen)
            if operator and not certificate_is_operator(seen):
                raise TlsConfigError(
                    f"raft TLS certificate {cert} is not an operator's (it needs the "
                    f"subjectAltName DNS:{OPERATOR_NAME}-<name>)"
                )
            if node_id is not None and node_id not in names:
                raise TlsConfigError(
                    f"raft TLS certificate {cert} names {_describe(names)}, not this node "
                    f"(it needs the subjectAltName DNS:{node_name(node_id)})"
                )
        return tls

    async def accept(self, stream: trio.SocketStream) -> trio.SSLStream[trio.SocketStream]:
        """The listener's side of the handshake; a failure is logged, then raised as
        trio.BrokenResourceError (the caller closes `stream`)."""
        tls = trio.SSLStream(stream, self.server, server_side=True, https_compatible=True)
        try:
            await tls.do_handshake()
        except trio.BrokenResourceError as exc:
            reason = f"TLS handshake failed: {exc.__cause__ or exc}"
            self._refusals.warn(remote_address(stream), "handshake", reason)
            raise
        return tls

    def admits(self, stream: trio.abc.Stream, node_id: int) -> bool:
        """Whether the client of an accepted `stream` may speak as node `node_id` (its
        certificate names that node); a refusal is logged."""
        names = peer_nodes(stream)
        if node_id in names:
            return True
        reason = f"claims node {node_id} with a certificate for {_describe(names)}"
        self._refusals.warn(_where(stream), "identity", reason)
        return False

    def admits_member(self, stream: trio.abc.Stream, members: Collection[int], what: str) -> bool:
        """Whether the client of an accepted `stream` is a current member (its certificate
        names one of `members`), as `what` (a snapshot pull) needs; a refusal is logged."""
        names = peer_nodes(stream)
        if names & set(members):
            return True
        reason = f"{what} needs a current member's certificate, not one for {_describe(names)}"
        self._refusals.warn(_where(stream), what, reason)
        return False

    def refuse(self, stream: trio.abc.Stream, kind: str, reason: str) -> None:
        """Log the refusal of an accepted `stream` (rate-limited per host and kind)."""
        self._refusals.warn(_where(stream), kind, reason)

    async def connect(
        self, stream: trio.SocketStream, node_id: int | None
    ) -> trio.SSLStream[trio.SocketStream]:
        """The dialer's side: the server must be node `node_id` (None: any node, for an
        admin client that knows only an address). Raises ConnectionError (an OSError,
        which every dialer already handles as "cannot reach") and closes `stream`."""
        name = node_name(node_id) if node_id is not None else None
        where = remote_address(stream)
        tls = trio.SSLStream(stream, self.client, server_hostname=name, https_compatible=True)
        try:
            with trio.move_on_after(HANDSHAKE_TIMEOUT_S) as timer:
                await tls.do_handshake()
        except trio.BrokenResourceError as exc:
            await stream.aclose()
            raise ConnectionError(
                f"TLS handshake with {where} failed: {exc.__cause__ or exc}"
            ) from None
        except BaseException:  # cancelled: do not leave the socket to the garbage collector
            stream.socket.close()
            raise
        if timer.cancelled_caught:
            await stream.aclose()
            raise ConnectionError(f"TLS handshake with {where} timed out")
        names = peer_nodes(tls)
        if not (node_id in names if node_id is not None else names):
            await tls.aclose()
            raise ConnectionError(
                f"{where} presented a certificate for {_describe(names)}, "
                f"not {name or 'a raft node'}"
            )
        return tls


async def open_raft_stream(
    address: tuple[str, int], tls: PeerTls | None, node_id: int | None
) -> trio.abc.Stream:
    """A connection to the raft port at `address` (of node `node_id`, if known): plain TCP
    without TLS, else authenticated both ways. Any failure is an OSError."""
    stream = await trio.open_tcp_stream(*address)
    if tls is None:
        return stream
    return await tls.connect(stream, node_id)


def _handshake_with_itself(server: ssl.SSLContext, client: ssl.SSLContext) -> dict[str, Any]:
    """Run a handshake between the two contexts in memory and return the certificate
    the server side verified: what a peer would see of this node, found at start-up."""
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    ends = [client.wrap_bio(c_in, c_out), server.wrap_bio(s_in, s_out, server_side=True)]
    pending = list(ends)
    for _ in range(8):  # a TLS 1.2 or 1.3 handshake takes two or three flights
        for end in list(pending):
            try:
                end.do_handshake()
                pending.remove(end)
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if not pending:
            break
    cert: dict[str, Any] | None = ends[1].getpeercert()
    if pending or not cert:
        raise ssl.SSLError("the in-memory handshake did not finish")
    return cert


class _RefusalLog:
    """Warnings about refused connections, at most one per remote host and kind of refusal
    every few seconds: a misconfigured peer redials about 20 times a second (TLS 1.3 lets
    its handshake finish before ours refuses its certificate), each refusal a line."""

    INTERVAL_S = 10.0

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def warn(self, remote: str, kind: str, reason: str) -> None:
        key = (remote.rpartition(":")[0] or remote, kind)
        now = trio.current_time()
        last, suppressed = self._last.get(key, (float("-inf"), 0))
        if now - last < self.INTERVAL_S:
            self._last[key] = (last, suppressed + 1)
            return
        if len(self._last) > 1024:  # bounded however many hosts knock
            self._last.clear()
        self._last[key] = (now, 0)
        more = f" ({suppressed} more refusals from this host since the last warning)"
        log.warning(
            "refusing raft connection from %s: %s%s", remote, reason, more if suppressed else ""
        )


def _describe(nodes: set[int]) -> str:
    if not nodes:
        return "no raft node"
    return ", ".join(node_name(n) for n in sorted(nodes))


def _where(stream: trio.abc.Stream) -> str:
    return remote_address(stream.transport_stream) if isinstance(stream, trio.SSLStream) else "?"


def remote_address(stream: trio.SocketStream) -> str:
    """`host:port` of the other end of `stream`, for log lines."""
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "a closed connection"
    return f"{host}:{port}"
