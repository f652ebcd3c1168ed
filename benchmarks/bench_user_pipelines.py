"""User pipelines through ``StatefulDataLoader`` (2 workers, a state after every batch: the loader's
default), HF ``datasets`` and ``resumable_iterable`` side by side in one run, on files written by
the script and read with ``load_dataset(..., streaming=True)``:

* **tokenizer** - a text corpus (Parquet, 8 files) -> batched ``map`` of a ``transformers`` fast
  tokenizer (``PreTrainedTokenizerFast`` over a ``tokenizers`` WordLevel model trained on the text
  in the process: no download), ``remove_columns=["text"]`` -> ``shuffle(1000)`` -> batches of 32
  collated by ``DataCollatorWithPadding``;
* **images, torch format** - an imagefolder of 32x32 PNG images -> ``with_format("torch")`` ->
  ``map`` (flip and crop of the tensor, to float) -> ``shuffle(500)`` -> batches of 32 (an
  imagefolder is one shard for both libraries: one worker yields);
* **interleave, all_exhausted** - ``interleave_datasets`` of 3 Parquet sources of different sizes,
  probabilities 0.5 / 0.3 / 0.2, ``stopping_strategy="all_exhausted"`` -> ``shuffle(1000)`` ->
  batches of 32;
* **JSON Lines .gz** - gzip-compressed JSON Lines -> ``filter`` -> ``map`` -> batches of 32;
* **split by node** - the Parquet corpus -> ``split_dataset_by_node(rank=0, world_size=2)`` ->
  ``shuffle(1000)`` -> batches of 32;
* **batch(32) torch** - the Parquet corpus (a string column too) -> ``.batch(32)`` ->
  ``with_format("torch")``, the loader with ``batch_size=None``.

Both libraries run the same functions. Each figure is examples/s after the first 3 batches (the
shuffle buffers fill, the workers start), the best of ``--repeats`` runs, variants taking turns;
HF's shuffle is its lossy one (its state leaves the buffer out), ours is exact. Rows: both in
torchdata's loader, and both in ``ri.StatefulDataLoader`` (which sends small tensors by value).

    python benchmarks/bench_user_pipelines.py [--scale 1] [--repeats 2] [--quick] [--only tokenizer,images,...]

``--quick`` runs tiny sizes of the images, JSON Lines and ``batch(32)`` pipelines in torchdata's
loader (about 8 s; HF's loader over the other three takes 5-15 s to start and stop at any size).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time

import numpy as np

from common import Result, loader_class, print_section

WORKERS = 2
WARM = 3  # batches before the clock starts

_rng = np.random.default_rng(0)
WORDS = ["".join(chr(97 + c) for c in _rng.integers(0, 26, size=int(n))) for n in _rng.integers(2, 10, size=5000)]


def sentence(rng, n: int) -> str:
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), size=n))


# ---------------------------------------------------------------------------------- the data


def write_corpus(folder: str, rows: int, files: int = 8) -> list[str]:
    """``files`` Parquet files ``{"id": int64, "text": str (5-120 words), "label": int64}``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(1)
    paths, per = [], rows // files
    for f in range(files):
        texts = [sentence(rng, int(n)) for n in rng.integers(5, 120, size=per)]
        table = pa.table({"id": np.arange(f * per, (f + 1) * per), "text": texts,
                          "label": rng.integers(0, 2, size=per)})
        paths.append(os.path.join(folder, f"text-{f}.parquet"))
        pq.write_table(table, paths[-1], row_group_size=1000)
    return paths


def write_tokenizer(folder: str, texts: list[str]) -> str:
    """A ``PreTrainedTokenizerFast`` (WordLevel, whitespace) trained on ``texts``, saved in ``folder``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")
    fast.save_pretrained(folder)
    return folder


def write_images(folder: str, n: int, side: int = 32) -> str:
    from PIL import Image

    rng = np.random.default_rng(2)
    for i in range(n):
        d = os.path.join(folder, f"class_{i % 4}")
        os.makedirs(d, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, size=(side, side, 3), dtype=np.uint8)).save(os.path.join(d, f"{i:05d}.png"))
    return folder


def write_jsonl_gz(folder: str, rows: int, files: int = 4) -> list[str]:
    rng = np.random.default_rng(3)
    paths, per = [], rows // files
    for f in range(files):
        paths.append(os.path.join(folder, f"part-{f}.jsonl.gz"))
        with gzip.open(paths[-1], "wt", encoding="utf-8") as out:
            for i in range(per):
                out.write(json.dumps({"id": f * per + i, "text": sentence(rng, int(rng.integers(5, 60))),
                                      "score": float(rng.random()), "meta": {"src": "web", "k": i % 7}}) + "\n")
    return paths


def write_sources(folder: str, rows: int, files: int = 4) -> list[list[str]]:
    """3 Parquet sources of ``rows / 2``, ``rows`` and ``1.5 rows`` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(4)
    out = []
    for s in range(3):
        per = rows * (s + 1) // 2 // files
        paths = []
        for f in range(files):
            ids = np.arange(s * 10**7 + f * per, s * 10**7 + (f + 1) * per)
            table = pa.table({"id": ids, "text": [sentence(rng, int(k)) for k in rng.integers(3, 30, size=per)],
                              "score": rng.random(per)})
            paths.append(os.path.join(folder, f"source{s}-{f}.parquet"))
            pq.write_table(table, paths[-1], row_group_size=1000)
        out.append(paths)
    return out


# ---------------------------------------------------------------------------------- the pipelines

_tokenizers: dict = {}


def tokenizer(folder: str):
    """The tokenizer saved in ``folder``, loaded once per process (each worker loads its own)."""
    tok = _tokenizers.get(folder)
    if tok is None:
        from transformers import PreTrainedTokenizerFast

        tok = _tokenizers[folder] = PreTrainedTokenizerFast.from_pretrained(folder)
    return tok


class Tokenize:
    def __init__(self, folder: str):
        self.folder = folder

    def __call__(self, batch: dict) -> dict:
        return tokenizer(self.folder)(batch["text"], truncation=True, max_length=128)


def tokenized(m, data: dict):
    ds = m.load_dataset("parquet", data_files=data["corpus"], split="train", streaming=True)
    ds = ds.map(Tokenize(data["tokenizer"]), batched=True, remove_columns=["text"])
    return ds.shuffle(seed=0, buffer_size=1000)


def flip_crop(ex: dict) -> dict:
    x = ex["image"]  # uint8 HWC tensor
    return {"pixel_values": x.flip(-2)[4:28, 4:28].permute(2, 0, 1).float() / 255.0}


def images_torch(m, data: dict):
    ds = m.load_dataset("imagefolder", data_dir=data["images"], split="train", streaming=True).with_format("torch")
    return ds.map(flip_crop, remove_columns=["image"]).shuffle(seed=0, buffer_size=500)


def interleave_all(m, data: dict):
    parts = [m.load_dataset("parquet", data_files=paths, split="train", streaming=True) for paths in data["sources"]]
    ds = m.interleave_datasets(parts, probabilities=[0.5, 0.3, 0.2], seed=0, stopping_strategy="all_exhausted")
    return ds.shuffle(seed=0, buffer_size=1000)


def keep(ex: dict) -> bool:
    return ex["score"] > 0.2


def summarize(ex: dict) -> dict:
    return {"n_chars": len(ex["text"]), "k": ex["meta"]["k"]}


def jsonl_gz(m, data: dict):
    ds = m.load_dataset("json", data_files=data["jsonl_gz"], split="train", streaming=True)
    return ds.filter(keep).map(summarize, remove_columns=["meta", "text"])


def split_by_node(m, data: dict):
    ds = m.load_dataset("parquet", data_files=data["corpus"], split="train", streaming=True)
    if m.__name__ == "resumable_iterable":
        ds = m.split_dataset_by_node(ds, rank=0, world_size=2)
    else:
        from datasets.distributed import split_dataset_by_node

        ds = split_dataset_by_node(ds, rank=0, world_size=2)
    return ds.shuffle(seed=0, buffer_size=1000)


def batch_torch(m, data: dict):
    ds = m.load_dataset("parquet", data_files=data["corpus"], split="train", streaming=True)
    return ds.batch(32).with_format("torch")


def padding_collator(data: dict):
    from transformers import DataCollatorWithPadding

    return DataCollatorWithPadding(tokenizer(data["tokenizer"]))


# name -> (pipeline, loader batch_size, collate_fn maker or None)
PIPELINES = {
    "tokenizer": ("tokenizer + DataCollatorWithPadding", tokenized, 32, padding_collator),
    "images": ("imagefolder, torch format, map, shuffle", images_torch, 32, None),
    "interleave": ("interleave 3 Parquet, all_exhausted, shuffle", interleave_all, 32, None),
    "jsonl": ("JSON Lines .gz, filter, map", jsonl_gz, 32, None),
    "split": ("split_dataset_by_node rank 0 of 2, shuffle", split_by_node, 32, None),
    "batch": ("batch(32).with_format('torch'), batch_size=None", batch_torch, None, None),
}


def rows_of(batch) -> int:
    if hasattr(batch, "keys"):  # a dict, or transformers' BatchEncoding
        return len(batch[next(iter(batch.keys()))])
    return len(batch)


def run_once(m, pipe, data: dict, loader: str, batch_size, collate) -> tuple[float, int]:
    """Examples/s of one pass through ``loader``'s ``StatefulDataLoader`` after :data:`WARM` batches."""
    kwargs = {} if collate is None else {"collate_fn": collate(data)}
    dl = loader_class(loader)(pipe(m, data), batch_size=batch_size, num_workers=WORKERS, **kwargs)
    n = batches = 0
    t0 = None
    for batch in dl:
        batches += 1
        if batches == WARM:
            t0 = time.perf_counter()
        elif batches > WARM:
            n += rows_of(batch)
    if t0 is None or n == 0:
        return 0.0, 0
    return n / (time.perf_counter() - t0), n


#: what ``--quick`` runs unless told (``--only``): HF's loader over the others takes 5-15 s to start
#: and stop at any size (the tokenizer's, the interleave's, the split's)
QUICK = ("images", "jsonl", "batch")


def run(quick: bool = False, scale: float = 1.0, repeats: int = 2, only: tuple | None = None,
        loaders: tuple = ("torchdata", "ri"), folder: str | None = None) -> list[Result]:
    """The pipelines ``only`` names (default: all; :data:`QUICK` with ``quick``), ours and HF's in
    each of ``loaders``. ``quick``: tiny sizes, one run, torchdata's loader only."""
    import torch  # noqa: F401 - import first: our IterableDataset then derives from torch's

    import datasets

    import resumable_iterable as ri

    if only is None:
        only = QUICK if quick else tuple(PIPELINES)
    if quick:
        scale, repeats, loaders = 0.04, 1, ("torchdata",)
    results = []
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        data: dict = {}
        for d in ("corpus", "tokenizer", "images", "jsonl", "sources"):
            os.makedirs(os.path.join(tmp, d))
        if {"tokenizer", "split", "batch"} & set(only):
            data["corpus"] = write_corpus(os.path.join(tmp, "corpus"), int(80_000 * scale))
        if "tokenizer" in only:
            import pyarrow.parquet as pq

            texts = pq.read_table(data["corpus"][0], columns=["text"]).column("text").to_pylist()
            data["tokenizer"] = write_tokenizer(os.path.join(tmp, "tokenizer"), texts)
        if "images" in only:
            data["images"] = write_images(os.path.join(tmp, "images"), max(200, int(4000 * scale)))
        if "jsonl" in only:
            data["jsonl_gz"] = write_jsonl_gz(os.path.join(tmp, "jsonl"), int(60_000 * scale))
        if "interleave" in only:
            data["sources"] = write_sources(os.path.join(tmp, "sources"), int(20_000 * scale))
        for key in only:
            title, pipe, batch_size, collate = PIPELINES[key]
            best: dict = {}
            for _ in range(repeats):  # variants take turns: a busy moment of the machine hits them all
                for loader in loaders:
                    for lib, m in (("ours", ri), ("hf", datasets)):
                        got = run_once(m, pipe, data, loader, batch_size, collate)
                        best[(lib, loader)] = max(best.get((lib, loader), (0.0, 0)), got)
            for loader in loaders:
                (ours, n), (hf, hn) = best[("ours", loader)], best[("hf", loader)]
                results.append(Result(f"{title}, {loader} loader", ours, hf, "ex/s",
                                      note=f"ours {n} examples, HF {hn} (after {WARM} batches); best of {repeats}"))
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="data size (1: 80 000 text rows, 4000 images...)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--only", help=f"some of {','.join(PIPELINES)} (default: all; with --quick {','.join(QUICK)})")
    ap.add_argument("--loaders", default="torchdata,ri")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, torchdata's loader only, 3 of the pipelines unless "
                    "--only says: checks that they run")
    args = ap.parse_args()
    print_section("user pipelines through StatefulDataLoader (2 workers, a state after every batch)",
                  run(quick=args.quick, scale=args.scale, repeats=args.repeats, only=tuple(args.only.split(",")) if args.only else None,
                      loaders=tuple(args.loaders.split(","))))


if __name__ == "__main__":
    main()
