"""Throughput through ``torchdata.stateful_dataloader.StatefulDataLoader`` (2 workers, batches of
32): the same pipelines as ``bench_throughput.py``, HF ``datasets`` and ``resumable_iterable`` each
handed to the loader as-is. The loader asks every worker for its dataset's ``state_dict()`` after
every batch (its default ``snapshot_every_n_steps=1``), so this also times state capture. Two of
ours run again with the dataset's handoff turned off (``small_tensors_by_value = False``: each
batch's tensors cross through shared memory, as any other dataset's), to show what it gives.

    python benchmarks/bench_dataloader.py [--rows N] [--repeats R]
"""

from __future__ import annotations

from common import (N_ROWS, NUM_SHARDS, PIPELINES, Result, arg_parser, make_hf_dataset, print_section,
                    time_iteration)

NAMES = ["plain iteration", "per-example map", "shuffle(buffer 1000)", "shuffle(buffer 1000), buffer_state='drop'",
         "map+filter+interleave+shuffle"]
# the loader pickles every worker's state_dict() after every batch: our exact state sends the
# shuffle buffer's changes since the last batch (each example about once; see
# bench_loader_shuffle.py), HF's leaves the buffer out. This variant leaves it out too
# (buffer_state="drop", lossy like HF) to compare the same work; HF runs its usual shuffle.
VARIANTS = {
    "shuffle(buffer 1000), buffer_state='drop'": (
        lambda m, ds, ds_b: ds.shuffle(seed=42, buffer_size=1000, buffer_state="drop"),
        PIPELINES["shuffle(buffer 1000)"]),
}
# the loader itself tops out at a few 10 k ex/s with batches of 32 on this machine, so both
# libraries are timed on the same prefix of each stream (examples)
LIMITS = {
    "plain iteration": 48_000,
    "per-example map": 32_000,
    "shuffle(buffer 1000)": 32_000,
    "shuffle(buffer 1000), buffer_state='drop'": 32_000,
    "map+filter+interleave+shuffle": 12_000,
}
NOTES = {
    "shuffle(buffer 1000)": "; our per-batch state sends the buffer's changes (HF's leaves the buffer out)",
    "map+filter+interleave+shuffle": "; our per-batch state sends the buffer's changes (HF's leaves the buffer out)",
    "shuffle(buffer 1000), buffer_state='drop'": "; HF runs its usual shuffle(buffer 1000)",
}
BATCH_SIZE = 32
WORKERS = 2
# pipelines also run with our handoff turned off (ds.session.small_tensors_by_value = False)
OWN_PATH = ("plain iteration", "map+filter+interleave+shuffle")


def rows_dataset(rows: list):
    """The loader's own ceiling: a torch ``IterableDataset`` over a Python list of ready-made
    examples, split among workers by index - no dataset library involved."""
    import torch.utils.data

    class Rows(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            k, n = (info.id, info.num_workers) if info is not None else (0, 1)
            return iter(rows[k::n])

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    return Rows()


def loader_rate(make_ds, limit: int | None, repeats: int = 1) -> tuple[float, int]:
    """Examples per second through a ``StatefulDataLoader`` (best of ``repeats``), counting the
    examples of up to ``limit // BATCH_SIZE`` batches."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    batches = None if limit is None else max(1, limit // BATCH_SIZE)
    best, examples = float("inf"), 0
    for _ in range(repeats):
        counted = [0]

        def stream():
            for b in StatefulDataLoader(make_ds(), batch_size=BATCH_SIZE, num_workers=WORKERS):
                counted[0] += len(b["id"])  # the last batch of a worker may be short
                yield b

        dt, _ = time_iteration(stream, limit=batches, repeats=1)
        if dt < best:
            best, examples = dt, counted[0]
    return examples / best, examples


def run(n_rows: int = N_ROWS, repeats: int = 1, scale: float = 1.0, hf_ds=None, hf_ds_b=None,
        names: list[str] | None = None) -> list[Result]:
    import torch  # noqa: F401 - import first: our IterableDataset then derives from torch's
    import datasets

    import resumable_iterable as ri

    hf_ds = hf_ds if hf_ds is not None else make_hf_dataset(n_rows)
    hf_ds_b = hf_ds_b if hf_ds_b is not None else make_hf_dataset(n_rows, offset=10 * n_rows)
    shards = min(NUM_SHARDS, len(hf_ds))
    limit_of = {name: max(BATCH_SIZE, int(n * scale)) for name, n in LIMITS.items()}

    ceiling_rows = hf_ds.select(range(min(len(hf_ds), limit_of["plain iteration"]))).to_list()
    rate, n = loader_rate(lambda: rows_dataset(ceiling_rows), None, repeats)
    results = [Result("loader alone (Python list of examples)", rate, None, "ex/s",
                      note=f"the ceiling of the loader itself: {n} ready-made examples")]
    for name in names or NAMES:
        ours_pipe, hf_pipe = VARIANTS.get(name, (PIPELINES.get(name), PIPELINES.get(name)))
        limit = limit_of[name]
        rate, n = loader_rate(lambda: ours_pipe(ri, ri.to_iterable_dataset(hf_ds, num_shards=shards),
                                                ri.to_iterable_dataset(hf_ds_b, num_shards=shards)), limit, repeats)
        hf_rate, hn = loader_rate(lambda: hf_pipe(datasets, hf_ds.to_iterable_dataset(num_shards=shards),
                                                  hf_ds_b.to_iterable_dataset(num_shards=shards)), limit, repeats)
        results.append(Result(f"{name}, StatefulDataLoader", rate, hf_rate, "ex/s",
                              note=f"{n} examples each" + NOTES.get(name, "")))
        if name in OWN_PATH:  # ours again, the handoff turned off: what it gives, in the same run
            def own_path():
                ds = ours_pipe(ri, ri.to_iterable_dataset(hf_ds, num_shards=shards),
                               ri.to_iterable_dataset(hf_ds_b, num_shards=shards))
                ds.session.small_tensors_by_value = False
                return ds

            off, _ = loader_rate(own_path, limit, repeats)
            results.append(Result(f"{name}, ours: small tensors by value vs torch's own path", rate, off, "ex/s",
                                  ref_label="ours, torch's own path",
                                  note="in a worker our dicts hand their small tensors to the main process by value "
                                       "(docs/torch.md); turned off, each batch's id tensor crosses through shared memory"))
    return results


def main() -> None:
    args = arg_parser(__doc__, repeats=1).parse_args()
    print_section(f"StatefulDataLoader ({WORKERS} workers, batch {BATCH_SIZE}), {args.rows} rows in {NUM_SHARDS} shards",
                  run(n_rows=args.rows, repeats=args.repeats))


if __name__ == "__main__":
    main()
