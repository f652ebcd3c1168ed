"""Large list columns of an Arrow source, formatted as numpy, side by side with HF in one run.

Each row holds ``x``: a list of ``--width`` float32 values (65 536 by default: 256 KB, like an
embedding or a waveform stored as a list column of an HF ``Dataset``), read with
``with_format("numpy")`` in one process:

* the plain source;
* after ``shuffle(buffer_size=100)``;
* after ``interleave_datasets`` of two such sources.

No target: this measures a known gap (noted at the end of the session that added it). HF keeps
these rows on its Arrow path down to the numpy formatter; ours turns each row into Python lists
for the shuffle buffer and the interleave (``SourceNode.rows_of``), then back into numpy arrays
(``nodes/format_values.ArrowRowValues``).

    python benchmarks/bench_arrow_lists.py [--rows N] [--width W] [--repeats R] [--quick]
"""

from __future__ import annotations

from common import Result, arg_parser, print_section, time_iteration

N_ROWS = 400
WIDTH = 65_536


def make_dataset(n: int, width: int):
    """A HF map-style ``Dataset`` of ``n`` rows ``{"id": int64, "x": width float32}``."""
    import numpy as np
    from datasets import Dataset, Features, List, Value

    features = Features({"id": Value("int64"), "x": List(Value("float32"))})
    return Dataset.from_dict({"id": np.arange(n), "x": np.zeros((n, width), np.float32)}, features=features)


def run(n_rows: int = N_ROWS, width: int = WIDTH, repeats: int = 2) -> list[Result]:
    import datasets

    import resumable_iterable as ri

    hf = make_dataset(n_rows, width)

    def ours(kind: str):
        src = lambda: ri.to_iterable_dataset(hf, num_shards=2)  # noqa: E731
        return {"plain": src, "shuffle": lambda: src().shuffle(seed=0, buffer_size=100),
                "interleave": lambda: ri.interleave_datasets([src(), src()], seed=0)}[kind]().with_format("numpy")

    def theirs(kind: str):
        src = lambda: hf.to_iterable_dataset(num_shards=2)  # noqa: E731
        return {"plain": src, "shuffle": lambda: src().shuffle(seed=0, buffer_size=100),
                "interleave": lambda: datasets.interleave_datasets([src(), src()], seed=0)}[kind]().with_format("numpy")

    results = []
    for kind in ("plain", "shuffle", "interleave"):
        t_ours, n_ours = time_iteration(lambda: ours(kind), repeats=repeats)
        t_hf, n_hf = time_iteration(lambda: theirs(kind), repeats=repeats)
        results.append(Result(f"numpy rows of {width}-float lists, {kind}", n_ours / t_ours, n_hf / t_hf, "ex/s",
                              note=f"{n_ours} vs {n_hf} examples, one process"))
    return results


def main() -> None:
    ap = arg_parser(__doc__, repeats=2)
    ap.set_defaults(rows=N_ROWS)
    ap.add_argument("--width", type=int, default=WIDTH, help="float32 values per row")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check that it runs")
    args = ap.parse_args()
    n, width = (40, 1_024) if args.quick else (args.rows, args.width)
    print_section(f"large list columns of an Arrow source, numpy format: {n} rows of {width} float32",
                  run(n_rows=n, width=width, repeats=args.repeats))


if __name__ == "__main__":
    main()
