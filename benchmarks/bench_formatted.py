"""Formatted batches through ``torchdata.stateful_dataloader.StatefulDataLoader`` (2 workers, batches
of 32), side by side in one run:

* **column-wise** - ``ri.to_iterable_dataset(hf).with_format("numpy").batch(32)`` handed to the
  loader with ``batch_size=None``: each batch is a slice of the Arrow table turned into numpy
  arrays, no Python dict per example; and the same with ``with_format("torch")``, whose tensors
  share one storage per batch (the loader moves one shared-memory block per batch, not one per
  column);
* **the loader alone** - ready-made batches, as tensors in one storage and as three numpy arrays
  (torch's own path turns each array into a tensor with its own shared-memory block), and the
  numpy batches as the dataset's dicts travel (``WorkerDict``, below): the ceilings;
* **per-example dicts** - ``ri.to_iterable_dataset(hf)`` with the loader's ``batch_size=32``: the
  loader's ``default_collate`` builds every batch from 32 Python dicts;
* **torch's own path** - the numpy batches and the per-example dicts again with the dataset's
  handoff turned off (``ds.session.small_tensors_by_value = False``): in a DataLoader worker the
  dataset hands each dict out as a ``WorkerDict``, whose small tensors the worker's queue sends by
  value (``integrations/torch/transport.py``); turned off, every tensor crosses through a
  shared-memory segment of its own, as any other dataset's;
* **HF** - ``hf.to_iterable_dataset().with_format("numpy")`` with ``batch_size=32`` (HF's usual
  way), and HF's own ``with_format("numpy").batch(32)`` with ``batch_size=None``;
* and, without a loader, formatted examples (``with_format("numpy" | "torch")``, no batching) in one
  process, ours and HF's.

Each runs through torchdata's loader; the numpy batches, the per-example dicts and the numpy ceiling
also through ``ri.StatefulDataLoader``, which sends the small tensors of any batch inside the
worker's message (its ``collate_fn`` wrapper). The target is taken in torchdata's loader, as the
issue set it. Now that the per-example dicts' 18 tensors per batch travel by value there too, the
per-example path runs at half the loader's own ceiling, so no batch can be 5x faster than it: the
rows against torch's own path show what the handoff gave each side.

The loader takes every worker's ``state_dict()`` after every batch, so state capture is timed too.
On Linux the script also prints where torchdata's loader spends its time: the CPU per batch of the
main process and of the workers (from ``/proc``) for the numpy batches, the ready-made batches and the
per-example dicts, and what one more numpy array per batch costs (benchmarks/README.md reads them).
The rows are ``{"id": int64, "label": int64, "x": 16 float32}`` (a small feature vector).

    python benchmarks/bench_formatted.py [--rows N] [--repeats R] [--quick]
"""

from __future__ import annotations

import os
import time

from common import NUM_SHARDS, Result, arg_parser, loader_class, print_section, time_iteration

BATCH_SIZE = 32
WORKERS = 2
N_ROWS = 200_000
# examples timed per variant: the per-example paths are slow, so they are timed on a prefix
LIMITS = {"column-wise": 200_000, "per-example": 32_000, "hf-rows": 16_000, "hf-batch": 32_000, "hf-torch": 32_000}
TARGET = 5.0  # column-wise >= 5x per-example dicts


def make_dataset(n: int):
    """A HF map-style ``Dataset`` of ``n`` rows ``{"id", "label", "x": 16 float32}``."""
    import numpy as np
    from datasets import Dataset, Features, List, Value

    rng = np.random.default_rng(0)
    features = Features({"id": Value("int64"), "label": Value("int64"), "x": List(Value("float32"), length=16)})
    return Dataset.from_dict({"id": np.arange(n), "label": rng.integers(0, 10, n),
                              "x": rng.random((n, 16), dtype=np.float32)}, features=features)


def ready_batches(n_batches: int, arrays: bool = False, handed_off: bool = False):
    """The loader's own ceiling here: a torch ``IterableDataset`` yielding ready-made batches of tensors
    shaped like this data, split among workers; each batch fresh, its three tensors in one new storage
    (the cheapest layout for torch's own path) - or, with ``arrays``, three numpy arrays (which torch's
    own path turns into a tensor of its own storage each), as plain dicts or, with ``handed_off``, as
    the ``WorkerDict`` our datasets hand out in a worker (their small tensors then travel by value)."""
    import numpy as np
    import torch
    import torch.utils.data

    from resumable_iterable.integrations.torch.transport import WorkerDict

    kind = WorkerDict if handed_off else dict

    class Ready(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            k, n = (info.id, info.num_workers) if info is not None else (0, 1)
            ids, x = torch.arange(BATCH_SIZE, dtype=torch.float32), torch.rand(BATCH_SIZE, 16)
            for _ in range(k, n_batches, n):
                if arrays:
                    yield kind(id=np.arange(BATCH_SIZE), label=np.arange(BATCH_SIZE), x=x.numpy().copy())
                    continue
                buf = torch.empty(BATCH_SIZE * 18)
                buf[:BATCH_SIZE] = ids
                buf[BATCH_SIZE:2 * BATCH_SIZE] = ids
                buf[2 * BATCH_SIZE:] = x.ravel()
                yield {"id": buf[:BATCH_SIZE], "label": buf[BATCH_SIZE:2 * BATCH_SIZE],
                       "x": buf[2 * BATCH_SIZE:].view(BATCH_SIZE, 16)}

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    return Ready()


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) a process has used so far, from ``/proc`` (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loader_rate(make_ds, batch_size: int | None, limit: int, repeats: int = 1, loader: str = "torchdata",
                cpu: dict | None = None) -> tuple[float, int]:
    """Examples per second through a ``StatefulDataLoader`` (torchdata's, or ours with ``loader="ri"``;
    best of ``repeats``), counting the examples of up to ``limit // BATCH_SIZE`` batches;
    ``batch_size=None`` when the dataset yields batches. With ``cpu`` (a dict, Linux), also the CPU
    time per batch of the main process (``cpu["main"]``) and of the workers together
    (``cpu["workers"]``), in µs, from the first batch to the last of the best run."""
    make_loader = loader_class(loader)
    batches = max(1, limit // BATCH_SIZE)
    best, examples = float("inf"), 0
    track = cpu is not None and os.path.exists(f"/proc/{os.getpid()}/stat")
    for _ in range(repeats):
        counted, used = [0], {}

        def stream():
            it = iter(make_loader(make_ds(), batch_size=batch_size, num_workers=WORKERS))
            pids = [w.pid for w in getattr(it, "_workers", ())] if track else []
            n, start = 0, None
            for b in it:
                counted[0] += len(b["id"])
                n += 1
                if pids and (n == 1 or n == batches):
                    try:
                        now = (time.process_time(), sum(_cpu_seconds(p) for p in pids))
                    except OSError:  # a worker that finished its shards may be gone: no figure
                        pids, now = [], None
                    if now is not None and start is None:
                        start = now
                    elif now is not None and n > 1:
                        used.update(main=(now[0] - start[0]) / (n - 1) * 1e6,
                                    workers=(now[1] - start[1]) / (n - 1) * 1e6)
                yield b

        dt, _ = time_iteration(stream, limit=batches, repeats=1)
        if dt < best:
            best, examples = dt, counted[0]
            if track:
                cpu.clear()
                cpu.update(used)
    return examples / best, examples


def run(n_rows: int = N_ROWS, repeats: int = 1, scale: float = 1.0, hf_ds=None) -> list[Result]:
    import torch  # noqa: F401 - import first: our IterableDataset then derives from torch's

    import resumable_iterable as ri

    hf = hf_ds if hf_ds is not None else make_dataset(n_rows)
    shards = min(NUM_SHARDS, len(hf))
    limit = {k: max(BATCH_SIZE, min(len(hf), int(v * scale))) for k, v in LIMITS.items()}

    def ours(fmt: str | None = None, by_value: bool = True):
        ds = ri.to_iterable_dataset(hf, num_shards=shards)
        ds = ds.with_format(fmt).batch(BATCH_SIZE) if fmt else ds
        ds.session.small_tensors_by_value = by_value  # False: torch's own path, as any other dataset's
        return ds

    cpu = {k: {} for k in ("ready", "ready-np", "ready-np-bv", "col", "rows")}  # CPU per batch, main and workers
    n_ready_batches = limit["column-wise"] // BATCH_SIZE
    ceiling, n_ready = loader_rate(lambda: ready_batches(n_ready_batches), None, limit["column-wise"], repeats,
                                   cpu=cpu["ready"])
    ceiling_np, _ = loader_rate(lambda: ready_batches(n_ready_batches, arrays=True), None,
                                limit["column-wise"], repeats, cpu=cpu["ready-np"])
    ceiling_np_bv, _ = loader_rate(lambda: ready_batches(n_ready_batches, arrays=True, handed_off=True), None,
                                   limit["column-wise"], repeats, cpu=cpu["ready-np-bv"])
    col, n_col = loader_rate(lambda: ours("numpy"), None, limit["column-wise"], repeats, cpu=cpu["col"])
    col_t, n_col_t = loader_rate(lambda: ours("torch"), None, limit["column-wise"], repeats)
    hf_torch, n_hft = loader_rate(lambda: hf.to_iterable_dataset(num_shards=shards).with_format("torch")
                                  .batch(BATCH_SIZE), None, limit["hf-torch"], repeats)
    rows, n_rows_ = loader_rate(ours, BATCH_SIZE, limit["per-example"], repeats, cpu=cpu["rows"])
    col_off, _ = loader_rate(lambda: ours("numpy", by_value=False), None, limit["column-wise"], repeats)
    rows_off, n_rows_off = loader_rate(lambda: ours(by_value=False), BATCH_SIZE, limit["per-example"] // 4, repeats)
    hf_rows, n_hf = loader_rate(lambda: hf.to_iterable_dataset(num_shards=shards).with_format("numpy"), BATCH_SIZE,
                                limit["hf-rows"], repeats)
    hf_batch, n_hfb = loader_rate(lambda: hf.to_iterable_dataset(num_shards=shards).with_format("numpy").batch(BATCH_SIZE),
                                  None, limit["hf-batch"], repeats)
    ceiling_np_ri, _ = loader_rate(lambda: ready_batches(n_ready_batches, arrays=True), None,
                                   limit["column-wise"], repeats, loader="ri")
    col_ri, n_col_ri = loader_rate(lambda: ours("numpy"), None, limit["column-wise"], repeats, loader="ri")
    rows_ri, n_rows_ri = loader_rate(ours, BATCH_SIZE, limit["per-example"], repeats, loader="ri")
    ratio = col / rows
    in_process = []
    for fmt in ("numpy", "torch"):  # formatted examples, no loader
        dt, got = time_iteration(lambda: ri.to_iterable_dataset(hf, num_shards=shards).with_format(fmt),
                                 limit["column-wise"], repeats)
        hdt, hgot = time_iteration(lambda: hf.to_iterable_dataset(num_shards=shards).with_format(fmt),
                                   limit["hf-rows"] // 4, repeats)
        in_process.append(Result(f"with_format('{fmt}') examples, one process", got / dt, hgot / hdt, "ex/s",
                                 note=f"ours: {got} examples, HF: {hgot}"))
    return [
        Result("loader alone (ready-made tensor batches, one storage)", ceiling, None, "ex/s",
               note=f"torch's own path with batch_size=None: {n_ready} examples"),
        Result("loader alone (ready-made numpy batches, three arrays)", ceiling_np, None, "ex/s",
               note=f"torch's own path: one shared-memory storage per array; "
                    f"{ceiling_np / rows_off:.1f}x per-example dicts on torch's own path"),
        Result("loader alone (ready-made numpy batches, handed off as our datasets' dicts)", ceiling_np_bv, ceiling_np,
               "ex/s", ref_label="torch's own path",
               note=f"WorkerDict: small tensors by value; {ceiling_np_bv / rows:.1f}x our per-example dicts"),
        Result("loader alone, ri.StatefulDataLoader (ready-made numpy batches)", ceiling_np_ri, ceiling_np, "ex/s",
               ref_label="torchdata's loader, torch's own path",
               note="small tensors inside the worker's message (the loader's collate_fn wrapper)"),
        Result("column-wise numpy batches vs per-example dicts + collate", col, rows, "ex/s",
               target=f">= {TARGET:.0f}x per-example dicts", check=f"{ratio:.1f}x", met=ratio >= TARGET,
               ref_label="ours, per-example dicts",
               note=f"{n_col} vs {n_rows_} examples; with_format('numpy').batch(32), loader batch_size=None; both "
                    f"handed off (small tensors by value); the per-example dicts run at "
                    f"{rows / ceiling_np_bv:.0%} of the loader's ceiling above"),
        Result("column-wise torch batches vs per-example dicts + collate", col_t, rows, "ex/s",
               target=f">= {TARGET:.0f}x per-example dicts", check=f"{col_t / rows:.1f}x", met=col_t >= TARGET * rows,
               ref_label="ours, per-example dicts",
               note=f"{n_col_t} examples; with_format('torch').batch(32): one storage per batch"),
        Result("column-wise numpy batches, handed off vs torch's own path", col, col_off, "ex/s",
               ref_label="torch's own path", note="three shared-memory segments per batch on torch's own path"),
        Result("per-example dicts + collate, handed off vs torch's own path", rows, rows_off, "ex/s",
               ref_label="torch's own path", note=f"{n_rows_off} examples on torch's own path: default_collate makes 16 "
                                                  "tensors of the list column x, plus id and label: 18 segments per batch"),
        Result("column-wise numpy batches vs per-example dicts, both on torch's own path", col_off, rows_off, "ex/s",
               ref_label="per-example dicts", note="the comparison before the handoff (2026-11-26 and earlier)"),
        Result("column-wise numpy batches vs per-example dicts + collate, both in ri.StatefulDataLoader", col_ri,
               rows_ri, "ex/s", ref_label="ours, per-example dicts", note=f"{n_col_ri} vs {n_rows_ri} examples"),
        Result("column-wise numpy batches, ri.StatefulDataLoader vs torchdata's", col_ri, col, "ex/s",
               ref_label="torchdata's loader"),
        Result("per-example dicts + collate, ri.StatefulDataLoader vs torchdata's", rows_ri, rows, "ex/s",
               ref_label="torchdata's loader"),
        Result("column-wise torch batches vs HF with_format('torch').batch(32)", col_t, hf_torch, "ex/s",
               note=f"HF: {n_hft} examples, loader batch_size=None"),
        Result("column-wise numpy batches vs HF with_format('numpy') + collate", col, hf_rows, "ex/s",
               note=f"HF: {n_hf} examples, numpy rows collated by the loader (batch_size=32)"),
        Result("column-wise numpy batches vs HF with_format('numpy').batch(32)", col, hf_batch, "ex/s",
               note=f"HF: {n_hfb} examples, loader batch_size=None"),
        Result("per-example dicts + collate vs HF with_format('numpy') + collate", rows, hf_rows, "ex/s"),
        *in_process,
        *cpu_results(cpu),
    ]


def cpu_results(cpu: dict) -> list[Result]:
    """Where the time of torchdata's loader goes: CPU per batch of the main process and of the two
    workers together, for numpy batches beside ready-made ones (handed off, and on torch's own path),
    the per-example dicts, and what one more numpy array per batch costs on torch's own path (three
    arrays against the same three tensors in one storage).
    Empty where it was not measured (not Linux, or too few batches)."""
    if not all(c.keys() == {"main", "workers"} for c in cpu.values()):
        return []

    def total(c: dict) -> float:
        return c["main"] + c["workers"]

    def split(c: dict) -> str:
        return f"main process {c['main']:.0f} µs + workers {c['workers']:.0f} µs"

    ready, ready_np, ready_bv, col, rows = cpu["ready"], cpu["ready-np"], cpu["ready-np-bv"], cpu["col"], cpu["rows"]
    per_array = {k: max(0.0, (ready_np[k] - ready[k]) / 2) for k in ("main", "workers")}
    return [
        Result("CPU per batch, torchdata's loader: column-wise numpy batches", total(col), total(ready_bv), "µs",
               ref_label="ready-made numpy batches, handed off", note=f"{split(col)}; ready-made: {split(ready_bv)}"),
        Result("CPU per batch, torchdata's loader: ready-made numpy batches, torch's own path", total(ready_np),
               total(ready_bv), "µs", ref_label="handed off", note=split(ready_np)),
        Result("CPU per batch, torchdata's loader: ready-made tensor batches, one storage", total(ready), None, "µs",
               note=split(ready)),
        Result("CPU per numpy array per batch, torchdata's loader, torch's own path", total(per_array), None, "µs",
               note=f"(three arrays - one storage) / 2: {split(per_array)}: a shared-memory segment, "
                    f"its fd handed over a new authenticated socket connection"),
        Result("CPU per batch, torchdata's loader: per-example dicts + collate (18 tensors, handed off)", total(rows),
               None, "µs", note=split(rows)),
    ]


def main() -> None:
    ap = arg_parser(__doc__, repeats=1)
    ap.set_defaults(rows=N_ROWS)
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check that it runs")
    args = ap.parse_args()
    n = 4_000 if args.quick else args.rows
    results = run(n_rows=n, repeats=args.repeats, scale=0.02 if args.quick else 1.0)
    print_section(f"formatted batches through StatefulDataLoader ({WORKERS} workers, batch {BATCH_SIZE}), "
                  f"{n} rows in {NUM_SHARDS} shards", results)


if __name__ == "__main__":
    main()
