"""Writes ``datasets_<commit>.pkl``: datasets pickled by the code of one commit, with what they
yield, a state taken part-way and what it resumes with, for ``tests/test_pickles.py``, which unpickles them with the
current code (classes moved between modules must still unpickle, states still load).

Run it with the tree of that commit: ``git archive <commit> | tar -x -C /tmp/old`` then
``PYTHONPATH=/tmp/old/src python tests/pickles/make_pickles.py <commit>``."""

import json
import os
import pickle
import sys

import numpy as np
from datasets import Dataset, DatasetInfo, Features, Value

import resumable_iterable as ri


def plain(x):
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [plain(v) for v in x]
    return x.item() if isinstance(x, np.generic) else x


def with_length(ex):
    return {"n": len(ex["t"])}


def even(ex, i):
    return i % 2 == 0


def doubled(batch):
    return {"id": [i for i in batch["id"] for _ in range(2)], "t": [t for t in batch["t"] for _ in range(2)]}


def small(batch):
    return [i < 20 for i in batch["id"]]


def cases():
    cols = {"id": list(range(30)), "t": [f"row {i}" for i in range(30)]}
    typed = Features({"id": Value("int64"), "t": Value("string")})
    info = DatasetInfo(description="a pickled dataset", citation="none")
    base = ri.IterableDataset.from_dict(cols)
    yield "cast+shuffle+batch", base.cast(typed).shuffle(seed=3, buffer_size=7).batch(4)
    yield "replay shuffle", base.shuffle(seed=5, buffer_size=6, buffer_state="replay")
    yield "drop shuffle", base.shuffle(seed=2, buffer_size=5, buffer_state="drop").select_columns(["id"])
    yield "info+format", ri.IterableDataset.from_hf(Dataset.from_dict(cols, info=info, split="train")).with_format("numpy")
    yield "decode+columns", base.rename_column("t", "text").decode(False).shuffle(seed=1, buffer_size=4).take(20)
    # an elastic plan loaded (2 ranks -> 3): the dataset holds the node that runs its segments
    sharded = ri.IterableDataset.from_dict(cols, num_shards=4).shuffle(seed=1, buffer_size=3)
    states = []
    for r in range(2):
        part = ri.split_dataset_by_node(sharded, r, 2)
        it = iter(part)
        for _ in range(4):
            next(it)
        states.append(json.loads(json.dumps(part.state_dict())))
    planned = ri.split_dataset_by_node(sharded, 0, 3)
    planned.load_state_dict(ri.redistribute_states(states, 3)[0])
    yield "elastic plan loaded", planned
    # maps and filters, per example and batched: their passes are mixins of MapNode
    yield "map+filter", base.map(with_length).filter(even, with_indices=True)
    yield "batched map mid-batch", base.map(doubled, batched=True, batch_size=4)
    yield "batched map keeping its rows", base.shuffle(seed=4, buffer_size=8).map(doubled, batched=True, batch_size=5)
    yield "batched filter", base.filter(small, batched=True, batch_size=3)


def main(commit):
    out = []
    for name, ds in cases():
        blob = pickle.dumps(ds)  # before it is iterated
        full = [plain(x) for x in pickle.loads(blob)]
        cut = len(full) // 3
        part = pickle.loads(blob)
        it = iter(part)
        for _ in range(cut):
            next(it)
        state = json.loads(json.dumps(part.state_dict()))
        loaded = pickle.loads(blob)
        loaded.load_state_dict(state)  # a dataset pickled with a loaded state
        resumed = pickle.loads(blob)
        resumed.load_state_dict(state)
        tail = [plain(x) for x in resumed]  # the rest of full, except where the state drops the buffer
        out.append({"name": name, "dataset": blob, "loaded": pickle.dumps(loaded), "full": full,
                    "state": state, "tail": tail})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"datasets_{commit}.pkl")
    with open(path, "wb") as f:
        pickle.dump(out, f)
    print(path)


if __name__ == "__main__":
    import make_pickles  # the functions the maps call are pickled as make_pickles's, which the test imports

    make_pickles.main(sys.argv[1])
