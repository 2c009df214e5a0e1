"""A Jepsen-style checker for exactly-once consume-transform-produce (KIP-98, KIP-447).

The loop under test reads an input topic with read_committed, writes one output record per
input record inside a transaction, sends the consumer's offsets in the same transaction and
commits (or aborts). Every output record names what it came from and which attempt (one
transaction) wrote it: `<input partition>:<input offset>:<attempt>:<input value>`. The driver
records what it did with each attempt; the checker then compares that history with the
input topic and with the output topic as a read_committed consumer sees it:

- every input record appears in the output exactly once (none lost, none duplicated);
- no output record comes from an attempt that was aborted or never asked to commit;
- an attempt whose commit was acknowledged shows all of its records; one whose outcome
  is unknown (the commit failed ambiguously) shows all or none of them: atomicity;
- records of one input partition keep their input order in the output;
- no output record names an input record that does not exist, or carries another value.

The checker is pure (no clients): the integration test feeds it what it read, and
tests/unit/test_eos_checker.py feeds it fabricated histories it must reject.
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from dataclasses import dataclass, field

InputKey = tuple[int, int]  # (input partition, input offset)


class Outcome(enum.Enum):
    """What the driver knows of one attempt once it is over."""

    COMMITTED = "committed"  # commit_transaction() returned
    ABORTED = "aborted"  # abort_transaction() returned
    NOT_COMMITTED = "not committed"  # the attempt ended before commit was ever asked
    UNKNOWN = "unknown"  # commit was asked and failed without a known outcome


def output_value(input_partition: int, input_offset: int, attempt: int, value: bytes) -> bytes:
    return f"{input_partition}:{input_offset}:{attempt}:".encode() + value


@dataclass(frozen=True)
class OutputRecord:
    """One record of the output topic, as read back, with what its value names."""

    partition: int
    offset: int
    input_partition: int
    input_offset: int
    attempt: int
    value: bytes

    @classmethod
    def parse(cls, partition: int, offset: int, raw: bytes) -> OutputRecord:
        ip, io, attempt, value = raw.split(b":", 3)
        return cls(partition, offset, int(ip), int(io), int(attempt), value)


@dataclass
class Attempt:
    outcome: Outcome | None = None  # None while the attempt is still open
    records: set[InputKey] = field(default_factory=set)


@dataclass
class EosHistory:
    """What the loop did: its attempts, in the order they began."""

    attempts: dict[int, Attempt] = field(default_factory=dict)

    def begin(self, attempt: int) -> None:
        self.attempts[attempt] = Attempt()

    def wrote(self, attempt: int, key: InputKey) -> None:
        self.attempts[attempt].records.add(key)

    def end(self, attempt: int, outcome: Outcome) -> None:
        self.attempts[attempt].outcome = outcome

    def count(self, outcome: Outcome) -> int:
        return sum(1 for a in self.attempts.values() if a.outcome is outcome)


@dataclass(frozen=True)
class EosVerdict:
    inputs: int
    outputs: int
    attempts: int
    committed: int
    aborted: int
    not_committed: int
    unknown: int
    lost: int
    duplicated: int
    from_aborted: int  # output records of attempts aborted or never asked to commit
    incomplete_committed: int  # committed attempts missing some of their records
    partial_unknown: int  # unknown attempts with some but not all of their records
    reordered: int
    phantom: int  # naming an input record that does not exist, or another value
    unattributed: int  # naming an attempt the driver never began
    examples: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.from_aborted
            or self.incomplete_committed
            or self.partial_unknown
            or self.reordered
            or self.phantom
            or self.unattributed
        )

    def table(self) -> str:
        rows = [(k, v) for k, v in self.__dict__.items() if k != "examples"]
        lines = [f"  {k:<22} {v:>8}" for k, v in rows]
        lines += [f"  ! {example}" for example in self.examples]
        return "\n".join(lines)


def check(
    history: EosHistory, inputs: dict[InputKey, bytes], output: list[OutputRecord]
) -> EosVerdict:
    """`inputs`: every record of the input topic; `output`: the output topic read with
    read_committed, each partition in offset order."""
    examples: list[str] = []

    def note(text: str) -> None:
        if len(examples) < 10:
            examples.append(text)

    seen: Counter[InputKey] = Counter()
    present: dict[int, set[InputKey]] = defaultdict(set)
    phantom = unattributed = from_aborted = reordered = 0
    last_input: dict[tuple[int, int], int] = {}  # (output partition, input partition)
    for record in output:
        key = (record.input_partition, record.input_offset)
        seen[key] += 1
        if inputs.get(key) != record.value:
            phantom += 1
            note(f"output {record.partition}@{record.offset} names {key}, not an input record")
        attempt = history.attempts.get(record.attempt)
        if attempt is None:
            unattributed += 1
            note(f"output {record.partition}@{record.offset} from unknown attempt")
        else:
            present[record.attempt].add(key)
            if attempt.outcome in (Outcome.ABORTED, Outcome.NOT_COMMITTED, None):
                from_aborted += 1
                note(
                    f"output {record.partition}@{record.offset} from attempt {record.attempt} "
                    f"({'open' if attempt.outcome is None else attempt.outcome.value})"
                )
        order_key = (record.partition, record.input_partition)
        if record.input_offset <= last_input.get(order_key, -1):
            reordered += 1
            note(f"output {record.partition}@{record.offset}: input {key} out of order")
        last_input[order_key] = record.input_offset
    lost = 0
    for key in sorted(inputs):
        if seen[key] == 0:
            lost += 1
            note(f"input {key} never in the output")
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    for key, n in seen.items():
        if n > 1:
            note(f"input {key} in the output {n} times")
    incomplete = partial = 0
    for number, attempt in history.attempts.items():
        shown = len(present[number])
        if attempt.outcome is Outcome.COMMITTED and shown < len(attempt.records):
            incomplete += 1
            note(f"committed attempt {number}: {shown} of {len(attempt.records)} records")
        elif attempt.outcome is Outcome.UNKNOWN and 0 < shown < len(attempt.records):
            partial += 1
            note(f"attempt {number} of unknown outcome: {shown} of {len(attempt.records)}")
    return EosVerdict(
        inputs=len(inputs),
        outputs=len(output),
        attempts=len(history.attempts),
        committed=history.count(Outcome.COMMITTED),
        aborted=history.count(Outcome.ABORTED),
        not_committed=history.count(Outcome.NOT_COMMITTED),
        unknown=history.count(Outcome.UNKNOWN),
        lost=lost,
        duplicated=duplicated,
        from_aborted=from_aborted,
        incomplete_committed=incomplete,
        partial_unknown=partial,
        reordered=reordered,
        phantom=phantom,
        unattributed=unattributed,
        examples=tuple(examples),
    )
