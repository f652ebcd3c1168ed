"""Peak memory of a ``shuffle(buffer_size=10_000)`` pipeline against holding 10 000 examples.

Each measure runs in a fresh subprocess for a clean RSS: the child builds the 200 k-row table
straight in Arrow (no Python objects to free and leave behind) and reads it through the same
Arrow source as ``to_iterable_dataset`` without importing HF ``datasets`` (whose import leaves
megabytes of freed memory that later allocations would reuse unseen), warms up the code path on
a tiny pipeline, fills the allocators' free lists with a ballast of examples and returns the C
heap's free pages to the OS (so that RSS sees every new allocation), records RSS as the
baseline and

* ``pipeline``: iterates ``source -> shuffle(10 000)`` to the end, sampling RSS every 500
  examples, and reports the peak growth over the baseline;
* ``list``: materialises the first 10 000 examples of the source as a Python list and reports
  the growth (the memory the buffer's examples need anyway);

The examples are ``{"id": int, "text": str}`` with a text of about 1 KB (see ``TEXT_REPEAT``).

    python benchmarks/bench_memory.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from common import N_ROWS, NUM_SHARDS, Result, arg_parser, print_section

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


def _child(mode: str, n_rows: int, buffer: int, repeat: int = 1) -> dict:
    import gc
    import itertools

    import numpy as np
    import psutil
    import pyarrow as pa
    import pyarrow.compute as pc

    import resumable_iterable as ri  # without HF `datasets`: far fewer freed objects at the baseline

    proc = psutil.Process()

    def rss() -> int:
        return proc.memory_info().rss

    ids = pa.array(np.arange(n_rows, dtype="int64"))
    text = pc.binary_join_element_wise("the quick brown fox ", pc.cast(ids, pa.string()), " jumps over the lazy dog. ", "")
    if repeat > 1:
        text = pc.binary_repeat(text, repeat)
    table = pa.table({"id": ids, "text": text})  # the same ArrowSource as `to_iterable_dataset`
    shards = min(NUM_SHARDS, n_rows)

    def source():
        return ri.IterableDataset.from_arrow_table(table, num_shards=shards)

    # warm up the code path (imports, caches, RNG) on a tiny run
    for _ in itertools.islice(iter(source().shuffle(seed=42, buffer_size=10)), 50):
        pass
    # memory freed so far (imports, the warm-up) sits in the allocators' free lists and would be
    # reused unseen by RSS: fill it with a ballast of examples made the same way (the first shard
    # of another copy of the table, read to its end so that no half-read chunk is freed), kept
    # alive to the end, and give the C heap's free pages back to the OS
    ballast = list(ri.IterableDataset.from_arrow_table(table, num_shards=shards).take(n_rows // shards))
    gc.collect()
    _trim()
    base = peak = rss()

    if mode == "list":
        held = list(itertools.islice(iter(source()), buffer))
        gc.collect()
        peak = max(peak, rss())
        n = len(held)
    else:
        n = 0
        for _ in source().shuffle(seed=42, buffer_size=buffer):
            n += 1
            if n % SAMPLE_EVERY == 0:
                peak = max(peak, rss())
        peak = max(peak, rss())
    del ballast
    return {"mode": mode, "growth_mb": (peak - base) / 2**20, "examples": n}


def measure(mode: str, n_rows: int = N_ROWS, buffer: int = BUFFER, repeat: int = TEXT_REPEAT) -> dict:
    """Run one measure in a fresh interpreter; returns ``{"growth_mb", "examples"}``."""
    code = (f"import sys; sys.path[:0] = [{HERE!r}]; import json, bench_memory; "
            f"print(json.dumps(bench_memory._child({mode!r}, {n_rows}, {buffer}, {repeat})))")
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(HERE), "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"memory measure {mode!r} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(n_rows: int = N_ROWS, buffer: int = BUFFER, repeat: int = TEXT_REPEAT, label: str = " (1 KB text)") -> list[Result]:
    held = measure("list", n_rows, buffer, repeat=repeat)
    pipe = measure("pipeline", n_rows, buffer, repeat=repeat)
    ratio = pipe["growth_mb"] / held["growth_mb"] if held["growth_mb"] > 0 else float("inf")
    size = f"{buffer // 1000}k" if buffer >= 1000 else str(buffer)
    return [
        Result(f"RSS: {size} examples held in a list{label}", held["growth_mb"], None, "MB",
               note="RSS growth while materialising them (fresh subprocess)"),
        Result(f"RSS: shuffle({size}) pipeline, peak{label}", pipe["growth_mb"], None, "MB",
               target=f"≤ 1.5x holding {size} examples", check=f"{ratio:.2f}x", met=ratio <= 1.5,
               note=f"peak RSS growth over a whole pass ({pipe['examples']} examples, sampled every "
                    f"{SAMPLE_EVERY}); {ratio:.2f}x the list"),
    ]


def main() -> None:
    ap = arg_parser(__doc__)
    ap.add_argument("--buffer", type=int, default=BUFFER)
    ap.add_argument("--text-repeat", type=int, default=TEXT_REPEAT)
    args = ap.parse_args()
    label = " (50-byte text)" if args.text_repeat == 1 else f" (text x{args.text_repeat})"
    print_section("memory", run(n_rows=args.rows, buffer=args.buffer, repeat=args.text_repeat, label=label))


if __name__ == "__main__":
    main()
