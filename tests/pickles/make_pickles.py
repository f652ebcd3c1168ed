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


def main(commit):
    out = []
    for name, ds in cases():
        full = [plain(x) for x in ds]
        cut = len(full) // 3
        it = iter(ds)
        for _ in range(cut):
            next(it)
        state = json.loads(json.dumps(ds.state_dict()))
        loaded = pickle.loads(pickle.dumps(ds))
        loaded.load_state_dict(state)  # a dataset pickled with a loaded state
        resumed = pickle.loads(pickle.dumps(ds))
        resumed.load_state_dict(state)
        tail = [plain(x) for x in resumed]  # the rest of full, except where the state drops the buffer
        out.append({"name": name, "dataset": pickle.dumps(ds), "loaded": pickle.dumps(loaded), "full": full,
                    "state": state, "tail": tail})
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"datasets_{commit}.pkl")
    with open(path, "wb") as f:
        pickle.dump(out, f)
    print(path)


if __name__ == "__main__":
    main(sys.argv[1])
