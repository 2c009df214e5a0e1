"""Per-stage timings of the nodes under a benchmark: where an acknowledged produce spends
its time (the stages are described in vdl/metrics/stages.py).

A node writes its histograms to `<data-dir>/stage_timings.json` on SIGUSR1; a benchmark
takes a snapshot of every node before and after a phase and prints the difference, one
row per stage and, per node, count / p50 / p99. Reports, never asserts.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from node_launcher import REPO_ROOT

if TYPE_CHECKING:
    from vdl.metrics.stages import Histogram

NodeStages = dict[str, "Histogram"]


class _Node(Protocol):
    data_dir: Path

    @property
    def pid(self) -> int: ...


def supported() -> bool:
    """Whether the checkout's node writes stage timings (without the handler, SIGUSR1
    would end the node: the bench runs across the project's history), and this process
    can read them."""
    if not (REPO_ROOT / "vdl" / "metrics" / "stages.py").exists():
        return False
    try:
        return importlib.util.find_spec("vdl.metrics.stages") is not None
    except ImportError:
        return False


@functools.cache
def _stage_order() -> tuple[str, ...]:
    """The path of a produce, in order (as a leader, then as a follower, then the disk),
    as the checkout's node defines it; unordered for a checkout that does not."""
    if not supported():
        return ()
    from vdl.metrics import stages

    produce_stages = getattr(stages, "produce_stages", None)
    return () if produce_stages is None else tuple(produce_stages())


def snapshot(nodes: Mapping[int, _Node], timeout: float = 10.0) -> dict[int, NodeStages]:
    """Every node's histograms now (node id -> `name{labels}` -> histogram); nodes that do
    not answer within `timeout` are left out."""
    if not supported():
        return {}
    from vdl.metrics.stages import SNAPSHOT_FILE, load_snapshot, merged

    paths: dict[int, tuple[Path, int]] = {}
    for node_id, node in nodes.items():
        path = node.data_dir / SNAPSHOT_FILE
        before = path.stat().st_mtime_ns if path.exists() else -1
        try:
            os.kill(node.pid, signal.SIGUSR1)
        except (OSError, AssertionError):
            continue
        paths[node_id] = (path, before)
    out: dict[int, NodeStages] = {}
    deadline = time.monotonic() + timeout
    while paths and time.monotonic() < deadline:
        for node_id, (path, before) in list(paths.items()):
            try:
                if path.stat().st_mtime_ns != before:
                    out[node_id] = merged(load_snapshot(path)[0])
                    del paths[node_id]
            except (OSError, ValueError):
                pass  # not there yet, or being replaced
        time.sleep(0.02)
    return out


def difference(after: NodeStages, before: NodeStages) -> NodeStages:
    """What each histogram counted between two snapshots of one node."""
    from vdl.metrics.stages import Histogram

    out: NodeStages = {}
    for key, hist in after.items():
        old = before.get(key)
        diff = Histogram(hist.name, hist.bounds, hist.labels)
        if old is None or old.bounds != hist.bounds:
            diff.merge(hist)
        else:
            diff.counts = [a - b for a, b in zip(hist.counts, old.counts, strict=True)]
            diff.count = sum(diff.counts)
            diff.sum = hist.sum - old.sum
            diff.max = hist.max  # the maximum since the node started, at worst
        if diff.count > 0:
            out[key] = diff
    return out


def phase(after: dict[int, NodeStages], before: dict[int, NodeStages]) -> dict[int, NodeStages]:
    return {n: difference(stages, before.get(n, {})) for n, stages in after.items()}


def _order(key: str) -> tuple[int, str]:
    order = _stage_order()
    base = key if key in order else key.split("{")[0]
    return (order.index(base) if base in order else len(order), key)


def _short(key: str) -> tuple[str, str]:
    """(stage name without its unit, unit shown)."""
    if "_seconds" in key:
        return key.replace("_seconds", ""), "ms"
    return key.replace("_bytes", ""), "KiB"


def _value(hist: Histogram, q: float, unit: str) -> str:
    value = hist.quantile(q)
    return f"{value * 1e3:.2f}" if unit == "ms" else f"{value / 1024:.1f}"


def render(per_node: dict[int, NodeStages], title: str) -> str:
    """A table: per stage, per node `count p50 p99` (ms, or KiB for bytes)."""
    if not per_node:
        return f"{title}: no stage timings (the nodes did not write any)"
    node_ids = sorted(per_node)
    keys = sorted({k for stages in per_node.values() for k in stages}, key=_order)
    rows = [["stage", "unit", *(f"node {n}: count p50 p99" for n in node_ids)]]
    for key in keys:
        name, unit = _short(key)
        row = [name, unit]
        for node_id in node_ids:
            hist = per_node[node_id].get(key)
            if hist is None or hist.count == 0:
                row.append("-")
            else:
                row.append(f"{hist.count} {_value(hist, 0.5, unit)} {_value(hist, 0.99, unit)}")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    ]
    return f"{title} (per-stage timings, p50/p99)\n" + "\n".join(lines)


def as_json(per_node: dict[int, NodeStages]) -> dict[str, Any]:
    """count, p50, p99 (ms, or bytes) per node and stage, for the saved results."""
    out: dict[str, Any] = {}
    for node_id, stages in per_node.items():
        node: dict[str, Any] = {}
        for key, hist in sorted(stages.items(), key=lambda kv: _order(kv[0])):
            scale = 1e3 if "_seconds" in key else 1.0
            node[key] = {
                "count": hist.count,
                "p50": hist.quantile(0.5) * scale,
                "p99": hist.quantile(0.99) * scale,
                "mean": hist.sum / hist.count * scale if hist.count else 0.0,
            }
        out[str(node_id)] = node
    return out
