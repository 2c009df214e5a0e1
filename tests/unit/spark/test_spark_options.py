"""Option parsing of the ``vdl`` Spark data source: no Spark, no node."""

from __future__ import annotations

import pytest

from vdl.adapters.spark.options import OptionError, SinkOptions, SourceOptions, Subscription

BOOT = {"bootstrap": "127.0.0.1:9092"}


def parse(streaming: bool | None = True, **options: str) -> SourceOptions:
    return SourceOptions.parse({**BOOT, **options}, streaming=streaming)


def test_defaults_follow_spark_kafka_source() -> None:
    stream = parse(subscribe="a, b,a")
    assert stream.subscription == Subscription(topics=("a", "b"))
    assert stream.starting == "latest"
    assert stream.fail_on_data_loss is True
    assert stream.include_headers is False
    assert stream.max_offsets_per_trigger is None
    assert parse(False, subscribe="a").starting == "earliest"
    assert parse(False, subscribe="a").ending == "latest"


def test_option_names_are_case_insensitive_and_typed() -> None:
    given = {
        "SUBSCRIBE": "t",
        "MaxOffsetsPerTrigger": "500",
        "minpartitions": "4",
        "failOnDataLoss": "false",
        "includeHeaders": "TRUE",
        "kafka.client.id": "me",
    }
    options = SourceOptions.parse({**BOOT, **given}, streaming=True)
    assert options.max_offsets_per_trigger == 500
    assert options.min_partitions == 4
    assert options.fail_on_data_loss is False
    assert options.include_headers is True
    assert options.client_config == {"client.id": "me"}


def test_assign_lists_exact_partitions() -> None:
    options = parse(assign='{"t": [1, 0], "u": [3]}')
    assert options.subscription.partitions == (("t", 0), ("t", 1), ("u", 3))
    assert options.subscription.topics == ("t", "u")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t", "assign": '{"t": [0]}'}, "Only one of the following options"),
        ({}, "One of the following options must be specified"),
        ({"subscribe": " , "}, "No topics to subscribe to"),
        ({"assign": "[0, 1]"}, "No topicpartitions to assign"),
        ({"assign": "{}"}, 'option "assign" must be a non-empty JSON object'),
        ({"assign": '{"t": ["x"]}'}, "must map to a list of partition numbers"),
        ({"assign": "{oops"}, 'option "assign" must be JSON'),
        ({"subscribe": "t", "startingOffsets": "{not json"}, "nor valid JSON"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, "is not an integer"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"0": "1"}}'}, "must be an integer"),
        ({"subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'}, "is invalid"),
        ({"subscribe": "t", "startingOffsets": '{"u": {"0": 1}}'}, "not subscribed"),
        ({"assign": '{"t": [0]}', "startingOffsets": '{"t": {"1": 1}}'}, "does not list"),
        ({"subscribe": "t", "maxOffsetsPerTrigger": "0"}, "positive integer"),
        ({"subscribe": "t", "minPartitions": "many"}, "positive integer"),
        ({"subscribe": "t", "failOnDataLoss": "maybe"}, '"true" or "false"'),
        ({"subscribe": "t", "subscribePattern": "t.*"}, "Only one of the following options"),
        ({"subscribe": "t", "endingOffsets": "latest"}, "ending offset not valid in streaming"),
    ],
)
def test_bad_stream_options_say_what_is_wrong(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse(True, **options)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": "latest"}, "starting offset can't be latest for batch queries"),
        ({"startingOffsets": '{"t": {"0": -1}}'}, "startingOffsets for t-0 can't be latest"),
        ({"endingOffsets": "earliest"}, "ending offset can't be earliest for batch queries"),
    ],
)
def test_bad_batch_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse(False, subscribe="t", **options)


def test_mode_neutral_check_allows_either_mode_options() -> None:
    parse(None, subscribe="t", endingOffsets='{"t": {"0": 5}}', maxOffsetsPerTrigger="3")
    with pytest.raises(OptionError, match="nor valid JSON"):
        parse(None, subscribe="t", startingOffsets="[")


def test_bootstrap_is_required() -> None:
    with pytest.raises(OptionError, match='"bootstrap" is required'):
        SourceOptions.parse({"subscribe": "t"}, streaming=True)
    alias = SourceOptions.parse(
        {"kafka.bootstrap.servers": "h:1, h:2", "subscribe": "t"}, streaming=True
    )
    assert alias.bootstrap == "h:1,h:2"
    assert alias.client_config == {}


def test_sink_options() -> None:
    sink = SinkOptions.parse({**BOOT, "topic": "out", "commitTopic": "c", "kafka.linger.ms": "1"})
    assert (sink.topic, sink.commit_topic, sink.client_config) == ("out", "c", {"linger.ms": "1"})
    assert SinkOptions.parse(BOOT).topic is None
