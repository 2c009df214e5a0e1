"""The ``vdl`` data source: batch and streaming reads of VDL topics over the Kafka protocol.

Process model (PySpark 4.x): the stream reader's driver methods run in
one long-lived "source runner" process, which keeps the metadata client and the availableNow
target between micro-batches; ``read()`` runs on executors on a reader that was pickled right
after construction, so it uses only the InputPartition and the parsed options.

Determinism: a micro-batch is the records ``start <= offset < end`` per partition, where
``end`` is what Spark wrote to its offset log before running the batch. ``partitions(start,
end)`` depends only on those two dicts and the options, and ``read()`` only on its range, so
a batch replayed after a crash reads the same records.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from vdl.adapters.spark.metadata import LogMetadata
from vdl.adapters.spark.offsets import (
    EARLIEST,
    LATEST,
    MinRowsGate,
    Offsets,
    TopicPartition,
    cap_to_limit,
    from_json_dict,
    plan_ranges,
    to_json_dict,
)
from vdl.adapters.spark.options import ByTimestamp, OffsetSpec, OptionError, SourceOptions
from vdl.adapters.spark.reader import DataLossError, read_range
from vdl.adapters.spark.schema import source_ddl

__all__ = ["DataLossError", "OffsetRangePartition", "VdlDataSource"]


@dataclass
class OffsetRangePartition(InputPartition):
    """One Spark task: records ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int


def timestamp_targets(
    spec: ByTimestamp, partitions: Sequence[TopicPartition], name: str
) -> dict[TopicPartition, int]:
    """The timestamp to look up for each partition read."""
    if spec.per_partition is not None and set(spec.per_partition) != set(partitions):
        given = ", ".join(f"{t}-{p}" for t, p in sorted(spec.per_partition))
        assigned = ", ".join(f"{t}-{p}" for t, p in sorted(partitions))
        raise OptionError(
            f'option "{name}": If starting/endingOffsetsByTimestamp contains specific offsets, '
            f"you must specify all topics. Specified: {given} Assigned: {assigned}"
        )
    return {tp: spec.timestamp_for(tp) for tp in partitions}


def resolve(
    spec: OffsetSpec,
    partitions: Sequence[TopicPartition],
    earliest: Offsets,
    latest: Offsets,
    name: str,
    found: Mapping[TopicPartition, int | None] | None = None,
) -> Offsets:
    """Concrete offsets for an option over the current partitions.

    ``found`` holds, for a by-timestamp option, what ListOffsets answered for each partition's
    timestamp (``None``: no record that late).
    """
    if isinstance(spec, ByTimestamp):
        assert found is not None, "timestamps must be looked up first"
        out: Offsets = {}
        for tp in partitions:
            offset = found[tp]
            if offset is None:
                if spec.no_match == "error":
                    raise OptionError(
                        f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} "
                        f"and timestamp {spec.timestamp_for(tp)}. Set option "
                        '"startingOffsetsByTimestampStrategy" to "latest" to start such '
                        "partitions at their latest offset."
                    )
                offset = latest[tp]
            out[tp] = offset
        return out
    if spec == "earliest":
        return {tp: earliest[tp] for tp in partitions}
    if spec == "latest":
        return {tp: latest[tp] for tp in partitions}
    assert isinstance(spec, dict)
    missing = [tp for tp in partitions if tp not in spec]
    if missing:
        listed = ", ".join(f"{t}/{p}" for t, p in missing)
        raise OptionError(
            f'option "{name}" must give an offset for every partition read '
            f"(-2 = earliest, -1 = latest); missing: {listed}"
        )
    unknown = sorted(set(spec) - set(partitions))
    if unknown:
        listed = ", ".join(f"{t}/{p}" for t, p in unknown)
        raise OptionError(f'option "{name}" names partitions that do not exist: {listed}')
    out = {}
    for tp in partitions:
        offset = spec[tp]
        if offset == EARLIEST:
            out[tp] = earliest[tp]
        elif offset == LATEST:
            out[tp] = latest[tp]
        elif offset > latest[tp]:
            raise OptionError(
                f'option "{name}": offset {offset} of "{tp[0]}" partition {tp[1]} is past '
                f"the end of the log ({latest[tp]})"
            )
        else:
            out[tp] = offset
    return out


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # Spark turns an empty partition list into one InputPartition(None): nothing to read.
    if not isinstance(partition, OffsetRangePartition):
        return iter(())
    return read_range(
        options.bootstrap,
        options.client_config,
        partition.topic,
        partition.partition,
        partition.start,
        partition.end,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
    )


def _to_partitions(
    start: Offsets, end: Offsets, min_partitions: int | None
) -> list[InputPartition]:
    return [
        OffsetRangePartition(r.topic, r.partition, r.start, r.end)
        for r in plan_ranges(start, end, min_partitions)
    ]


class _MetadataUser:
    """Holds a driver-side metadata client that is created on first use, never pickled."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._metadata: LogMetadata | None = None

    @property
    def metadata(self) -> LogMetadata:
        if self._metadata is None:
            self._metadata = LogMetadata(self.options.bootstrap, self.options.client_config)
        return self._metadata

    def resolve(
        self,
        spec: OffsetSpec,
        partitions: Sequence[TopicPartition],
        earliest: Offsets,
        latest: Offsets,
        name: str,
    ) -> Offsets:
        found = None
        if isinstance(spec, ByTimestamp):
            if spec.per_partition is not None:
                name = name.replace("Offsets", "OffsetsByTimestamp")
            else:
                name = name.replace("Offsets", "Timestamp")
            targets = timestamp_targets(spec, partitions, name)
            found = self.metadata.offsets_for_times(targets)
        return resolve(spec, partitions, earliest, latest, name, found)

    def close(self) -> None:
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles readers right after construction and after planning; a librdkafka
        # handle cannot travel, and executors never need it.
        state = dict(self.__dict__)
        state["_metadata"] = None
        return state


class VdlBatchReader(_MetadataUser, DataSourceReader):
    def partitions(self) -> Sequence[InputPartition]:
        # Planned once, in a short-lived (or reused) worker: do not leave a client behind.
        try:
            partitions = self.metadata.partitions(self.options.subscription)
            earliest, latest = self.metadata.bounds(partitions)
            start = self.resolve(
                self.options.starting, partitions, earliest, latest, "startingOffsets"
            )
            end = self.resolve(self.options.ending, partitions, earliest, latest, "endingOffsets")
        finally:
            self.close()
        backwards = [tp for tp in partitions if start[tp] > end[tp]]
        if backwards:
            t, p = backwards[0]
            raise OptionError(
                f'"{t}" partition {p}: startingOffsets ({start[(t, p)]}) is after '
                f"endingOffsets ({end[(t, p)]})"
            )
        return _to_partitions(start, end, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class VdlStreamReader(_MetadataUser, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        # Spark asks for the initial offset more than once at the first start; "latest" must
        # give the same answer each time, or batch 0 would not start where it was planned.
        self._initial: Offsets | None = None
        # availableNow: the log's end when the run began; no batch of the run goes past it.
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        # minOffsetsPerTrigger: when the last micro-batch ran, kept between micro-batches.
        self._gate: MinRowsGate | None = None
        if options.min_offsets_per_trigger is not None:
            self._gate = MinRowsGate(options.min_offsets_per_trigger, options.max_trigger_delay_ms)

    def _current_latest(self) -> Offsets:
        partitions = self.metadata.partitions(self.options.subscription)
        return self.metadata.bounds(partitions)[1]

    def initialOffset(self) -> dict[str, Any]:
        if self._initial is None:
            partitions = self.metadata.partitions(self.options.subscription)
            earliest, latest = self.metadata.bounds(partitions)
            self._initial = self.resolve(
                self.options.starting, partitions, earliest, latest, "startingOffsets"
            )
        return to_json_dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        # PySpark has no composite limit: with both minOffsetsPerTrigger and
        # maxOffsetsPerTrigger the cap travels as the limit and the minimum is applied from the
        # options. Either way, a limit other than ReadAllAvailable tells a normal trigger from
        # Trigger.Once, which passes ReadAllAvailable and, as in Spark, ignores every limit.
        most = self.options.max_offsets_per_trigger
        least = self.options.min_offsets_per_trigger
        if most:
            return ReadMaxRows(most)
        if least:
            return ReadMinRows(least)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._current_latest()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json_dict(start, "start offset")
        latest = dict(self._target) if self._target is not None else self._current_latest()
        self._latest = dict(latest)
        vanished = [tp for tp in begin if tp not in latest]
        if vanished and self._target is None:
            if self.options.fail_on_data_loss:
                t, p = vanished[0]
                raise DataLossError(
                    f'"{t}" partition {p} no longer exists (topic deleted?). Set option '
                    '"failOnDataLoss" to "false" to go on without it.'
                )
        for tp in vanished:
            # Keep its position: dropping a key would make it look new if it came back.
            latest[tp] = begin[tp]
        for tp, offset in begin.items():
            if latest[tp] < offset:
                if self.options.fail_on_data_loss:
                    raise DataLossError(
                        f'"{tp[0]}" partition {tp[1]} went back from offset {offset} to '
                        f"{latest[tp]} (topic deleted and recreated?). Set option "
                        '"failOnDataLoss" to "false" to read on from there.'
                    )
        end: Offsets = {}
        new = [tp for tp in latest if tp not in begin]
        if new:
            # A partition seen for the first time enters at its earliest offset with an empty
            # range; it is read from the next batch on. Its start is then in the offset log,
            # so a replay never has to guess where a new partition began.
            earliest = self.metadata.bounds(new)[0]
            for tp in new:
                end[tp] = earliest[tp]
        known = {tp: latest[tp] for tp in begin}
        # availableNow reads everything up to its target, in batches of at most
        # maxOffsetsPerTrigger: a minimum to wait for would only stall it, so it is ignored.
        if (
            self._gate is not None
            and self._target is None
            and not isinstance(limit, ReadAllAvailable)
        ):
            waiting = sum(max(0, known[tp] - begin[tp]) for tp in begin)
            if not self._gate.admits(waiting, time.monotonic() * 1000):
                return to_json_dict(begin)
        if isinstance(limit, ReadMaxRows):
            known = cap_to_limit(begin, known, limit.max_rows)
        end.update(known)
        return to_json_dict(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json_dict(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = from_json_dict(start, "start offset")
        stop = from_json_dict(end, "end offset")
        # A partition absent from start is new in this batch: its range is empty by
        # construction (see latestOffset). One that went backwards is skipped, which is what
        # failOnDataLoss=false asks for; with true, latestOffset already failed.
        return _to_partitions(begin, stop, self.options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        # Progress lives in Spark's checkpoint; this late, best-effort hint changes nothing.
        return None


def _is_read(options: dict[str, str]) -> bool:
    return any(k.lower() in ("subscribe", "assign", "subscribepattern") for k in options)


class VdlDataSource(DataSource):
    """``spark.read/readStream/writeStream.format("vdl")``."""

    @classmethod
    def name(cls) -> str:
        return "vdl"

    def schema(self) -> str:
        options = {str(k).lower(): str(v) for k, v in self.options.items()}
        if _is_read(options):
            # Fail at load() on options that are wrong in either mode, not at the first batch;
            # whether this is a batch or a streaming read is not known yet.
            return source_ddl(SourceOptions.parse(options, streaming=None).include_headers)
        return source_ddl(options.get("includeheaders", "false").strip().lower() == "true")

    def reader(self, schema: Any) -> DataSourceReader:
        return VdlBatchReader(SourceOptions.parse(dict(self.options), streaming=False))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return VdlStreamReader(SourceOptions.parse(dict(self.options), streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        from vdl.adapters.spark.sink import VdlBatchWriter

        return VdlBatchWriter(dict(self.options), schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        from vdl.adapters.spark.sink import VdlStreamWriter

        return VdlStreamWriter(dict(self.options), schema)
