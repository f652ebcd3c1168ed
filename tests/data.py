"""Small datasets the tests build for themselves."""

from __future__ import annotations

from datasets import Dataset

import resumable_iterable as ri


def hf_dataset(n: int = 60, offset: int = 0) -> Dataset:
    return Dataset.from_dict({"id": list(range(offset, offset + n)), "text": [f"t{i}" for i in range(offset, offset + n)]})


HF = hf_dataset(60)
HF_B = hf_dataset(25, offset=1000)
HF_C = hf_dataset(40, offset=2000)


def src(n_shards: int = 4, hf: Dataset = HF) -> ri.IterableDataset:
    return ri.to_iterable_dataset(hf, num_shards=n_shards)


def gen_rows(shard_ids, n=10):
    for s in shard_ids:
        for i in range(n):
            yield {"id": s * 100 + i, "text": f"g{s}-{i}"}


def gen_src(n_shards: int = 3, n: int = 10) -> ri.IterableDataset:
    return ri.IterableDataset.from_generator(gen_rows, gen_kwargs={"shard_ids": list(range(n_shards)), "n": n})
