"""Reading a node's admin API (the JSON views) from the command line: one GET at a time."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from typing import Any

DEFAULT_ADMIN_URL = "http://127.0.0.1:9644"


class AdminApiError(Exception):
    """The admin API could not be reached or refused the request; the message says why."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


class AdminApi:
    def __init__(
        self,
        url: str,
        *,
        user: str | None = None,
        password: str | None = None,
        ca_file: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--admin wants http[s]://HOST:PORT, got {url!r}")
        self.url = url.rstrip("/")
        self._auth: str | None = None
        if user is not None:
            token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
            self._auth = f"Basic {token}"
        self._context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        self._timeout = timeout

    def get(self, path: str) -> Any:
        request = urllib.request.Request(self.url + path, headers={"Accept": "application/json"})
        if self._auth is not None:
            request.add_header("Authorization", self._auth)
        try:
            with urllib.request.urlopen(
                request, timeout=self._timeout, context=self._context
            ) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                reason = json.loads(exc.read()).get("error", exc.reason)
            except (ValueError, AttributeError):
                reason = exc.reason
            raise AdminApiError(f"{self.url}{path}: {exc.code} {reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AdminApiError(f"cannot reach {self.url}: {reason}", unreachable=True) from None
