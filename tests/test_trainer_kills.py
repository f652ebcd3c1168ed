"""A transformers Trainer killed (SIGKILL) while it writes a checkpoint, at every file-system call
of the save (``--soak``; CI: the calls around the data state), then resumed with
``resume_from_checkpoint=True``: the resume is exact - from the new checkpoint or the previous
one - or the Trainer refuses the incomplete last checkpoint with an error naming it, and after
that folder is deleted the resume is exact. Never a data state of another step. The runs are
forked by ``trainer_kill_driver.py`` in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("torchdata")

pytestmark = [pytest.mark.torch]

HERE = os.path.dirname(os.path.abspath(__file__))
# the data state renamed into place, then trainer_state.json, then the older checkpoint deleted
AROUND_THE_DATA_STATE = "replace resumable_iterable_state.json,open trainer_state.json,rmtree"


def drive(tmp_path, workers, points):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, os.path.join(HERE, "trainer_kill_driver.py"), str(tmp_path), str(workers),
                          points], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def check(result):
    calls = result["calls"]
    # the data state is in place before trainer_state.json, which comes before the rotation
    data = calls.index("replace resumable_iterable_state.json")
    assert data < calls.index("open trainer_state.json") < calls.index("rmtree checkpoint-2")
    for t in result["trials"]:
        assert t["exact"], t
        for e in t["errors"]:  # the Trainer refusing the incomplete checkpoint-4, naming it
            assert "checkpoint-4" in e and ("trainer_state.json" in e or "valid checkpoint" in e), t
        # killed before trainer_state.json: resumed from checkpoint 2 (after deleting checkpoint-4)
        k = t["k"] - 1
        assert t["resumed_from"] == (4 if k > calls.index("open trainer_state.json") else 2), t


def test_a_trainer_killed_around_the_data_state_write_resumes_exactly(tmp_path):
    result = drive(tmp_path, 0, AROUND_THE_DATA_STATE)
    assert len(result["trials"]) == 3
    check(result)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_a_trainer_killed_at_every_call_of_a_save_resumes_exactly(tmp_path, workers, soak):
    if not soak:
        pytest.skip("run with --soak")
    result = drive(tmp_path, workers, "all")
    assert len(result["trials"]) >= 15
    check(result)
