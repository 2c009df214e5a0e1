"""YDB topic paths <-> VDL topic names.

The SDK sends paths verbatim: absolute (``/local/orders``) or database-relative
(``orders``). A VDL topic is flat and named like a Kafka topic, so ``/local/orders`` and
``orders`` both name topic ``orders``; paths with directories are not supported.
"""

from __future__ import annotations

from vdl.broker.topics import TopicError, validate_topic_name
from vdl.net.ydb.operation import StatusIds, YdbError


def topic_name(path: str, database: str) -> str:
    """The topic a path names; YdbError SCHEME_ERROR/BAD_REQUEST if it cannot name one."""
    name = path
    if name.startswith("/"):
        prefix = database.rstrip("/") + "/"
        if not name.startswith(prefix):
            raise YdbError(
                StatusIds.SCHEME_ERROR, f"path {path!r} is not inside database {database!r}"
            )
        name = name[len(prefix) :]
    if "/" in name:
        raise YdbError(
            StatusIds.SCHEME_ERROR, f"path {path!r}: directories are not supported, topics are flat"
        )
    try:
        validate_topic_name(name)
    except TopicError as exc:
        raise YdbError(StatusIds.BAD_REQUEST, f"path {path!r}: {exc}") from None
    return name


def topic_path(name: str, database: str) -> str:
    return f"{database.rstrip('/')}/{name}"
