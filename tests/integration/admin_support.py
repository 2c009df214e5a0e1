"""Reading a node's admin listener as a scraper or a script would: plain HTTP(S) requests,
and `/metrics` parsed with prometheus-client's own parser."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.integration.waiting import wait_until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def get(
    url: str,
    *,
    auth: tuple[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    timeout: float = 10,
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a GET; an HTTP error status is returned, not raised."""
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), exc.read()


def get_json(url: str, **kwargs: Any) -> tuple[int, Any]:
    status, _, body = get(url, **kwargs)
    return status, json.loads(body)


def scrape(base_url: str, **kwargs: Any) -> Samples:
    """Every sample of `/metrics`, keyed by (sample name, labels)."""
    status, headers, body = get(base_url + "/metrics", **kwargs)
    assert status == 200, (status, body[:200])
    assert headers["Content-Type"].startswith("text/plain"), headers
    samples: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every sample of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= lab)


def wait_for(check: Callable[[], Any], timeout: float = 30, every: float = 0.2) -> Any:
    """Poll `check` until it returns a true value (returned); AssertionError at timeout,
    carrying the last value or exception (a node still starting answers with those)."""
    return wait_until(
        check,
        "a true answer",
        timeout=timeout,
        every=every,
        tolerate=(OSError, AssertionError, KeyError, ValueError),
    )
