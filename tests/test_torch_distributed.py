"""Real multi-process runs with torch.distributed (gloo, loopback only, processes forked by
``torch.multiprocessing.start_processes``): every rank iterates its part, checkpoints; all ranks
restart from the saved states (same world size: exact continuation on every rank; another
world size through ``redistribute_states``: every remaining example exactly once across ranks).
"""

from __future__ import annotations

import datetime
import json
import os
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchdata")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from data import HF_C, src  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
              pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")]

if not dist.is_available() or not dist.is_gloo_available():  # pragma: no cover
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)


def build() -> ri.IterableDataset:
    """4 shards: split by shard for 1, 2 or 4 ranks, by example for 3 ranks."""
    a = src(4).map(lambda b: {"k": [i % 7 for i in b["id"]]}, batched=True, batch_size=4)
    b = src(4, HF_C).map(lambda ex: {"k": ex["id"] % 7})
    mix = ri.interleave_datasets([a, b], probabilities=[0.6, 0.4], seed=2,
                                 stopping_strategy="all_exhausted_without_replacement")
    return mix.shuffle(seed=5, buffer_size=7)


EVERYTHING = sorted(list(range(60)) + list(range(2000, 2040)))
HEAD = 3  # batches (or examples x 4 for dataset-level runs) each rank yields before the checkpoint


def ids(batch) -> list[int]:
    return batch["id"].tolist()


# ---------------------------------------------------------------------- what a rank does


def _part(rank: int, world: int) -> ri.IterableDataset:
    return ri.split_dataset_by_node(build(), rank=rank, world_size=world)


def _job(rank: int, world: int, job: dict) -> dict:
    kind, workers = job["kind"], job["workers"]
    if kind == "loader-save":
        full = [ids(b) for b in ri.StatefulDataLoader(_part(rank, world), batch_size=4, num_workers=workers)]
        loader = ri.StatefulDataLoader(_part(rank, world), batch_size=4, num_workers=workers)
        it = iter(loader)
        head = [ids(next(it)) for _ in range(HEAD)]
        state = json.loads(json.dumps(loader.state_dict()))
        return {"full": full, "head": head, "state": state}
    if kind == "loader-resume":
        ds = _part(rank, world)
        loader = ri.StatefulDataLoader(ds, batch_size=4, num_workers=workers)
        loader.load_state_dict(job["states"][rank])
        tail = [ids(b) for b in loader]
        ds.set_epoch(1)
        nxt = [i for b in loader for i in ids(b)]
        return {"tail": tail, "next": nxt}
    if kind == "dataset-save":
        ds = _part(rank, world)
        it = iter(ds)
        head = [next(it)["id"] for _ in range(4 * HEAD)]
        return {"head": [head], "state": json.loads(json.dumps(ds.state_dict()))}
    if kind == "dataset-resume":
        ds = _part(rank, world)
        ds.load_state_dict(job["states"][rank])
        it = iter(ds)
        if "take" not in job:
            return {"tail": [[e["id"] for e in it]]}
        head = [e["id"] for _, e in zip(range(job["take"]), it)]
        return {"head": [head], "state": json.loads(json.dumps(ds.state_dict()))}
    raise AssertionError(kind)


def _rank_main(rank: int, world: int, init_file: str, out_file: str, job: dict) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        result = _job(rank, world, job)
        gathered = [None] * world
        dist.all_gather_object(gathered, result)  # the states travel through torch.distributed
        if rank == 0:
            with open(out_file, "w") as f:
                json.dump(gathered, f)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def launch(tmp_path, world: int, job: dict) -> list[dict]:
    tag = f"{job['kind']}-{world}-{len(os.listdir(tmp_path))}"
    init_file, out_file = str(tmp_path / f"{tag}.init"), str(tmp_path / f"{tag}.json")
    mp.start_processes(_rank_main, args=(world, init_file, out_file, job), nprocs=world, join=True,
                       start_method="fork")
    with open(out_file) as f:
        return json.load(f)


def flat(batches) -> list[int]:
    return [i for b in batches for i in b]


def assert_exactly_once(heads, tails):
    got = Counter(flat(heads) + flat(tails))
    dup = sorted(i for i, c in got.items() if c > 1)
    missing = sorted(set(EVERYTHING) - set(got))
    assert not dup and not missing and sorted(got) == EVERYTHING, f"duplicated {dup[:10]}, missing {missing[:10]}"


def next_epoch_reference(world: int, workers: int) -> list[list[int]]:
    """What each rank yields in epoch 1, computed here in one process."""
    out = []
    for r in range(world):
        ds = _part(r, world)
        ds.set_epoch(1)
        out.append(flat(ids(b) for b in ri.StatefulDataLoader(ds, batch_size=4, num_workers=workers)))
    return out


# ---------------------------------------------------------------------- the tests


def test_ranks_with_dataloader_workers_checkpoint_restart_and_change_world_size(tmp_path):
    saved = launch(tmp_path, 2, {"kind": "loader-save", "workers": 2})
    states = [s["state"] for s in saved]
    heads = [b for s in saved for b in s["head"]]
    assert_exactly_once([], [b for s in saved for b in s["full"]])  # the two ranks partition the data

    # every rank restarts from its own state: each continues exactly
    resumed = launch(tmp_path, 2, {"kind": "loader-resume", "workers": 2, "states": states})
    reference = next_epoch_reference(2, 2)
    for r in range(2):
        assert saved[r]["head"] + resumed[r]["tail"] == saved[r]["full"], f"rank {r}"
        assert resumed[r]["next"] == reference[r], f"rank {r}: the epoch after the resumed one"

    # elastic across ranks (and workers): 2 ranks x 2 workers -> 1 rank x 2 workers, -> 3 ranks x 1 worker
    for new_world, workers in ((1, 2), (3, 1)):
        moved = ri.redistribute_states(states, new_world)
        assert len(moved) == new_world
        out = launch(tmp_path, new_world, {"kind": "loader-resume", "workers": workers, "states": moved})
        assert_exactly_once(heads, [b for o in out for b in o["tail"]])
        # the epoch after is an ordinary epoch for the new world size, on every rank
        assert [o["next"] for o in out] == next_epoch_reference(new_world, workers)


def test_ranks_iterating_the_dataset_move_from_one_to_two_ranks_and_back(tmp_path):
    saved = launch(tmp_path, 1, {"kind": "dataset-save", "workers": 0})
    heads = saved[0]["head"]
    moved = ri.redistribute_states([saved[0]["state"]], 2)
    out = launch(tmp_path, 2, {"kind": "dataset-resume", "workers": 0, "states": moved})
    assert_exactly_once(heads, [b for o in out for b in o["tail"]])
    # the two ranks take a checkpoint in the middle of the elastic epoch (their states are plans),
    # then the job shrinks back to one rank
    mid = launch(tmp_path, 2, {"kind": "dataset-resume", "workers": 0, "states": moved, "take": 9})
    assert all(m["state"]["format"] == "resumable_iterable.elastic_plan" for m in mid)
    heads = heads + [b for m in mid for b in m["head"]]
    back = ri.redistribute_states([m["state"] for m in mid], 1)
    out = launch(tmp_path, 1, {"kind": "dataset-resume", "workers": 0, "states": back})
    assert_exactly_once(heads, out[0]["tail"])
