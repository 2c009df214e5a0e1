"""``vdl``: the command line for topics, produce/consume and cluster status.

Every command talks to the cluster through :mod:`vdl.client`: ``--endpoint a,b,c`` gives
several nodes (and the nodes the cluster lists join them), and ``produce`` / ``consume``
carry on on another node when theirs dies. Exit codes: 0 success, 1 the
server refused or failed the request, 2 bad arguments, 3 the node cannot be reached,
130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import trio
from google.protobuf.struct_pb2 import Struct

from vdl.admin.client import DEFAULT_ADMIN_URL, AdminApi, AdminApiError
from vdl.client import (
    Client,
    ClientError,
    CommitError,
    ConnectError,
    WriterSettings,
    connect,
)
from vdl.client.connection import DEFAULT_DATABASE, DEFAULT_ENDPOINT, Endpoint
from vdl.client.errors import YdbStatusError
from vdl.net.ydb.acl_admin import ENVELOPE as ACL_ENVELOPE
from vdl.net.ydb.acl_admin import SERVICE as ACL_SERVICE
from vdl.net.ydb.user_admin import SERVICE as USER_SERVICE
from vdl.security.acl import CLUSTER_NAME, AclEntry, AclError, Operation, normalize_principal
from vdl.security.commands import (
    read_new_password,
    user_add,
    user_list,
    user_passwd,
    user_remove,
)
from vdl.security.users import User, UsersFileError, new_user

EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INTERRUPTED = 1, 2, 3, 130
_CHUNK = 1 << 20
_PROGRESS_EVERY_S = 1.0

Command = Callable[[Client, argparse.Namespace], Coroutine[Any, Any, int]]


class UsageError(Exception):
    pass


# -- output helpers -------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], out: TextIO) -> None:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _retention_ms(hours: float | None) -> int | None:
    if hours is None:
        return None
    if hours <= 0:
        raise UsageError("--retention-hours must be positive")
    return int(hours * 3600 * 1000)


# -- topic commands -------------------------------------------------------------------------


async def topic_create(client: Client, args: argparse.Namespace) -> int:
    if args.partitions < 1:
        raise UsageError("--partitions must be at least 1")
    await client.admin.create_topic(
        args.topic,
        partitions=args.partitions,
        consumers=args.consumer or [],
        retention_ms=_retention_ms(args.retention_hours),
        retention_storage_mb=args.retention_mb,
    )
    print(f"created topic {args.topic} ({args.partitions} partition(s))")
    return 0


async def topic_describe(client: Client, args: argparse.Namespace) -> int:
    info = await client.admin.describe_topic(args.topic)
    retention = "default" if info.retention_ms is None else f"{info.retention_ms / 3.6e6:g} h"
    print(f"topic:      {info.name}")
    print(f"retention:  {retention}")
    if info.retention_storage_mb:
        print(f"size limit: {info.retention_storage_mb} MB per partition")
    print(f"codecs:     {', '.join(map(str, info.supported_codecs)) or 'any'}")
    print(f"consumers:  {', '.join(info.consumers) or '-'}")
    print()
    table(
        ["PARTITION", "NODE", "START", "END", "MESSAGES", "SIZE"],
        [
            (
                p.partition,
                p.node_id,
                p.start_offset,
                p.end_offset,
                p.end_offset - p.start_offset,
                human_bytes(p.size_bytes),
            )
            for p in info.partitions
        ],
        sys.stdout,
    )
    return 0


async def topic_alter(client: Client, args: argparse.Namespace) -> int:
    if not (
        args.add_consumer
        or args.drop_consumer
        or args.retention_hours is not None
        or args.retention_mb is not None
    ):
        raise UsageError("nothing to alter: give --add-consumer, --drop-consumer or --retention-*")
    await client.admin.alter_topic(
        args.topic,
        add_consumers=args.add_consumer or [],
        drop_consumers=args.drop_consumer or [],
        retention_ms=_retention_ms(args.retention_hours),
        retention_storage_mb=args.retention_mb,
    )
    print(f"altered topic {args.topic}")
    return 0


async def topic_drop(client: Client, args: argparse.Namespace) -> int:
    await client.admin.drop_topic(args.topic)
    print(f"dropped topic {args.topic}")
    return 0


async def topic_list(client: Client, args: argparse.Namespace) -> int:
    for name in await client.admin.list_topics():
        print(name)
    return 0


# -- produce / consume ----------------------------------------------------------------------


class Progress:
    """Rate on stderr: rewritten in place on a terminal, one line per update otherwise."""

    def __init__(self, verb: str, quiet: bool) -> None:
        self.verb = verb
        self.quiet = quiet
        self.count = 0
        self.started = time.monotonic()
        self._last = self.started
        self._tty = sys.stderr.isatty()

    def add(self, n: int) -> None:
        self.count += n
        now = time.monotonic()
        if not self.quiet and now - self._last >= _PROGRESS_EVERY_S:
            self._last = now
            self._print(now, final=False)

    def done(self) -> None:
        if not self.quiet:
            self._print(time.monotonic(), final=True)

    def _print(self, now: float, *, final: bool) -> None:
        elapsed = max(now - self.started, 1e-9)
        rate = self.count / elapsed
        text = f"{self.verb} {self.count} messages in {elapsed:.1f} s ({rate:,.0f} msg/s)"
        end = "\n" if final or not self._tty else ""
        sys.stderr.write(("\r" if self._tty else "") + text + end)
        sys.stderr.flush()


async def produce(client: Client, args: argparse.Namespace) -> int:
    settings = WriterSettings(producer_id=args.producer_id, partition_id=args.partition)
    progress = Progress("produced", args.quiet)
    source: BinaryIO = sys.stdin.buffer if args.file in (None, "-") else open(args.file, "rb")
    try:
        async with client.writer(args.topic, settings) as writer:
            rest = b""
            # read1: whatever has arrived (up to a chunk), so lines piped in slowly are
            # sent as they come, not once a whole chunk is there.
            read = getattr(source, "read1", source.read)
            # A worker thread per read: stdin cannot be read without blocking the loop.
            while chunk := await trio.to_thread.run_sync(read, _CHUNK):
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                if lines:
                    await writer.write([line.removesuffix(b"\r") for line in lines])
                    progress.add(len(lines))
            if rest:
                await writer.write(rest.removesuffix(b"\r"))
                progress.add(1)
            await writer.flush()
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    progress.done()
    return 0


async def consume(client: Client, args: argparse.Namespace) -> int:
    consumer = args.consumer or None
    start_from: Any = args.start_from
    if start_from is None:
        # A consumer resumes where it committed; without one (as kcat -C or rpk topic
        # consume without a group) every partition is read from its start.
        start_from = "committed" if consumer else "earliest"
    if start_from == "committed" and not consumer:
        raise UsageError("--from committed needs --consumer: without one nothing is committed")
    if ":" in start_from:
        start_from = {
            _partition_number(p): _start_of(s)
            for p, _, s in (item.partition(":") for item in start_from.split(","))
        }
    else:
        start_from = _start_of(start_from)
    if args.count is not None and args.count < 1:
        raise UsageError("--count must be at least 1")
    progress = Progress("consumed", args.quiet or args.count is None)
    out = sys.stdout.buffer
    async with client.reader(args.topic, consumer, start_from=start_from) as reader:
        while args.count is None or progress.count < args.count:
            try:
                batch = await reader.receive_batch(timeout=args.idle_timeout)
            except TimeoutError:
                break
            if args.count is not None:
                batch = batch.head(args.count - progress.count)
            out.write(b"".join(m.data + b"\n" for m in batch.messages))
            out.flush()
            if consumer and not args.no_commit:
                try:
                    await reader.commit(batch)
                except CommitError:
                    # Its stream just broke: the first commit on the next one starts at
                    # the committed offset, so it covers this batch too.
                    pass
            progress.add(len(batch.messages))
    progress.done()
    return 0


def _start_of(text: str) -> str | int | None:
    """One ``--from`` value: None for the committed offset."""
    if text == "committed":
        return None
    if text in ("earliest", "latest"):
        return text
    try:
        offset = int(text)
    except ValueError:
        raise UsageError(
            "--from must be earliest, latest, committed, an offset, or PARTITION:START,..."
        ) from None
    if offset < 0:
        raise UsageError("--from OFFSET must not be negative")
    return offset


def _partition_number(text: str) -> int:
    try:
        partition = int(text)
    except ValueError:
        raise UsageError(f"--from: {text!r} is not a partition number") from None
    if partition < 0:
        raise UsageError("--from: partition numbers are not negative")
    return partition


# -- cluster status -------------------------------------------------------------------------

NOT_EXPOSED = (
    "NODE is the node serving the partition (DescribeTopic partition_node_id); LAG is END "
    "minus the consumer's committed offset. Replica sets, in-sync replicas, follower lag and "
    "node states come from the admin API: add --admin http://HOST:9644."
)


async def cluster_status(client: Client, args: argparse.Namespace) -> int:
    admin = client.admin
    nodes = await admin.list_nodes()
    print("NODES")
    table(
        ["ID", "ADDRESS", "TLS", "LOCATION"],
        [(n.node_id, f"{n.host}:{n.port}", "yes" if n.tls else "no", n.location) for n in nodes],
        sys.stdout,
    )
    partition_rows: list[tuple[object, ...]] = []
    consumer_rows: list[tuple[object, ...]] = []
    names = await admin.list_topics()
    for name in names:
        info = await admin.describe_topic(name)
        for p in info.partitions:
            partition_rows.append(
                (
                    name,
                    p.partition,
                    p.node_id,
                    p.start_offset,
                    p.end_offset,
                    human_bytes(p.size_bytes),
                )
            )
        for consumer in info.consumers:
            described = await admin.describe_consumer(name, consumer)
            for cp in described.partitions:
                consumer_rows.append(
                    (name, consumer, cp.partition, cp.committed_offset, cp.end_offset, cp.lag)
                )
    total_partitions = len(partition_rows)
    print(f"\nTOPICS ({len(names)} topics, {total_partitions} partitions)")
    table(["TOPIC", "PARTITION", "NODE", "START", "END", "SIZE"], partition_rows, sys.stdout)
    print("\nCONSUMERS")
    table(["TOPIC", "CONSUMER", "PARTITION", "COMMITTED", "END", "LAG"], consumer_rows, sys.stdout)
    print(f"\n{NOT_EXPOSED}")
    return 0


# -- through the admin API (HTTP JSON views): cluster status and consumer groups -----------


def _admin_api(args: argparse.Namespace) -> AdminApi:
    try:
        return AdminApi(
            args.admin or DEFAULT_ADMIN_URL,
            user=args.user,
            password=args.password,
            ca_file=args.ca_file,
            timeout=args.timeout,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _nodes_text(nodes: Sequence[int]) -> str:
    return ",".join(str(n) for n in nodes) or "-"


def _maybe(value: object) -> object:
    return "-" if value is None else value


def admin_cluster_status(args: argparse.Namespace) -> int:
    api = _admin_api(args)
    cluster = api.get("/v1/cluster")
    partitions = api.get("/v1/partitions")["partitions"]
    groups = api.get("/v1/groups")["groups"]
    ready = cluster["ready"]
    print(
        f"NODES (asked node {cluster['node_id']}: "
        f"{'ready' if ready['ready'] else 'not ready: ' + ready['reason']}; "
        f"controller {cluster['controller_id']})"
    )
    table(
        ["ID", "STATE", "DC", "KAFKA", "GRPC"],
        [
            (n["node_id"], n["state"], n["dc"] or "-", _maybe(n["kafka"]), _maybe(n["grpc"]))
            for n in cluster["nodes"]
        ],
        sys.stdout,
    )
    under = sum(1 for p in partitions if len(p["isr"]) < len(p["replicas"]))
    topics = len({p["topic"] for p in partitions})
    print(f"\nPARTITIONS ({topics} topics, {len(partitions)} partitions, {under} under-replicated)")
    table(
        ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "START", "END", "SIZE", "FOLLOWER LAG"],
        [
            (
                p["topic"],
                p["partition"],
                p["leader"] if p["leader"] > 0 else "none",
                _nodes_text(p["replicas"]),
                _nodes_text(p["isr"]),
                _maybe(p["log_start"]),
                _maybe(p["high_watermark"]),
                "-" if p["size_bytes"] is None else human_bytes(p["size_bytes"]),
                " ".join(f"{f['node_id']}:{f['lag']}" for f in p["followers"]) or "-",
            )
            for p in partitions
        ],
        sys.stdout,
    )
    print("\nCONSUMER GROUPS")
    table(
        ["GROUP", "TOPIC", "PARTITION", "COMMITTED", "END", "LAG"],
        [
            (
                g["group"],
                o["topic"],
                o["partition"],
                o["committed"],
                _maybe(o["end"]),
                _maybe(o["lag"]),
            )
            for g in groups
            for o in g["offsets"]
        ],
        sys.stdout,
    )
    print(
        "\nFOLLOWER LAG (entries each follower lacks) is known where the asked node leads the "
        "partition; END and LAG where it holds a replica."
    )
    return 0


def group_list(args: argparse.Namespace) -> int:
    groups = _admin_api(args).get("/v1/groups")["groups"]
    rows = []
    for g in groups:
        lags = [o["lag"] for o in g["offsets"]]
        known = [lag for lag in lags if lag is not None]
        lag = sum(known) if known and len(known) == len(lags) else "-"
        rows.append((g["group"], _maybe(g["state"]), len(g["members"]), len(g["offsets"]), lag))
    table(["GROUP", "STATE", "MEMBERS", "PARTITIONS", "LAG"], rows, sys.stdout)
    return 0


def group_describe(args: argparse.Namespace) -> int:
    groups = _admin_api(args).get("/v1/groups")
    group = next((g for g in groups["groups"] if g["group"] == args.name), None)
    if group is None:
        print(f"vdl: no group {args.name!r}", file=sys.stderr)
        return EXIT_FAILED
    state = group["state"] or "- (ask the coordinator: the metadata group's leader)"
    print(f"group:     {group['group']}\nstate:     {state}")
    print(f"protocol:  {group['protocol'] or '-'}\nmembers:   {len(group['members'])}")
    if group["members"]:
        print()
        table(
            ["MEMBER", "CLIENT", "HOST"],
            [(m["member_id"], m["client_id"], m["host"]) for m in group["members"]],
            sys.stdout,
        )
    print()
    table(
        ["TOPIC", "PARTITION", "COMMITTED", "END", "LAG"],
        [
            (o["topic"], o["partition"], o["committed"], _maybe(o["end"]), _maybe(o["lag"]))
            for o in group["offsets"]
        ],
        sys.stdout,
    )
    return 0


# -- security: users (on the users file, or through the node) and ACLs (through the node) ---


def run_user_command(args: argparse.Namespace) -> int:
    try:
        if args.user_command == "list":
            for name in user_list(args.users_file):
                print(name)
            return 0
        if args.user_command == "remove":
            print(user_remove(args.users_file, args.name))
            return 0
        password = read_new_password(args.password_stdin)
        change = user_add if args.user_command == "add" else user_passwd
        print(change(args.users_file, args.name, password))
        return 0
    except UsersFileError as exc:
        print(f"vdl: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _new_credentials(args: argparse.Namespace) -> User:
    # Hashed here, on the client: only the pbkdf2 hash and SCRAM keys reach the node.
    try:
        return new_user(args.name, read_new_password(args.password_stdin))
    except UsersFileError as exc:
        raise UsageError(str(exc)) from None


async def user_online(client: Client, args: argparse.Namespace) -> int:
    """`vdl user ... --endpoint`: the node's replicated user table (every node on a cluster)."""
    request = Struct()
    if args.user_command == "list":
        result = await _user_call(client, "ListUsers", request)
        for name in result["names"] if result is not None else []:
            print(name)
        return 0
    if args.user_command == "remove":
        request.update({"name": args.name})
        await _user_call(client, "RemoveUser", request)
        print(f"removed user {args.name}")
        return 0
    # A thread: the prompt blocks, and the key derivations take a while.
    user = await trio.to_thread.run_sync(_new_credentials, args)
    request.update({"user": user.line()})
    if args.user_command == "add":
        await _user_call(client, "AddUser", request)
        print(f"added user {args.name}")
    else:
        await _user_call(client, "ChangePassword", request)
        print(f"changed the password of {args.name}")
    return 0


async def _user_call(client: Client, method: str, request: Struct) -> Any:
    return await client.connection.unary(USER_SERVICE + method, request, ACL_ENVELOPE, Struct)


def _acl_entry(args: argparse.Namespace) -> dict[str, str]:
    kinds = [k for k in ("topic", "group", "transactional_id") if getattr(args, k) is not None]
    if args.cluster:
        kinds.append("cluster")
    if len(kinds) != 1:
        raise UsageError("give exactly one of --topic, --group, --transactional-id, --cluster")
    name = CLUSTER_NAME if args.cluster else getattr(args, kinds[0])
    try:
        principal = normalize_principal(args.principal)
    except AclError as exc:
        raise UsageError(str(exc)) from None
    return {
        "principal": principal,
        "resource_type": kinds[0],
        "resource_name": name,
        "operation": args.operation,
        "permission": "deny" if args.deny else "allow",
        "pattern": "prefixed" if args.prefixed else "literal",
    }


async def _acl_call(client: Client, method: str, request: Struct) -> Any:
    return await client.connection.unary(ACL_SERVICE + method, request, ACL_ENVELOPE, Struct)


async def acl_change(client: Client, args: argparse.Namespace) -> int:
    entry = _acl_entry(args)
    request = Struct()
    request.update({"entry": entry})
    method = "AddAcl" if args.acl_command == "add" else "RemoveAcl"
    result = await _acl_call(client, method, request)
    changed = bool(result["changed"]) if result is not None else False
    verb = {"add": ("added", "already present"), "remove": ("removed", "not present")}
    done, same = verb[args.acl_command]
    print(f"{done if changed else same}: {AclEntry.from_json(json.dumps(entry)).describe()}")
    return 0


async def acl_list(client: Client, args: argparse.Namespace) -> int:
    result = await _acl_call(client, "ListAcls", Struct())
    rows = []
    for raw in result["entries"] if result is not None else []:
        entry = AclEntry.from_json(json.dumps(dict(raw)))
        name = entry.resource_name + ("*" if entry.pattern == "prefixed" else "")
        rows.append([entry.principal, entry.permission, entry.operation, entry.resource_type, name])
    table(["PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE", "NAME"], rows, sys.stdout)
    return 0


def _security_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    user = commands.add_parser(
        "user", help="add, remove, passwd users (the users file, or the cluster's users)"
    )
    users = user.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    for action, text in (
        ("add", "add a user"),
        ("passwd", "set a user's password"),
        ("remove", "remove a user"),
        ("list", "user names"),
    ):
        sub = users.add_parser(action, parents=[common], help=text)
        sub.add_argument(
            "--users-file",
            type=Path,
            help="edit this users file offline (else: through the node at --endpoint)",
        )
        if action != "list":
            sub.add_argument("name")
        if action in ("add", "passwd"):
            sub.add_argument(
                "--password-stdin", action="store_true", help="read the password from stdin"
            )
        sub.set_defaults(parser=sub, run=user_online)
    acl = commands.add_parser("acl", help="add, remove, list ACLs (through the node)")
    acls = acl.add_subparsers(dest="acl_command", required=True, metavar="ACTION")
    for action, text in (("add", "grant (or --deny) an operation"), ("remove", "drop an entry")):
        sub = acls.add_parser(action, parents=[common], help=text)
        sub.add_argument("--principal", required=True, help="User:NAME, NAME or *")
        sub.add_argument("--topic", help="a topic (or prefix with --prefixed; * for all)")
        sub.add_argument("--group", help="a consumer group / YDB consumer")
        sub.add_argument(
            "--transactional-id", help="a Kafka producer's transactional id (write, describe)"
        )
        sub.add_argument("--cluster", action="store_true", help="the cluster itself")
        sub.add_argument("--operation", required=True, choices=[str(op) for op in Operation])
        sub.add_argument("--prefixed", action="store_true", help="the name is a prefix")
        sub.add_argument("--deny", action="store_true", help="a DENY entry (wins over ALLOW)")
        sub.set_defaults(parser=sub, run=acl_change)
    listing = acls.add_parser("list", parents=[common], help="every entry")
    listing.set_defaults(parser=listing, run=acl_list)


# -- argument parsing -----------------------------------------------------------------------


def _common_options(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: the options may come before or after the subcommand without the
    # subcommand's defaults overwriting what was given before it.
    group = parser.add_argument_group("connection")
    sup = argparse.SUPPRESS
    group.add_argument(
        "--endpoint",
        default=sup,
        help="grpc[s]://HOST:PORT, or several nodes of a cluster: A,B,C (default: "
        f"$VDL_ENDPOINT or {DEFAULT_ENDPOINT})",
    )
    group.add_argument("--database", default=sup, help=f"default: {DEFAULT_DATABASE}")
    group.add_argument("--ca-file", default=sup, help="PEM CA bundle to trust for grpcs://")
    group.add_argument("--user", default=sup, help="log in with this user")
    group.add_argument("--password", default=sup, help="password (default: $VDL_PASSWORD)")
    group.add_argument(
        "--timeout", type=float, default=sup, help="seconds to wait for the node (default 10)"
    )
    group.add_argument(
        "--admin",
        default=sup,
        help="the node's admin API, http[s]://HOST:PORT (default: $VDL_ADMIN; group commands "
        f"fall back to {DEFAULT_ADMIN_URL})",
    )


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    _common_options(common)
    parser = argparse.ArgumentParser(prog="vdl", description="VDL command line", parents=[common])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    topic = commands.add_parser("topic", help="create, describe, alter, drop, list topics")
    topics = topic.add_subparsers(dest="topic_command", required=True, metavar="ACTION")
    create = topics.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--consumer", action="append", help="register a consumer (repeatable)")
    create.add_argument("--retention-hours", type=float)
    create.add_argument("--retention-mb", type=int, help="size limit per partition")
    create.set_defaults(parser=create, run=topic_create)
    describe = topics.add_parser("describe", parents=[common], help="partitions and consumers")
    describe.add_argument("topic")
    describe.set_defaults(parser=describe, run=topic_describe)
    alter = topics.add_parser("alter", parents=[common], help="consumers and retention")
    alter.add_argument("topic")
    alter.add_argument("--add-consumer", action="append")
    alter.add_argument("--drop-consumer", action="append")
    alter.add_argument("--retention-hours", type=float)
    alter.add_argument("--retention-mb", type=int)
    alter.set_defaults(parser=alter, run=topic_alter)
    drop = topics.add_parser("drop", parents=[common], help="delete a topic and its data")
    drop.add_argument("topic")
    drop.set_defaults(parser=drop, run=topic_drop)
    listing = topics.add_parser("list", parents=[common], help="topic names")
    listing.set_defaults(parser=listing, run=topic_list)

    prod = commands.add_parser("produce", parents=[common], help="write lines as messages")
    prod.add_argument("topic")
    prod.add_argument("--file", help="read lines from this file (default: stdin)")
    prod.add_argument("--producer-id", help="dedup identity (default: random)")
    prod.add_argument("--partition", type=int, help="write to this partition")
    prod.add_argument("--quiet", action="store_true", help="no progress on stderr")
    prod.set_defaults(parser=prod, run=produce)

    cons = commands.add_parser("consume", parents=[common], help="print messages, one a line")
    cons.add_argument("topic")
    cons.add_argument(
        "--consumer",
        help="the consumer to read (and commit) as (default: none: every partition, no commits)",
    )
    cons.add_argument(
        "--from",
        dest="start_from",
        metavar="earliest|latest|committed|OFFSET|P:START,...",
        help="where partitions start (default: the consumer's committed offset, or earliest "
        "without --consumer); per partition as 0:120,1:latest (others: the default)",
    )
    cons.add_argument("--count", type=int, help="stop after N messages")
    cons.add_argument("--idle-timeout", type=float, help="stop after S seconds without data")
    cons.add_argument("--no-commit", action="store_true", help="do not commit what was printed")
    cons.add_argument("--quiet", action="store_true", help="no summary on stderr")
    cons.set_defaults(parser=cons, run=consume)

    cluster = commands.add_parser("cluster", help="cluster introspection")
    clusters = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    status = clusters.add_parser("status", parents=[common], help="nodes, partitions, lag")
    status.set_defaults(parser=status, run=cluster_status, admin_run=admin_cluster_status)
    group = commands.add_parser(
        "group", help="consumer groups (Kafka groups and YDB consumers) with their lag"
    )
    group_actions = group.add_subparsers(dest="group_command", required=True, metavar="ACTION")
    listing = group_actions.add_parser("list", parents=[common], help="every group, total lag")
    listing.set_defaults(parser=listing, admin_run=group_list, admin_only=True)
    described = group_actions.add_parser(
        "describe", parents=[common], help="members and per-partition lag"
    )
    described.add_argument("name")
    described.set_defaults(parser=described, admin_run=group_describe, admin_only=True)
    _security_commands(commands, common)
    return parser


async def _run(command: Command, args: argparse.Namespace) -> int:
    async with connect(
        args.endpoint,
        database=args.database,
        ca_file=args.ca_file,
        user=args.user,
        password=args.password,
        connect_timeout=args.timeout,
        fail_fast=True,
    ) as client:
        return await command(client, args)


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "user":
        # Offline with a file; through a node only when asked: no silent default endpoint.
        if args.users_file is not None:
            if hasattr(args, "endpoint"):
                args.parser.error("give --users-file or --endpoint, not both")
            raise SystemExit(run_user_command(args))
        if not hasattr(args, "endpoint") and "VDL_ENDPOINT" not in os.environ:
            args.parser.error("give --users-file FILE or --endpoint grpc[s]://HOST:PORT")
    env = os.environ
    defaults = {
        "endpoint": env.get("VDL_ENDPOINT", DEFAULT_ENDPOINT),
        "database": DEFAULT_DATABASE,
        "ca_file": None,
        "user": None,
        "password": env.get("VDL_PASSWORD"),
        "timeout": 10.0,
        "admin": env.get("VDL_ADMIN"),
    }
    for name, value in defaults.items():
        if not hasattr(args, name):
            setattr(args, name, value)
    try:
        Endpoint.parse_list(args.endpoint)
    except ValueError as exc:
        parser.error(str(exc))
    if args.ca_file is not None and not os.path.isfile(args.ca_file):
        parser.error(f"--ca-file {args.ca_file}: no such file")
    admin_run = getattr(args, "admin_run", None)
    if admin_run is not None and (getattr(args, "admin_only", False) or args.admin):
        try:
            code = admin_run(args)
        except UsageError as exc:
            args.parser.error(str(exc))
        except AdminApiError as exc:
            print(f"vdl: {exc}", file=sys.stderr)
            code = EXIT_UNREACHABLE if exc.unreachable else EXIT_FAILED
        raise SystemExit(code)
    try:
        code = trio.run(_run, args.run, args)
    except UsageError as exc:
        args.parser.error(str(exc))
    except ConnectError as exc:
        print(f"vdl: {exc}", file=sys.stderr)
        code = EXIT_UNREACHABLE
    except YdbStatusError as exc:
        print(f"vdl: {exc}", file=sys.stderr)
        code = EXIT_FAILED
    except (ClientError, OSError) as exc:
        print(f"vdl: {exc}", file=sys.stderr)
        code = EXIT_FAILED
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    raise SystemExit(code)


if __name__ == "__main__":
    main()
