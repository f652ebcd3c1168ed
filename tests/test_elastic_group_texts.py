"""Found by a realistic-user sweep (pre-training recipe: tokenize -> group_texts, resumed with more
DataLoader workers). An elastic resume into more workers than saved segments carves the segment's
untouched shards off into fresh segments; a batched map above the source then sees other batches
(a batch of the saved run spans the cut shard boundary, or the fresh segment's own shuffle buffer
mixes other rows), and a function whose output depends on its batch (HF's ``group_texts``) yields
other blocks than the saved run would have: some blocks of the rest of the epoch are never yielded,
others that the saved run would never have yielded are, and tokens are dropped differently."""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata")

from datasets import Dataset  # noqa: E402

import resumable_iterable as ri  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.set_vital. is deprecated")]

BLOCK = 8


def _tokenize(ex):
    return {"input_ids": [(ex["id"] * 7 + j) % 1000 for j in range(1 + ex["id"] % 11)]}


def _group_texts(batch):
    concat = sum(batch["input_ids"], [])
    n = (len(concat) // BLOCK) * BLOCK
    return {"input_ids": [concat[i:i + BLOCK] for i in range(0, n, BLOCK)]}


def _build(shuffle: bool):
    hf = Dataset.from_dict({"id": list(range(180))})
    ds = ri.to_iterable_dataset(hf, num_shards=3).map(_tokenize, remove_columns=["id"])
    if shuffle:
        ds = ds.shuffle(seed=11, buffer_size=40)
    return ds.map(_group_texts, batched=True, batch_size=32).with_format("torch")


def _blocks(batches):
    return [tuple(r) for b in batches for r in b["input_ids"].tolist()]


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("old,new", [(0, 2), (1, 2)])
def test_elastic_resume_into_more_workers_keeps_the_blocks_of_a_grouping_batched_map(shuffle, old, new):
    full = list(ri.StatefulDataLoader(_build(shuffle), batch_size=4, num_workers=old))
    loader = ri.StatefulDataLoader(_build(shuffle), batch_size=4, num_workers=old)
    head = []
    for b in loader:
        head.append(b)
        if len(head) == 3:
            break
    state = json.loads(json.dumps(loader.state_dict()))
    del loader
    resumed = ri.StatefulDataLoader(_build(shuffle), batch_size=4, num_workers=new)
    resumed.load_state_dict(state)
    tail = list(resumed)
    got, want = Counter(_blocks(head + tail)), Counter(_blocks(full))
    assert got == want, f"{sum((want - got).values())} blocks never yielded, {sum((got - want).values())} not of the saved run"
