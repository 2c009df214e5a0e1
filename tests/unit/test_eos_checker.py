"""The exactly-once checker rejects each kind of broken history it is meant to catch.

Fabricated histories: a correct one first (the checker must accept it, so the rejections
below are about the fault each introduces), then one fault at a time.
"""

from __future__ import annotations

import pytest

from tests.integration.eos_checker import (
    EosHistory,
    EosVerdict,
    Outcome,
    OutputRecord,
    check,
    output_value,
)

INPUTS = {(p, o): f"v{p}-{o}".encode() for p in range(2) for o in range(4)}


def _out(partition: int, offset: int, ip: int, io: int, attempt: int) -> OutputRecord:
    return OutputRecord.parse(partition, offset, output_value(ip, io, attempt, INPUTS[(ip, io)]))


def _good() -> tuple[EosHistory, list[OutputRecord]]:
    """Attempt 1 commits inputs 0-1 of both partitions, attempt 2 writes 2-3 and is
    aborted, attempt 3 writes 2-3 again and commits."""
    history = EosHistory()
    output: list[OutputRecord] = []
    offsets = {0: 0, 1: 0}
    for attempt, first, outcome in (
        (1, 0, Outcome.COMMITTED),
        (2, 2, Outcome.ABORTED),
        (3, 2, Outcome.COMMITTED),
    ):
        history.begin(attempt)
        for p in range(2):
            for o in (first, first + 1):
                history.wrote(attempt, (p, o))
                if outcome is Outcome.COMMITTED:
                    output.append(_out(p, offsets[p], p, o, attempt))
                offsets[p] += 1  # aborted records take offsets too
        history.end(attempt, outcome)
    return history, output


def test_a_correct_history_passes() -> None:
    history, output = _good()
    verdict = check(history, INPUTS, output)
    assert verdict.ok, verdict.table()
    assert (verdict.inputs, verdict.outputs, verdict.committed, verdict.aborted) == (8, 8, 2, 1)


def _verdict(history: EosHistory, output: list[OutputRecord]) -> EosVerdict:
    verdict = check(history, INPUTS, output)
    assert not verdict.ok
    assert verdict.examples
    return verdict


def test_a_duplicate_is_caught() -> None:
    history, output = _good()
    output.append(_out(1, 99, 1, 3, 3))
    verdict = _verdict(history, output)
    assert verdict.duplicated == 1


def test_a_record_of_an_aborted_attempt_is_caught() -> None:
    history, output = _good()
    output.insert(2, _out(0, 2, 0, 2, 2))
    verdict = _verdict(history, output)
    assert verdict.from_aborted == 1
    assert verdict.duplicated == 1  # attempt 3 wrote the same input again


@pytest.mark.parametrize("outcome", [Outcome.NOT_COMMITTED, None])
def test_a_record_of_an_attempt_never_committed_is_caught(outcome: Outcome | None) -> None:
    history, output = _good()
    history.attempts[2].outcome = outcome
    history.attempts[3].records.clear()
    output = [r for r in output if r.attempt != 3] + [
        _out(p, 10 + o, p, o, 2) for p in range(2) for o in (2, 3)
    ]
    verdict = _verdict(history, sorted(output, key=lambda r: (r.partition, r.offset)))
    assert verdict.from_aborted == 4
    assert verdict.lost == 0 and verdict.duplicated == 0


def test_a_lost_record_and_an_incomplete_commit_are_caught() -> None:
    history, output = _good()
    output = [r for r in output if (r.input_partition, r.input_offset) != (0, 3)]
    verdict = _verdict(history, output)
    assert verdict.lost == 1
    assert verdict.incomplete_committed == 1


def test_a_partly_visible_attempt_of_unknown_outcome_is_caught() -> None:
    history, output = _good()
    history.attempts[3].outcome = Outcome.UNKNOWN
    assert check(history, INPUTS, output).ok  # all of it shown: it committed
    history.attempts[3].records.add((0, 0))  # it wrote one more that is not there
    verdict = _verdict(history, output)
    assert verdict.partial_unknown == 1


def test_reordering_within_an_input_partition_is_caught() -> None:
    history, output = _good()
    output[0], output[1] = output[1], output[0]
    verdict = _verdict(history, output)
    assert verdict.reordered == 1


def test_phantom_and_unattributed_records_are_caught() -> None:
    history, output = _good()
    output.append(OutputRecord.parse(0, 50, output_value(0, 1, 1, b"other value")))
    output.append(OutputRecord.parse(1, 50, output_value(1, 9, 1, b"v1-9")))
    output.append(OutputRecord.parse(1, 51, output_value(1, 3, 7, b"v1-3")))
    verdict = _verdict(history, output)
    assert verdict.phantom == 2
    assert verdict.unattributed == 1
