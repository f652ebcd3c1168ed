"""``StatefulDataLoader.keep_batch_states`` / ``state_after`` (the state as of a batch a loop read
ahead of) and the ``"next_pass_epoch"`` mark of a loader state, which the Lightning integration
relies on: every cut point, states through JSON, resumed in a fresh loader."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")

import resumable_iterable as ri  # noqa: E402
from data import gen_src  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")]


def ds():
    return gen_src(n_shards=4, n=6).shuffle(seed=5, buffer_size=4)


def loader(workers=0, **kw):
    return ri.StatefulDataLoader(ds(), batch_size=3, num_workers=workers, **kw)


def ids(batches):
    return [b["id"].tolist() for b in batches]


def epoch(dl, e):
    dl.set_epoch(e)
    return ids(dl)


@pytest.mark.parametrize("workers", [0, 2])
def test_state_after_the_batch_before_the_one_read_ahead(workers):
    """At every cut: a loop that has read batch j + 1 while training on batch j saves
    ``state_after(j)``; a fresh loader resumed from it yields batches j + 1 ... exactly."""
    ref = loader(workers)
    full = epoch(ref, 0) + epoch(ref, 1)
    per_epoch = len(full) // 2
    for cut in range(1, per_epoch):
        dl = loader(workers)
        dl.set_epoch(0)
        it = iter(dl)
        next(it)
        dl.keep_batch_states(2)  # as the Lightning callback does, after the first batch was read
        for _ in range(cut):  # batches 2 .. cut + 1 read: the loop trains on batch `cut`
            next(it)
        state = json.loads(json.dumps(dl.state_after(cut)))
        assert dl.state_after(cut - 2) is None  # only the last two are kept
        resumed = loader(workers)
        resumed.load_state_dict(state)
        assert ids(resumed) + epoch(resumed, 1) == full[cut:], cut


def test_batch_states_of_a_new_pass_with_persistent_workers():
    dl = loader(2, persistent_workers=True)
    dl.set_epoch(0)
    first = ids(dl)
    dl.keep_batch_states(2)
    dl.set_epoch(1)
    it = iter(dl)
    second = [next(it)["id"].tolist(), next(it)["id"].tolist()]
    state = json.loads(json.dumps(dl.state_after(1)))
    assert dl.state_after(len(first)) is None  # the last pass's states were dropped
    resumed = loader(2)
    resumed.load_state_dict(state)
    rest = ids(resumed)
    assert rest[0] == second[1]
    assert sorted(i for b in [second[0]] + rest for i in b) == sorted(i for b in first for i in b)


@pytest.mark.parametrize("workers", [0, 2])
def test_next_pass_epoch_starts_that_epoch(workers):
    """A state marked ``"next_pass_epoch": e`` resumes nothing of its pass: the next pass is
    epoch ``e`` in full, whatever of the saved pass was left (a loop that limits its epochs)."""
    ref = loader(workers)
    e0, e1 = epoch(ref, 0), epoch(ref, 1)
    for taken in (2, len(e0)):  # part of the pass (limited epoch), all of it (the pass ended)
        dl = loader(workers)
        dl.set_epoch(0)
        it = iter(dl)
        for _ in range(taken):
            next(it)
        state = dict(dl.state_dict(), next_pass_epoch=1)
        resumed = loader(workers)
        resumed.load_state_dict(json.loads(json.dumps(state)))
        assert ids(resumed) == e1, taken


def test_next_pass_epoch_must_be_an_epoch():
    dl = loader()
    state = dl.state_dict()
    for bad in (-1, "1", 1.0, True):
        with pytest.raises(ValueError, match="next_pass_epoch"):
            loader().load_state_dict(dict(state, next_pass_epoch=bad))


def test_keep_batch_states_needs_a_count():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="keep_batch_states"):
            loader().keep_batch_states(bad)
