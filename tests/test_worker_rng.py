"""``ri.StatefulDataLoader(save_worker_rng=True)``: each worker's global random generators (torch,
numpy, ``random``) travel with its state and are set back on resume, so a collator that draws at
random and a ``map`` that augments with the global generators give the uninterrupted run's
batches after a resume, at every cut, across epochs with persistent workers; elastic resumes
keep exactly-once and fresh draws; a damaged entry is refused before anything is loaded."""

from __future__ import annotations

import copy
import random
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

import resumable_iterable as ri  # noqa: E402
from harness import json_roundtrip, take  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]

ROWS = 30


def masking_collate(rows: list[dict]) -> dict:
    """Draws from all three global generators, as MLM collators and augmentations do."""
    ids = torch.tensor([r["id"] for r in rows])
    return {"id": ids.tolist(), "mask": (torch.rand(len(rows)) < 0.5).tolist(),
            "np": np.random.randint(0, 1000, size=2).tolist(), "py": random.random(), "aug": [r["aug"] for r in rows]}


def augment(ex: dict) -> dict:
    return {"aug": random.randint(0, 10**6)}  # in the pipeline: also drawn in the worker


def build() -> ri.IterableDataset:
    return ri.IterableDataset.from_dict({"id": list(range(ROWS))}, num_shards=4).map(augment).shuffle(seed=3,
                                                                                                       buffer_size=4)


def loader(save: bool, workers: int = 2, **kwargs) -> ri.StatefulDataLoader:
    return ri.StatefulDataLoader(build(), batch_size=3, num_workers=workers, collate_fn=masking_collate,
                                 save_worker_rng=save, **kwargs)


def run_with_states(dl) -> tuple[list, list]:
    batches, states = [], []
    for b in dl:
        batches.append(b)
        states.append(json_roundtrip(dl.state_dict()))
    return batches, states


def test_every_cut_resumes_the_random_draws_of_the_workers():
    full, states = run_with_states(loader(True))
    assert all("rng" in ws["dataset_state"] for ws in states[0]["_snapshot"]["_worker_snapshots"].values())
    for k in range(len(states)):
        dl = loader(True)
        dl.load_state_dict(states[k])
        assert list(dl) == full[k + 1:], f"cut after batch {k}"


def test_without_it_the_examples_are_exact_and_the_draws_are_not():
    full, states = run_with_states(loader(False))
    assert all("rng" not in ws["dataset_state"] for ws in states[0]["_snapshot"]["_worker_snapshots"].values())
    dl = loader(False)
    dl.load_state_dict(states[2])
    rest = list(dl)
    assert [b["id"] for b in rest] == [b["id"] for b in full[3:]]
    assert rest != full[3:]


def test_persistent_workers_draw_on_in_the_next_epoch_as_uninterrupted():
    def two_epochs(dl, cut=None):
        out, state = [], None
        for epoch in range(2):
            dl.set_epoch(epoch)
            for i, b in enumerate(dl):
                out.append(b)
                if epoch == 0 and i == cut:
                    state = json_roundtrip(dl.state_dict())
        return out, state

    full, state = two_epochs(loader(True, persistent_workers=True), cut=4)
    dl = loader(True, persistent_workers=True)
    dl.load_state_dict(state)
    dl.set_epoch(0)
    rest = list(dl)
    dl.set_epoch(1)
    rest += list(dl)
    assert rest == full[5:]


def test_a_state_taken_before_the_first_batch_and_a_resume_taken_twice():
    full, states = run_with_states(loader(True))
    dl = loader(True)
    dl.load_state_dict(states[1])
    it = iter(dl)
    assert take(it, 3) == full[2:5]
    again = json_roundtrip(dl.state_dict())
    dl2 = loader(True)
    dl2.load_state_dict(again)
    assert list(dl2) == full[5:]


@pytest.mark.parametrize("workers", [0, 3])
def test_elastic_resume_keeps_exactly_once_and_draws_afresh(workers):
    dl = loader(True)
    it = iter(dl)
    seen = [i for b in take(it, 4) for i in b["id"]]
    dl2 = loader(True, workers=workers)
    dl2.load_state_dict(json_roundtrip(dl.state_dict()))
    seen += [i for b in dl2 for i in b["id"]]
    assert Counter(seen) == Counter(range(ROWS))


def test_main_process_generators_are_left_alone():
    dl = loader(True, workers=0)
    torch.manual_seed(11)
    before = torch.get_rng_state()
    it = iter(dl)
    take(it, 2)
    assert "rng" not in dl.state_dict()["dataset_state"]
    torch.set_rng_state(before)  # the collator drew from it: ours only does not
    dl2 = loader(True, workers=0)
    dl2.load_state_dict(dl.state_dict())
    assert torch.equal(torch.get_rng_state(), before)


def test_a_damaged_entry_is_refused_before_anything_is_loaded():
    _, states = run_with_states(loader(True))
    for edit, message in [(lambda r: r.update(torch="AAAA"), r"'rng' 'torch' holds 3 bytes, expected 5056"),
                          (lambda r: r["numpy"].update(pos=625), r"'rng' 'numpy' 'pos' must be an integer in \[0, 624\]"),
                          (lambda r: r["random"].pop("gauss_next"), r"'rng' 'random' must be an object with keys"),
                          (lambda r: r.update(numpy=[]), r"'rng' 'numpy' must be an object")]:
        bad = copy.deepcopy(states[2])
        edit(bad["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]["rng"])
        dl = loader(True)
        with pytest.raises(ValueError, match=message):
            dl.load_state_dict(bad)


def test_the_argument_is_checked():
    with pytest.raises(TypeError, match="save_worker_rng must be True or False"):
        ri.StatefulDataLoader(build(), save_worker_rng=1)
    with pytest.raises(ValueError, match="save_worker_rng=True needs a resumable_iterable dataset"):
        ri.StatefulDataLoader(list(range(3)), save_worker_rng=True)


def test_inspect_says_the_generators_are_saved(tmp_path, capsys):
    from resumable_iterable.cli import main

    _, states = run_with_states(loader(True))
    ri.save_state(states[1], tmp_path / "state.json")
    assert main(["inspect", str(tmp_path / "state.json")]) == 0
    out = capsys.readouterr().out
    assert out.count("random generators (torch, numpy, random) are saved") == 2
