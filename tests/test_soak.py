"""Soak: a long run through a mixed pipeline, checkpointed every few hundred batches, "crashed"
at random moments and resumed from a random earlier checkpoint, again and again. The output
kept across all the resumes must equal the uninterrupted run, example for example.

The pipeline: an HF dataset (8 shards) -> map -> filter, interleaved with a pyarrow table
(4 shards) with probabilities and ``all_exhausted_without_replacement`` (every example exactly
once), -> shuffle(buffer_size=1000) -> batches of 64. Three drivers:

* torchdata ``StatefulDataLoader`` with 2 workers, replay-mode shuffle buffer;
* the dataset itself (``num_workers=0``-style, ``state_dict()`` per batch), stored buffer;
* the same with a replay-mode buffer.

CI runs each on about 100 k examples (a few seconds); ``pytest --soak -m slow`` runs 1 M
examples each with more resumes. Every checkpoint goes through JSON, as a trainer would save it.
"""

from __future__ import annotations

import json
import random
import time

import numpy as np
import pyarrow as pa
import pytest
from datasets import Dataset

import resumable_iterable as ri

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]

BATCH = 64


def kept_by_filter(n: int) -> int:
    """How many of the ids 0..n-1 the filter keeps (it drops id % 10 == 3)."""
    return n - (n + 6) // 10


def sizes(total: int) -> tuple[int, int]:
    """Rows of the two sources so that the pipeline yields exactly ``total`` examples."""
    n_a = int(total * 0.6 / 0.9)
    return n_a, total - kept_by_filter(n_a)


_CACHE: dict = {}


def sources(total: int):
    if total not in _CACHE:
        n_a, n_b = sizes(total)
        a = Dataset.from_dict({"id": np.arange(n_a), "text": [f"a{i}" for i in range(n_a)]})
        b = pa.table({"id": np.arange(10**8, 10**8 + n_b), "text": [f"b{i}" for i in range(n_b)]})
        _CACHE[total] = (a, b)
    return _CACHE[total]


def triple(ex):
    return {"y": ex["id"] * 3 % 1000}


def keep(ex):
    return ex["id"] % 10 != 3


def build(total: int, mode: str) -> ri.IterableDataset:
    a, b = sources(total)
    left = ri.to_iterable_dataset(a, num_shards=8).map(triple).filter(keep)
    right = ri.IterableDataset.from_arrow_table(b, num_shards=4)
    mixed = ri.interleave_datasets([left, right], probabilities=[0.6, 0.4], seed=7,
                                   stopping_strategy="all_exhausted_without_replacement")
    return mixed.shuffle(seed=1, buffer_size=1000, buffer_state=mode)


def collate(rows: list[dict]) -> np.ndarray:
    """The ids of a batch; also checks, in the worker, that each example went through the map."""
    for r in rows:
        if r["id"] < 10**8 and r.get("y") != r["id"] * 3 % 1000:
            raise AssertionError(f"example {r} did not go through the map")
    return np.fromiter((r["id"] for r in rows), dtype=np.int64, count=len(rows))


class Loader:
    """The two ways a trainer iterates: StatefulDataLoader with workers, or the dataset itself."""

    def __init__(self, total: int, mode: str, workers: int):
        self.total, self.mode, self.workers = total, mode, workers

    def start(self, state: str | None):
        ds = build(self.total, self.mode)
        if self.workers:
            from torchdata.stateful_dataloader import StatefulDataLoader

            loader = StatefulDataLoader(ds, batch_size=BATCH, num_workers=self.workers, collate_fn=collate)
            if state is not None:
                loader.load_state_dict(json.loads(state))
            return loader, iter(loader), lambda: json.dumps(loader.state_dict())
        if state is not None:
            ds.load_state_dict(json.loads(state))
        it = iter(ds)

        def batches():
            while True:
                rows = [r for _, r in zip(range(BATCH), it)]
                if not rows:
                    return
                yield collate(rows)

        return ds, batches(), lambda: json.dumps(ds.state_dict())


def run_soak(total: int, mode: str, workers: int, every: int, seed: int) -> dict:
    """Run to the end through random crashes; return the figures."""
    rng = random.Random(seed)
    loader = Loader(total, mode, workers)
    t0 = time.perf_counter()
    _, it, _ = loader.start(None)
    reference_batches = list(it)  # with workers, each worker's last batch may be partial
    reference = np.concatenate(reference_batches)
    t_ref = time.perf_counter() - t0
    n_batches = len(reference_batches)
    kept: list[np.ndarray] = []  # output batches the trainer has consumed and kept
    checkpoints = [(0, None)]  # (batches kept, state JSON)
    resumes = states = 0
    state_bytes = 0
    t0 = time.perf_counter()
    while True:
        pos, state = checkpoints[-1] if resumes == 0 else rng.choice(checkpoints[-4:])
        if resumes:
            del kept[pos:]  # the work after that checkpoint is lost with the crash
            checkpoints = [c for c in checkpoints if c[0] <= pos]
        _, it, snapshot = loader.start(state)
        crash_after = rng.randint(every // 2, 5 * every)
        finished = True
        for step, batch in enumerate(it, start=1):
            kept.append(batch)
            if len(kept) % every == 0:
                text = snapshot()
                states += 1
                state_bytes = max(state_bytes, len(text))
                checkpoints.append((len(kept), text))
            if step == crash_after:
                finished = False
                break
        del it
        if finished:
            break
        resumes += 1
    got = np.concatenate(kept) if kept else np.zeros(0, np.int64)
    assert len(got) == len(reference) and len(kept) == n_batches, (len(got), len(reference), len(kept), n_batches)
    mismatch = np.flatnonzero(got != reference)
    assert mismatch.size == 0, f"first difference at example {mismatch[0]}"
    assert np.unique(reference).size == len(reference) == total
    return {"examples": len(reference), "resumes": resumes, "checkpoints": states, "max_state_kB": state_bytes / 1e3,
            "reference_s": t_ref, "soak_s": time.perf_counter() - t0}


@pytest.mark.parametrize("workers,mode", [pytest.param(2, "replay", marks=pytest.mark.torch), (0, "examples"),
                                          (0, "replay")])
def test_soak_resume_from_random_checkpoints(soak, workers, mode, capsys):
    if workers:
        pytest.importorskip("torch")
        pytest.importorskip("torchdata")
    total = 1_000_000 if soak else (60_000 if workers else 100_000)
    every = 200 if soak else 60
    figures = run_soak(total, mode, workers, every=every, seed=total + workers)
    with capsys.disabled():
        print(f"\n[soak] workers={workers} buffer_state={mode}: {figures['examples']} examples, {figures['resumes']} "
              f"resumes from random checkpoints ({figures['checkpoints']} checkpoints, state <= "
              f"{figures['max_state_kB']:.0f} kB), reference run {figures['reference_s']:.1f} s, soak "
              f"{figures['soak_s']:.1f} s: output identical")
    assert figures["resumes"] >= (20 if soak else 4)
