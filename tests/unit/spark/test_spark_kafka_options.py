"""Spark Kafka-source options of the ``vdl`` source: patterns, timestamps, trigger limits.

Parsing, Spark's conflict messages and the pure decisions behind them; no Spark, no node.
"""

from __future__ import annotations

import logging
import re

import pytest

from vdl.adapters.spark.offsets import MinRowsGate
from vdl.adapters.spark.options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    ByTimestamp,
    OptionError,
    SourceOptions,
    Subscription,
    time_string_ms,
)
from vdl.adapters.spark.source import resolve, timestamp_targets

BOOT = {"bootstrap": "127.0.0.1:9092"}
PARTS = [("t", 0), ("t", 1)]
EARLIEST = {("t", 0): 0, ("t", 1): 3}
LATEST = {("t", 0): 10, ("t", 1): 20}


def parse(streaming: bool | None = True, **options: str) -> SourceOptions:
    return SourceOptions.parse({**BOOT, **options}, streaming=streaming)


def test_subscribe_pattern_is_found_anywhere_in_the_name_as_spark_does() -> None:
    subscription = parse(subscribePattern=" events-.* ").subscription
    assert subscription == Subscription(pattern=re.compile("events-.*"))
    assert subscription.covers("events-eu")
    # Spark keeps a topic when the pattern occurs anywhere in its name (Regex.findFirstIn).
    assert subscription.covers("old-events-eu")
    assert not subscription.covers("metrics")
    anchored = parse(subscribePattern="^events-[0-9]+$").subscription
    assert anchored.covers("events-1") and not anchored.covers("events-1x")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"subscribePattern": "a.*", "assign": '{"a": [0]}'},
            "Only one of the following options can be specified for Kafka source: "
            "subscribe, subscribepattern, assign. See the docs for more details.",
        ),
        (
            {"subscribePattern": "a.*", "subscribe": "a"},
            "Only one of the following options can be specified for Kafka source",
        ),
        (
            {},
            "One of the following options must be specified for Kafka source: "
            "subscribe, subscribepattern, assign.",
        ),
        (
            {"subscribePattern": "  "},
            "Pattern to subscribe is empty as specified value for option 'subscribePattern'",
        ),
        ({"subscribePattern": "ev(ents"}, "is not a valid regular expression"),
        (
            {"subscribePattern": "e.*", "startingOffsets": '{"xyz": {"0": 1}}'},
            "which is not subscribed or assigned \\(subscribePattern 'e.\\*'\\)",
        ),
    ],
)
def test_strategy_conflicts_use_sparks_messages(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse(True, **options)


def test_json_offsets_may_name_any_topic_the_pattern_matches() -> None:
    options = parse(subscribePattern="e.*", startingOffsets='{"e1": {"0": 4}, "e2": {"0": -2}}')
    assert options.starting == {("e1", 0): 4, ("e2", 0): -2}


def test_starting_precedence_is_timestamp_then_by_timestamp_then_offsets() -> None:
    everything = {
        "subscribe": "t",
        "startingTimestamp": "1000",
        "startingOffsetsByTimestamp": '{"t": {"0": 5, "1": 6}}',
        "startingOffsets": "earliest",
    }
    assert parse(True, **everything).starting == ByTimestamp(timestamp=1000)
    del everything["startingTimestamp"]
    assert parse(True, **everything).starting == ByTimestamp(
        per_partition={("t", 0): 5, ("t", 1): 6}
    )
    del everything["startingOffsetsByTimestamp"]
    assert parse(True, **everything).starting == "earliest"


def test_ending_precedence_and_strategy() -> None:
    batch = parse(
        False,
        subscribe="t",
        endingTimestamp="2000",
        endingOffsetsByTimestamp='{"t": {"0": 1}}',
        startingOffsetsByTimestampStrategy="LATEST",
    )
    # Ending offsets by time never fail: a partition without a match ends at its latest.
    assert batch.ending == ByTimestamp(timestamp=2000, no_match="latest")
    assert batch.starting == "earliest"
    stream = parse(
        subscribe="t", startingTimestamp="7", startingOffsetsByTimestampStrategy="latest"
    )
    assert stream.starting == ByTimestamp(timestamp=7, no_match="latest")
    assert parse(subscribe="t", startingTimestamp="7").starting == ByTimestamp(timestamp=7)


@pytest.mark.parametrize(
    ("streaming", "options", "message"),
    [
        (True, {"startingTimestamp": "soon"}, "Expected a single long value, got soon"),
        (True, {"startingTimestamp": "-5"}, "cannot be negative"),
        (True, {"startingOffsetsByTimestamp": "{oops"}, "expected e.g."),
        (True, {"startingOffsetsByTimestamp": '{"t": {"0": -1}}'}, "cannot be negative"),
        (True, {"startingOffsetsByTimestamp": '{"u": {"0": 1}}'}, "not subscribed"),
        (True, {"startingOffsetsByTimestampStrategy": "skip"}, 'must be "error" or "latest"'),
        (True, {"endingOffsetsByTimestamp": '{"t": {"0": 1}}'}, "ending timestamp not valid"),
        (True, {"endingTimestamp": "1"}, "ending timestamp not valid in streaming queries"),
        (
            False,
            {
                "startingOffsetsByTimestamp": '{"t": {"0": 1}}',
                "endingOffsetsByTimestamp": '{"t": {"1": 1}}',
            },
            "must name the same topic partitions: start t-0, end t-1",
        ),
        (
            False,
            {
                "startingOffsetsByTimestamp": '{"t": {"0": 9}}',
                "endingOffsetsByTimestamp": '{"t": {"0": 8}}',
            },
            "starting timestamp 9 is greater than the ending timestamp 8",
        ),
        (
            False,
            {"startingOffsets": '{"t": {"0": 9}}', "endingOffsets": '{"t": {"0": 8}}'},
            "starting offset 9 is greater than the ending offset 8",
        ),
    ],
)
def test_bad_timestamp_options(streaming: bool, options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse(streaming, subscribe="t", **options)


def test_timestamp_targets_need_every_partition_of_a_per_partition_spec() -> None:
    assert timestamp_targets(ByTimestamp(timestamp=5), PARTS, "startingTimestamp") == {
        ("t", 0): 5,
        ("t", 1): 5,
    }
    half = ByTimestamp(per_partition={("t", 0): 5})
    with pytest.raises(OptionError, match="you must specify all topics"):
        timestamp_targets(half, PARTS, "startingOffsetsByTimestamp")


def test_resolve_by_timestamp_follows_the_strategy() -> None:
    found = {("t", 0): 4, ("t", 1): None}
    strict = ByTimestamp(timestamp=99)
    with pytest.raises(OptionError, match="No offset matched from request of topic-partition t-1"):
        resolve(strict, PARTS, EARLIEST, LATEST, "startingTimestamp", found)
    lenient = ByTimestamp(timestamp=99, no_match="latest")
    assert resolve(lenient, PARTS, EARLIEST, LATEST, "startingTimestamp", found) == {
        ("t", 0): 4,
        ("t", 1): 20,
    }


def test_trigger_limits_parse_and_combine_as_in_spark() -> None:
    options = parse(
        subscribe="t", minOffsetsPerTrigger="50", maxOffsetsPerTrigger="80", maxTriggerDelay="2s"
    )
    assert (options.min_offsets_per_trigger, options.max_offsets_per_trigger) == (50, 80)
    assert options.max_trigger_delay_ms == 2000
    assert parse(subscribe="t").max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS == 900_000
    with pytest.raises(OptionError, match=r"minOffsetPerTrigger\(90\) is higher than the "):
        parse(subscribe="t", minOffsetsPerTrigger="90", maxOffsetsPerTrigger="80")
    with pytest.raises(OptionError, match="positive integer"):
        parse(subscribe="t", minOffsetsPerTrigger="0")
    with pytest.raises(OptionError, match=r"maxTriggerDelay.*E.g. 50s, 100ms"):
        parse(subscribe="t", minOffsetsPerTrigger="5", maxTriggerDelay="1.5s")


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("15m", 900_000),
        ("250", 250),
        ("100ms", 100),
        ("3S", 3000),
        ("2min", 120_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        ("2000us", 2),
    ],
)
def test_time_strings(text: str, ms: int) -> None:
    assert time_string_ms(text, "maxTriggerDelay") == ms


def test_batch_reads_ignore_trigger_limits_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="vdl.adapters.spark.options"):
        options = parse(
            False,
            subscribe="t",
            maxOffsetsPerTrigger="9",
            minOffsetsPerTrigger="3",
            maxTriggerDelay="1s",
        )
    assert options.max_offsets_per_trigger is None
    assert options.min_offsets_per_trigger is None
    assert [r.getMessage() for r in caplog.records] == [
        "maxOffsetsPerTrigger option ignored in batch queries",
        "minOffsetsPerTrigger option ignored in batch queries",
        "maxTriggerDelay option ignored in batch queries",
    ]


def test_min_rows_gate_waits_for_rows_or_the_delay() -> None:
    gate = MinRowsGate(min_rows=10, max_delay_ms=1000)
    # The first question after a start has no earlier batch to wait from.
    assert gate.admits(0, now_ms=5_000)
    assert not gate.admits(9, now_ms=5_100)
    assert gate.admits(10, now_ms=5_200)
    assert not gate.admits(1, now_ms=6_199)
    # maxTriggerDelay since the last batch ran: runs with whatever there is.
    assert gate.admits(1, now_ms=6_200)
    assert gate.last_run_ms == 6_200
