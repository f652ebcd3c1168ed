"""``ri.StatefulDataLoader(num_workers=0, batch_size=k)`` puts the pipeline back where a batch began
when reading it raises (``integrations/torch/loader.py``). Errors outside the dataset: a
``collate_fn`` that raises on the last, partial batch (the fetcher had already seen the end), one
that raises part-way through the epoch while the loop goes on with the same iterator, and one
that edits its rows in place before raising."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import resumable_iterable as ri

pytest.importorskip("torchdata.stateful_dataloader")


class Boom(RuntimeError):
    pass


def rows(shard_ids, n):
    for s in shard_ids:
        for i in range(n):
            yield {"id": s * 100 + i, "tags": [s, i], "arr": np.array([i, s], dtype=np.int64)}


def source(n_shards=3, n=5):
    return ri.IterableDataset.from_generator(rows, gen_kwargs={"shard_ids": list(range(n_shards)), "n": n})


class Collate:
    """Rows' ids; raises :class:`Boom` on its ``at``-th call; ``edit``: edits the rows in place first
    (as ``DataCollatorForSeq2Seq`` pads the labels of its features)."""

    def __init__(self, at=None, edit=False):
        self.at, self.calls, self.edit = at, 0, edit

    def __call__(self, batch):
        if self.edit:
            for ex in batch:
                ex["tags"].append(-1)
                ex["arr"] += 100
        n, self.calls = self.calls, self.calls + 1
        if n == self.at:
            raise Boom(f"collate call {n}")
        return [(ex["id"], list(ex["tags"]), ex["arr"].tolist()) for ex in batch]


def flat(loader):
    return [x for b in loader for x in b]


@pytest.mark.parametrize("shuffled", [False, True])
def test_a_collate_error_on_the_last_partial_batch_is_resumed(shuffled):
    """15 rows in batches of 4: the fetcher meets the end of the input while collecting the last
    batch (its ``ended`` flag is set), then the ``collate_fn`` raises. The pipeline is put back where
    that batch began; the loader's state taken then must not say the fetcher ended, or the resumed
    loader yields nothing (the 3 rows were lost)."""

    def pipe():
        return source().shuffle(seed=2, buffer_size=4) if shuffled else source()

    full = flat(ri.StatefulDataLoader(pipe(), batch_size=4, collate_fn=Collate()))
    ld = ri.StatefulDataLoader(pipe(), batch_size=4, collate_fn=Collate(at=3))
    got = []
    with pytest.raises(Boom):
        for b in ld:
            got += b
    assert len(got) == 12
    resumed = ri.StatefulDataLoader(pipe(), batch_size=4, collate_fn=Collate())
    resumed.load_state_dict(pickle.loads(pickle.dumps(ld.state_dict())))
    assert got + flat(resumed) == full


def test_rows_a_collate_fn_edited_before_raising_on_the_last_batch_are_read_unedited():
    """Over a shuffle with no ``map`` above it the state copied before each batch shares the buffered
    examples: a ``collate_fn`` that edits its rows in place and then raises (the last batch) must not
    leave its edits in the state put back, or the resumed loader gets them edited twice."""

    def pipe():
        return source().shuffle(seed=2, buffer_size=4)

    full = flat(ri.StatefulDataLoader(pipe(), batch_size=4, collate_fn=Collate(edit=True)))
    ds = pipe()
    ld = ri.StatefulDataLoader(ds, batch_size=4, collate_fn=Collate(at=3, edit=True))
    got = []
    with pytest.raises(Boom):
        for b in ld:
            got += b
    fresh = pipe()
    fresh.load_state_dict(ri.loads_state(ri.dumps_state(ds.state_dict())))
    assert got + flat(ri.StatefulDataLoader(fresh, batch_size=4, collate_fn=Collate(edit=True))) == full


@pytest.mark.parametrize("kind", ["shuffle", "prefetch"])
def test_a_loop_that_skips_a_batch_whose_collate_fn_raised_stays_consistent(kind):
    """A loop that catches a ``collate_fn`` error and goes on with the same iterator (the dataset's
    generators are still live): the rows it then gets, and the loader's state taken later, must
    agree - as with torchdata's loader. Loading the state copied before the batch under the live
    generators made a prefetch yield rows twice and a shuffle's later states resume wrong rows."""

    def pipe():
        ds = source(n=8)
        return ds.shuffle(seed=2, buffer_size=5) if kind == "shuffle" else ds.prefetch(3)

    ld = ri.StatefulDataLoader(pipe(), batch_size=4, collate_fn=Collate(at=1))
    it = iter(ld)
    seen, skipped = [], 0
    while len(seen) < 4:
        try:
            seen.append(next(it))
        except Boom:
            skipped += 1
    assert skipped == 1
    state = pickle.loads(pickle.dumps(ld.state_dict()))
    rest = list(it)
    ids = [x[0] for b in seen + rest for x in b]
    assert len(ids) == len(set(ids)) == 24 - 4, "the live iteration repeated rows"
    resumed = ri.StatefulDataLoader(pipe(), batch_size=4, collate_fn=Collate())
    resumed.load_state_dict(state)
    assert list(resumed) == rest


def test_an_iterator_left_part_way_is_freed_at_once_and_its_prefetch_thread_stops():
    """The rewinding wraps the iterator's ``_next_data`` and the fetcher's ``collate_fn``: those
    wrappers must not make a reference cycle with them, or a loop that breaks off leaves the
    dataset's iterator (and a prefetch's thread) alive until the cyclic collector runs."""
    import gc
    import threading
    import time
    import weakref

    def prefetch_threads():
        return sum(t.name == "resumable_iterable-prefetch" for t in threading.enumerate())

    gc.collect()
    before = prefetch_threads()
    gc.disable()
    try:
        ld = ri.StatefulDataLoader(source(n=8).prefetch(3), batch_size=4, collate_fn=Collate())
        it = iter(ld)
        next(it)
        ref = weakref.ref(it)
        ld.load_state_dict({})  # torchdata's way to drop the loader's iterator
        del it
        assert ref() is None
        deadline = time.monotonic() + 5
        while prefetch_threads() > before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert prefetch_threads() == before
    finally:
        gc.enable()
