"""torchdata's ``StatefulDataLoader`` state keys are spelled once, in ``loader/loader_state.py``:
they equal torchdata's own constants, and reading them imports no torchdata (the CLI needs none)."""

from __future__ import annotations

import os
import pathlib

import pytest
from fresh import run_fresh

from resumable_iterable.loader import loader_state as keys

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"


def test_the_keys_are_torchdatas():
    sdl = pytest.importorskip("torchdata.stateful_dataloader.stateful_dataloader")
    from torchdata.stateful_dataloader import incremental_state

    single = sdl._StatefulSingleProcessDataLoaderIter
    multi = sdl._StatefulMultiProcessingDataLoaderIter
    theirs = {
        "INDEX_SAMPLER_STATE": sdl._INDEX_SAMPLER_STATE, "SAMPLER_ITER_STATE": sdl._SAMPLER_ITER_STATE,
        "SAMPLER_ITER_YIELDED": sdl._SAMPLER_ITER_YIELDED, "ITERABLEDATASET_LEN_CALLED": sdl._ITERABLEDATASET_LEN_CALLED,
        "SHARED_SEED": sdl._SHARED_SEED, "ITERATOR_FINISHED": sdl._ITERATOR_FINISHED,
        "NUM_YIELDED": single._NUM_YIELDED,
        "SNAPSHOT": multi._SNAPSHOT, "MAIN_SNAPSHOT": multi._MAIN_SNAPSHOT, "WORKER_SNAPSHOTS": multi._WORKER_SNAPSHOTS,
        "SNAPSHOT_STEP": multi._SNAPSHOT_STEP, "STEPS_SINCE_SNAPSHOT": multi._STEPS_SINCE_SNAPSHOT,
        "LAST_YIELDED_WORKER_ID": multi._LAST_YIELDED_WORKER_ID, "NUM_WORKERS": multi._NUM_WORKERS,
        "BASE_SEED": multi._BASE_SEED,
        "WORKER_ID": incremental_state._WORKER_ID, "FETCHER_STATE": incremental_state._FETCHER_STATE,
        "FETCHER_ENDED": incremental_state._FETCHER_ENDED, "DATASET_STATE": incremental_state._DATASET_STATE,
        "DATASET_ITER_STATE": incremental_state._DATASET_ITER_STATE,
    }
    assert {name: getattr(keys, name) for name in theirs} == theirs
    assert keys.worker_key(3) == multi._worker_key(None, 3)


def test_the_keys_are_those_of_a_real_loader_state():
    loader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader(list(range(8)), batch_size=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert {keys.NUM_YIELDED, keys.FETCHER_STATE, keys.ITERATOR_FINISHED, keys.SAMPLER_ITER_YIELDED} <= set(state)
    assert keys.loader_num_workers(state) == 0


def test_reading_loader_states_imports_no_torchdata():
    code = ("import sys, resumable_iterable.cli, resumable_iterable.loader.loader_state as k; "
            "k.loader_num_workers({k.NUM_YIELDED: 0}); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torchdata')); "
            "assert not bad, bad")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    run_fresh(code, env=env)
