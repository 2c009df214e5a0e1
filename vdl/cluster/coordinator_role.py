"""Which node coordinates consumer groups on a cluster: the leader of the metadata group.

Committed offsets are applied through group 0 (`offset_commands`), so its leader is the one
node that can answer OffsetFetch with every acknowledged commit, once it has applied its
log up to where it stood when it was elected (Raft's leader holds every committed entry,
but may not have applied them all yet): until then group requests get
COORDINATOR_LOAD_IN_PROGRESS, as on a Kafka broker loading its offsets topic. Other nodes
answer NOT_COORDINATOR. When leadership moves away, the groups here are unloaded so held
requests are answered at once; once loaded, the new coordinator takes every group over from
its last record (`group_commands.py`), so members carry on there in their generation.
"""

from __future__ import annotations

import trio

from vdl.cluster.metadata_group import MetadataGroup
from vdl.groups.service import GroupService
from vdl.log.error_codes import ErrorCode

# How often leadership of group 0 is looked at; a missed change only delays the unload.
_WATCH_S = 0.05


class CoordinatorRole:
    def __init__(self, metadata: MetadataGroup, groups: GroupService) -> None:
        self._metadata = metadata
        self._groups = groups
        self._term = -1  # the term this node leads in, or -1
        self._load_index = 0  # applied must reach this before serving in that term
        self._loaded = False

    def error(self) -> ErrorCode:
        """NONE if this node serves group requests now."""
        driver = self._metadata.driver
        if driver is None or not driver.is_leader:
            return ErrorCode.NOT_COORDINATOR
        if driver.term != self._term:
            self._take_over(driver.term, driver.next_index() - 1)
        if not self._loaded:
            if self._metadata.applied < self._load_index:
                return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            self._loaded = True
            self._groups.load()
        return ErrorCode.NONE

    def _take_over(self, term: int, last_index: int) -> None:
        # Groups held in an earlier term may have lived on elsewhere meanwhile.
        if self._term != -1:
            self._groups.unload()
        self._term = term
        self._load_index = last_index
        self._loaded = False

    async def run(self) -> None:
        """Notice leadership changes even when no group request arrives."""
        while True:
            driver = self._metadata.driver
            if driver is not None:
                if driver.is_leader:
                    # Takes over and loads the groups as soon as it may, not only when the
                    # first group request arrives (members' sessions run from the load).
                    self.error()
                elif not driver.is_leader and self._term != -1:
                    self._term = -1
                    self._groups.unload()
            await trio.sleep(_WATCH_S)
