"""A small reader and runner for `datadriven` test files (the format of etcd raft's
`testdata/*.txt`).

A file is a sequence of blocks separated by blank lines. A block is one command line, a
`----` line and the output the command must print (no blank lines in it). Lines starting
with `#` outside blocks are comments. With `rewrite`, the file is written back with the
actual outputs in place of the expected ones (as datadriven's `-rewrite` flag does), so a
deliberate change of behaviour is reviewed as a diff of the scripts.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

SEPARATOR = "----"


@dataclass
class Block:
    line_no: int  # 1-based line of the command
    command: str
    expected: list[str]


Part = str | Block  # a verbatim line (comment or blank) or a block


def parse(text: str, name: str = "<script>") -> list[Part]:
    lines = text.splitlines()
    parts: list[Part] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            parts.append(line)
            i += 1
            continue
        if i + 1 >= len(lines) or lines[i + 1] != SEPARATOR:
            raise ValueError(f"{name}:{i + 1}: expected {SEPARATOR!r} after {line!r}")
        j = i + 2
        expected: list[str] = []
        while j < len(lines) and lines[j].strip():
            expected.append(lines[j])
            j += 1
        parts.append(Block(i + 1, line, expected))
        i = j
    return parts


def render(parts: list[Part]) -> str:
    out: list[str] = []
    for part in parts:
        if isinstance(part, Block):
            out.extend([part.command, SEPARATOR, *part.expected])
        else:
            out.append(part)
    return "\n".join(out) + "\n"


def run_file(path: Path, handle: Callable[[str], str], *, rewrite: bool = False) -> None:
    """Run every block of `path` through `handle` (a command line -> its output).

    Fails at the first block whose output differs, showing a unified diff; with `rewrite`,
    stores the actual outputs in the file instead.
    """
    parts = parse(path.read_text(), path.name)
    for part in parts:
        if not isinstance(part, Block):
            continue
        actual = [line.rstrip() for line in handle(part.command).splitlines() if line.strip()]
        if rewrite:
            part.expected = actual
        elif actual != part.expected:
            diff = "\n".join(
                difflib.unified_diff(part.expected, actual, "expected", "actual", lineterm="")
            )
            raise AssertionError(
                f"{path.name}:{part.line_no}: output of {part.command!r} differs\n{diff}"
            )
    if rewrite:
        path.write_text(render(parts))
