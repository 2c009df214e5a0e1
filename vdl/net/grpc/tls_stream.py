"""A TLS stream over a Trio byte stream that decrypts all that one socket read brings.

``trio.SSLStream`` hands back at most one TLS record (<= 16 KiB) per ``receive_some`` and
goes through the scheduler for each, so a 64 KiB gRPC message costs four read-and-parse
cycles of the connection loop; that, not the cipher, made TLS several times dearer than
in grpcio. Here one large socket read is fed to an ``ssl.SSLObject`` through a memory BIO
and every complete record in it is decrypted into one buffer, which h2 then parses in a
single ``receive_data`` call. Sending encrypts the whole buffer and writes all its records
with one ``send_all``.

Cancellation: a receive only ever waits on the transport. Ciphertext is fed to the SSL
object and decrypted with no checkpoint in between, and plaintext not yet returned stays
in the stream, so a cancelled ``receive_some`` loses nothing. A send cut short (cancelled or
failed) leaves an unknown part of a record on the wire, so the stream is broken afterwards,
as with ``trio.SSLStream``.

Errors follow ``trio.SSLStream`` (with ``https_compatible=False``): TLS failures and EOF
without close_notify raise ``trio.BrokenResourceError``; a close_notify from the peer is EOF
(``b""``); use after :meth:`TlsStream.aclose` raises ``trio.ClosedResourceError``.
Renegotiation is not supported (RFC 9113 §9.2.1 forbids it under HTTP/2, and our contexts
set ``OP_NO_RENEGOTIATION``). Unlike ``trio.SSLStream`` the handshake is never implicit:
call :meth:`TlsStream.do_handshake` first.
"""

from __future__ import annotations

import enum
import operator
import ssl
from typing import Any, cast

import trio

#: Ciphertext asked of the transport per read: a 64 KiB message is about four records.
RECEIVE_SIZE = 256 * 1024
# The most plaintext one TLS record carries (RFC 8446 §5.1, RFC 5246 §6.2.1).
_MAX_RECORD_PLAINTEXT = 16 * 1024


class _State(enum.Enum):
    HANDSHAKING = enum.auto()
    OPEN = enum.auto()
    BROKEN = enum.auto()
    CLOSED = enum.auto()


class TlsStream(trio.abc.Stream):
    """TLS over ``transport_stream`` (normally a ``trio.SocketStream``).

    At most one task may receive and one may send at a time (``trio.BusyResourceError``
    otherwise); the two may run concurrently.
    """

    def __init__(
        self,
        transport_stream: trio.abc.Stream,
        context: ssl.SSLContext,
        *,
        server_side: bool,
        server_hostname: str | None = None,
        receive_size: int = RECEIVE_SIZE,
    ) -> None:
        self.transport_stream = transport_stream
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(
            self._incoming,
            self._outgoing,
            server_side=server_side,
            server_hostname=server_hostname,
        )
        self._receive_size = receive_size
        self._state = _State.HANDSHAKING
        self._broken_by: Exception | None = None
        # Decrypted bytes not yet returned: they survive a cancelled or size-capped receive.
        self._plaintext = bytearray()
        self._eof = False
        self._handshaking = False
        self._receiving = False
        self._sending = False
        # Whoever writes the outgoing BIO to the transport holds this; it keeps writing
        # until the BIO is empty, so bytes queued meanwhile by the other side go out too.
        self._flushing = False
        self._flush_done = trio.lowlevel.ParkingLot()
        # Ciphertext that must precede the outgoing BIO's on the wire (see do_handshake).
        self._held_back = b""

    # ------------------------------------------------------------------ TLS facts

    @property
    def ssl_object(self) -> ssl.SSLObject:
        return self._ssl

    def selected_alpn_protocol(self) -> str | None:
        return self._ssl.selected_alpn_protocol()

    def getpeercert(self) -> dict[str, Any] | None:
        """The verified peer certificate, as ``ssl.SSLSocket.getpeercert()`` gives it."""
        return self._ssl.getpeercert()

    def version(self) -> str | None:
        return self._ssl.version()

    # ------------------------------------------------------------------ handshake

    async def do_handshake(self) -> None:
        """Run the TLS handshake; ``trio.BrokenResourceError`` if it fails.

        Cancelling it leaves the stream broken: only closing it makes sense then.
        """
        if self._state is _State.OPEN:
            await trio.lowlevel.checkpoint()
            return
        if self._state is not _State.HANDSHAKING:
            self._check_state()
        if self._handshaking:
            raise trio.BusyResourceError("another task is already doing the handshake")
        self._handshaking = True
        try:
            while True:
                try:
                    self._ssl.do_handshake()
                    done = True
                except ssl.SSLWantReadError:
                    done = False
                if done and self._ssl.server_side and self._ssl.version() == "TLSv1.3":
                    # OpenSSL ends a TLS 1.3 server handshake by writing session tickets
                    # the client is not waiting for (openssl/openssl#7948); sending them
                    # now could block on a peer that is not reading. They go out ahead of
                    # our first record instead, as BoringSSL does it.
                    self._held_back = self._outgoing.read()
                    break
                await self._flush()
                if done:
                    break
                await self._receive_ciphertext()
        except ssl.SSLError as exc:
            self._break(exc)
            await self._send_alert()
            raise trio.BrokenResourceError(f"TLS handshake failed: {exc}") from exc
        except BaseException as exc:
            self._break(exc)
            raise
        finally:
            self._handshaking = False
        self._state = _State.OPEN
        # The peer's first application data often rides in the same read as its Finished.
        self._decrypt()

    async def _send_alert(self) -> None:
        """Best effort: tell the peer why its handshake failed (e.g. a missing client
        certificate) instead of just dropping it."""
        if self._flushing or not self._outgoing.pending:
            return
        with trio.move_on_after(1.0):
            try:
                await self.transport_stream.send_all(self._take_ciphertext())
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    # ------------------------------------------------------------------ receiving

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        """Plaintext: everything decrypted so far (up to ``max_bytes``); ``b""`` at EOF.

        The result may be a ``bytearray`` the caller then owns.
        """
        if max_bytes is not None:
            max_bytes = operator.index(max_bytes)
            if max_bytes < 1:
                raise ValueError("max_bytes must be >= 1")
        if self._receiving:
            raise trio.BusyResourceError("another task is already receiving")
        if self._state is not _State.BROKEN or not self._plaintext:
            self._check_state()
        self._receiving = True
        try:
            if self._plaintext or self._eof:
                await trio.lowlevel.checkpoint()
            while not self._plaintext and not self._eof:
                self._check_state()
                await self._receive_ciphertext()
                self._decrypt()
                if self._outgoing.pending and not self._flushing:
                    # Reading produced a TLS message of its own (a KeyUpdate answer, a
                    # refusal to renegotiate). The plaintext is already saved, so a
                    # failure here loses nothing but the stream. If a sender is mid-flush
                    # it sends these bytes too; waiting for it could deadlock.
                    await self._flush()
            return self._take_plaintext(max_bytes)
        finally:
            self._receiving = False

    async def _receive_ciphertext(self) -> None:
        """The only place a receive waits: a cancellation here has consumed nothing."""
        try:
            data = await self.transport_stream.receive_some(self._receive_size)
        except trio.ClosedResourceError as exc:
            if self._state is _State.CLOSED:
                raise  # we were closed while waiting
            self._break(exc)
            raise trio.BrokenResourceError("transport closed underneath TLS") from exc
        except trio.BrokenResourceError as exc:
            self._break(exc)
            raise
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()

    def _decrypt(self) -> None:
        """Decrypt every complete record the incoming BIO holds into ``_plaintext``.

        No checkpoint in here: feeding the BIO and draining it are one atomic step.
        """
        while True:
            # Plaintext is never longer than its ciphertext; the one record OpenSSL may
            # already have half-read out of the BIO adds at most a record's worth.
            room = self._incoming.pending + self._ssl.pending() + _MAX_RECORD_PLAINTEXT
            out = bytearray(room)
            filled, full = self._read_records(out)
            del out[filled:]
            if self._plaintext:
                self._plaintext += out
            else:
                self._plaintext = out
            if not full:
                return

    def _read_records(self, out: bytearray) -> tuple[int, bool]:
        """Decrypt records into ``out`` until none is complete; (bytes, whether ``out``
        filled up first)."""
        filled = 0
        with memoryview(out) as view:
            while filled < len(out):
                # Released before ``out`` is resized, even when an exception's traceback
                # keeps the slice referenced.
                with view[filled:] as free:
                    try:
                        # Into our buffer: read(n) alone allocates n bytes per record.
                        # Given a buffer, read() returns a count (typeshed only knows
                        # the bytes form).
                        count = cast(int, self._ssl.read(len(free), free))
                    except ssl.SSLWantReadError:
                        return filled, False
                    except ssl.SSLZeroReturnError:
                        self._eof = True
                        return filled, False
                    except ssl.SSLError as exc:
                        # Plaintext before the bad record is still delivered first.
                        self._break(exc)
                        return filled, False
                if count == 0:  # close_notify, reported without an exception
                    self._eof = True
                    return filled, False
                filled += count
        return filled, True

    def _take_plaintext(self, max_bytes: int | None) -> bytes | bytearray:
        data = self._plaintext
        if not data:
            return b""  # EOF
        if max_bytes is None or len(data) <= max_bytes:
            self._plaintext = bytearray()
            return data
        head = data[:max_bytes]
        del data[:max_bytes]
        return head

    # ------------------------------------------------------------------ sending

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt all of ``data`` and write its records to the transport at once."""
        if self._sending:
            raise trio.BusyResourceError("another task is already sending")
        self._check_state()
        self._sending = True
        try:
            if data:
                try:
                    self._ssl.write(data)
                except ssl.SSLError as exc:
                    self._break(exc)
                    raise trio.BrokenResourceError(f"TLS error: {exc}") from exc
            await self._flush()
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is already sending")
        self._check_state()
        self._sending = True
        try:
            await self.transport_stream.wait_send_all_might_not_block()
        finally:
            self._sending = False

    async def _flush(self) -> None:
        """Write the outgoing BIO to the transport; returns once what it held is sent."""
        waited = False
        while self._flushing:
            await self._flush_done.park()
            waited = True
        if waited:
            # The task that was flushing sent our bytes too, unless it failed.
            self._check_state()
        if not self._outgoing.pending and not self._held_back:
            if not waited:
                await trio.lowlevel.checkpoint()
            return
        self._flushing = True
        try:
            while self._outgoing.pending or self._held_back:
                await self.transport_stream.send_all(self._take_ciphertext())
        except trio.ClosedResourceError as exc:
            if self._state is _State.CLOSED:
                raise
            self._break(exc)
            raise trio.BrokenResourceError("transport closed underneath TLS") from exc
        except BaseException as exc:
            # Cancelled or failed part-way: the peer may hold half a record.
            self._break(exc)
            raise
        finally:
            self._flushing = False
            self._flush_done.unpark_all()

    def _take_ciphertext(self) -> bytes:
        data = self._outgoing.read()
        if self._held_back:
            data, self._held_back = self._held_back + data, b""
        return data

    # ------------------------------------------------------------------ closing

    async def aclose(self) -> None:
        """Send close_notify (without waiting for the peer's) and close the transport."""
        if self._state is _State.CLOSED:
            await trio.lowlevel.checkpoint()
            return
        say_goodbye = self._state is _State.OPEN and not self._flushing
        self._state = _State.CLOSED
        self._flush_done.unpark_all()
        try:
            if say_goodbye:
                try:
                    self._ssl.unwrap()
                except ssl.SSLWantReadError:
                    pass  # the peer's close_notify has not come; RFC 8446 §6.1 lets us go
                except ssl.SSLError:
                    pass
                if self._outgoing.pending or self._held_back:
                    try:
                        await self.transport_stream.send_all(self._take_ciphertext())
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
        finally:
            await self.transport_stream.aclose()

    # ------------------------------------------------------------------ state

    def _break(self, cause: BaseException) -> None:
        if self._state is not _State.CLOSED:
            self._state = _State.BROKEN
            # A Cancelled is no cause worth chaining (nor keeping alive with its frames).
            if self._broken_by is None and isinstance(cause, Exception):
                self._broken_by = cause

    def _check_state(self) -> None:
        if self._state is _State.OPEN:
            return
        if self._state is _State.CLOSED:
            raise trio.ClosedResourceError("TLS stream was closed")
        if self._state is _State.BROKEN:
            raise trio.BrokenResourceError("TLS stream is broken") from self._broken_by
        if not self._handshaking:
            raise RuntimeError("TLS handshake not done: call do_handshake() first")
