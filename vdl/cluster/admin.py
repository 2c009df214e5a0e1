"""`python -m vdl.cluster.admin`: hand a membership command to a running cluster.

    python -m vdl.cluster.admin --node 127.0.0.1:9301 set-replicas orders 0 1,2,4
    python -m vdl.cluster.admin --node 127.0.0.1:9301 remove-node 4

`--node` is any member's raft address; it passes the command to the metadata group's
leader. Best effort and asynchronous: the effect shows in Kafka Metadata (replicas, ISR,
brokers) once applied. Adding a node needs no command: start it with `--join true`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import trio

from vdl.cluster.commands import Command
from vdl.config import HostPort
from vdl.consensus.transport import send_admin_command


def _command(args: argparse.Namespace) -> Command:
    if args.action == "remove-node":
        return {"op": "remove_node", "node": args.node_id}
    replicas = [int(n) for n in args.replicas.split(",") if n.strip()]
    return {
        "op": "set_replicas",
        "name": args.topic,
        "partition": args.partition,
        "replicas": replicas,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vdl.cluster.admin")
    parser.add_argument("--node", required=True, help="a member's raft address, host:port")
    actions = parser.add_subparsers(dest="action", required=True)
    remove = actions.add_parser("remove-node", help="take a node out of the cluster")
    remove.add_argument("node_id", type=int)
    move = actions.add_parser("set-replicas", help="move a partition's replicas")
    move.add_argument("topic")
    move.add_argument("partition", type=int)
    move.add_argument("replicas", help="node ids, comma-separated")
    args = parser.parse_args(argv)
    node = HostPort.parse(args.node)
    raw = json.dumps(_command(args)).encode()
    trio.run(send_admin_command, (node.host, node.port), raw)


if __name__ == "__main__":
    main()
