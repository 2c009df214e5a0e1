"""Moving a whole log from one store into another's snapshot staging in-process, as a
transfer does over the network: closed segment files byte for byte (if the staging takes
them), then entries."""

from __future__ import annotations

from vdl.backends.api import LogStore, SnapshotStaging


def copy_log(
    source: LogStore, staging: SnapshotStaging, upto: int, chunk: int = 700, files: bool = True
) -> int:
    """Stage `source`'s log up to `upto` and finish it; return how many files went (none
    unless `files` and the staging takes them)."""
    staging.start(source.first_index(), source.first_offset())
    held = source.closed_segments(upto)
    try:
        sent = held.files if files and staging.takes_files else ()
        next_index = source.first_index()
        for file in sent:
            data = file.path.read_bytes()[: file.size]
            staging.begin_file(file.name, file.size)
            for at in range(0, file.size, chunk):
                staging.write(data[at : at + chunk])
            staging.end_file()
            next_index = file.last_index + 1
        while next_index <= upto:
            entries = source.entries(next_index, upto + 1, 1000)
            staging.add_entries(entries)
            next_index = entries[-1].index + 1
    finally:
        held.release()
    staging.finish(upto, source.term_at(upto))
    return len(sent)
