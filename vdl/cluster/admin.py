"""`python -m vdl.cluster.admin`: hand a membership command to a running cluster.

    python -m vdl.cluster.admin --node 127.0.0.1:9301 set-replicas orders 0 1,2,4
    python -m vdl.cluster.admin --node 127.0.0.1:9301 remove-node 4

`--node` is any member's raft address; it passes the command to the metadata group's
leader. A cluster with raft TLS takes admin commands only over TLS from an operator's
certificate its raft CA signed: add `--raft-tls-cert FILE --raft-tls-key FILE --raft-tls-ca
FILE`, a certificate whose subjectAltName is `DNS:vdl-operator-<name>` (or
`DNS:vdl-operator`); the node must present a node's.

Best effort and asynchronous: the effect shows in Kafka Metadata (replicas, ISR, brokers)
once applied. Adding a node needs no command: start it with `--join true`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from vdl.cluster.commands import Command
from vdl.config import ConfigError, HostPort
from vdl.consensus.peer_tls import PeerTls
from vdl.consensus.transport import send_admin_command
from vdl.security.tls import TlsConfigError


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
    parser.add_argument("--raft-tls-cert", type=Path, help="certificate for raft TLS")
    parser.add_argument("--raft-tls-key", type=Path, help="its private key")
    parser.add_argument("--raft-tls-ca", type=Path, help="the cluster's raft CA")
    actions = parser.add_subparsers(dest="action", required=True)
    remove = actions.add_parser("remove-node", help="take a node out of the cluster")
    remove.add_argument("node_id", type=int)
    move = actions.add_parser("set-replicas", help="move a partition's replicas")
    move.add_argument("topic")
    move.add_argument("partition", type=int)
    move.add_argument("replicas", help="node ids, comma-separated")
    args = parser.parse_args(argv)
    files = (args.raft_tls_cert, args.raft_tls_key, args.raft_tls_ca)
    try:
        node = HostPort.parse(args.node)
        tls = None
        if any(path is not None for path in files):
            if any(path is None for path in files):
                raise ConfigError("--raft-tls-cert, --raft-tls-key and --raft-tls-ca go together")
            tls = PeerTls.from_files(*files, operator=True)
    except (ConfigError, TlsConfigError) as exc:
        print(f"vdl.cluster.admin: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    raw = json.dumps(_command(args)).encode()

    async def send() -> None:
        await send_admin_command((node.host, node.port), raw, tls=tls)

    try:
        trio.run(send)
    except OSError as exc:
        print(f"vdl.cluster.admin: cannot reach {node}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
