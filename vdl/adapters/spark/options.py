"""The data source's options, parsed and checked once into typed objects.

Names and meanings follow Spark's Kafka source (``subscribe``, ``assign``,
``startingOffsets``, ``endingOffsets``, ``maxOffsetsPerTrigger``, ``minPartitions``,
``failOnDataLoss``, ``includeHeaders``) so a job moves between the two by changing the format
name and ``kafka.bootstrap.servers`` to ``bootstrap``. Spark hands options over as a
case-insensitive mapping of strings; everything here works on plain mappings so the parsing is
unit-tested without Spark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from vdl.adapters.spark.offsets import EARLIEST, LATEST, OffsetError, Offsets, parse_json

OffsetSpec = Literal["earliest", "latest"] | Offsets

# Options passed straight to librdkafka, as Spark's Kafka source does with ``kafka.*``.
CLIENT_PREFIX = "kafka."


class OptionError(ValueError):
    """A bad ``vdl`` data source option; the message names the option and the fix."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bootstrap(opts: Mapping[str, str]) -> str:
    value = opts.get("bootstrap") or opts.get("kafka.bootstrap.servers")
    if not value or not value.strip():
        raise OptionError(
            'option "bootstrap" is required: the VDL node addresses, e.g. "127.0.0.1:9092"'
        )
    return ",".join(part.strip() for part in value.split(",") if part.strip())


def _client_config(opts: Mapping[str, str]) -> dict[str, str]:
    return {
        key[len(CLIENT_PREFIX) :]: value
        for key, value in opts.items()
        if key.startswith(CLIENT_PREFIX) and key != "kafka.bootstrap.servers"
    }


def _positive_int(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f'option "{name}" must be a positive integer, got {raw!r}') from None
    if value <= 0:
        raise OptionError(f'option "{name}" must be a positive integer, got {value}')
    return value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise OptionError(f'option "{name}" must be "true" or "false", got {raw!r}')


@dataclass(frozen=True)
class Subscription:
    """What to read: whole topics (``subscribe``) or fixed partitions (``assign``)."""

    topics: tuple[str, ...]
    # Only for ``assign``: the exact partitions, never extended by new ones.
    partitions: tuple[tuple[str, int], ...] | None = None


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "assign", "subscribepattern") if name in opts]
    if "subscribepattern" in given:
        raise OptionError('option "subscribePattern" is not supported; list topics in "subscribe"')
    if len(given) != 1:
        raise OptionError(
            'exactly one of "subscribe" (comma-separated topics) or "assign" '
            '(JSON like {"topic": [0, 1]}) must be given'
            + (f", got both {given[0]} and {given[1]}" if len(given) == 2 else "")
        )
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise OptionError('option "subscribe" names no topic')
        return Subscription(topics=tuple(dict.fromkeys(topics)))
    try:
        document = json.loads(opts["assign"])
    except json.JSONDecodeError as exc:
        raise OptionError(f'option "assign" must be JSON like {{"topic": [0, 1]}}: {exc}') from None
    partitions: list[tuple[str, int]] = []
    if not isinstance(document, dict) or not document:
        raise OptionError('option "assign" must be a non-empty JSON object like {"topic": [0, 1]}')
    for topic, numbers in document.items():
        if not isinstance(numbers, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers
        ):
            raise OptionError(
                f'option "assign": topic "{topic}" must map to a list of partition numbers'
            )
        partitions.extend((topic, n) for n in numbers)
    if not partitions:
        raise OptionError('option "assign" lists no partition')
    return Subscription(
        topics=tuple(dict.fromkeys(t for t, _ in partitions)),
        partitions=tuple(sorted(set(partitions))),
    )


def _offset_spec(
    opts: Mapping[str, str], name: str, default: Literal["earliest", "latest"]
) -> OffsetSpec:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip()
    if text.lower() in ("earliest", "latest"):
        return "earliest" if text.lower() == "earliest" else "latest"
    try:
        offsets = parse_json(text, f'option "{name}"')
    except OffsetError as exc:
        raise OptionError(str(exc)) from None
    for (topic, partition), offset in offsets.items():
        if offset < EARLIEST:
            raise OptionError(
                f'option "{name}": offset {offset} of "{topic}" partition {partition} is '
                "invalid (use >= 0, or -2 for earliest, -1 for latest)"
            )
    return offsets


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec = "latest"
    ending: OffsetSpec = "latest"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    # How long one task may wait for records it knows exist before it calls them lost.
    poll_timeout_ms: int = 120_000
    client_config: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool | None) -> SourceOptions:
        """Parse and check; ``streaming=None`` checks only what is wrong in either mode."""
        opts = _lower(options)
        subscription = _subscription(opts)
        # Spark's Kafka source starts a stream at "latest" and a batch read at "earliest".
        starting = _offset_spec(opts, "startingOffsets", "latest" if streaming else "earliest")
        ending = _offset_spec(opts, "endingOffsets", "latest")
        if streaming is True and "endingoffsets" in opts:
            raise OptionError('option "endingOffsets" is for batch reads only')
        if streaming is False:
            if starting == "latest":
                raise OptionError(
                    'option "startingOffsets" cannot be "latest" for a batch read '
                    "(it would always be empty)"
                )
            if ending == "earliest" or (
                isinstance(ending, dict) and any(o == EARLIEST for o in ending.values())
            ):
                raise OptionError(
                    'option "endingOffsets" cannot be "earliest" (-2) for a batch read'
                )
            if isinstance(starting, dict) and any(o == LATEST for o in starting.values()):
                raise OptionError(
                    'option "startingOffsets" cannot use -1 (latest) for a batch read'
                )
        if "maxoffsetspertrigger" in opts and streaming is False:
            raise OptionError('option "maxOffsetsPerTrigger" is for streaming reads only')
        for spec, name in ((starting, "startingOffsets"), (ending, "endingOffsets")):
            if isinstance(spec, dict):
                _check_against_subscription(spec, subscription, name)
        return cls(
            bootstrap=_bootstrap(opts),
            subscription=subscription,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
            min_partitions=_positive_int(opts, "minPartitions"),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            include_headers=_bool(opts, "includeHeaders", False),
            poll_timeout_ms=_positive_int(opts, "pollTimeoutMs") or 120_000,
            client_config=_client_config(opts),
        )


def _check_against_subscription(spec: Offsets, subscription: Subscription, name: str) -> None:
    for topic, partition in spec:
        if topic not in subscription.topics:
            raise OptionError(
                f'option "{name}" names topic "{topic}", which is not subscribed or assigned '
                f"({', '.join(subscription.topics)})"
            )
        if (
            subscription.partitions is not None
            and (topic, partition) not in subscription.partitions
        ):
            raise OptionError(
                f'option "{name}" names "{topic}" partition {partition}, which "assign" does '
                "not list"
            )


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    # Topic for every row; without it each row names its own in a "topic" column.
    topic: str | None = None
    # Where the streaming sink keeps its commit markers (default: derived from the query id).
    commit_topic: str | None = None
    client_config: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        opts = _lower(options)
        topic = (opts.get("topic") or "").strip() or None
        commit_topic = (opts.get("committopic") or "").strip() or None
        return cls(
            bootstrap=_bootstrap(opts),
            topic=topic,
            commit_topic=commit_topic,
            client_config=_client_config(opts),
        )
