"""Lists of numbers from Arrow sources under ``with_format("numpy" | "torch")``, beside HF in one run.

The rows of an HF ``Dataset`` (``to_iterable_dataset``) below a ``shuffle`` or an
``interleave_datasets``, read with a tensor format - what a training loop over tokenized text,
embeddings or waveforms stored as list columns does:

* ``x``: 65 536 float32 per row (256 KB, an embedding or waveform stored as a list), numpy and
  torch, the plain source, after ``shuffle(100)`` and after ``interleave_datasets``, in one process;
* token ids: ``input_ids`` 2 048 int32 and ``attention_mask`` 2 048 int8 per row, after
  ``shuffle(1000)``, numpy and torch, as rows and as the dataset's ``batch(32)``, in one process;
* through torchdata's ``StatefulDataLoader`` with 2 workers: the 256 KB rows ``interleave ->
  shuffle(300)`` with ``"torch"``, batch 16 (our exact shuffle, our ``"drop"``, HF's), and the
  token ids ``shuffle(1000)``, batch 32.

Ours reads such lists into numpy arrays where only the formatter sees the rows
(``nodes/rows.large_list_arrays``) and makes HF's arrays and tensors of Python lists at once
(``nodes/format_rows.py``); HF keeps the rows on its Arrow path. No target (informative).

    python benchmarks/bench_arrow_lists.py [--rows N] [--width W] [--repeats R] [--quick] [--no-loader]
"""

from __future__ import annotations

from common import Result, arg_parser, print_section, time_iteration

N_ROWS = 400
WIDTH = 65_536
TOKENS = 2_048
TOKEN_ROWS = 4_000


def make_dataset(n: int, width: int):
    """A HF map-style ``Dataset`` of ``n`` rows ``{"id": int64, "x": width float32}``."""
    import numpy as np
    from datasets import Dataset, Features, List, Value

    features = Features({"id": Value("int64"), "x": List(Value("float32"))})
    return Dataset.from_dict({"id": np.arange(n), "x": np.zeros((n, width), np.float32)}, features=features)


def make_tokens(n: int, tokens: int):
    """A HF ``Dataset`` of ``n`` tokenized rows: ``input_ids`` (int32) and ``attention_mask`` (int8)."""
    import numpy as np
    from datasets import Dataset, Features, List, Value

    features = Features({"id": Value("int64"), "input_ids": List(Value("int32")),
                         "attention_mask": List(Value("int8"))})
    ids = np.random.default_rng(0).integers(0, 50_000, (n, tokens), dtype=np.int32)
    return Dataset.from_dict({"id": np.arange(n), "input_ids": ids, "attention_mask": np.ones((n, tokens), np.int8)},
                             features=features)


def _pipelines(hf, kind: str, fmt: str, buffer: int = 100):
    import datasets

    import resumable_iterable as ri

    def build(lib, src):
        return {"plain": src, "shuffle": lambda: src().shuffle(seed=0, buffer_size=buffer),
                "interleave": lambda: lib.interleave_datasets([src(), src()], seed=0)}[kind]

    ours = build(ri, lambda: ri.to_iterable_dataset(hf, num_shards=4))
    theirs = build(datasets, lambda: hf.to_iterable_dataset(num_shards=4))
    return (lambda: ours().with_format(fmt)), (lambda: theirs().with_format(fmt))


def run(n_rows: int = N_ROWS, width: int = WIDTH, repeats: int = 2, token_rows: int = TOKEN_ROWS,
        tokens: int = TOKENS, loader: bool = True) -> list[Result]:
    import torch  # noqa: F401 - import first: our IterableDataset then derives from torch's

    results = []
    hf = make_dataset(n_rows, width)
    for fmt in ("numpy", "torch"):
        for kind in ("plain", "shuffle", "interleave"):
            ours, theirs = _pipelines(hf, kind, fmt)
            t_ours, n_ours = time_iteration(ours, repeats=repeats)
            t_hf, n_hf = time_iteration(theirs, repeats=repeats)
            results.append(Result(f"{fmt} rows of {width}-float32 lists, {kind}", n_ours / t_ours, n_hf / t_hf,
                                  "ex/s", note=f"{n_ours} vs {n_hf} examples, one process"))
    tok = make_tokens(token_rows, tokens)
    for fmt in ("numpy", "torch"):
        ours, theirs = _pipelines(tok, "shuffle", fmt, buffer=1000)
        t_ours, n_ours = time_iteration(ours, repeats=repeats)
        t_hf, n_hf = time_iteration(theirs, repeats=repeats)
        results.append(Result(f"{fmt} rows of {tokens} token ids + mask, shuffle(1000)", n_ours / t_ours,
                              n_hf / t_hf, "ex/s", note=f"{n_ours} vs {n_hf} examples, one process"))
    for fmt in ("numpy", "torch"):  # batches made by the dataset, for DataLoader(batch_size=None)
        ours, theirs = _pipelines(tok, "shuffle", fmt, buffer=1000)
        t_ours, b_ours = time_iteration(lambda: ours().batch(32), repeats=repeats)
        t_hf, b_hf = time_iteration(lambda: theirs().batch(32), repeats=repeats)
        results.append(Result(f"{fmt} batch(32) of {tokens} token ids + mask, shuffle(1000)", 32 * b_ours / t_ours,
                              32 * b_hf / t_hf, "ex/s", note=f"{b_ours} vs {b_hf} batches of 32, one process"))
    if loader:
        results += run_loader(hf, tok, repeats=repeats)
    return results


def run_loader(hf, tok, repeats: int = 2, limit: int = 4_000) -> list[Result]:
    """The same rows through torchdata's ``StatefulDataLoader`` with 2 workers, torch format."""
    import datasets

    import resumable_iterable as ri
    from bench_loader_shuffle import WORKERS, best_rates

    def ours(src, buffer, buffer_state="examples", interleave=True):
        def make():
            d = ri.to_iterable_dataset(src, num_shards=4)
            d = ri.interleave_datasets([d, ri.to_iterable_dataset(src, num_shards=4)], seed=0) if interleave else d
            return d.shuffle(seed=0, buffer_size=buffer, buffer_state=buffer_state).with_format("torch")
        return make

    def theirs(src, buffer, interleave=True):
        def make():
            d = src.to_iterable_dataset(num_shards=4)
            d = datasets.interleave_datasets([d, src.to_iterable_dataset(num_shards=4)], seed=0) if interleave else d
            return d.shuffle(seed=0, buffer_size=buffer).with_format("torch")
        return make

    got = best_rates({"exact": ours(hf, 300), "drop": ours(hf, 300, "drop"), "hf": theirs(hf, 300)},
                     16, min(limit, 2 * len(hf)), repeats)
    (exact, n), (drop, _), (hf_rate, _) = got["exact"], got["drop"], got["hf"]
    what = f"{WORKERS} workers, 256 KB float32 lists, interleave -> shuffle(300), torch, batch 16"
    out = [Result(f"exact vs HF, {what}", exact, hf_rate, "ex/s", note=f"{n} examples; HF drops its buffer on resume"),
           Result(f"exact vs drop, {what}", exact, drop, "ex/s", ref_label="ours, drop")]
    got = best_rates({"exact": ours(tok, 1000, interleave=False), "hf": theirs(tok, 1000, interleave=False)},
                     32, min(4 * limit, len(tok)), repeats)
    (exact, n), (hf_rate, _) = got["exact"], got["hf"]
    out.append(Result(f"exact vs HF, {WORKERS} workers, token ids, shuffle(1000), torch, batch 32", exact, hf_rate,
                      "ex/s", note=f"{n} examples"))
    return out


def main() -> None:
    ap = arg_parser(__doc__, repeats=2)
    ap.set_defaults(rows=N_ROWS)
    ap.add_argument("--width", type=int, default=WIDTH, help="float32 values per row")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: check that it runs")
    ap.add_argument("--no-loader", action="store_true", help="skip the runs through the DataLoader")
    args = ap.parse_args()
    n, width, token_rows = (40, 1_024, 200) if args.quick else (args.rows, args.width, TOKEN_ROWS)
    print_section(f"lists of numbers from an Arrow source, numpy / torch format: {n} rows of {width} float32, "
                  f"{token_rows} rows of {TOKENS} token ids",
                  run(n_rows=n, width=width, repeats=args.repeats, token_rows=token_rows,
                      loader=not args.no_loader))


if __name__ == "__main__":
    main()
