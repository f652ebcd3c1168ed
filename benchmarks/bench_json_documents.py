"""JSON documents (a file holding one JSON list of objects, or an object whose ``field="data"``
holds it) read by ``load_dataset("json", ..., streaming=True)``, ours beside HF's, on the same files
written by the script: the time to the first example (the reading: both read a document whole), a
whole pass, and the peak memory of a pass in a fresh process (RSS growth over the file's size), with
pandas' ``read_json`` of the list (the file parsed, no rows yielded) as a reference and the same rows
as JSON Lines for scale.

    python benchmarks/bench_json_documents.py [--rows N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

from common import HERE, Result, print_section

N_ROWS = 200_000


def write_files(folder: str, n: int) -> dict:
    """The list document, the ``field="data"`` document and JSON Lines of the same rows (~165 bytes a row:
    an int, a text, a float, a list of strings, a struct)."""
    rng = random.Random(0)
    rows = [{"id": i, "text": f"the quick brown fox {i} jumps over the lazy dog", "score": round(rng.random(), 6),
             "tags": ["a", "b", str(i % 7)], "meta": {"src": "web", "len": i % 100}} for i in range(n)]
    paths = {name: os.path.join(folder, name) for name in ("list.json", "field.json", "rows.jsonl")}
    with open(paths["list.json"], "w") as f:
        json.dump(rows, f)
    with open(paths["field.json"], "w") as f:
        json.dump({"version": "1.0", "data": rows}, f)
    with open(paths["rows.jsonl"], "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return paths


def _load(lib: str, path: str, kw: dict):
    if lib == "ours":
        import resumable_iterable as m
    else:
        import datasets as m

        m.disable_progress_bars()
    return m.load_dataset("json", data_files=path, split="train", streaming=True, **kw)


def _pass(lib: str, path: str, kw: dict) -> tuple[float, float, int]:
    """(seconds to the first example, seconds for the whole pass, examples)."""
    t0 = time.perf_counter()
    it = iter(_load(lib, path, kw))
    next(it)
    first = time.perf_counter() - t0
    n = 1 + sum(1 for _ in it)
    return first, time.perf_counter() - t0, n


def _child(lib: str, path: str, kw: dict) -> None:
    """In a fresh process: the RSS growth (MB) at the peak of a pass, printed as JSON."""
    import datasets  # noqa: F401  (both libraries imported before the baseline)
    import pandas  # noqa: F401
    import pyarrow.json  # noqa: F401

    import resumable_iterable  # noqa: F401

    def rss() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    import threading

    _pass(lib, path, kw)  # once, so that what a first pass sets up is in the baseline
    base, peak, done = rss(), [0.0], threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            peak[0] = max(peak[0], rss())

    sampler = threading.Thread(target=sample)
    sampler.start()
    _pass(lib, path, kw)
    done.set()
    sampler.join()
    print(json.dumps({"growth": max(peak[0], rss()) - base}))


def peak_growth(lib: str, path: str, kw: dict) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", lib, path, json.dumps(kw)], capture_output=True,
                         text=True, check=True, cwd=HERE,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(os.path.dirname(HERE), "src"),
                                                                          os.environ.get("PYTHONPATH", "")])})
    return json.loads(out.stdout.strip().splitlines()[-1])["growth"]


def run(n_rows: int = N_ROWS, repeats: int = 3, folder: str | None = None, memory: bool = True) -> list[Result]:
    import pandas as pd

    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        paths = write_files(tmp, n_rows)
        mb = os.path.getsize(paths["list.json"]) / 2**20
        results = []
        small = os.path.join(tmp, "small.json")
        with open(small, "w") as f:
            json.dump([{"id": 0}], f)
        for lib in ("ours", "hf"):  # imports and first-call setup out of the figures
            _pass(lib, small, {})
        t_pandas = min(_timed(lambda: pd.read_json(paths["list.json"], dtype_backend="pyarrow"))
                       for _ in range(repeats))
        for name, path, kw in (("list of objects", paths["list.json"], {}),
                               ('field="data"', paths["field.json"], {"field": "data"}),
                               ("JSON Lines, same rows", paths["rows.jsonl"], {})):
            best: dict = {}
            for _ in range(repeats):  # the libraries take turns: a busy moment does not hit one only
                for lib in ("ours", "hf"):
                    first, total, n = _pass(lib, path, kw)
                    assert n == n_rows, (lib, name, n)
                    old = best.get(lib, (float("inf"), float("inf")))
                    best[lib] = (min(old[0], first), min(old[1], total))
            (o_first, o_total), (h_first, h_total) = best["ours"], best["hf"]
            target = name != "JSON Lines, same rows"
            results.append(Result(f"{name}: to the first example", o_first * 1e3, h_first * 1e3, "ms",
                                  target=">= 1x HF" if target else "", check=f"{h_first / o_first:.2f}x",
                                  met=(h_first / o_first >= 1.0) if target else None))
            results.append(Result(f"{name}: whole pass", o_total * 1e3, h_total * 1e3, "ms",
                                  note=f"; pandas read_json of the list alone: {t_pandas * 1e3:.0f} ms"
                                  if name == "list of objects" else ""))
            if memory and target:
                o_mb, h_mb = peak_growth("ours", path, kw), peak_growth("hf", path, kw)
                results.append(Result(f"{name}: peak RSS growth of a pass", o_mb, h_mb, "MB",
                                      note=f"; the file: {mb:.0f} MB ({o_mb / mb:.1f}x ours, {h_mb / mb:.1f}x HF)"))
        return results


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=N_ROWS)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    args = ap.parse_args()
    n = 2_000 if args.quick else args.rows
    print_section(f"JSON documents: {n} rows, load_dataset('json', streaming=True)",
                  run(n, repeats=1 if args.quick else 3, memory=not args.no_memory))


if __name__ == "__main__":
    main()
