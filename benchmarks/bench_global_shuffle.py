"""Global shuffle vs shuffle buffer vs HF ``datasets``, in one run, on the same data.

Builds a HF ``Dataset`` of ``--rows`` rows ``{"id": int, "text": str}`` (200 k by default) read in
8 shards, and times full passes of:

* HF   ``to_iterable_dataset(num_shards=8).shuffle(seed, buffer_size=1000)`` (shard order + buffer)
* HF   ``Dataset.shuffle(seed)`` then ``to_iterable_dataset(num_shards=8)`` (HF's global shuffle: an
  indices mapping, materialised, O(N) memory)
* ours ``to_iterable_dataset(num_shards=8)`` plain sequential iteration
* ours ``.shuffle(seed, buffer_size=1000)`` (buffer)
* ours ``.shuffle(seed, buffer_size=None)`` (global shuffle)
* ours sequential and global shuffle again on the same dataset saved to disk and memory-mapped
  (``load_from_disk``: the usual case for real datasets; its table has one chunk per 1000 rows)

Each variant runs ``--repeats`` times, interleaved with the others so that a busy machine slows
them alike; the best pass is reported (and the median, for the noise). It also prints the size
of a mid-epoch state and the time to the first example after loading it.

Run: ``.venv/bin/python benchmarks/bench_global_shuffle.py [--rows 200000] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time


def _pass(make) -> float:
    """Examples per second of one full pass over ``make()`` (building it is not timed)."""
    ds = make()
    t0 = time.perf_counter()
    n = 0
    for _ in ds:
        n += 1
    return n / (time.perf_counter() - t0)


def _resume_cost(make, k: int) -> tuple[int, float]:
    """(JSON bytes of the state after ``k`` examples, seconds from load_state_dict to the next example)."""
    ds = make()
    it = iter(ds)
    for _ in range(k):
        next(it)
    blob = json.dumps(ds.state_dict())
    fresh = make()
    t0 = time.perf_counter()
    fresh.load_state_dict(json.loads(blob))
    next(iter(fresh))
    return len(blob), time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    import datasets
    from datasets import Dataset, load_from_disk

    import resumable_iterable as ri

    datasets.disable_progress_bars()
    n, seed = args.rows, 42
    hf = Dataset.from_dict({"id": list(range(n)), "text": [f"text {i}" for i in range(n)]})
    hf_shuffled = hf.shuffle(seed=seed)  # HF's global shuffle (built once: its cost is not in the pass)
    tmp = tempfile.TemporaryDirectory()
    hf.save_to_disk(tmp.name)
    hf_mmap = load_from_disk(tmp.name)

    variants = {
        "HF shuffle(buffer=1000)": lambda: hf.to_iterable_dataset(num_shards=8).shuffle(seed=seed, buffer_size=1000),
        "HF Dataset.shuffle() (indices)": lambda: hf_shuffled.to_iterable_dataset(num_shards=8),
        "ours sequential": lambda: ri.to_iterable_dataset(hf, num_shards=8),
        "ours shuffle(buffer=1000)": lambda: ri.to_iterable_dataset(hf, num_shards=8).shuffle(seed=seed, buffer_size=1000),
        "ours global shuffle": lambda: ri.to_iterable_dataset(hf, num_shards=8).shuffle(seed=seed, buffer_size=None),
        "ours sequential (mmap)": lambda: ri.to_iterable_dataset(hf_mmap, num_shards=8),
        "ours global shuffle (mmap)": lambda: ri.to_iterable_dataset(hf_mmap, num_shards=8).shuffle(
            seed=seed, buffer_size=None),
    }
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, make in variants.items():
            runs[name].append(_pass(make))

    print(f"{n} rows {{id: int, text: str}}, 8 shards, best of {args.repeats} passes "
          f"(python {sys.version.split()[0]}, datasets {datasets.__version__})")
    print(f"{'':34}{'best ex/s':>12}{'median ex/s':>14}")
    best = {name: max(v) for name, v in runs.items()}
    for name, v in runs.items():
        print(f"{name:34}{best[name]:>12,.0f}{statistics.median(v):>14,.0f}")

    seq, glob = best["ours sequential"], best["ours global shuffle"]
    slowdown = seq / glob
    print()
    print(f"global shuffle vs sequential (ours): {slowdown:.2f}x slower  "
          f"[target: within 2x -> {'met' if slowdown <= 2 else 'NOT met'}]")
    print(f"global shuffle vs HF shuffle(buffer=1000): {glob / best['HF shuffle(buffer=1000)']:.2f}x the throughput")
    print(f"global shuffle vs HF Dataset.shuffle() (indices): "
          f"{glob / best['HF Dataset.shuffle() (indices)']:.2f}x the throughput")
    print(f"global shuffle vs our buffer shuffle: {glob / best['ours shuffle(buffer=1000)']:.2f}x the throughput")
    mm = best["ours sequential (mmap)"] / best["ours global shuffle (mmap)"]
    print(f"memory-mapped: global shuffle vs sequential: {mm:.2f}x slower  "
          f"[target: within 2x -> {'met' if mm <= 2 else 'NOT met'}]")

    print()
    k = n // 2
    for name in ("ours shuffle(buffer=1000)", "ours global shuffle"):
        size, seconds = _resume_cost(variants[name], k)
        print(f"{name:34} state after {k} examples: {size:>8,} bytes of JSON; "
              f"load + first example: {seconds * 1e3:.1f} ms")
    del hf_mmap
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
