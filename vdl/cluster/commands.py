"""Commands of the metadata group, as small JSON documents.

Each command travels as the value of a one-record RecordBatch whose base offset is the
entry's raft index (log stores index DATA entries by record offset, and the raft index
grows with the log). JSON keeps the log readable with ordinary tools.

    {"op": "register", "node": 2, "kafka": "host:port", "grpc": "host:port", "dc": "eu"}
      ("dc" is optional: absent in older logs, meaning no data-centre label)
    {"op": "create_topic", "topic": {Topic document}, "replicas": [[1, 2, 3], ...]}
    {"op": "delete_topic", "name": "orders"}
    {"op": "update_topic", "topic": {Topic document}}
    {"op": "add_node", "node": 4, "raft": "host:port"}
    {"op": "remove_node", "node": 4}
    {"op": "set_replicas", "name": "orders", "partition": 0, "replicas": [1, 2, 4]}
"""

from __future__ import annotations

import json
from typing import Any

from vdl.backends.api import Buffer
from vdl.log.record_batch import Record, build_batch, iter_records

Command = dict[str, Any]


class CommandError(ValueError):
    """An entry of the metadata log that is not a command (skipped, never fatal)."""


def encode_command(command: Command, index: int) -> bytes:
    value = json.dumps(command, sort_keys=True).encode()
    return build_batch([Record(None, value, 0, [])], base_offset=index)


def decode_command(payload: Buffer) -> Command:
    try:
        records = list(iter_records(bytes(payload)))
        if len(records) != 1 or records[0].value is None:
            raise CommandError("a command batch holds exactly one record")
        doc = json.loads(records[0].value)
    except (ValueError, KeyError) as exc:
        raise CommandError(str(exc)) from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("op"), str):
        raise CommandError("a command is a JSON object with an op")
    return doc
