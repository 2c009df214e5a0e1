"""The data source's options, parsed and checked once into typed objects.

Names and meanings follow Spark's Kafka source (``subscribe``, ``subscribePattern``,
``assign``, ``startingOffsets``, ``startingTimestamp``, ``startingOffsetsByTimestamp``,
``startingOffsetsByTimestampStrategy``, ``endingOffsets``, ``endingTimestamp``,
``endingOffsetsByTimestamp``, ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``,
``maxTriggerDelay``, ``minPartitions``, ``failOnDataLoss``, ``includeHeaders``) so a job moves
between the two by changing the format name and ``kafka.bootstrap.servers`` to ``bootstrap``.
Where two options conflict, the error message is the one Spark's ``KafkaSourceProvider`` gives
(Structured Streaming + Kafka Integration Guide). Spark hands options over as a
case-insensitive mapping of strings; everything here works on plain mappings so the parsing is
unit-tested without Spark.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from vdl.adapters.spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetError,
    Offsets,
    TopicPartition,
    parse_json,
)

log = logging.getLogger(__name__)

# Options passed straight to librdkafka, as Spark's Kafka source does with ``kafka.*``.
CLIENT_PREFIX = "kafka."

# Spark's KafkaSourceProvider lists the three strategies in this order in its messages.
_STRATEGIES = ("subscribe", "subscribepattern", "assign")
_STRATEGY_LIST = ", ".join(_STRATEGIES)

# Spark's default maxTriggerDelay (15 minutes).
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
# Spark's time strings (JavaUtils.timeStringAsMs): an integer with an optional unit; none is ms.
_TIME_UNITS_MS = {
    "us": 0.001,
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}
_TIME = re.compile(r"(-?[0-9]+)([a-z]+)?")

_TIMESTAMP_EXAMPLE = (
    '{"topicA": {"0": 123456789, "1": 123456789}, "topicB": {"0": 123456789, "1": 123456789}}'
)


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


def time_string_ms(text: str, name: str) -> int:
    """Milliseconds of a Spark time string such as ``15m``, ``30s``, ``500ms`` or ``250``."""
    match = _TIME.fullmatch(text.strip().lower())
    unit = (match.group(2) or "ms") if match else ""
    if match is None or unit not in _TIME_UNITS_MS:
        raise OptionError(
            f'option "{name}": time must be specified as seconds (s), milliseconds (ms), '
            "microseconds (us), minutes (m or min), hour (h), or day (d). E.g. 50s, 100ms, or "
            f"250us; got {text!r}"
        )
    value = int(match.group(1))
    if value < 0:
        raise OptionError(f'option "{name}" must not be negative, got {text!r}')
    return int(value * _TIME_UNITS_MS[unit])


@dataclass(frozen=True)
class Subscription:
    """What to read: topics (``subscribe``), a name pattern, or fixed partitions (``assign``)."""

    topics: tuple[str, ...] = ()
    # Only for ``assign``: the exact partitions, never extended by new ones.
    partitions: tuple[tuple[str, int], ...] | None = None
    # Only for ``subscribePattern``: topics are those whose name it matches, at every look.
    pattern: re.Pattern[str] | None = None

    def covers(self, topic: str) -> bool:
        if self.pattern is not None:
            return matches_pattern(self.pattern, topic)
        return topic in self.topics

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern {self.pattern.pattern!r}"
        return ", ".join(self.topics)


def matches_pattern(pattern: re.Pattern[str], topic: str) -> bool:
    # Spark's Kafka source (since 3.1, offsets fetched with the admin client) keeps a topic when
    # the pattern is found anywhere in its name (Scala ``Regex.findFirstIn``), not only when it
    # matches the whole name: ``re.search``. Anchor it (``^...$``) for a whole-name match.
    return pattern.search(topic) is not None


def _compile_pattern(raw: str) -> re.Pattern[str]:
    text = raw.strip()
    if not text:
        raise OptionError(
            "Pattern to subscribe is empty as specified value for option "
            f"'subscribePattern' is '{raw}'"
        )
    try:
        return re.compile(text)
    except re.error as exc:
        raise OptionError(
            f'option "subscribePattern": {text!r} is not a valid regular expression ({exc}). '
            "It is read with Python's re module, which shares Java's regex syntax for topic "
            r"names but not \p{...} classes, \Q...\E quoting or [a&&b] intersections"
        ) from None


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in _STRATEGIES if name in opts]
    if not given:
        raise OptionError(
            f"One of the following options must be specified for Kafka source: "
            f"{_STRATEGY_LIST}. See the docs for more details."
        )
    if len(given) > 1:
        raise OptionError(
            f"Only one of the following options can be specified for Kafka source: "
            f"{_STRATEGY_LIST}. See the docs for more details."
        )
    if given[0] == "subscribepattern":
        return Subscription(pattern=_compile_pattern(opts["subscribepattern"]))
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise OptionError(
                "No topics to subscribe to as specified value for option "
                f"'subscribe' is '{opts['subscribe']}'"
            )
        return Subscription(topics=tuple(dict.fromkeys(topics)))
    raw = opts["assign"]
    if not raw.strip().startswith("{"):
        raise OptionError(
            f"No topicpartitions to assign as specified value for option 'assign' is '{raw}'"
        )
    try:
        document = json.loads(raw)
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


NoMatch = Literal["error", "latest"]


@dataclass(frozen=True)
class ByTimestamp:
    """Offsets looked up by time (ListOffsets with a timestamp, KIP-79).

    Each partition's offset is that of its first record with a timestamp at or after the one
    given: ``timestamp`` for every partition (``startingTimestamp``/``endingTimestamp``), or one
    per partition (``...OffsetsByTimestamp``). ``no_match`` says what a partition without such a
    record gets: ``latest`` (always so for ending offsets) or ``error``.
    """

    timestamp: int | None = None
    per_partition: Offsets | None = None
    no_match: NoMatch = "error"

    def timestamp_for(self, tp: TopicPartition) -> int:
        if self.per_partition is not None:
            return self.per_partition[tp]
        assert self.timestamp is not None
        return self.timestamp


OffsetSpec = Literal["earliest", "latest"] | Offsets | ByTimestamp


def _timestamp(raw: str, name: str) -> int:
    text = raw.strip()
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f'option "{name}": Expected a single long value, got {text}') from None
    if value < 0:
        raise OptionError(f'option "{name}": the timestamp cannot be negative, got {value}')
    return value


def _timestamps(raw: str, name: str) -> Offsets:
    try:
        stamps = parse_json(raw.strip(), f'option "{name}"')
    except OffsetError as exc:
        raise OptionError(f"{exc}; expected e.g. {_TIMESTAMP_EXAMPLE}") from None
    for (topic, partition), stamp in stamps.items():
        if stamp < 0:
            raise OptionError(
                f'option "{name}": the timestamp of "{topic}" partition {partition} cannot be '
                f"negative, got {stamp}"
            )
    return stamps


def _no_match(opts: Mapping[str, str]) -> NoMatch:
    raw = opts.get("startingoffsetsbytimestampstrategy")
    if raw is None:
        return "error"
    value = raw.strip().lower()
    if value == "error":
        return "error"
    if value == "latest":
        return "latest"
    raise OptionError(
        f'option "startingOffsetsByTimestampStrategy" must be "error" or "latest", got {raw!r}'
    )


def _offset_spec(
    opts: Mapping[str, str],
    names: tuple[str, str, str],
    default: Literal["earliest", "latest"],
    no_match: NoMatch,
) -> OffsetSpec:
    """Spark's order of preference: one timestamp, then timestamps per partition, then offsets."""
    global_name, by_timestamp_name, name = names
    if global_name.lower() in opts:
        return ByTimestamp(
            timestamp=_timestamp(opts[global_name.lower()], global_name), no_match=no_match
        )
    if by_timestamp_name.lower() in opts:
        stamps = _timestamps(opts[by_timestamp_name.lower()], by_timestamp_name)
        return ByTimestamp(per_partition=stamps, no_match=no_match)
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


STARTING = ("startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets")
ENDING = ("endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets")


def _check_batch(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Spark's checks of a batch query's range (KafkaSourceProvider.validateBatchOptions)."""
    if starting == "latest":
        raise OptionError("starting offset can't be latest for batch queries on Kafka")
    if isinstance(starting, dict):
        for (topic, partition), offset in sorted(starting.items()):
            if offset == LATEST:
                raise OptionError(
                    f"startingOffsets for {topic}-{partition} can't be latest for batch "
                    "queries on Kafka"
                )
    if ending == "earliest":
        raise OptionError("ending offset can't be earliest for batch queries on Kafka")
    if isinstance(ending, dict):
        for (topic, partition), offset in sorted(ending.items()):
            if offset == EARLIEST:
                raise OptionError(
                    f"ending offset for {topic}-{partition} can't be earliest for batch "
                    "queries on Kafka"
                )
    pairs: list[tuple[Offsets, Offsets, str]] = []
    if isinstance(starting, dict) and isinstance(ending, dict):
        pairs.append((starting, ending, "offset"))
    if (
        isinstance(starting, ByTimestamp)
        and isinstance(ending, ByTimestamp)
        and starting.per_partition is not None
        and ending.per_partition is not None
    ):
        pairs.append((starting.per_partition, ending.per_partition, "timestamp"))
    for start, end, kind in pairs:
        if set(start) != set(end):
            raise OptionError(
                "The start and end offsets must name the same topic partitions: "
                f"start {_names(start)}, end {_names(end)}"
            )
        for tp in sorted(start):
            # Negative offsets (earliest/latest) are resolved later, not compared here.
            if start[tp] > end[tp] >= 0:
                raise OptionError(
                    f"The specified starting {kind} {start[tp]} is greater than the ending "
                    f"{kind} {end[tp]} for topic {tp[0]} partition {tp[1]}"
                )


def _names(offsets: Offsets) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(offsets))


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec = "latest"
    ending: OffsetSpec = "latest"
    max_offsets_per_trigger: int | None = None
    # With it, a micro-batch waits until this many records are there, or max_trigger_delay_ms
    # has passed since the last one ran (Spark's minOffsetsPerTrigger / maxTriggerDelay).
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
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
        no_match = _no_match(opts)
        # Spark's Kafka source starts a stream at "latest" and a batch read at "earliest".
        starting = _offset_spec(opts, STARTING, "latest" if streaming else "earliest", no_match)
        # Ending offsets by time have no "error" choice: a partition without a match ends at
        # its latest offset.
        ending = _offset_spec(opts, ENDING, "latest", "latest")
        if streaming is True:
            if "endingoffsets" in opts:
                raise OptionError("ending offset not valid in streaming queries")
            # Spark ignores endingTimestamp in a stream; a silently ignored bound is refused.
            if "endingoffsetsbytimestamp" in opts or "endingtimestamp" in opts:
                raise OptionError("ending timestamp not valid in streaming queries")
        if streaming is False:
            _check_batch(starting, ending)
        for spec, name in ((starting, "startingOffsets"), (ending, "endingOffsets")):
            if isinstance(spec, dict):
                _check_against_subscription(spec, subscription, name)
            elif isinstance(spec, ByTimestamp) and spec.per_partition is not None:
                by_time = name.replace("Offsets", "OffsetsByTimestamp")
                _check_against_subscription(spec.per_partition, subscription, by_time)
        max_offsets = _positive_int(opts, "maxOffsetsPerTrigger")
        min_offsets = _positive_int(opts, "minOffsetsPerTrigger")
        delay_raw = opts.get("maxtriggerdelay")
        delay = (
            time_string_ms(delay_raw, "maxTriggerDelay")
            if delay_raw is not None
            else DEFAULT_MAX_TRIGGER_DELAY_MS
        )
        if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
            raise OptionError(
                f"The value of minOffsetPerTrigger({min_offsets}) is higher than the "
                f"maxOffsetsPerTrigger({max_offsets})."
            )
        if streaming is False:
            # As Spark does: a batch query has no triggers; the options are ignored, with a note.
            for key, name in (
                ("maxoffsetspertrigger", "maxOffsetsPerTrigger"),
                ("minoffsetspertrigger", "minOffsetsPerTrigger"),
                ("maxtriggerdelay", "maxTriggerDelay"),
            ):
                if key in opts:
                    log.warning("%s option ignored in batch queries", name)
            max_offsets = min_offsets = None
        return cls(
            bootstrap=_bootstrap(opts),
            subscription=subscription,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=max_offsets,
            min_offsets_per_trigger=min_offsets,
            max_trigger_delay_ms=delay,
            min_partitions=_positive_int(opts, "minPartitions"),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            include_headers=_bool(opts, "includeHeaders", False),
            poll_timeout_ms=_positive_int(opts, "pollTimeoutMs") or 120_000,
            client_config=_client_config(opts),
        )


def _check_against_subscription(spec: Offsets, subscription: Subscription, name: str) -> None:
    for topic, partition in spec:
        if not subscription.covers(topic):
            raise OptionError(
                f'option "{name}" names topic "{topic}", which is not subscribed or assigned '
                f"({subscription.describe()})"
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
