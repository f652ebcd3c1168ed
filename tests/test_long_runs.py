"""Days-long runs stay flat: nothing grows with the examples, batches, epochs, checkpoints or
resumes of a run where it should not.

* a pass left part-way (a loop that breaks off, a state loaded over it), or finished, frees its
  shuffle buffer at once, without waiting for the cyclic garbage collector (a regression: it did
  not).
"""

from __future__ import annotations

import gc

import numpy as np
import pyarrow as pa
import pytest

import resumable_iterable as ri


pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")

TABLE = pa.table({"id": np.arange(400), "input_ids": [[i % 50] * (i % 5 + 1) for i in range(400)]})


def src(num_shards: int = 4, table: pa.Table = TABLE) -> ri.IterableDataset:
    return ri.IterableDataset.from_arrow_table(table, num_shards=num_shards)


def gen(shards):
    for s in shards:
        for i in range(60):
            yield {"id": s * 1000 + i}


async def add_one(ex):
    return {"y": ex["id"] + 1}



def generator_of_arrays(shards):
    for s in shards:
        for i in range(80):
            yield {"id": s * 1000 + i, "x": np.full(64, i, dtype=np.float32)}


@pytest.mark.parametrize("buffer_state", ["examples", "drop", "replay"])
@pytest.mark.parametrize("how", ["left", "loaded_over", "finished"])
def test_a_pass_frees_its_shuffle_buffer_without_the_cyclic_collector(buffer_state, how):
    """A pass that is left part-way (a training loop that breaks off every epoch, a DataLoader
    worker reset between epochs), replaced by a loaded state, or finished, leaves no reference
    cycle: its shuffle buffer - up to ``buffer_size`` examples - goes as soon as nothing uses it.
    Before, the buffer's trail (what an error note works the source row out from) held the node,
    which held the trail: every such pass kept its buffer until the cyclic garbage collector ran,
    which in a training process with a large heap of long-lived objects is rare, so the memory of
    a buffer of large examples piled up epoch after epoch."""
    def build():
        ds = ri.IterableDataset.from_generator(generator_of_arrays, gen_kwargs={"shards": [0, 1]})
        return ds.shuffle(seed=0, buffer_size=40, buffer_state=buffer_state)

    ds = build()
    it = iter(ds)
    next(it)
    state = ri.loads_state(ri.dumps_state(ds.state_dict()))  # the buffer holds numpy arrays
    del it
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for epoch in range(6):
            ds.set_epoch(epoch)
            if how == "finished":
                for _ in ds:
                    pass
            else:
                it = iter(ds)
                for _ in range(5):
                    next(it)
                del it
                if how == "loaded_over":
                    ds.load_state_dict(state)
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage if type(o).__module__.startswith("resumable_iterable")]
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()
    assert left == [], f"passes left for the cyclic garbage collector: {sorted(set(left))}"


@pytest.mark.parametrize("buffer_state", ["examples", "drop"])
def test_a_shuffle_error_note_still_names_the_row(buffer_state):
    """The error note of a map after a shuffle still works out the source row from the pass's
    draws (the trail's resolver now holds the pass weakly)."""
    def fail(ex):
        if ex["id"] == 57:
            raise RuntimeError("boom")
        return ex

    ds = src().shuffle(seed=4, buffer_size=30, buffer_state=buffer_state).map(fail)
    with pytest.raises(RuntimeError) as info:
        for _ in ds:
            pass
    note = " ".join(getattr(info.value, "__notes__", []))
    assert "row 57" in note, note


def test_shuffle_resumes_exactly_at_every_cut_after_passes_left_part_way():
    """Every cut point, with passes left part-way before the run measured."""
    from harness import assert_resumes_exactly

    def build():
        ds = src().map(lambda ex: {"y": ex["id"] % 11}).shuffle(seed=5, buffer_size=25)
        for epoch in range(3):  # passes left part-way, as a loop that breaks off leaves them
            it = iter(ds)
            next(it)
            del it
        ds.set_epoch(3)
        return ds

    assert_resumes_exactly(build, max_cuts=60)
