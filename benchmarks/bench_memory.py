"""Peak memory of a ``shuffle(buffer_size=10_000)`` pipeline against holding 10 000 examples.

Each measure runs in a fresh subprocess for a clean RSS: the child builds the 200 k-row table
straight in Arrow (no Python objects to free and leave behind), warms up the code path on a tiny
pipeline, then records its RSS as the baseline and

* ``pipeline``: iterates ``source -> shuffle(10 000)`` to the end, sampling RSS every 500
  examples, and reports the peak growth over the baseline;
* ``list``: materialises the first 10 000 examples of the source as a Python list and reports
  the growth (the memory the buffer's examples need anyway);
* ``hf``: the ``pipeline`` measure for HF ``datasets`` (on a prefix of the stream).

The examples are ``{"id": int, "text": str}`` with a text of about 1 KB (see ``TEXT_REPEAT``).

    python benchmarks/bench_memory.py
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from common import N_ROWS, NUM_SHARDS, Result, print_section

HERE = os.path.dirname(os.path.abspath(__file__))
BUFFER = 10_000
# the text of each example is repeated to ~1 KB (a realistic size): with 50-byte examples, 10 k
# examples weigh ~3 MB, within the noise of RSS (memory freed before the baseline is reused first)
TEXT_REPEAT = 20
SAMPLE_EVERY = 500


def _trim() -> None:
    """Give the C heap's free pages back to the OS (glibc ``malloc_trim``), so that memory freed
    before the baseline shows up as growth again when it is reused."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the measure is just noisier
        pass


def _child(mode: str, n_rows: int, buffer: int, hf_limit: int, repeat: int = 1) -> dict:
    import gc
    import itertools

    import numpy as np
    import psutil
    import pyarrow as pa
    import pyarrow.compute as pc
    from datasets import Dataset
    from datasets.table import InMemoryTable

    import resumable_iterable as ri

    proc = psutil.Process()

    def rss() -> int:
        return proc.memory_info().rss

    ids = pa.array(np.arange(n_rows, dtype="int64"))
    text = pc.binary_join_element_wise("the quick brown fox ", pc.cast(ids, pa.string()), " jumps over the lazy dog. ", "")
    if repeat > 1:
        text = pc.binary_repeat(text, repeat)
    hf_ds = Dataset(InMemoryTable(pa.table({"id": ids, "text": text})))
    shards = min(NUM_SHARDS, n_rows)

    def build(n_buffer: int):
        if mode == "hf":
            return hf_ds.to_iterable_dataset(num_shards=shards).shuffle(seed=42, buffer_size=n_buffer)
        return ri.to_iterable_dataset(hf_ds, num_shards=shards).shuffle(seed=42, buffer_size=n_buffer)

    # warm up the code path (imports, caches, RNG) on a tiny run, then take the baseline; the
    # warm-up is kept short: the memory it frees stays in the allocator's pools and would hide
    # part of the growth measured next
    for _ in itertools.islice(build(10), 50):
        pass
    gc.collect()
    _trim()
    base = peak = rss()

    if mode == "list":
        held = list(itertools.islice(iter(ri.to_iterable_dataset(hf_ds, num_shards=shards)), buffer))
        gc.collect()
        peak = max(peak, rss())
        n = len(held)
    else:
        n = 0
        limit = hf_limit if mode == "hf" else None
        for _ in itertools.islice(iter(build(buffer)), limit):
            n += 1
            if n % SAMPLE_EVERY == 0:
                peak = max(peak, rss())
        peak = max(peak, rss())
    return {"mode": mode, "growth_mb": (peak - base) / 2**20, "examples": n}


def measure(mode: str, n_rows: int = N_ROWS, buffer: int = BUFFER, hf_limit: int = 40_000, repeat: int = TEXT_REPEAT) -> dict:
    """Run one measure in a fresh interpreter; returns ``{"growth_mb", "examples"}``."""
    code = (f"import sys; sys.path[:0] = [{HERE!r}]; import json, bench_memory; "
            f"print(json.dumps(bench_memory._child({mode!r}, {n_rows}, {buffer}, {hf_limit}, {repeat})))")
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(HERE), "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"memory measure {mode!r} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(n_rows: int = N_ROWS, buffer: int = BUFFER, with_hf: bool = True, hf_limit: int = 40_000,
        repeat: int = TEXT_REPEAT) -> list[Result]:
    held = measure("list", n_rows, buffer, repeat=repeat)
    pipe = measure("pipeline", n_rows, buffer, repeat=repeat)
    hf = measure("hf", n_rows, buffer, hf_limit, repeat=repeat) if with_hf else None
    ratio = pipe["growth_mb"] / held["growth_mb"] if held["growth_mb"] > 0 else float("inf")
    label = f"{buffer // 1000}k" if buffer >= 1000 else str(buffer)
    return [
        Result(f"RSS: {label} examples held in a list", held["growth_mb"], None, "MB",
               note="growth of RSS while materialising them, fresh subprocess"),
        Result(f"RSS: shuffle({label}) pipeline, peak", pipe["growth_mb"], hf["growth_mb"] if hf else None, "MB",
               target=f"≤ 1.5x holding {label} examples", check=f"{ratio:.2f}x", met=ratio <= 1.5,
               note=f"peak growth over {pipe['examples']} examples (HF: {hf['examples'] if hf else '-'}), "
                    f"sampled every {SAMPLE_EVERY}; {ratio:.2f}x the list"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=N_ROWS)
    ap.add_argument("--buffer", type=int, default=BUFFER)
    args = ap.parse_args()
    print_section("memory", run(n_rows=args.rows, buffer=args.buffer))


if __name__ == "__main__":
    main()
