"""What every Kafka API handler receives, and what it returns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from vdl.broker.broker import Broker
from vdl.net.kafka.header import RequestHeader
from vdl.net.kafka.quotas import KafkaQuotas
from vdl.security.acl import ALLOW_ALL, Authorizer, Operation
from vdl.security.service import Security

# A handler does its order-sensitive work (e.g. appending) synchronously when called and
# returns the rest as a coroutine factory; the connection runs those concurrently but
# writes their responses in request order. None as a result means "send nothing" (acks=0).
Response = list[bytes | memoryview] | bytes | None
Pending = Callable[[], Awaitable[Response]]
# Kafka's broker-side fetch.max.bytes default: the most one Fetch response carries.
FETCH_MAX_BYTES = 55 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: int
    host: str
    port: int
    cluster_id: str


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    frame: memoryview
    broker: Broker
    node: NodeInfo
    # Who sent the request (None when security is off) and the rules it is held to.
    principal: str | None = None
    authorizer: Authorizer = ALLOW_ALL
    sasl: bool = False  # SASL is enabled on this listener (ApiVersions lists its APIs)
    quotas: KafkaQuotas | None = None  # byte-rate quotas per client id, if configured
    fetch_max_bytes: int = FETCH_MAX_BYTES  # clamps a Fetch's max_bytes (fetch.py)
    # The node's users and ACL stores (acls_admin.py, scram_admin.py); None: security off.
    security: Security | None = None

    def may_topic(self, operation: Operation, topic: str) -> bool:
        return self.authorizer.topic(self.principal, operation, topic)

    def may_group(self, operation: Operation, group: str) -> bool:
        return self.authorizer.group(self.principal, operation, group)

    def may_cluster(self, operation: Operation) -> bool:
        return self.authorizer.cluster(self.principal, operation)

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def body(self) -> memoryview:
        return self.frame[self.header.body_offset :]


def ready(response: Response) -> Pending:
    """A Pending whose response is already known."""

    async def done() -> Response:
        return response

    return done
