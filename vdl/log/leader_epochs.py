"""A stream's leader-epoch table: the first offset written in each leader epoch.

Every record batch carries its leader's epoch (partitionLeaderEpoch; in VDL the Raft term
of the leader that appended it). Kafka keeps, per partition, the offset at which each epoch
begins (the leader-epoch cache of KIP-101 and KIP-279) so that OffsetForLeaderEpoch can say
where an epoch ended without reading the log: a consumer (KIP-320) or a follower asks for
the end of the epoch it last saw and truncates what lies beyond it.

The stream builds the table from the batch headers it scans at open, adds to it on every
append (leader) and replicated entry (follower), rebuilds it after a truncation or a
snapshot, and cuts it at the log start when retention or DeleteRecords moves that.
"""

from __future__ import annotations

from bisect import bisect_right

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochs:
    """(epoch, start offset) pairs, epochs and offsets both strictly increasing."""

    def __init__(self) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest(self) -> int:
        """The newest epoch in the log, or UNDEFINED_EPOCH if it holds no batch."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """A batch of `epoch` starts at `start_offset`: a newer epoch begins there. A batch
        of an older epoch than the newest (which a well-behaved log never holds) is not
        recorded: the table stays monotonic, as Kafka's does."""
        if epoch < 0:
            return
        if not self._epochs or epoch > self._epochs[-1]:
            self._epochs.append(epoch)
            self._starts.append(start_offset)

    def truncate_from(self, end_offset: int) -> None:
        """The log now ends before `end_offset`: epochs that began at or after it go."""
        while self._starts and self._starts[-1] >= end_offset:
            self._epochs.pop()
            self._starts.pop()

    def drop_before(self, log_start: int) -> None:
        """The log now starts at `log_start`: epochs that began before it go, except the
        last of them, which now begins at the log start (Kafka's truncation from the start)."""
        k = bisect_right(self._starts, log_start)
        if k == 0:
            return
        del self._epochs[: k - 1]
        del self._starts[: k - 1]
        self._starts[0] = max(self._starts[0], log_start)

    def end_offset_for(self, epoch: int, log_end: int, current: int) -> tuple[int, int]:
        """(largest epoch <= `epoch` in the log, the offset where it ended): where the next
        epoch's first batch begins, or `log_end` for the newest epoch. `current` is the
        partition's epoch now; it counts as beginning at `log_end` when no batch has been
        written in it yet. UNDEFINED for an epoch below the earliest, or above `current`."""
        epochs, starts = list(self._epochs), list(self._starts)
        if current > (epochs[-1] if epochs else UNDEFINED_EPOCH):
            epochs.append(current)
            starts.append(log_end)
        if epoch < 0 or not epochs or epoch > epochs[-1] or epoch < epochs[0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        k = bisect_right(epochs, epoch)  # epochs[k - 1] <= epoch < epochs[k]
        if k == len(epochs):
            return epochs[-1], log_end
        return epochs[k - 1], starts[k]
