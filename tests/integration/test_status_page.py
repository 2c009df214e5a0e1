"""The node's status page (`GET /` on the admin listener) in a real headless browser.

Debian's Chromium driven by Selenium through Debian's chromedriver: the Service names the
driver, so Selenium Manager never downloads one (https://www.selenium.dev/documentation/
selenium_manager/). Without /usr/bin/chromium, /usr/bin/chromedriver or the selenium
package the browser tests skip and say why; `.ci/run` installs the Debian packages.

- the page alone, against a canned JSON server: server strings are shown as text (never
  parsed as HTML), under-replicated partitions are marked, follower lag reads "2:0 3:5",
  a failed fetch shows a banner and keeps the last data, and the page polls again;
- a three-node cluster: the page of a node that survives shows the partitions' leaders,
  and after the leader of partition 0 is killed with SIGKILL it shows another leader and
  the killed node down.

The page's state is read with one script per poll (`_READ_PAGE`): the page re-renders its
tables every refresh, and a single synchronous read sees one whole render, never a row the
next render is replacing.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.integration.cluster_support import Cluster, partition_seen_by

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
HEADLESS_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)

TOPIC = "status-page"
RECORDS = {0: 3, 1: 4, 2: 5}  # partition -> records produced to it
# A group name is any string a client sends: this one would run script if the page ever
# handed server data to an HTML parser.
EVIL_GROUP = '<img src=x onerror="window.__pwned=1">status&amp;page'

T = TypeVar("T")
Page = dict[str, Any]

# One synchronous read of everything the tests look at, through the page's test hooks.
_READ_PAGE = """
const rows = (selector, f) => Array.from(document.querySelectorAll(selector), f);
const banner = document.getElementById("error-banner");
return {
  refreshed: document.body.getAttribute("data-refreshed"),
  banner: banner.hidden ? null : banner.textContent,
  node_id: document.getElementById("node-id").textContent,
  controller: document.getElementById("controller-id").textContent,
  images: document.querySelectorAll("img").length,
  pwned: window.__pwned === undefined ? null : String(window.__pwned),
  partitions: rows("tr.partition", (tr) => ({
    topic: tr.getAttribute("data-topic"),
    partition: Number(tr.getAttribute("data-partition")),
    leader: Number(tr.getAttribute("data-leader")),
    leader_cell: tr.querySelector("td.leader").textContent,
    under_replicated: tr.classList.contains("under-replicated"),
    cells: Array.from(tr.cells, (td) => td.textContent),
  })),
  nodes: rows("tr.node", (tr) => ({
    node: Number(tr.getAttribute("data-node")),
    state: tr.getAttribute("data-state"),
  })),
  groups: rows("tr.group", (tr) => ({
    group: tr.getAttribute("data-group"),
    members: tr.getAttribute("data-members"),
    cells: Array.from(tr.cells, (td) => td.textContent),
  })),
  offsets: rows("tr.group-offset", (tr) => ({
    group: tr.getAttribute("data-group"),
    topic: tr.getAttribute("data-topic"),
    partition: Number(tr.getAttribute("data-partition")),
    lag: tr.getAttribute("data-lag"),
    cells: Array.from(tr.cells, (td) => td.textContent),
  })),
};
"""


def _page_html() -> str:
    return resources.files("vdl.admin").joinpath("status.html").read_text(encoding="utf-8")


# -- without a browser -------------------------------------------------------------------


def test_the_page_is_self_contained_and_has_its_test_hooks() -> None:
    html = _page_html()
    lowered = html.lower()
    for external in ('src="http', "src='http", 'href="http', "href='http", "<link", "@import"):
        assert external not in lowered, external
    assert re.search(r"<script[^>]*\bsrc\s*=", lowered) is None
    assert re.search(r"""(src|href|action)\s*=\s*["']?//""", lowered) is None
    assert "url(" not in lowered  # no CSS fetches either
    # Polled relative to the page, so the node that served it answers, over its scheme.
    for endpoint in ("v1/cluster", "v1/partitions", "v1/groups"):
        assert f'"{endpoint}"' in html, endpoint
    assert re.search(r"""fetch\(\s*["'`](https?:)?//""", html) is None
    assert 'cache: "no-store"' in html
    # Server strings reach the DOM as text only.
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in html, sink
    # The hooks the browser tests (and anyone scripting the page) read.
    for hook in (
        '"partition"',
        '"data-topic"',
        '"data-partition"',
        '"data-leader"',
        '"num leader',
        'row("node"',
        '"data-node"',
        '"data-state"',
        '"group-offset',
        '"data-group"',
        '"data-lag"',
        'id="error-banner"',
        'id="node-id"',
        'id="cluster-id"',
        'id="controller-id"',
        'id="last-refresh"',
    ):
        assert hook in html, hook


# -- the browser -------------------------------------------------------------------------


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    """Headless Chromium; skips, saying why, where it cannot run."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    if missing:
        pytest.skip(
            f"browser test did not run: no {' and no '.join(missing)} "
            "(Debian packages chromium and chromium-driver; .ci/run installs them as root)"
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        pytest.skip(f"browser test did not run: selenium cannot be imported ({exc})")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in HEADLESS_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    # chromedriver listens on a loopback port of its own; quit() stops it and the browser.
    service = Service(
        executable_path=str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log")
    )
    driver = webdriver.Chrome(options=options, service=service)
    try:
        driver.set_page_load_timeout(30)
        driver.set_script_timeout(10)
        yield driver
    finally:
        driver.quit()


def _read(driver: WebDriver) -> Page:
    page: Page = driver.execute_script(_READ_PAGE)
    return page


def _wait_for(driver: WebDriver, what: str, check: Callable[[Page], T | None], timeout: float) -> T:
    """Poll the page until `check` returns something; fail with the last page state."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.wait import WebDriverWait

    last: list[Page] = []

    def probe(d: WebDriver) -> T | Literal[False]:
        page = _read(d)
        last[:] = [page]
        found = check(page)
        return False if found is None else found

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(probe)
    except TimeoutException:
        shown = json.dumps(last[0] if last else None, indent=1)[:4000]
        raise AssertionError(f"the page did not show {what} within {timeout}s:\n{shown}") from None


def _partition(page: Page, topic: str, partition: int) -> dict[str, Any] | None:
    for row in page["partitions"]:
        if row["topic"] == topic and row["partition"] == partition:
            found: dict[str, Any] = row
            return found
    return None


def _states(page: Page) -> dict[int, str]:
    return {int(n["node"]): str(n["state"]) for n in page["nodes"]}


# -- the page against canned JSON --------------------------------------------------------


class _CannedAdmin:
    """The admin endpoints' JSON from a dict the test edits, on a loopback port."""

    def __init__(self, page: bytes) -> None:
        self.page = page
        self.views: dict[str, Any] = {}
        self.failing: set[str] = set()
        self.requests: list[str] = []
        self.lock = threading.Lock()
        canned = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with canned.lock:
                    canned.requests.append(self.path)
                    failing = self.path in canned.failing
                    view = canned.views.get(self.path)
                if self.path == "/":
                    self._send(200, "text/html; charset=utf-8", canned.page)
                elif failing:
                    self._send(503, "application/json", b'{"error": "canned failure"}')
                elif view is not None:
                    self._send(200, "application/json", json.dumps(view).encode())
                else:
                    self._send(404, "application/json", b'{"error": "no such path"}')

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def count(self, path: str) -> int:
        with self.lock:
            return self.requests.count(path)

    def __enter__(self) -> _CannedAdmin:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def _canned_views() -> dict[str, Any]:
    evil_topic = "<script>window.__pwned=2</script>"
    return {
        "/v1/cluster": {
            "node_id": 2,
            "cluster_id": "c-<b>1</b>",
            "controller_id": 1,
            "draining": False,
            "nodes": [
                {"node_id": 1, "kafka": "127.0.0.1:9092", "grpc": "h:1", "dc": "a", "state": "up"},
                {"node_id": 2, "kafka": "127.0.0.1:9093", "grpc": "h:2", "dc": "", "state": "self"},
                {"node_id": 3, "kafka": None, "grpc": None, "dc": "<i>c</i>", "state": "down"},
            ],
        },
        "/v1/partitions": {
            "node_id": 2,
            "partitions": [
                {
                    "topic": "t",
                    "partition": 0,
                    "leader": 2,
                    "replicas": [1, 2, 3],
                    "isr": [1, 2],
                    "high_watermark": 10,
                    "log_start": 0,
                    "role": "leader",
                    "term": 3,
                    "followers": [
                        {"node_id": 3, "match_index": 7, "lag": 5},
                        {"node_id": 1, "match_index": 12, "lag": 0},
                    ],
                },
                {
                    "topic": "t",
                    "partition": 1,
                    "leader": -1,
                    "replicas": [1, 2, 3],
                    "isr": [1, 2, 3],
                    "high_watermark": None,
                    "log_start": None,
                    "role": "none",
                    "term": None,
                    "followers": [],
                },
                {
                    "topic": evil_topic,
                    "partition": 0,
                    "leader": 1,
                    "replicas": [1, 2, 3],
                    "isr": [1, 2, 3],
                    "high_watermark": 4,
                    "log_start": 1,
                    "role": "follower",
                    "term": 2,
                    "followers": [],
                },
            ],
        },
        "/v1/groups": {
            "groups": [
                {
                    "group": EVIL_GROUP,
                    "state": "Stable",
                    "protocol": "range",
                    "members": [{"member_id": "m-<u>", "client_id": "c", "host": "/127.0.0.1"}],
                    "offsets": [
                        {"topic": "t", "partition": 0, "committed": 5, "end": 10, "lag": 5},
                        {"topic": "t", "partition": 1, "committed": 2, "end": None, "lag": None},
                    ],
                },
                # As a node that does not coordinate the group shows it.
                {"group": "idle", "state": None, "protocol": None, "members": [], "offsets": []},
            ]
        },
    }


def test_the_page_renders_server_strings_as_text_and_survives_failed_fetches(
    browser: WebDriver,
) -> None:
    with _CannedAdmin(_page_html().encode()) as admin:
        admin.views = _canned_views()
        browser.get(admin.url)
        page = _wait_for(
            browser,
            "three partition rows",
            lambda p: p if len(p["partitions"]) == 3 and p["groups"] else None,
            timeout=10,
        )
        assert page["banner"] is None, page["banner"]
        assert page["node_id"] == "2" and page["controller"] == "1"
        # Sorted by topic, then partition; "<" sorts before "t".
        rows = [(r["topic"], r["partition"]) for r in page["partitions"]]
        assert rows == [("<script>window.__pwned=2</script>", 0), ("t", 0), ("t", 1)]
        evil, t0, t1 = page["partitions"]
        assert evil["cells"][0] == "<script>window.__pwned=2</script>"
        assert t0["leader"] == 2 and t0["leader_cell"] == "2"
        assert t0["under_replicated"] and not t1["under_replicated"]
        assert not evil["under_replicated"]
        assert t0["cells"][-1] == "1:0 3:5"  # follower lag, by node
        assert t1["leader"] == -1 and t1["leader_cell"] == "none"
        assert _states(page) == {1: "up", 2: "self", 3: "down"}
        # Server strings stayed text: no element was made of them, no script ran.
        assert page["images"] == 0 and page["pwned"] is None
        assert browser.find_element("id", "cluster-id").text == "c-<b>1</b>"
        assert [g["group"] for g in page["groups"]] == [EVIL_GROUP, "idle"]
        evil_group, idle = page["groups"]
        assert evil_group["members"] == "1" and idle["members"] == ""
        cells = evil_group["cells"]
        assert cells[:3] + cells[4:] == [EVIL_GROUP, "Stable", "range", "5"]
        assert cells[3].startswith("1") and "m-<u> (c @ /127.0.0.1)" in cells[3]
        assert idle["cells"] == ["idle", "—", "—", "—", "—"]
        offsets = [(o["group"], o["topic"], o["partition"], o["lag"]) for o in page["offsets"]]
        assert offsets == [(EVIL_GROUP, "t", 0, "5"), (EVIL_GROUP, "t", 1, "")]

        # A failing endpoint: a banner, and the last partitions stay on the page.
        with admin.lock:
            admin.failing.add("/v1/partitions")
        page = _wait_for(browser, "the error banner", lambda p: p if p["banner"] else None, 10)
        assert "v1/partitions" in page["banner"] and "HTTP 503" in page["banner"]
        assert len(page["partitions"]) == 3
        # It keeps polling, and the banner goes once the node answers again.
        with admin.lock:
            admin.failing.clear()
            admin.views["/v1/partitions"]["partitions"][0]["leader"] = 3
        page = _wait_for(
            browser,
            "the recovered partitions",
            lambda p: p if p["banner"] is None and p["partitions"][1]["leader"] == 3 else None,
            timeout=10,
        )
        assert admin.count("/v1/cluster") >= 3


# -- the page of a live three-node cluster ------------------------------------------------


def _produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    errors: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for partition, count in RECORDS.items():
        for i in range(count):
            value = f"record {i}".encode()
            producer.produce(TOPIC, value, partition=partition, on_delivery=delivered)
    assert producer.flush(30) == 0, "records still unacknowledged"
    assert not errors, errors


def _commit(bootstrap: str, group: str, offset: int) -> None:
    """Commit `offset` for partition 0 as `group`, without joining the group."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                consumer.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
                return
            except KafkaException:
                # The group's coordinator may still be settling.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def _leaders_shown(page: Page) -> dict[int, int] | None:
    """partition -> leader, once the page shows every partition of TOPIC with a leader."""
    leaders = {r["partition"]: r["leader"] for r in page["partitions"] if r["topic"] == TOPIC}
    if sorted(leaders) != sorted(RECORDS) or min(leaders.values()) <= 0:
        return None
    return leaders


def _all_records_shown(page: Page) -> Literal[True] | None:
    high_watermark = 7  # the column
    rows = [r for r in page["partitions"] if r["topic"] == TOPIC]
    shown = {r["partition"]: r["cells"][high_watermark] for r in rows}
    return True if shown == {n: str(count) for n, count in RECORDS.items()} else None


def _group_lag_shown(page: Page) -> Page | None:
    """The page once it shows EVIL_GROUP's lag on partition 0 (one record read)."""
    lags = [o["lag"] for o in page["offsets"] if (o["group"], o["topic"]) == (EVIL_GROUP, TOPIC)]
    return page if lags == [str(RECORDS[0] - 1)] else None


def test_the_page_follows_a_leader_change_after_kill_9(browser: WebDriver, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        cluster.start()
        cluster.create_topic(TOPIC, len(RECORDS))
        _produce(cluster.bootstrap)
        _commit(cluster.bootstrap, EVIL_GROUP, 1)

        # Open a node's page and note partition 0's leader; the page must be a survivor's,
        # so a page node that leads partition 0 hands over to another node's page. The
        # leader is asked too: leadership may move to a preferred replica meanwhile.
        page_node = 1
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "no stable leader of partition 0 to kill"
            browser.get(cluster.nodes[page_node].admin_url + "/")
            leaders = _wait_for(browser, f"the leaders of {TOPIC}", _leaders_shown, 30)
            leader = leaders[0]
            if leader == page_node:
                page_node = next(i for i in cluster.nodes if i != leader)
                continue
            if partition_seen_by(cluster.nodes[leader], TOPIC, 0)[1] == leader:
                break
            time.sleep(0.2)

        # Every node up first, so that "down" below is news.
        every_node_up = {i: "self" if i == page_node else "up" for i in cluster.nodes}
        page = _wait_for(
            browser,
            "every node up",
            lambda p: p if _states(p) == every_node_up else None,
            timeout=20,
        )
        assert page["node_id"] == str(page_node) and page["banner"] is None, page["banner"]
        # This node's high watermarks count every record produced (a follower's included).
        _wait_for(browser, "every partition's high watermark", _all_records_shown, 20)
        # The group name is text on the page, and its lag is the records it has not read.
        offsets = _wait_for(
            browser,
            "the group's committed offset",
            lambda p: [o for o in p["offsets"] if o["group"] == EVIL_GROUP] or None,
            timeout=20,
        )
        assert [(o["topic"], o["partition"]) for o in offsets] == [(TOPIC, 0)]
        page = _wait_for(browser, "the group's lag", _group_lag_shown, 20)
        assert page["images"] == 0 and page["pwned"] is None

        # kill -9 partition 0's leader: the surviving node's page shows a new leader, and
        # the killed node down.
        killed_at = time.monotonic()
        cluster.nodes[leader].kill()

        def moved(p: Page) -> tuple[int, str] | None:
            row = _partition(p, TOPIC, 0)
            state = _states(p).get(leader)
            if row is None or row["leader"] in (leader, -1) or state != "down":
                return None
            return int(row["leader"]), str(row["leader_cell"])

        new_leader, shown = _wait_for(
            browser, f"a leader other than node {leader}, and node {leader} down", moved, 20
        )
        took = time.monotonic() - killed_at
        assert new_leader in cluster.nodes and cluster.nodes[new_leader].alive(), new_leader
        survivors = sorted(i for i in cluster.nodes if i != leader)
        assert shown == str(new_leader)
        page = _read(browser)
        assert page["banner"] is None, page["banner"]
        print(f"page showed node {new_leader} leading after {took:.1f}s")

        # Only a leader knows the ISR: the new leader's own page marks partition 0
        # under-replicated (two of three replicas in sync).
        browser.get(cluster.nodes[new_leader].admin_url + "/")

        def under_replicated(p: Page) -> dict[str, Any] | None:
            row = _partition(p, TOPIC, 0)
            if row is None or row["leader"] != new_leader or not row["under_replicated"]:
                return None
            return row

        row = _wait_for(browser, "partition 0 under-replicated", under_replicated, 20)
        in_sync = ", ".join(str(i) for i in survivors)
        assert row["cells"][5:7] == ["1, 2, 3", f"{in_sync} under-replicated"]
        assert row["cells"][3] == "leader"
    finally:
        cluster.stop()
