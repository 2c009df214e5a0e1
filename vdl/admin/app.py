"""The admin API's routes: metrics, health, JSON views and the status page.

| path | what | auth (when the node has users) |
|---|---|---|
| `/v1/status/live` | 200 while the process serves HTTP | none (a probe needs no secret) |
| `/v1/status/ready` | 200, or 503 with a JSON reason | Describe on the cluster |
| `/metrics` | Prometheus text format | Describe on the cluster |
| `/v1/cluster`, `/v1/partitions`, `/v1/groups` | JSON | Describe on the cluster |
| `/` | the status page | Describe on the cluster |

With users, requests authenticate with HTTP Basic (RFC 7617) as the same users as the
Kafka and YDB ports, and need the Describe operation on the Cluster resource (Kafka's
ACL for DescribeCluster / DescribeConfigs); superusers pass. Failed logins count against
the client's address with the other ports' failures (login throttle).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from importlib import resources
from typing import Any

import trio
from prometheus_client import CollectorRegistry

from vdl.admin.http import Request, Response
from vdl.admin.metrics import CONTENT_TYPE, render
from vdl.admin.views import NodeView
from vdl.security.acl import Operation
from vdl.security.sasl import principal_of
from vdl.security.service import Security
from vdl.security.throttle import host_of

log = logging.getLogger(__name__)

_REALM = 'Basic realm="vdl", charset="UTF-8"'


def _json(status: int, body: Any) -> Response:
    return Response(status, json.dumps(body).encode(), "application/json")


def status_page() -> bytes:
    return resources.files("vdl.admin").joinpath("status.html").read_bytes()


class AdminApp:
    def __init__(
        self,
        view: NodeView,
        registry: CollectorRegistry,
        security: Security,
        *,
        page: bytes | None = None,
    ) -> None:
        self._view = view
        self._registry = registry
        self._security = security
        self._page = page

    async def __call__(self, request: Request) -> Response:
        path = request.path.rstrip("/") or "/"
        if path == "/v1/status/live":
            return _json(200, {"live": True})
        refused = await self._authorize(request)
        if refused is not None:
            return refused
        if path == "/metrics":
            # Rendered on the Trio thread: the views read state the event loop owns.
            return Response(200, render(self._registry), CONTENT_TYPE)
        if path == "/v1/status/ready":
            ready = self._view.readiness()
            return _json(200 if ready.ready else 503, ready.to_json())
        if path == "/v1/cluster":
            return _json(200, self._view.cluster_json())
        if path == "/v1/partitions":
            return _json(200, self._view.partitions_json())
        if path == "/v1/groups":
            return _json(200, self._view.groups_json())
        if path in ("/", "/index.html"):
            if self._page is None:
                self._page = status_page()
            return Response(200, self._page, "text/html; charset=utf-8")
        return _json(404, {"error": f"no such path: {request.path}"})

    async def _authorize(self, request: Request) -> Response | None:
        """None when the request may go on; the refusal otherwise."""
        security = self._security
        users = security.users
        if users is None:
            return None
        user, password = _basic_credentials(request.headers.get("authorization", ""))
        if user is None or password is None:
            return Response(
                401,
                b'{"error": "authentication required (HTTP Basic)"}\n',
                "application/json",
                [("WWW-Authenticate", _REALM)],
            )
        host = host_of(request.peer)
        ok = await security.throttle.check_password(
            host, lambda: users.verify_password(user, password)
        )
        if not ok:
            delay = security.throttle.failed(host, user)
            log.warning(
                "admin HTTP login from %s failed for user %r%s",
                request.peer,
                user,
                f" (answered after {delay:.1f} s)" if delay else "",
            )
            await trio.sleep(delay)
            return Response(
                401,
                b'{"error": "invalid user or password"}\n',
                "application/json",
                [("WWW-Authenticate", _REALM)],
            )
        if not security.authorizer.cluster(principal_of(user), Operation.DESCRIBE):
            log.info("admin HTTP: %s may not describe the cluster (%s)", user, request.path)
            return _json(403, {"error": f"user {user!r} may not describe the cluster"})
        return None


def _basic_credentials(header: str) -> tuple[str | None, str | None]:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value:
        return None, None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None, None
    user, sep, password = decoded.partition(":")
    if not sep:
        return None, None
    return user, password
