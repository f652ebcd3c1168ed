"""Packing throughput: ``pack(seq_len)`` beside the plain-Python packing loop people write by hand
(concatenate token lists, cut every ``seq_len``), both reading the same tokenized corpus from the
same source, in one run. Ours also keeps the carry-over in its state (resumable at any chunk).

    python benchmarks/bench_pack.py [--docs N] [--quick]
"""

from __future__ import annotations

import argparse

import numpy as np

import resumable_iterable as ri
from common import Result, print_section, time_iteration

SEQ_LEN = 2048
EOS = 0


def corpus(n_docs: int, seed: int = 0) -> ri.IterableDataset:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(20, 1500, size=n_docs)
    docs = [rng.integers(1, 50_000, size=int(n)).tolist() for n in lengths]
    return ri.IterableDataset.from_dict({"input_ids": docs}, num_shards=8)


def hand_written(ds: ri.IterableDataset, seq_len: int = SEQ_LEN):
    """The loop users write: a growing buffer, cut every seq_len tokens (not resumable)."""
    buf: list = []
    for ex in ds:
        buf.extend(ex["input_ids"])
        buf.append(EOS)
        while len(buf) >= seq_len:
            yield {"input_ids": buf[:seq_len]}
            buf = buf[seq_len:]
    if buf:
        yield {"input_ids": buf}


def run(n_docs: int = 20_000, repeats: int = 5) -> list[Result]:
    ds = corpus(n_docs)
    best: dict = {}
    for _ in range(repeats):  # the variants take turns, so a busy moment does not hit one of them only
        for name, make in (("hand", lambda: hand_written(ds)), ("ours", lambda: ds.pack(SEQ_LEN, separator=EOS)),
                           ("greedy", lambda: ds.pack(SEQ_LEN, separator=EOS, mode="greedy"))):
            t, n = time_iteration(make, repeats=1)
            if name not in best or t < best[name][0]:
                best[name] = (t, n)
    (t_hand, n_hand), (t_ours, n_ours), (t_greedy, n_greedy) = best["hand"], best["ours"], best["greedy"]
    assert n_hand == n_ours, (n_hand, n_ours)
    return [
        Result(f"pack({SEQ_LEN}) concat, chunks/s", n_ours / t_ours, n_hand / t_hand, "ex/s", target=">= 1x",
               check=f"{t_hand / t_ours:.2f}x", met=t_hand / t_ours >= 1.0, ref_label="hand-written loop"),
        Result(f"pack({SEQ_LEN}) greedy, chunks/s", n_greedy / t_greedy, None, "ex/s",
               note="; whole documents per chunk"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 500 if args.quick else args.docs
    print_section(f"Packing {n} documents into {SEQ_LEN}-token chunks", run(n, repeats=1 if args.quick else 3))


if __name__ == "__main__":
    main()
