"""SaslHandshake, SaslAuthenticate and the gate in front of every other request.

One :class:`ConnectionAuth` per connection wraps the sans-I/O :class:`SaslServer` and does
the Kafka-side I/O around it: decoding the two APIs, running PLAIN's slow password check on
the password-check threads, holding back the answers to repeated failures (throttle.py),
and framing the raw tokens that follow a v0 handshake. Until the exchange succeeds, only
ApiVersions and the two SASL APIs are admitted; anything else closes the connection, as
Kafka does. Every refused step counts in `kafka_authentication_failures` (Kafka's
failed-authentication-total: a wrong password, an unsupported mechanism, a step out of order).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable

import trio

from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, Response, ready
from vdl.net.kafka.control_codec import decode_request, encode_response, make_response
from vdl.net.kafka.header import RequestHeader
from vdl.net.kafka.request_metrics import AUTHENTICATION_FAILURES
from vdl.net.kafka.versions import ApiKey
from vdl.security.acl import ANONYMOUS
from vdl.security.sasl import (
    Authenticated,
    Challenge,
    PasswordCheck,
    SaslError,
    SaslServer,
    State,
    Step,
)
from vdl.security.service import Security
from vdl.security.throttle import host_of

log = logging.getLogger(__name__)

_PRE_AUTH = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# Encodes one SaslAuthenticate outcome (or a bare token); None sends nothing.
_Answer = Callable[[ErrorCode, str | None, bytes], bytes | None]


class ConnectionAuth:
    def __init__(
        self,
        security: Security,
        peer: str,
        tls_principal: str | None,
    ) -> None:
        self._security = security
        self._raw = False
        self._peer = peer
        self._host = host_of(peer)
        users = security.users
        self.sasl = (
            SaslServer(security.sasl_mechanisms, users)
            if security.sasl_mechanisms and users is not None
            else None
        )
        # Without SASL the connection is its client certificate's user, or anonymous.
        self.principal: str | None = None if self.sasl else (tls_principal or ANONYMOUS)

    @property
    def raw_tokens(self) -> bool:
        """After a v0 handshake the next frames are bare SASL tokens, not requests."""
        return self._raw

    @property
    def failed(self) -> bool:
        return self.sasl is not None and self.sasl.state is State.FAILED

    def admits(self, api_key: int) -> bool:
        return self.sasl is None or self.sasl.authenticated or api_key in _PRE_AUTH

    def handle(self, header: RequestHeader, frame: memoryview) -> Pending | None:
        """The SASL APIs; None if ``header`` is not one of them."""
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            return self._handshake(header, frame)
        if header.api_key == ApiKey.SASL_AUTHENTICATE:
            return self._authenticate(header, frame)
        return None

    def _handshake(self, header: RequestHeader, frame: memoryview) -> Pending:
        request = decode_request(header, frame)
        error = ErrorCode.NONE
        if self.sasl is None:
            error = ErrorCode.ILLEGAL_SASL_STATE
        else:
            try:
                self.sasl.handshake(request.mechanism, header.api_version)
            except SaslError as exc:
                error = exc.code
                log.info("SASL handshake from %s refused: %s", self._peer, exc.message)
        if error != ErrorCode.NONE:
            AUTHENTICATION_FAILURES.inc()
        self._raw = header.api_version == 0 and error == ErrorCode.NONE
        mechanisms = list(self.sasl.mechanisms) if self.sasl is not None else []
        response = make_response(header, error_code=int(error), mechanisms=mechanisms)
        return ready(encode_response(header, response))

    def _authenticate(self, header: RequestHeader, frame: memoryview) -> Pending:
        request = decode_request(header, frame)

        def answer(code: ErrorCode, message: str | None, data: bytes) -> bytes:
            response = make_response(
                header,
                error_code=int(code),
                error_message=message,
                auth_bytes=data,
                session_lifetime_ms=0,
            )
            return encode_response(header, response)

        if self.sasl is None or self._raw:
            AUTHENTICATION_FAILURES.inc()
            if self.sasl is not None:
                self.sasl.refuse("SaslAuthenticate after a v0 handshake")
            return ready(answer(ErrorCode.ILLEGAL_SASL_STATE, "unexpected SaslAuthenticate", b""))
        return self._step(bytes(request.auth_bytes), answer)

    def raw_token(self, frame: memoryview) -> Pending:
        """A bare token after a v0 handshake: answered with a bare (length-framed) token;
        a failure closes the connection without an answer."""

        def answer(code: ErrorCode, message: str | None, data: bytes) -> bytes | None:
            if code != ErrorCode.NONE:
                return None
            return struct.pack(">i", len(data)) + data

        return self._step(bytes(frame), answer)

    def _step(self, token: bytes, answer: _Answer) -> Pending:
        assert self.sasl is not None
        sasl = self.sasl
        try:
            step: Step = sasl.authenticate(token)
        except SaslError as exc:
            return self._failure(exc, answer)
        if isinstance(step, Challenge):
            return ready(answer(ErrorCode.NONE, None, step.data))
        if isinstance(step, Authenticated):
            return ready(self._success(step, answer))
        check: PasswordCheck = step
        users = self._security.users
        assert users is not None
        throttle = self._security.throttle

        async def verify() -> Response:
            ok = await throttle.check_password(
                self._host, lambda: users.verify_password(check.user, check.password)
            )
            try:
                done = sasl.password_checked(ok)
            except SaslError as exc:
                return await self._failure(exc, answer)()
            return self._success(done, answer)

        return verify

    def _success(self, done: Authenticated, answer: _Answer) -> bytes | None:
        self.principal = done.principal
        self._raw = False
        log.info("SASL %s: %s authenticated from %s", self._mechanism, done.principal, self._peer)
        return answer(ErrorCode.NONE, None, done.data)

    def _failure(self, exc: SaslError, answer: _Answer) -> Pending:
        """The failure's answer; held back while this address and user keep failing."""
        AUTHENTICATION_FAILURES.inc()
        user = self.sasl.user if self.sasl is not None else ""
        delay = 0.0
        if exc.code == ErrorCode.SASL_AUTHENTICATION_FAILED:
            delay = self._security.throttle.failed(self._host, user)
        log.warning(
            "SASL %s from %s failed for user %r: %s%s",
            self._mechanism,
            self._peer,
            user,
            exc.message,
            f" (answered after {delay:.1f} s)" if delay else "",
        )
        response = answer(exc.code, exc.message, b"")

        async def slowed() -> Response:
            await trio.sleep(delay)
            return response

        return slowed if delay else ready(response)

    @property
    def _mechanism(self) -> str:
        return self.sasl.mechanism if self.sasl is not None else "-"
