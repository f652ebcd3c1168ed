"""Throughput, one process: the same pipelines over the same 200 k-row ``Dataset`` (8 shards),
built with HF ``datasets`` and with ``resumable_iterable``, plus raw pyarrow as the ceiling.

    python benchmarks/bench_throughput.py [--rows N] [--repeats R]
"""

from __future__ import annotations

from common import (N_ROWS, NUM_SHARDS, PIPELINES, Result, arg_parser, make_hf_dataset, print_section,
                    time_iteration)

# HF's per-example paths run at 3-60 k ex/s: HF is timed on a prefix of each stream (examples
# yielded), we on the whole stream. Throughput does not depend on the prefix length.
HF_LIMITS = {
    "plain iteration": 60_000,
    "per-example map": 25_000,
    "filter": 20_000,
    "shuffle(buffer 1000)": 25_000,
    "batched map": None,  # the whole stream
    "map+filter+interleave+shuffle": 8_000,
}

# minimum speed-up over HF per pipeline (None: informative only)
TARGETS = {
    "plain iteration": (10.0, "≥ 10x HF (aim 20x)"),
    "per-example map": (3.0, "≥ 3x HF"),
    "filter": (3.0, "≥ 3x HF"),
    "shuffle(buffer 1000)": (3.0, "≥ 3x HF"),
    "batched map": (1.0, "≥ 1x HF"),
    "map+filter+interleave+shuffle": (None, ""),
}


def raw_pyarrow_rate(hf_ds, repeats: int = 3, chunk: int = 1024) -> float:
    """Rows per second of ``RecordBatch.to_pylist`` over the dataset's table, every row visited."""
    table = hf_ds.data.table

    def rows():
        for rb in table.to_batches(max_chunksize=chunk):
            yield from rb.to_pylist()

    dt, n = time_iteration(rows, repeats=repeats)
    return n / dt


def run(n_rows: int = N_ROWS, repeats: int = 3, hf_scale: float = 1.0, hf_ds=None, hf_ds_b=None,
        names: list[str] | None = None) -> list[Result]:
    import datasets

    import resumable_iterable as ri

    hf_ds = hf_ds if hf_ds is not None else make_hf_dataset(n_rows)
    hf_ds_b = hf_ds_b if hf_ds_b is not None else make_hf_dataset(n_rows, offset=10 * n_rows)
    shards = min(NUM_SHARDS, len(hf_ds))

    def ours(pipe):
        return lambda: pipe(ri, ri.to_iterable_dataset(hf_ds, num_shards=shards),
                            ri.to_iterable_dataset(hf_ds_b, num_shards=shards))

    def theirs(pipe):
        return lambda: pipe(datasets, hf_ds.to_iterable_dataset(num_shards=shards),
                            hf_ds_b.to_iterable_dataset(num_shards=shards))

    results = []
    plain_rate = None
    for name, pipe in PIPELINES.items():
        if names is not None and name not in names:
            continue
        dt, n = time_iteration(ours(pipe), repeats=repeats)
        our_rate = n / dt
        limit = HF_LIMITS[name]
        if limit is not None:
            limit = max(1, int(limit * hf_scale))
        hdt, hn = time_iteration(theirs(pipe), limit=limit, repeats=repeats)
        hf_rate = hn / hdt
        minimum, text = TARGETS[name]
        r = Result(name, our_rate, hf_rate, "ex/s", target=text, note=f"ours: {n} examples, HF: {hn}")
        if minimum is not None:
            r.check = f"{r.speedup:.1f}x"
            r.met = r.speedup >= minimum
        results.append(r)
        if name == "plain iteration":
            plain_rate = our_rate

    if plain_rate is not None:
        ceiling = raw_pyarrow_rate(hf_ds, repeats=repeats)
        frac = plain_rate / ceiling
        results.append(Result("plain iteration vs raw pyarrow", plain_rate, ceiling, "ex/s",
                              target="≥ 0.4x RecordBatch.to_pylist", check=f"{frac:.2f}x", met=frac >= 0.4,
                              ref_label="pyarrow"))
    return results


def main() -> None:
    args = arg_parser(__doc__, repeats=3).parse_args()
    print_section(f"throughput, {args.rows} rows in {NUM_SHARDS} shards, one process",
                  run(n_rows=args.rows, repeats=args.repeats))


if __name__ == "__main__":
    main()
