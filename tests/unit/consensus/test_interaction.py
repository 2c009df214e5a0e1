"""Raft scenarios as interaction scripts (`testdata/*.txt`, see `interaction.py`).

Each script is a transcript of commands and what the cluster printed; the test replays it
and fails on the first difference. `VDL_REWRITE=1` stores the actual outputs instead (then
read the diff: it must be what Raft should do).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .datadriven import parse, render, run_file
from .interaction import InteractionEnv

TESTDATA = Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_script(path: Path) -> None:
    env = InteractionEnv()
    run_file(path, env.handle, rewrite=os.environ.get("VDL_REWRITE") == "1")


def test_there_are_scripts() -> None:
    assert len(SCRIPTS) >= 5


def test_a_changed_output_fails_with_a_diff(tmp_path: Path) -> None:
    script = tmp_path / "s.txt"
    script.write_text("add-nodes 1 voters=(1)\n----\nadded node 1\n\nstatus 1\n----\n1: leader\n")
    with pytest.raises(AssertionError, match=r"s.txt:5: output of 'status 1' differs"):
        run_file(script, InteractionEnv().handle)


def test_rewrite_stores_the_actual_output_and_keeps_comments(tmp_path: Path) -> None:
    script = tmp_path / "s.txt"
    script.write_text("# one node\nadd-nodes 1 voters=(1)\n----\nwrong\n\ncampaign 1\n----\n")
    run_file(script, InteractionEnv().handle, rewrite=True)
    text = script.read_text()
    assert text.startswith("# one node\nadd-nodes 1 voters=(1)\n----\nadded node 1\n\n")
    run_file(script, InteractionEnv().handle)  # and it now passes
    assert render(parse(text)) == text
