"""The ordered segments of one store, with the lookups by Raft index and by offset."""

from __future__ import annotations

from bisect import bisect_right

from vdl.backends.segment.segment import Segment


class SegmentList:
    def __init__(self, segments: list[Segment]) -> None:
        if not segments:
            raise ValueError("a store has at least one segment")
        self._segments = segments
        self._firsts = [s.first_index for s in segments]
        self._starts = [s.start_offset for s in segments]

    def __len__(self) -> int:
        return len(self._segments)

    def __getitem__(self, n: int) -> Segment:
        return self._segments[n]

    def snapshot(self) -> list[Segment]:
        return list(self._segments)

    @property
    def first(self) -> Segment:
        return self._segments[0]

    @property
    def active(self) -> Segment:
        return self._segments[-1]

    def number_holding_index(self, index: int) -> int:
        """Position in the list of the segment that holds (or would hold) `index`."""
        return max(0, bisect_right(self._firsts, index) - 1)

    def holding_index(self, index: int) -> Segment:
        return self._segments[self.number_holding_index(index)]

    def number_for_offset(self, offset: int) -> int:
        """Position of the first segment that can hold the batch with `offset`: the last one
        created at or before the stream reached that offset."""
        return max(0, bisect_right(self._starts, offset) - 1)

    def push(self, segment: Segment) -> None:
        self._segments.append(segment)
        self._firsts.append(segment.first_index)
        self._starts.append(segment.start_offset)

    def replace(self, number: int, segment: Segment) -> None:
        """Put `segment` (the same first index and start offset) in place of segment `number`."""
        self._segments[number] = segment

    def pop_last(self) -> Segment:
        self._firsts.pop()
        self._starts.pop()
        return self._segments.pop()

    def pop_first(self) -> Segment:
        del self._firsts[0]
        del self._starts[0]
        return self._segments.pop(0)
