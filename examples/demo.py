"""Demo: checkpoint a pipeline mid-way, crash (SIGKILL), resume in a new process, prove the
continuation identical to an uninterrupted run - and show what HF `datasets` loses meanwhile.

Run with `make demo` (sets everything up first) or `python examples/demo.py`.
"""

from __future__ import annotations

import json
from collections import Counter
import os
import signal
import subprocess
import sys
import tempfile

import datasets
from datasets import Dataset

import resumable_iterable as ri

N = 20_000
CRASH_AFTER = 137  # batches


def build():
    hf = Dataset.from_dict({"id": list(range(N)), "text": [f"example {i}" for i in range(N)]})
    extra = Dataset.from_dict({"id": list(range(N, N + 5_000)), "text": [f"extra {i}" for i in range(5_000)]})
    a = ri.to_iterable_dataset(hf, num_shards=8).map(lambda ex: {"n_chars": len(ex["text"])})
    a = a.filter(lambda ex: ex["id"] % 7 != 0)
    b = ri.to_iterable_dataset(extra, num_shards=2)
    mix = ri.interleave_datasets([a, b], probabilities=[0.8, 0.2], seed=0, stopping_strategy="all_exhausted")
    return mix.shuffle(seed=42, buffer_size=1000).batch(32)


def ids(batches):
    return [i for b in batches for i in b["id"]]


def child(state_path: str, out_path: str) -> None:
    """Iterate, saving the state after every batch; SIGKILL ourselves after CRASH_AFTER batches."""
    ds = build()
    seen = []
    for n, batch in enumerate(ds, 1):
        seen.extend(batch["id"])
        ds.save_state(state_path)
        with open(out_path, "w") as f:
            json.dump(seen, f)
        if n == CRASH_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)


def buffered(state: dict) -> int:
    """Examples held by the shuffle buffer in a saved state (kept in chunks: lists of examples)."""
    return sum(len(chunk) for chunk in state["state"]["children"][0]["buffer"])


def hf_loss() -> int:
    """The same shuffle in HF datasets: how many examples does a resume lose?"""
    datasets.logging.set_verbosity_error()  # HF warns that it refills the buffer: we count what that costs
    hf = Dataset.from_dict({"id": list(range(N))})
    ds = hf.to_iterable_dataset(num_shards=8).shuffle(seed=42, buffer_size=1000)
    it = iter(ds)
    head = [next(it)["id"] for _ in range(5_000)]
    state = ds.state_dict()
    ds2 = hf.to_iterable_dataset(num_shards=8).shuffle(seed=42, buffer_size=1000)
    ds2.load_state_dict(state)
    tail = [e["id"] for e in ds2]
    return N - len(set(head) | set(tail))


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return 0
    tmp = tempfile.mkdtemp()
    state_path, out_path = os.path.join(tmp, "state.json"), os.path.join(tmp, "seen.json")
    print(f"1. uninterrupted run of map -> filter -> interleave -> shuffle(1000) -> batch(32) over {N + 5000} rows")
    full = ids(build())
    print(f"   {len(full)} examples")
    print(f"2. a training process saves the state after every batch and is killed (SIGKILL) after {CRASH_AFTER} batches")
    proc = subprocess.run([sys.executable, __file__, "--child", state_path, out_path])
    print(f"   process exit code {proc.returncode} (killed: {proc.returncode == -signal.SIGKILL})")
    with open(out_path) as f:
        before = json.load(f)
    state = ri.load_state(state_path)
    size = os.path.getsize(state_path)
    print(f"   it had yielded {len(before)} examples; last state file: {size / 1024:.0f} KiB "
          f"({buffered(state)} buffered examples kept)")
    print("3. a new process builds the same pipeline, loads the state and continues")
    ds = build()
    ds.load_state_dict(state)
    after = ids(ds)
    resumed = before + after
    same = resumed == full
    print(f"   resumed run: {len(before)} + {len(after)} = {len(resumed)} examples")
    print(f"   identical to the uninterrupted run, same order: {same}")
    diff_full, diff_resumed = Counter(full) - Counter(resumed), Counter(resumed) - Counter(full)
    print(f"   examples lost: {sum(diff_full.values())}, examples repeated: {sum(diff_resumed.values())}")
    lost = hf_loss()
    print(f"4. for comparison, HF datasets {datasets.__version__} with shuffle(buffer_size=1000) "
          f"loses {lost} of {N} examples when resumed after 5000", flush=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
