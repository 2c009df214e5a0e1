"""`python -m vdl.node`: one VDL node in one nursery tree.

Shutdown order on SIGTERM/SIGINT is what makes acknowledgements trustworthy: stop
accepting and reading, let in-flight requests finish (answered after their flush, or with
an error), flush what is left, close the stores, exit 0.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Sequence

import trio

from vdl.backends.registry import open_meta_store
from vdl.broker.broker import Broker
from vdl.broker.topics import topic_config_specs
from vdl.config import ConfigError, NodeConfig, load_config
from vdl.log.flusher import Flusher
from vdl.net.kafka.control_codec import warm_up
from vdl.net.kafka.server import KafkaServer

log = logging.getLogger("vdl.node")

_CLUSTER_ID_KEY = b"cluster/id"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.kafka_port: int | None = None
        self._stop = trio.Event()

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        config = self.config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        meta = open_meta_store(config.data_dir / "meta")
        try:
            cluster_id = meta.get(_CLUSTER_ID_KEY)
            if cluster_id is None:
                cluster_id = uuid.uuid4().hex[:22].encode()
                meta.put(_CLUSTER_ID_KEY, cluster_id)
            flusher = Flusher()
            broker = Broker(
                config.data_dir,
                meta,
                flusher,
                wall_clock_ms,
                log_backend=config.log_backend,
                config_specs=topic_config_specs(
                    retention_ms=config.retention_ms,
                    retention_bytes=config.retention_bytes,
                    segment_bytes=config.segment_bytes,
                    max_message_bytes=config.max_message_bytes,
                ),
                auto_create_topics=config.auto_create_topics,
                default_partitions=config.default_partitions,
            )
            try:
                await self._serve(broker, flusher, cluster_id.decode(), task_status)
            finally:
                with trio.CancelScope(shield=True):
                    await broker.close()
        finally:
            meta.close()
        log.info("stopped")

    async def _serve(
        self,
        broker: Broker,
        flusher: Flusher,
        cluster_id: str,
        task_status: trio.TaskStatus[None],
    ) -> None:
        config = self.config
        warm_up()
        async with trio.open_nursery() as root:
            await root.start(flusher.run)
            housekeeping = trio.CancelScope()

            async def retention() -> None:
                with housekeeping:
                    await broker.run_retention(config.retention_check_ms / 1000)

            root.start_soon(retention)
            kafka = KafkaServer(
                broker,
                config.node_id,
                cluster_id,
                config.kafka_listen,
                config.kafka_advertised,
                config.max_request_bytes,
            )
            async with trio.open_nursery() as front_ends:
                self.kafka_port = await front_ends.start(kafka.serve)
                log.info("node %d ready (data in %s)", config.node_id, config.data_dir)
                task_status.started()
                await self._stop.wait()
                log.info("stopping: draining in-flight requests")
                front_ends.cancel_scope.deadline = (
                    trio.current_time() + config.shutdown_grace_ms / 1000
                )
                kafka.shutdown()
            housekeeping.cancel()
            flusher.stop()


async def _watch_signals(node: Node) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            log.info("received %s", signal.Signals(signum).name)
            node.request_stop()
            return


async def run_node(config: NodeConfig) -> None:
    node = Node(config)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_signals, node)
        await node.run()
        nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> None:
    try:
        config = load_config(sys.argv[1:] if argv is None else argv, os.environ)
    except ConfigError as exc:
        print(f"vdl-node: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    trio.run(run_node, config)


if __name__ == "__main__":
    main()
