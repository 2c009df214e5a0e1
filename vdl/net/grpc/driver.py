"""The Trio loop around a :class:`GrpcConnection`, shared by the server and the client.

One reader task feeds received bytes to the core and dispatches its events; one writer
task sends whatever the core has queued. Everything else (handlers, callers) only calls
the core and wakes the writer, so many small operations coalesce into few ``send_all``
calls, and a PING's ACK (queued by h2 during ``receive_data``) leaves right after the read
that carried the PING.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import trio
from h2.errors import ErrorCodes

from vdl.metrics.stages import Counter

from . import events as ev
from .connection import GrpcConnection, StreamGoneError
from .status import GrpcError, StatusCode

logger = logging.getLogger("vdl.net.grpc")

# Bytes handed to h2 per receive_data call, plaintext or TLS: our TLS stream returns all
# the records one socket read brought, so both transports batch the same way.
READ_SIZE = 256 * 1024
# Outgoing bytes a peer can make us queue (serialised, not yet accepted by the transport)
# before we wait for it to read them:
# * replies HTTP/2 itself owes the peer (PING and SETTINGS ACKs, RST_STREAM, ...) stop
#   our reading from it, as grpc-go's control-buffer throttle and Go net/http2's cap on
#   queued control frames do, so a peer that sends PINGs and never reads cannot make us
#   queue ACKs without bound. Only those count here, never our DATA: two peers that each
#   stopped reading because of their own unsent DATA would wait for each other forever.
# * handlers' messages wait while the whole queue is over it: flow control bounds DATA
#   by the peer's windows, but the peer chooses those too.
MAX_QUEUED_OUTGOING = 1 << 20
# A peer that has not read any of it for this long is taken to be gone and disconnected.
WRITE_STALL_TIMEOUT = 30.0
_SEND_PIECE = 256 * 1024


@contextmanager
def unwrap_single_exception() -> Iterator[None]:
    """Re-raise the body's own exception instead of a one-item ExceptionGroup.

    Our context managers run background tasks that never raise, so a group escaping their
    nursery only ever wraps what the ``async with`` body raised; callers should see that
    exception (``except GrpcError``) rather than a group.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from group.exceptions[0].__cause__
        raise


class Signal:
    """Wakes every task waiting on it; a waiter re-checks its condition after waking."""

    def __init__(self) -> None:
        self._lot = trio.lowlevel.ParkingLot()

    async def wait(self) -> None:
        await self._lot.park()

    def fire(self) -> None:
        self._lot.unpark_all()


class CallIO:
    """Trio-side state of one stream: the bounded inbound buffer and the send path.

    The inbound deque is bounded by HTTP/2 flow control: credit for a message is returned
    only in :meth:`receive_message`, so the peer cannot put more than a window into it.
    """

    def __init__(self, driver: ConnectionDriver, stream_id: int) -> None:
        self.driver = driver
        self.stream_id = stream_id
        self.inbound: deque[tuple[bytes, int]] = deque()
        self.remote_ended = False
        self.reset_code: int | None = None
        self.failure: tuple[StatusCode, str] | None = None
        self.changed = Signal()

    @property
    def is_reset(self) -> bool:
        return self.reset_code is not None

    def take_message(self) -> bytes | None:
        """A buffered message, returning its flow-control credit; None if none is buffered."""
        if not self.inbound:
            return None
        data, credit = self.inbound.popleft()
        self.driver.conn.message_consumed(self.stream_id, credit)
        self.driver.wake_writer()
        return data

    async def send_message(self, data: bytes | bytearray | memoryview) -> None:
        """Queue a message and wait until all of it is handed to HTTP/2 (window permitting)."""
        conn = self.driver.conn
        try:
            conn.send_message(self.stream_id, data)
        except StreamGoneError:
            raise GrpcError(StatusCode.CANCELLED, "stream closed") from None
        self.driver.wake_writer()
        while conn.outbound_pending(self.stream_id):
            await self.changed.wait()
        if self.is_reset:
            raise GrpcError(StatusCode.CANCELLED, "stream reset while sending")
        await self.driver.wait_drained()


class ConnectionDriver:
    """Reader and writer tasks for one connection, with event dispatch to :class:`CallIO`."""

    #: Who is at the other end, for log lines.
    peer = "to the server"

    def __init__(
        self,
        transport: trio.abc.Stream,
        conn: GrpcConnection,
        *,
        read_size: int,
        bytes_in: Counter | None = None,
        bytes_out: Counter | None = None,
    ) -> None:
        self.transport = transport
        # Where the bytes read and written are counted (the server's metrics); a client's
        # go to counters of its own that nobody exposes.
        self._bytes_in = bytes_in if bytes_in is not None else Counter("bytes_in")
        self._bytes_out = bytes_out if bytes_out is not None else Counter("bytes_out")
        self.conn = conn
        self.read_size = read_size
        self.calls: dict[int, CallIO] = {}
        self.calls_changed = Signal()
        self._wakeup = trio.Event()
        self._send_lock = trio.Lock()
        self._pings: dict[bytes, trio.Event] = {}
        self._ping_counter = 0
        self.closed = False
        # Bytes taken from the core and not yet accepted by the transport.
        self._in_flight = 0
        self._drained = Signal()
        # Upper bound of the queued bytes that are HTTP/2's own replies to the peer.
        self._replies_queued = 0
        #: Trio time of the last bytes read (for idle timeouts).
        self.last_activity = trio.current_time()

    # ------------------------------------------------------------------ writing

    def wake_writer(self) -> None:
        self._wakeup.set()

    async def flush(self) -> None:
        """Write everything queued so far (also used for the last bytes before closing)."""
        async with self._send_lock:
            data = self.conn.data_to_send()
            if data and not self.closed:
                self._in_flight = len(data)
                view = memoryview(data)
                try:
                    # In pieces, so that a slow reader is seen making progress.
                    for start in range(0, len(view), _SEND_PIECE):
                        piece = view[start : start + _SEND_PIECE]
                        await self.transport.send_all(piece)
                        self._bytes_out.inc(len(piece))
                        self._in_flight -= len(piece)
                        self._replies_queued = min(self._replies_queued, self.queued_outgoing)
                        self._drained.fire()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self._lost("write failed")
                finally:
                    self._in_flight = 0
                    self._replies_queued = min(self._replies_queued, self.queued_outgoing)
                    self._drained.fire()

    @property
    def queued_outgoing(self) -> int:
        """Outgoing bytes serialised and not yet accepted by the transport."""
        return self._in_flight + self.conn.queued_bytes

    async def wait_drained(self, *, replies_only: bool = False) -> None:
        """Wait while more than ``MAX_QUEUED_OUTGOING`` bytes (with ``replies_only``, of
        HTTP/2's own replies) wait for the peer to read.

        If the peer reads none of them for ``WRITE_STALL_TIMEOUT`` the connection is
        dropped (one log line) and this returns.
        """

        def over() -> bool:
            queued = self._replies_queued if replies_only else self.queued_outgoing
            return not self.closed and queued > MAX_QUEUED_OUTGOING

        if not over():
            return
        with trio.move_on_after(WRITE_STALL_TIMEOUT) as stall:
            while over():
                self.wake_writer()
                await self._drained.wait()
                if over():
                    # Some went out: the peer reads, only slowly; give it time again.
                    stall.deadline = trio.current_time() + WRITE_STALL_TIMEOUT
        if stall.cancelled_caught and not self.closed:
            logger.warning(
                "closing connection %s: peer read none of %d queued bytes in %.0f s",
                self.peer,
                self.queued_outgoing,
                WRITE_STALL_TIMEOUT,
            )
            self._lost("peer stopped reading")

    async def writer(self) -> None:
        while not self.closed:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            await self.flush()

    # ------------------------------------------------------------------ reading

    async def reader(self) -> None:
        """Read until EOF or a protocol error; returns when the connection is unusable."""
        while not self.closed:
            try:
                data = await self.transport.receive_some(self.read_size)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self._lost("connection closed by peer")
                return
            self.last_activity = trio.current_time()
            self._bytes_in.inc(len(data))
            for event in self.conn.receive_data(data):
                self.handle_event(event)
            self._replies_queued += self.conn.take_replies_queued()
            self.wake_writer()
            if self.conn.closed and not self.conn.open_stream_count:
                return
            # Read no more from a peer that does not read what we owe it.
            await self.wait_drained(replies_only=True)

    def handle_event(self, event: ev.Event) -> None:
        """Dispatch one core event; subclasses extend it for side-specific events."""
        if isinstance(event, ev.MessageReceived):
            call = self.calls.get(event.stream_id)
            if call is None:
                self.conn.message_consumed(event.stream_id, event.flow_credit)
                return
            call.inbound.append((event.data, event.flow_credit))
            call.changed.fire()
        elif isinstance(event, ev.StreamEnded):
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.remote_ended = True
                call.changed.fire()
        elif isinstance(event, ev.StreamReset):
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.reset_code = event.error_code
                call.changed.fire()
                self.on_call_reset(call)
        elif isinstance(event, ev.StreamFailed):
            call = self.calls.get(event.stream_id)
            if call is not None:
                call.failure = (event.status, event.message)
                call.changed.fire()
                self.on_call_failed(call)
        elif isinstance(event, ev.WindowUpdated):
            if event.stream_id == 0:
                for call in self.calls.values():
                    call.changed.fire()
            elif (call := self.calls.get(event.stream_id)) is not None:
                call.changed.fire()
        elif isinstance(event, ev.PingAcknowledged):
            waiter = self._pings.pop(event.data, None)
            if waiter is not None:
                waiter.set()
        elif isinstance(event, ev.ConnectionFailed):
            self._lost(event.message, flush_goaway=True)

    def on_call_reset(self, call: CallIO) -> None:
        """Hook: a stream was reset."""

    def on_call_failed(self, call: CallIO) -> None:
        """Hook: a stream's inbound messages could not be decoded."""

    def _lost(self, reason: str, *, flush_goaway: bool = False) -> None:
        if self.closed:
            return
        logger.debug("connection ended: %s", reason)
        for event in self.conn.connection_lost():
            self.handle_event(event)
        if not flush_goaway:
            self.closed = True
        # With flush_goaway the writer still sends h2's GOAWAY before the transport closes.
        self.wake_writer()
        self.calls_changed.fire()

    # ------------------------------------------------------------------ calls and pings

    def add_call(self, call: CallIO) -> None:
        self.calls[call.stream_id] = call
        self.calls_changed.fire()

    def remove_call(self, call: CallIO) -> None:
        if self.calls.pop(call.stream_id, None) is not None:
            self.calls_changed.fire()

    async def ping(self, timeout: float) -> float:
        """Round-trip time of one PING; raises TimeoutError if no ACK arrives in time."""
        if self.closed or self.conn.closed:
            raise GrpcError(StatusCode.UNAVAILABLE, "connection closed")
        self._ping_counter += 1
        opaque = self._ping_counter.to_bytes(8, "big")
        acked = trio.Event()
        self._pings[opaque] = acked
        started = trio.current_time()
        self.conn.ping(opaque)
        self.wake_writer()
        try:
            with trio.fail_after(timeout):
                await acked.wait()
        except trio.TooSlowError:
            raise TimeoutError(f"no PING ACK within {timeout} s") from None
        finally:
            self._pings.pop(opaque, None)
        return trio.current_time() - started

    async def close_transport(self, timeout: float = 5.0) -> None:
        """Send what is queued, then close the transport (idempotent).

        Shielded so a cancelled owner still says goodbye, but bounded: a peer that stopped
        reading must not hold the final flush or the TLS close_notify forever.
        """
        with trio.CancelScope(shield=True, deadline=trio.current_time() + timeout) as scope:
            await self.flush()
            self.closed = True
            self.wake_writer()
            try:
                await self.transport.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        if scope.cancelled_caught:
            self.closed = True
            self.wake_writer()
            await trio.aclose_forcefully(self.transport)

    def reset_call(self, call: CallIO, error_code: int = ErrorCodes.CANCEL) -> None:
        self.conn.reset_stream(call.stream_id, error_code)
        if call.reset_code is None:
            call.reset_code = error_code
        call.changed.fire()
        self.wake_writer()
