"""Realistic training pipelines end to end, HF ``datasets`` and ``resumable_iterable`` side by side
in one run: files written by the script, read by ``load_dataset``, through torchdata's
``StatefulDataLoader`` and ``ri.StatefulDataLoader`` (2 workers) and in one process.

* **LLM pre-training** - JSON Lines files (``--mb`` MB of text, documents of 200-20 000
  characters) -> ``load_dataset("json", data_files=..., streaming=True)`` -> batched ``map`` with a
  cheap pure-Python tokenizer (``str.split`` + a vocabulary ``dict``) -> packing into 1024-token
  blocks (ours: ``pack(1024, drop_last=True)``; HF: the ``group_texts`` batched map of the
  transformers examples) -> ``shuffle(buffer 10 000)`` -> ``batch(8)`` -> ``with_format("torch")``;
* **vision** - an ``imagefolder`` of 64x64 JPEG images in 4 class folders -> decode -> ``map`` to a
  normalized float32 CHW array -> ``shuffle(1000)`` -> ``batch(32)`` -> ``with_format("torch")``;
* **mixture** - ``interleave_datasets`` of 3 Parquet sources (4 files each) with probabilities
  0.5 / 0.3 / 0.2 -> ``map`` -> ``filter`` -> ``shuffle(1000)`` -> ``batch(32)``.

Each pipeline is written once (``m`` is the module) and handed to the loader with
``batch_size=None`` (the batches are the dataset's). Figures: examples/s (documents, images or
rows read from the files, counted in the yielded batches: tokens / 1024 blocks for the LLM
pipeline), and the cost of the loader's per-batch snapshot: the loader takes every worker's
``state_dict()`` after every batch (``snapshot_every_n_steps=1``, its default); the run again with
``snapshot_every_n_steps=10**9`` gives the time per batch that the snapshots cost, end to end
(the state taken, pickled and sent). In one process, the mean time of ``state_dict()`` taken after
every batch is reported. Variants take turns; each figure is the median of ``--repeats`` runs.

    python benchmarks/bench_pipelines.py [--mb 64] [--repeats 3] [--quick] [--only llm,vision,mix]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

from common import Result, loader_class, print_section

WORKERS = 2
BLOCK = 1024
VOCAB_SIZE = 32_000
EOS = 0

_rng = np.random.default_rng(1234)
WORDS = ["".join(chr(97 + c) for c in _rng.integers(0, 26, size=int(n))) for n in _rng.integers(2, 10, size=VOCAB_SIZE)]
VOCAB = {w: i + 1 for i, w in enumerate(dict.fromkeys(WORDS))}


# ---------------------------------------------------------------------------------- the data


def write_jsonl(folder: str, mb: float, files: int = 32, seed: int = 0) -> list[str]:
    """``files`` JSON Lines files of about ``mb`` MB of text in all: ``{"id", "url", "text"}``
    whose texts have log-normal lengths (median ~2 KB, 200 to 20 000 characters)."""
    rng = np.random.default_rng(seed)
    vocab = np.array(WORDS, dtype=object)
    # Zipf-like word frequencies, as in real text
    p = 1.0 / np.arange(1, len(vocab) + 1)
    p /= p.sum()
    paths, budget, doc = [], mb * 1e6 / files, 0
    for f in range(files):
        path = os.path.join(folder, f"part-{f:03d}.jsonl")
        size = 0
        with open(path, "w", encoding="utf-8") as out:
            while size < budget:
                chars = int(np.clip(rng.lognormal(np.log(2000), 0.8), 200, 20_000))
                words = vocab[rng.choice(len(vocab), size=max(1, chars // 6), p=p)]
                line = json.dumps({"id": doc, "url": f"https://example.com/{doc}", "text": " ".join(words)})
                out.write(line + "\n")
                size += len(line) + 1
                doc += 1
        paths.append(path)
    return paths


def write_images(folder: str, n: int, side: int = 64, classes: int = 4, seed: int = 0) -> str:
    """An imagefolder of ``n`` ``side`` x ``side`` JPEG images (smooth gradients plus noise) in
    ``classes`` class folders."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side]
    for i in range(n):
        d = os.path.join(folder, f"class_{i % classes}")
        os.makedirs(d, exist_ok=True)
        base = np.stack([xx * rng.uniform(1, 4), yy * rng.uniform(1, 4), (xx + yy) * rng.uniform(0.5, 2)], -1)
        img = np.clip(base + rng.normal(0, 20, size=base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(d, f"{i:06d}.jpg"), quality=90)
    return folder


def write_parquet_sources(folder: str, rows: int, sources: int = 3, files: int = 4, seed: int = 0) -> list[list[str]]:
    """``sources`` Parquet sources of ``rows`` rows each in ``files`` files:
    ``{"id": int64, "text": str, "score": float64}``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    out = []
    for s in range(sources):
        paths = []
        per = rows // files
        for f in range(files):
            ids = np.arange(s * 10_000_000 + f * per, s * 10_000_000 + (f + 1) * per)
            lengths = rng.integers(3, 40, size=per)
            texts = [" ".join(WORDS[(int(i) * 7 + k) % VOCAB_SIZE] for k in range(int(n))) for i, n in zip(ids, lengths)]
            table = pa.table({"id": ids, "text": texts, "score": rng.random(per)})
            path = os.path.join(folder, f"source{s}-{f:02d}.parquet")
            pq.write_table(table, path, row_group_size=1_000)
            paths.append(path)
        out.append(paths)
    return out


# ---------------------------------------------------------------------------------- the pipelines


def tokenize(batch: dict) -> dict:
    """A cheap pure-Python tokenizer: whitespace words looked up in a vocabulary, EOS appended."""
    get = VOCAB.get
    return {"input_ids": [[get(w, 1) for w in text.split()] + [EOS] for text in batch["text"]]}


def group_texts(batch: dict) -> dict:
    """The packing of the transformers examples (run_clm.py): concatenate, cut into BLOCK-token
    blocks, drop the remainder of each map batch."""
    ids = [t for doc in batch["input_ids"] for t in doc]
    n = len(ids) // BLOCK * BLOCK
    return {"input_ids": [ids[i:i + BLOCK] for i in range(0, n, BLOCK)]}


def llm(m, paths: list[str]):
    ds = m.load_dataset("json", data_files=paths, split="train", streaming=True)
    ds = ds.map(tokenize, batched=True, remove_columns=["id", "url", "text"])
    if m.__name__ == "resumable_iterable":
        ds = ds.pack(BLOCK, drop_last=True)  # EOS is already appended by the tokenizer
    else:
        ds = ds.map(group_texts, batched=True)
    return ds.shuffle(seed=42, buffer_size=10_000).batch(8).with_format("torch")


MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


def to_pixels(ex: dict) -> dict:
    x = np.asarray(ex["image"].convert("RGB"), dtype=np.float32).transpose(2, 0, 1) / 255.0
    return {"pixel_values": (x - MEAN) / STD}


def vision(m, folder: str):
    ds = m.load_dataset("imagefolder", data_dir=folder, split="train", streaming=True)
    ds = ds.map(to_pixels, remove_columns=["image"])
    return ds.shuffle(seed=42, buffer_size=1000).batch(32).with_format("torch")


def add_length(ex: dict) -> dict:
    return {"n_words": ex["text"].count(" ") + 1, "text": ex["text"].lower()}


def keep(ex: dict) -> bool:
    return ex["score"] > 0.1


def mixture(m, sources: list[list[str]]):
    parts = [m.load_dataset("parquet", data_files=paths, split="train", streaming=True) for paths in sources]
    ds = m.interleave_datasets(parts, probabilities=[0.5, 0.3, 0.2], seed=0)
    return ds.map(add_length).filter(keep).shuffle(seed=42, buffer_size=1000).batch(32)


def rows_of(batch: dict) -> int:
    col = batch.get("input_ids", batch.get("pixel_values", batch.get("id")))
    return len(col)


# ---------------------------------------------------------------------------------- timing


def run_once(make, mode: str, snapshot: bool = True, limit: int | None = None) -> tuple[float, int, int, float]:
    """One pass over the pipeline: ``(seconds, examples, batches, state_dict seconds in total)``.
    ``mode``: ``"process"`` (no loader; ``state_dict()`` taken after every batch), ``"torchdata"`` or
    ``"ri"`` (that ``StatefulDataLoader`` with 2 workers, ``batch_size=None``); ``limit``: stop after
    that many batches."""
    t0 = time.perf_counter()
    n = batches = 0
    t_state = 0.0
    ds = make()
    if mode == "process":
        for b in ds:
            n += rows_of(b)
            batches += 1
            if batches == limit:
                break
            if snapshot:
                s0 = time.perf_counter()
                ds.state_dict()
                t_state += time.perf_counter() - s0
    else:
        kwargs = {} if snapshot else {"snapshot_every_n_steps": 10**9}
        for b in loader_class(mode)(ds, batch_size=None, num_workers=WORKERS, **kwargs):
            n += rows_of(b)
            batches += 1
            if batches == limit:
                break
    return time.perf_counter() - t0, n, batches, t_state


def measure(name: str, pipe, arg, repeats: int, hf_arg=None, hf_batches: int | None = None, hf_note: str = "",
            modes=("process", "torchdata", "ri")) -> list[Result]:
    """Ours on ``arg``, HF on ``hf_arg`` (default ``arg``: a smaller part of the files where HF is slow)
    and on at most ``hf_batches`` batches; examples/s do not depend on the amount timed."""
    import datasets

    import resumable_iterable as ri

    runs: dict = {}
    variants = []
    for mode in modes:
        for lib in ("ours", "hf"):
            variants.append((lib, mode, True))
            if mode == "torchdata":
                variants.append((lib, mode, False))
    for _ in range(repeats):  # variants take turns: a busy moment of the shared machine hits them all
        for lib, mode, snap in variants:
            m, a = (ri, arg) if lib == "ours" else (datasets, arg if hf_arg is None else hf_arg)
            limit = None if lib == "ours" else hf_batches
            runs.setdefault((lib, mode, snap), []).append(run_once(lambda: pipe(m, a), mode, snap, limit))

    def med(key, i):
        return statistics.median(r[i] for r in runs[key])

    results = []
    for mode in modes:
        (t, n), (ht, hn) = (med(("ours", mode, True), 0), runs[("ours", mode, True)][0][1]), \
            (med(("hf", mode, True), 0), runs[("hf", mode, True)][0][1])
        where = "one process" if mode == "process" else f"{mode} loader"
        results.append(Result(f"{name}, {where}", n / t, hn / ht, "ex/s",
                              note=f"ours {n} examples, HF {hn}{hf_note}; median of {repeats}"))
        if mode == "process":
            b, hb = runs[("ours", mode, True)][0][2], runs[("hf", mode, True)][0][2]
            results.append(Result(f"{name}, state_dict() per batch", med(("ours", mode, True), 3) / b * 1e6,
                                  med(("hf", mode, True), 3) / hb * 1e6, "µs",
                                  note="mean over every batch of a pass (ours exact, HF's leaves the shuffle buffer out)"))
        if mode == "torchdata":
            b, hb = runs[("ours", mode, True)][0][2], runs[("hf", mode, True)][0][2]
            ours_cost = max(0.0, (t - med(("ours", mode, False), 0)) / b * 1e3)
            hf_cost = max(0.0, (ht - med(("hf", mode, False), 0)) / hb * 1e3)
            results.append(Result(f"{name}, snapshot per batch, torchdata", ours_cost, hf_cost, "ms",
                                  note="end to end: time with snapshot_every_n_steps=1 minus without, per batch"))
    return results


def run(quick: bool = False, mb: float = 64, images: int = 2000, rows: int = 50_000, repeats: int = 3,
        only: tuple = ("llm", "vision", "mix"), folder: str | None = None) -> list[Result]:
    """The three pipelines. HF is timed on 2 of the 32 JSON Lines files (its per-token torch
    formatting runs at about 40 blocks/s) and on the first 600 batches of the mixture."""
    import torch  # noqa: F401 - import first: our IterableDataset then derives from torch's

    hf_batches = 600
    if quick:
        mb, images, rows, repeats, hf_batches = 0.6, 64, 2_000, 1, 20
    results = []
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        if "llm" in only:
            os.makedirs(os.path.join(tmp, "jsonl"))
            paths = write_jsonl(os.path.join(tmp, "jsonl"), mb)
            hf_paths = paths[:2]
            results += measure(f"LLM ({mb:g} MB JSONL)", llm, paths, repeats, hf_arg=hf_paths,
                               hf_note=f" (from {len(hf_paths)} of the {len(paths)} files)")
        if "vision" in only:
            write_images(os.path.join(tmp, "images"), images)
            results += measure(f"vision ({images} JPEG)", vision, os.path.join(tmp, "images"), repeats)
        if "mix" in only:
            os.makedirs(os.path.join(tmp, "parquet"))
            sources = write_parquet_sources(os.path.join(tmp, "parquet"), rows)
            results += measure(f"mixture (3 x {rows} Parquet rows)", mixture, sources, repeats, hf_batches=hf_batches,
                               hf_note=f" (its first {hf_batches} batches)")
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=64, help="MB of JSON Lines text (LLM pipeline)")
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--rows", type=int, default=50_000, help="rows per Parquet source (mixture)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="llm,vision,mix")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, to check that everything runs")
    args = ap.parse_args()
    print_section("realistic pipelines, files -> load_dataset -> ... -> loader (2 workers) / one process",
                  run(quick=args.quick, mb=args.mb, images=args.images, rows=args.rows, repeats=args.repeats,
                      only=tuple(args.only.split(","))))


if __name__ == "__main__":
    main()
