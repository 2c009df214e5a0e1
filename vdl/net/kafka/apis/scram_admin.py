"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) over VDL's users.

The users are the ones `vdl user` manages (`vdl.security.users`): SCRAM-SHA-256 and
SCRAM-SHA-512 map to Kafka's mechanisms 1 and 2; any other is UNSUPPORTED_SASL_MECHANISM.
An upsertion carries what the client derived from the password (salt, iterations and the
salted password), never the password; VDL stores the salted keys from it as they are, in
the users-file format.

What a salted password cannot give: the pbkdf2 hash that PLAIN and YDB Login check. A
user created or changed by an upsertion therefore has SCRAM credentials only (its old
password hash, if any, is dropped so that an old password cannot outlive a change);
`vdl user passwd` gives it a password again. Deleting a user's last SCRAM credential
removes the user (VDL has one user store for every mechanism).

Errors are Kafka's: RESOURCE_NOT_FOUND for a user (or credential) that does not exist,
DUPLICATE_RESOURCE for a user and mechanism named twice in one request (the user's other
alterations are not made either), UNACCEPTABLE_CREDENTIAL for an empty name, salt or
salted password and for iterations outside 4096..16384, CLUSTER_AUTHORIZATION_FAILED
without ALTER (DESCRIBE to describe) on the cluster, SECURITY_DISABLED when the node has
no users. A describe naming users carries these in each user's result only (Kafka also
sets the top-level error, on which librdkafka 2.16 aborts). On a cluster any node takes
them (KIP-590): a change is a metadata-group command (`vdl.cluster.user_commands`),
answered once this node has applied it.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from vdl.broker.topics import TopicError
from vdl.cluster.user_commands import user_put_command, user_remove_command
from vdl.log.error_codes import ErrorCode
from vdl.net.kafka.apis.context import Pending, RequestContext, Response
from vdl.net.kafka.apis.security_admin import Refused, authorize, who
from vdl.net.kafka.control_codec import (
    decode_request,
    encode_response,
    make_response,
    response_class,
)
from vdl.security.acl import Operation
from vdl.security.scram import MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted
from vdl.security.users import (
    NO_PASSWORD,
    User,
    UsersFileError,
    UserStore,
    check_user_name,
)

log = logging.getLogger(__name__)

# Kafka's ScramMechanism type codes.
MECHANISMS: dict[int, str] = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_CODES = {name: code for code, name in MECHANISMS.items()}


def _users(ctx: RequestContext) -> UserStore | None:
    security = ctx.security
    return None if security is None else security.users


def handle_describe_user_scram_credentials(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    store = _users(ctx)

    async def run() -> Response:
        cls = response_class(ctx.header.api_key, ctx.header.api_version)
        names = [u.name for u in request.users] if request.users else None
        top, top_message = ErrorCode.NONE, None
        try:
            results = _describe(cls, authorize(ctx, store, Operation.DESCRIBE), names)
        except Refused as exc:
            top, top_message = exc.code, exc.message
            results = [
                cls.DescribeUserScramCredentialsResult(
                    user=name, error_code=int(top), error_message=top_message
                )
                for name in names or []
            ]
        if names:
            # Kafka sets the error at the top too, but librdkafka (2.16) frees memory it
            # does not own on a top-level error; the per-user results carry it alone.
            top, top_message = ErrorCode.NONE, None
        response = make_response(
            ctx.header,
            throttle_time_ms=0,
            error_code=int(top),
            error_message=top_message,
            results=results,
        )
        return encode_response(ctx.header, response)

    return run


def _describe(cls: Any, store: UserStore, names: list[str] | None) -> list[Any]:
    result_cls = cls.DescribeUserScramCredentialsResult
    if names is None:
        # No names: every user with a SCRAM credential.
        names = [n for n in store.names() if (u := store.get(n)) is not None and u.scram]
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        user = store.get(name)
        if counts[name] > 1:
            code, message = ErrorCode.DUPLICATE_RESOURCE, "user named twice in the request"
        elif user is None or not user.scram:
            code, message = ErrorCode.RESOURCE_NOT_FOUND, "attempt to describe nonexistent user"
        else:
            infos = [
                result_cls.CredentialInfo(mechanism=_CODES[mech], iterations=cred.iterations)
                for mech, cred in sorted(user.scram.items())
                if mech in _CODES
            ]
            results.append(
                result_cls(user=name, error_code=0, error_message=None, credential_infos=infos)
            )
            continue
        results.append(result_cls(user=name, error_code=int(code), error_message=message))
    return results


def handle_alter_user_scram_credentials(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    store = _users(ctx)

    async def run() -> Response:
        cls = response_class(ctx.header.api_key, ctx.header.api_version)
        alterations: dict[str, list[Any]] = {}
        for item in [*request.deletions, *request.upsertions]:
            alterations.setdefault(item.name, []).append(item)
        results = []
        for name, items in alterations.items():
            code, message = ErrorCode.NONE, None
            try:
                await _alter(ctx, authorize(ctx, store, Operation.ALTER), name, items)
            except Refused as exc:
                code, message = exc.code, exc.message
                if code is not ErrorCode.SECURITY_DISABLED:
                    log.warning(
                        "AlterUserScramCredentials of %r by %s refused: %s", name, who(ctx), message
                    )
            except TopicError as exc:
                code, message = exc.error, str(exc)
            results.append(
                cls.AlterUserScramCredentialsResult(
                    user=name, error_code=int(code), error_message=message
                )
            )
        return encode_response(ctx.header, make_response(ctx.header, results=results))

    return run


def _is_upsertion(item: Any) -> bool:
    return hasattr(item, "salted_password")


def _check(name: str, items: list[Any]) -> None:
    if not name:
        raise Refused(ErrorCode.UNACCEPTABLE_CREDENTIAL, "the user name must not be empty")
    for item in items:
        if item.mechanism not in MECHANISMS:
            raise Refused(
                ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                f"unknown SCRAM mechanism {item.mechanism} (VDL has SCRAM-SHA-256 and -512)",
            )
    if max(Counter(item.mechanism for item in items).values()) > 1:
        raise Refused(
            ErrorCode.DUPLICATE_RESOURCE, "a user credential cannot be altered twice in a request"
        )
    try:
        check_user_name(name)
    except UsersFileError as exc:
        raise Refused(ErrorCode.INVALID_REQUEST, str(exc)) from None
    for item in items:
        if not _is_upsertion(item):
            continue
        if not MIN_ITERATIONS <= item.iterations <= MAX_ITERATIONS:
            raise Refused(
                ErrorCode.UNACCEPTABLE_CREDENTIAL,
                f"iterations {item.iterations} outside {MIN_ITERATIONS}..{MAX_ITERATIONS}",
            )
        if not item.salt or not item.salted_password:
            raise Refused(
                ErrorCode.UNACCEPTABLE_CREDENTIAL, "the salt and salted password must be set"
            )


async def _alter(ctx: RequestContext, store: UserStore, name: str, items: list[Any]) -> None:
    _check(name, items)
    current = store.get(name)
    scram = dict(current.scram) if current is not None else {}
    password_hash = current.password_hash if current is not None else NO_PASSWORD
    for item in items:
        mechanism = MECHANISMS[item.mechanism]
        if _is_upsertion(item):
            scram[mechanism] = credential_from_salted(
                mechanism, bytes(item.salt), item.iterations, bytes(item.salted_password)
            )
            # A salted password gives no pbkdf2 hash; the old one must not stay valid.
            password_hash = NO_PASSWORD
        elif scram.pop(mechanism, None) is None:
            raise Refused(
                ErrorCode.RESOURCE_NOT_FOUND,
                f"attempt to delete a {mechanism} credential that does not exist",
            )
    cluster = ctx.broker.cluster
    if not scram:
        if cluster is not None:
            await cluster.run_command(user_remove_command(name))
        else:
            assert store.table is not None
            store.table.remove(name)
        log.info("user %s removed by %s (Kafka: last SCRAM credential deleted)", name, who(ctx))
        return
    user = User(name, password_hash, scram)
    if cluster is not None:
        await cluster.run_command(user_put_command(user))
    else:
        assert store.table is not None
        store.table.put(user)
    log.info(
        "SCRAM credentials of %s set by %s (Kafka): %s", name, who(ctx), ", ".join(sorted(scram))
    )
