"""Shared pieces of the side-by-side benchmarks: the data, the timers, the result rows.

Every benchmark builds the *same* data and the *same* pipeline with HF ``datasets`` and with
``resumable_iterable`` in one process and reports the ratio ours / HF. HF's per-example paths are
slow, so HF may be timed on a prefix of the stream (``hf_rows``): throughputs are reported in
examples per second, which does not depend on how many examples were timed.

Timings on a shared 2-core machine are noisy: each figure is the best of ``repeats`` runs, taken
the same way for both libraries.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import platform
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
if SRC not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, SRC)

N_ROWS = 200_000
NUM_SHARDS = 8


def loader_class(loader: str) -> type:
    """The ``StatefulDataLoader`` a benchmark runs: torchdata's (``"torchdata"``) or ours (``"ri"``,
    which sends small tensors by value)."""
    if loader == "ri":
        import resumable_iterable as ri

        return ri.StatefulDataLoader
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader


def text_of(i: int) -> str:
    return f"the quick brown fox {i} jumps over the lazy dog"


def make_hf_dataset(n: int = N_ROWS, offset: int = 0):
    """A HF map-style ``Dataset`` of ``n`` rows ``{"id": int, "text": str}`` held in memory."""
    from datasets import Dataset

    ids = list(range(offset, offset + n))
    return Dataset.from_dict({"id": ids, "text": [text_of(i) for i in ids]})


# ---------------------------------------------------------------------------------- the pipelines
# Identical functions for both libraries: each pipeline is written once against the shared API
# (`m` is the module: `datasets` or `resumable_iterable`).


def example_fn(ex: dict) -> dict:
    return {"n": len(ex["text"])}


def keep_fn(ex: dict) -> bool:
    return ex["id"] % 3 != 0


def batch_fn(batch: dict) -> dict:
    return {"n": [len(t) for t in batch["text"]]}


def other_fn(ex: dict) -> dict:
    return {"n": -ex["id"]}


def pipe_plain(m: Any, ds: Any, ds_b: Any) -> Any:
    return ds


def pipe_map(m: Any, ds: Any, ds_b: Any) -> Any:
    return ds.map(example_fn)


def pipe_filter(m: Any, ds: Any, ds_b: Any) -> Any:
    return ds.filter(keep_fn)


def pipe_shuffle(m: Any, ds: Any, ds_b: Any) -> Any:
    return ds.shuffle(seed=42, buffer_size=1000)


def pipe_batched_map(m: Any, ds: Any, ds_b: Any) -> Any:
    return ds.map(batch_fn, batched=True, batch_size=1000)


def pipe_mix(m: Any, ds: Any, ds_b: Any) -> Any:
    a = ds.map(example_fn).filter(keep_fn)
    b = ds_b.map(other_fn)
    return m.interleave_datasets([a, b], probabilities=[0.5, 0.5], seed=0).shuffle(seed=42, buffer_size=1000)


PIPELINES: dict[str, Callable] = {
    "plain iteration": pipe_plain,
    "per-example map": pipe_map,
    "filter": pipe_filter,
    "shuffle(buffer 1000)": pipe_shuffle,
    "batched map": pipe_batched_map,
    "map+filter+interleave+shuffle": pipe_mix,
}


# ---------------------------------------------------------------------------------- timing


def time_iteration(make: Callable[[], Iterable], limit: int | None = None, repeats: int = 3) -> tuple[float, int]:
    """Best wall time (seconds) over ``repeats`` runs of building ``make()`` and pulling up to
    ``limit`` items from it; returns ``(seconds, items)``."""
    best, count = float("inf"), 0
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        it = iter(make())
        if limit is not None:
            it = itertools.islice(it, limit)
        n = 0
        for _ in it:
            n += 1
        dt = time.perf_counter() - t0
        if dt < best:
            best, count = dt, n
    return best, count


def time_call(fn: Callable[[], Any], number: int, repeats: int = 5) -> float:
    """Best mean time (seconds) of one call of ``fn`` over ``repeats`` batches of ``number`` calls."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


# ---------------------------------------------------------------------------------- results


@dataclass
class Result:
    """One line of the table.

    ``speedup`` is how much faster we are than the reference (HF unless ``ref_label`` says
    otherwise): ours / theirs for throughputs, theirs / ours for times. ``check`` is the measured
    quantity the target is about (it may be a ratio between two of our own figures).
    """

    name: str
    ours: float
    ref: float | None  # HF's figure (or ``ref_label``'s); None: no counterpart
    unit: str  # "ex/s", "µs", "ms", "MB"
    target: str = ""
    check: str = ""
    met: bool | None = None  # None: informative line, no target
    ref_label: str = ""
    note: str = ""

    @property
    def speedup(self) -> float | None:
        if self.ref is None or self.ref <= 0 or self.ours <= 0:
            return None
        if self.unit == "ex/s":
            return self.ours / self.ref
        return self.ref / self.ours


def fmt_value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ex/s":
        if v >= 1e6:
            return f"{v / 1e6:.2f} M ex/s"
        return f"{v / 1e3:.1f} k ex/s"
    if unit in ("µs", "ms"):
        return f"{v:.0f} {unit}" if v >= 100 else (f"{v:.1f} {unit}" if v >= 10 else f"{v:.2f} {unit}")
    if unit == "MB":
        return f"{v:.1f} MB"
    return f"{v:.3g} {unit}"


def fmt_ratio(r: float | None) -> str:
    if r is None:
        return "-"
    return f"{r:.0f}x" if r >= 100 else (f"{r:.1f}x" if r >= 10 else f"{r:.2f}x")


def status(met: bool | None) -> str:
    return "" if met is None else ("MET" if met else "NOT MET")


HEAD = ["benchmark", "resumable_iterable", "HF datasets", "speed-up", "target", "measured", "status"]


def _row(r: Result) -> list[str]:
    ref = fmt_value(r.ref, r.unit) + (f" ({r.ref_label})" if r.ref_label and r.ref is not None else "")
    return [r.name, fmt_value(r.ours, r.unit), ref, fmt_ratio(r.speedup), r.target, r.check, status(r.met)]


def table(results: list[Result], markdown: bool = False) -> str:
    """The results as a fixed-width text table, or a Markdown table."""
    rows = [_row(r) for r in results]
    notes = [(r.name, r.note) for r in results if r.note]
    if markdown:
        lines = ["| " + " | ".join(HEAD) + " |", "|---|---:|---:|---:|---|---:|---|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        if notes:
            lines += [""] + [f"- *{name}*: {note}" for name, note in notes]
        return "\n".join(lines)
    widths = [max(len(x) for x in col) for col in zip(HEAD, *rows)]
    out = ["  ".join(h.ljust(w) for h, w in zip(HEAD, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    if notes:
        out += ["", "notes:"] + [f"  {name}: {note}" for name, note in notes]
    return "\n".join(out)


def environment() -> str:
    import datasets
    import pyarrow

    parts = [f"Python {platform.python_version()}", f"datasets {datasets.__version__}",
             f"pyarrow {pyarrow.__version__}"]
    for mod in ("torch", "torchdata"):
        try:
            parts.append(f"{mod} {__import__(mod).__version__}")
        except ImportError:
            pass
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        if names:
            cpu = names[0]
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), {platform.system()}; " + ", ".join(parts)


def arg_parser(doc: str, repeats: int | None = None) -> argparse.ArgumentParser:
    """The command line of a benchmark script: ``--rows N``, and ``--repeats R`` if ``repeats`` (its
    default) is given."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=N_ROWS)
    if repeats is not None:
        ap.add_argument("--repeats", type=int, default=repeats)
    return ap


def print_section(title: str, results: list[Result]) -> None:
    print(f"\n== {title}")
    print(table(results))
    sys.stdout.flush()
