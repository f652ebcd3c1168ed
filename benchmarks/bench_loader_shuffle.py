"""The exact shuffle buffer through ``torchdata.stateful_dataloader.StatefulDataLoader`` with workers.

The loader asks every worker for its dataset's ``state_dict()`` after every batch and sends the
leaves that changed since the previous one to the main process. Our exact shuffle
(``buffer_state="examples"``, the default) keeps the buffered examples in its state; this script
times it beside our lossy ``buffer_state="drop"`` and HF ``datasets``' (lossy) shuffle, in one run,
on these kinds of examples:

* 256 KB numpy examples (``{"id": int, "x": float32[65536]}``) from a generator in 8 shards,
  ``shuffle(buffer 300)``, 2 workers, batches of 16; our exact shuffle and HF's also through
  ``ri.StatefulDataLoader`` (the target is taken against HF in the faster of the two loaders);
* 256x256 PIL images and 110 KB file bytes (HF's undecoded ``{"bytes", "path"}`` layout), the
  same shuffle and loader, batched by a ``collate_fn`` a training loop would use;
* an image dataset as ``load_dataset`` gives one (JPEG files in an ``Image()`` column), the
  shuffle right above the source (its buffer holds the files, decoded as they leave it, as HF
  does) or after a map (its buffer holds the decoded images);
* what a resume costs with the arrays: from the saved state file to the first batch, our default
  (the workers' states hold positions, re-read by re-running the generator shards) beside the
  stored examples (``worker_positions=False``) and HF's (which drops its buffer);
* small text rows (``{"id": int, "text": str}``, a 200 k-row ``Dataset`` in 8 shards),
  ``shuffle(buffer 1000)``, 2 workers, batches of 32; beside them the loader's own ceiling (the
  same rows ready-made in a Python list, no state), which bounds what any dataset can reach. The
  text rows run through both loaders: torchdata's and ``ri.StatefulDataLoader``, which sends each
  batch's small tensors (here the ``id`` column) inside the worker's message instead of through
  shared memory (``integrations/torch/transport.py``); HF's shuffle runs through both too;
* documents of ~6 KB of text with a batched ``map`` after the shuffle (HF's tokenizing habit), also
  with a per-example ``map`` before the shuffle (a worker then logs its buffer by value).

Each figure is the best of ``--repeats`` runs (default 3), the variants taking turns.

``--sharing file_system`` runs everything with torch's ``file_system`` sharing strategy instead of
the default ``file_descriptor`` one: each tensor of a batch then crosses by the name of its shared
memory instead of a socket round trip with the worker (both libraries' batches cross that way).

    python benchmarks/bench_loader_shuffle.py [--quick] [--repeats R] [--sharing file_system]
"""

from __future__ import annotations

import argparse

from bench_dataloader import rows_dataset
from common import NUM_SHARDS, Result, loader_class, make_hf_dataset, print_section, text_of, time_iteration

WORKERS = 2
ARRAY_LEN = 65_536  # float32: 256 KB per example
TARGETS = {"arrays_drop": 0.8, "arrays_hf": 1.0, "text_hf": 1.5}


def array_rows(shards: list[int], per_shard: int):
    """``per_shard`` examples of 256 KB per shard (a generator source for both libraries)."""
    import numpy as np

    for s in shards:
        for k in range(per_shard):
            i = s * per_shard + k
            yield {"id": i, "x": np.full(ARRAY_LEN, i % 251, dtype=np.float32)}


IMAGE_SIDE = 256  # RGB: 192 KB of pixels per image
FILE_BYTES = 110_000  # about an ImageNet JPEG


def media_rows(shards: list[int], per_shard: int, kind: str):
    """``per_shard`` examples per shard, each a PIL image (``kind="image"``) or encoded file bytes
    (``kind="bytes"``, in HF's undecoded layout ``{"bytes", "path"}``) that differ per example."""
    import numpy as np
    from PIL import Image

    base = np.random.default_rng(0).integers(0, 256, (IMAGE_SIDE, IMAGE_SIDE, 3), dtype=np.uint8)
    for s in shards:
        for k in range(per_shard):
            i = s * per_shard + k
            pixels = np.roll(base, i, axis=0)
            if kind == "image":
                yield {"id": i, "image": Image.fromarray(pixels)}
            else:
                yield {"id": i, "file": {"bytes": pixels.tobytes()[:FILE_BYTES], "path": f"{i}.jpg"}}


def collate_media(batch: list) -> dict:
    """A batch as a training loop would take it: the images as one uint8 tensor, the files' sizes."""
    import numpy as np
    import torch

    out = {"id": torch.tensor([ex["id"] for ex in batch])}
    if "image" in batch[0]:
        out["image"] = torch.from_numpy(np.stack([np.asarray(ex["image"]) for ex in batch]))
    else:
        out["size"] = torch.tensor([len(ex["file"]["bytes"]) for ex in batch])
    return out


def loader_rate(make_ds, batch_size: int, limit: int, collate_fn=None, loader: str = "torchdata") -> tuple[float, int]:
    """Examples per second through a ``StatefulDataLoader`` (torchdata's, or with ``loader="ri"``
    ours) with ``WORKERS`` workers over the first ``limit // batch_size`` batches (the run includes
    starting the workers and filling the shuffle buffers)."""
    make_loader = loader_class(loader)
    counted = [0]

    def stream():
        for b in make_loader(make_ds(), batch_size=batch_size, num_workers=WORKERS, collate_fn=collate_fn):
            counted[0] += len(b["id"])
            yield b

    dt, _ = time_iteration(stream, limit=max(1, limit // batch_size), repeats=1)
    return counted[0] / dt, counted[0]


def best_rates(makers: dict, batch_size: int, limit: int, repeats: int, collate_fn=None) -> dict:
    """``{name: (ex/s, examples)}``, the best of ``repeats`` runs of each, the variants taking
    turns so that a busy moment of the (shared) machine does not fall on one of them only. A
    maker is a function making the dataset (run through torchdata's loader) or a pair (that
    function, ``"ri"``) to run through ``ri.StatefulDataLoader``."""
    best: dict = {}
    for _ in range(repeats):
        for name, make in makers.items():
            make, loader = make if isinstance(make, tuple) else (make, "torchdata")
            rate, n = loader_rate(make, batch_size, limit, collate_fn, loader)
            if rate > best.get(name, (0.0, 0))[0]:
                best[name] = (rate, n)
    return best


def generator_rates(rows, kwargs: dict, buffer: int, batch_size: int, limit: int, repeats: int,
                    collate_fn=None, both_loaders: bool = False) -> dict:
    """``best_rates`` of our three shuffle modes and HF's shuffle over one generator source; with
    ``both_loaders`` also our exact shuffle and HF's through ``ri.StatefulDataLoader``."""
    import torch  # noqa: F401 - import first: our IterableDataset then derives from torch's
    import datasets

    import resumable_iterable as ri

    def ours(buffer_state):
        return lambda: ri.IterableDataset.from_generator(rows, gen_kwargs=kwargs).shuffle(
            seed=42, buffer_size=buffer, buffer_state=buffer_state)

    def hf():
        return datasets.IterableDataset.from_generator(rows, gen_kwargs=kwargs).shuffle(seed=42, buffer_size=buffer)

    makers = {"exact": ours("examples"), "drop": ours("drop"), "replay": ours("replay"), "hf": hf}
    if both_loaders:
        makers.update({"exact ri": (ours("examples"), "ri"), "hf ri": (hf, "ri")})
    return best_rates(makers, batch_size, limit, repeats, collate_fn)


def run_arrays(per_shard: int = 800, limit: int = 6_000, buffer: int = 300, batch_size: int = 16,
               repeats: int = 3) -> list[Result]:
    kwargs = {"shards": list(range(NUM_SHARDS)), "per_shard": per_shard}
    got = generator_rates(array_rows, kwargs, buffer, batch_size, limit, repeats, both_loaders=True)
    (exact, n), (drop, _), (hf_rate, _) = got["exact"], got["drop"], got["hf"]
    replay, exact_ri, hf_ri = got["replay"][0], got["exact ri"][0], got["hf ri"][0]
    hf_best = max(hf_rate, hf_ri)
    what = f"256 KB arrays, buffer {buffer}, batch {batch_size}"
    return [
        Result(f"exact shuffle vs drop, {what}", exact, drop, "ex/s", ref_label="ours, drop",
               target=f">= {TARGETS['arrays_drop']}x drop", check=f"{exact / drop:.2f}x",
               met=exact >= TARGETS["arrays_drop"] * drop, note=f"{n} examples each"),
        Result(f"exact shuffle vs HF, {what}", exact, hf_rate, "ex/s",
               note="both through torchdata's loader; HF's shuffle loses its buffer on resume"),
        Result(f"exact shuffle in ri.StatefulDataLoader vs HF, {what}", exact_ri, hf_best, "ex/s",
               ref_label="HF, faster loader", target=f">= {TARGETS['arrays_hf']}x HF",
               check=f"{exact_ri / hf_best:.2f}x", met=exact_ri >= TARGETS["arrays_hf"] * hf_best,
               note=f"HF in the faster of the two loaders: {hf_rate:.0f} ex/s in torchdata's, {hf_ri:.0f} in ours "
                    f"(we are {exact_ri / hf_rate:.2f}x HF in torchdata's loader)"),
        Result(f"drop vs HF, {what}", drop, hf_rate, "ex/s", note="both lossy"),
        Result(f"replay shuffle vs HF, {what}", replay, hf_rate, "ex/s",
               note="exact; the state holds where buffered examples came from, resume re-reads them"),
        Result(f"replay shuffle vs drop, {what}", replay, drop, "ex/s", ref_label="ours, drop"),
    ]


def resume_ms(make_ds, batch_size: int, cut: int, path: str, repeats: int, ours: bool = True) -> tuple[float, int]:
    """Milliseconds from a saved state file to the first batch of the resumed loader (reading the
    file, ``load_state_dict``, starting the workers, refilling what the state holds), best of
    ``repeats``; and the file's size in bytes. The state is taken after ``cut`` batches and saved
    with ``ri.save_state`` (ours) or ``torch.save`` (HF's, as its users save it)."""
    import os
    import time

    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    import resumable_iterable as ri

    dl = StatefulDataLoader(make_ds(), batch_size=batch_size, num_workers=WORKERS)
    it = iter(dl)
    for _ in range(cut):
        next(it)
    if ours:
        ri.save_state(dl.state_dict(), path)
    else:
        torch.save(dl.state_dict(), path)
    del it, dl
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        again = StatefulDataLoader(make_ds(), batch_size=batch_size, num_workers=WORKERS)
        again.load_state_dict(ri.load_state(path) if ours else torch.load(path, weights_only=False))
        next(iter(again))
        best = min(best, time.perf_counter() - t0)
        del again
    return best * 1e3, os.path.getsize(path)


def run_resume(per_shard: int = 800, buffer: int = 300, batch_size: int = 16, cut: int = 100,
               repeats: int = 3) -> list[Result]:
    """What logging positions costs at resume: a saved state to the first batch, 256 KB arrays from a
    generator (its shards are re-run up to the buffered rows) beside the stored examples. HF's
    shuffled generator dataset is tried too: its resume through the loader fails (``IndexError``
    in its ``load_state_dict`` with datasets 5.2), which the note says."""
    import tempfile

    import torch  # noqa: F401
    import datasets

    import resumable_iterable as ri

    kwargs = {"shards": list(range(NUM_SHARDS)), "per_shard": per_shard}

    def ours(positions):
        return lambda: ri.IterableDataset.from_generator(array_rows, gen_kwargs=kwargs).shuffle(
            seed=42, buffer_size=buffer, worker_positions=positions)

    def hf():
        return datasets.IterableDataset.from_generator(array_rows, gen_kwargs=kwargs).shuffle(seed=42, buffer_size=buffer)

    with tempfile.TemporaryDirectory() as d:
        pos, pos_size = resume_ms(ours(True), batch_size, cut, f"{d}/positions.state", repeats)
        stored, stored_size = resume_ms(ours(False), batch_size, cut, f"{d}/stored.state", repeats)
        try:
            hf_ms, _ = resume_ms(hf, batch_size, cut, f"{d}/hf.state", 1, ours=False)
            hf_note = f"HF (which drops its buffer): {hf_ms:.0f} ms"
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            hf_note = f"HF's resume of the same pipeline fails ({str(e).splitlines()[-1][:80]})"
    what = f"256 KB arrays, buffer {buffer}, state after {cut} batches of {batch_size}"
    return [
        Result(f"resume to first batch, positions vs stored examples, {what}", pos, stored, "ms",
               ref_label="ours, stored",
               note=f"state files {pos_size / 1e3:.0f} KB and {stored_size / 1e6:.0f} MB; the workers re-run their "
                    f"generator shards up to the buffered rows; {hf_note}"),
    ]


def run_media(kind: str, per_shard: int = 800, limit: int = 6_000, buffer: int = 300, batch_size: int = 16,
              repeats: int = 3) -> list[Result]:
    """PIL images or encoded bytes through the loader, each shuffle mode beside HF's."""
    kwargs = {"shards": list(range(NUM_SHARDS)), "per_shard": per_shard, "kind": kind}
    got = generator_rates(media_rows, kwargs, buffer, batch_size, limit, repeats, collate_media)
    (exact, n), (drop, _), (hf_rate, _) = got["exact"], got["drop"], got["hf"]
    what = (f"{IMAGE_SIDE}x{IMAGE_SIDE} PIL images" if kind == "image" else f"{FILE_BYTES // 1000} KB file bytes"
            ) + f", buffer {buffer}, batch {batch_size}"
    return [
        Result(f"exact shuffle vs drop, {what}", exact, drop, "ex/s", ref_label="ours, drop", note=f"{n} examples each"),
        Result(f"exact shuffle vs HF, {what}", exact, hf_rate, "ex/s", note="HF's shuffle loses its buffer on resume"),
        Result(f"replay shuffle vs HF, {what}", got["replay"][0], hf_rate, "ex/s"),
    ]


def jpeg_dataset(n: int):
    """An in-memory HF ``Dataset`` of ``n`` photo-like 256x256 JPEGs (about 21 KB each) in an
    ``Image()`` column, as ``load_dataset`` gives an image dataset: decoded to PIL when read."""
    import io

    import numpy as np
    from datasets import Dataset, Features, Image, Value
    from PIL import Image as PILImage

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:IMAGE_SIDE, 0:IMAGE_SIDE]
    base = np.stack([(x + y) % 256, (2 * x) % 256, (3 * y) % 256], -1).astype(np.int16)
    files = []
    for i in range(n):
        pixels = np.clip(np.roll(base, i, axis=0) + rng.integers(-12, 13, base.shape), 0, 255).astype(np.uint8)
        out = io.BytesIO()
        PILImage.fromarray(pixels).save(out, "JPEG", quality=90)
        files.append({"bytes": out.getvalue(), "path": None})
    return Dataset.from_dict({"id": list(range(n)), "image": files},
                             features=Features({"id": Value("int64"), "image": Image()}))


def unchanged(example: dict) -> dict:
    """A map between the source and the shuffle (any transform there): the buffer then holds what
    the map returns, the decoded images."""
    return example


def run_image_dataset(n: int = 6_000, limit: int = 6_000, buffer: int = 300, batch_size: int = 16,
                      repeats: int = 3) -> list[Result]:
    """An image dataset (JPEG files in an ``Image()`` column). A shuffle right above the source
    buffers the files and decodes each image as it leaves the buffer, as HF does; with a map
    between them the buffer holds the decoded images."""
    import torch  # noqa: F401
    import resumable_iterable as ri

    hf_ds = jpeg_dataset(n)
    shards = min(NUM_SHARDS, n)

    def ours(buffer_state, map_first=False):
        def make():
            ds = ri.to_iterable_dataset(hf_ds, num_shards=shards)
            if map_first:
                ds = ds.map(unchanged)
            return ds.shuffle(seed=42, buffer_size=buffer, buffer_state=buffer_state)
        return make

    def hf():
        return hf_ds.to_iterable_dataset(num_shards=shards).shuffle(seed=42, buffer_size=buffer)

    got = best_rates({"exact": ours("examples"), "exact_decoded": ours("examples", True), "drop": ours("drop"),
                      "hf": hf}, batch_size, limit, repeats, collate_media)
    (exact, n_ex), (decoded, _), (drop, _), (hf_rate, _) = got["exact"], got["exact_decoded"], got["drop"], got["hf"]
    what = f"JPEG image dataset, buffer {buffer}, batch {batch_size}"
    return [
        Result(f"exact shuffle vs HF, {what}", exact, hf_rate, "ex/s",
               note=f"{n_ex} examples each; the buffer holds the JPEG files, decoded as they leave it (as HF does)"),
        Result(f"exact shuffle vs drop, {what}", exact, drop, "ex/s", ref_label="ours, drop"),
        Result(f"exact, map before the shuffle vs HF, {what}", decoded, hf_rate, "ex/s",
               note="a map between the source and the shuffle: the buffer holds the decoded images"),
    ]


def run_text(n_rows: int = 200_000, limit: int = 32_000, buffer: int = 1000, batch_size: int = 32,
             repeats: int = 3, hf_ds=None) -> list[Result]:
    import torch  # noqa: F401
    import datasets  # noqa: F401

    import resumable_iterable as ri

    hf_ds = hf_ds if hf_ds is not None else make_hf_dataset(n_rows)
    shards = min(NUM_SHARDS, len(hf_ds))

    def ours(buffer_state):
        return lambda: ri.to_iterable_dataset(hf_ds, num_shards=shards).shuffle(
            seed=42, buffer_size=buffer, buffer_state=buffer_state)

    def hf():
        return hf_ds.to_iterable_dataset(num_shards=shards).shuffle(seed=42, buffer_size=buffer)

    ready = hf_ds.select(range(min(len(hf_ds), limit + WORKERS * batch_size))).to_list()
    got = best_rates({"exact": ours("examples"), "drop": ours("drop"), "replay": ours("replay"), "hf": hf,
                      "alone": lambda: rows_dataset(ready), "exact ri": (ours("examples"), "ri"),
                      "hf ri": (hf, "ri"), "alone ri": (lambda: rows_dataset(ready), "ri")},
                     batch_size, limit, repeats)
    (exact, n), (drop, _), (hf_rate, _) = got["exact"], got["drop"], got["hf"]
    replay, alone = got["replay"][0], got["alone"][0]
    exact_ri, hf_ri, alone_ri = got["exact ri"][0], got["hf ri"][0], got["alone ri"][0]
    hf_best = max(hf_rate, hf_ri)
    what = f"text rows, buffer {buffer}, batch {batch_size}"
    return [
        Result(f"loader alone vs HF, {what}", alone, hf_rate, "ex/s", ref_label="HF",
               note="the loader's own ceiling for per-example dicts: the rows ready-made in a Python list, no state "
                    "and no dataset library"),
        Result(f"exact shuffle vs HF, {what}", exact, hf_rate, "ex/s",
               note=f"{n} examples each, both through torchdata's loader; HF's shuffle loses its buffer on resume"),
        Result(f"exact shuffle vs drop, {what}", exact, drop, "ex/s", ref_label="ours, drop"),
        Result(f"replay shuffle vs HF, {what}", replay, hf_rate, "ex/s", note="exact; positions only in the state"),
        Result(f"ri.StatefulDataLoader alone vs torchdata's, {what}", alone_ri, alone, "ex/s",
               ref_label="torchdata's loader", note="the ready-made rows: the ceiling of each loader"),
        Result(f"exact shuffle in ri.StatefulDataLoader vs HF, {what}", exact_ri, hf_best, "ex/s",
               ref_label="HF, faster loader", target=f">= {TARGETS['text_hf']}x HF", check=f"{exact_ri / hf_best:.2f}x",
               met=exact_ri >= TARGETS["text_hf"] * hf_best,
               note=f"HF in the faster of the two loaders: {hf_rate:.0f} ex/s in torchdata's, {hf_ri:.0f} in ours "
                    f"(we are {exact_ri / hf_rate:.2f}x HF in torchdata's loader)"),
    ]


def text_lengths(batch: dict) -> dict:
    """A cheap batched function (module level: the workers pickle it): the work measured is the
    pipeline's, not the function's."""
    return {"n": [len(t) for t in batch["text"]]}


def text_tag(ex: dict) -> dict:
    """A cheap per-example function before the shuffle (module level: the workers pickle it)."""
    return {"n0": len(ex["text"])}


def run_batched_map(n_rows: int = 40_000, limit: int = 16_000, buffer: int = 1000, batch_size: int = 32,
                    map_batch: int = 32, text_repeat: int = 120, repeats: int = 3) -> list[Result]:
    """Documents of ~6 KB of text, ``shuffle(buffer)`` then a batched ``map`` (as HF's tutorials
    tokenize), through torchdata's loader. In a worker the map keeps its input's state from the
    start of its batch; that copy used to hold the buffered documents, which then travelled with
    every state taken during the map's batch."""
    import torch  # noqa: F401
    from datasets import Dataset

    import resumable_iterable as ri

    hf_ds = Dataset.from_dict({"id": list(range(n_rows)), "text": [text_of(i) * text_repeat for i in range(n_rows)]})
    shards = min(NUM_SHARDS, len(hf_ds))

    def ours(buffer_state, mapped_below=False):
        def make():
            ds = ri.to_iterable_dataset(hf_ds, num_shards=shards)
            if mapped_below:
                ds = ds.map(text_tag)
            return ds.shuffle(seed=42, buffer_size=buffer, buffer_state=buffer_state).map(
                text_lengths, batched=True, batch_size=map_batch)
        return make

    def hf(mapped_below=False):
        def make():
            ds = hf_ds.to_iterable_dataset(num_shards=shards)
            if mapped_below:
                ds = ds.map(text_tag)
            return ds.shuffle(seed=42, buffer_size=buffer).map(text_lengths, batched=True, batch_size=map_batch)
        return make

    got = best_rates({"exact": ours("examples"), "drop": ours("drop"), "hf": hf(),
                      "exact_below": ours("examples", True), "drop_below": ours("drop", True),
                      "hf_below": hf(True)}, batch_size, limit, repeats)
    (exact, n), (drop, _), (hf_rate, _) = got["exact"], got["drop"], got["hf"]
    what = f"6 KB documents, shuffle({buffer}) -> map(batched, batch_size={map_batch}), batch {batch_size}"
    below = f"6 KB documents, map -> shuffle({buffer}) -> map(batched, batch_size={map_batch}), batch {batch_size}"

    def worker_state_kb(make) -> float:
        """The pickled dataset state of worker 0 in the loader's state, after 2 * buffer examples."""
        import pickle

        from torchdata.stateful_dataloader import StatefulDataLoader

        dl = StatefulDataLoader(make(), batch_size=batch_size, num_workers=WORKERS)
        it = iter(dl)
        for _ in range(min(2 * buffer, n_rows // 2) // batch_size):
            next(it)
        state = dl.state_dict()["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
        del it, dl
        return len(pickle.dumps(state)) / 1e3

    return [
        Result(f"exact shuffle vs HF, {what}", exact, hf_rate, "ex/s", note=f"{n} examples each"),
        Result(f"exact shuffle vs drop, {what}", exact, drop, "ex/s", ref_label="ours, drop"),
        Result(f"a worker's state, exact vs drop, {what}", worker_state_kb(ours("examples")),
               worker_state_kb(ours("drop")), "KB", ref_label="ours, drop",
               note="the map's copy of its input's state from the start of its batch describes the buffer by "
                    "arithmetic (positions); it held the buffered documents (5.7 MB before 2026-11-26)"),
        Result(f"exact shuffle vs HF, {below}", got["exact_below"][0], got["hf_below"][0], "ex/s",
               note="mapped documents: the worker logs its buffer by value; the batched map keeps its batch's rows "
                    "(it kept a copy of the whole buffer per batch until 2026-11-26: 0.22x HF)"),
        Result(f"exact shuffle vs drop, {below}", got["exact_below"][0], got["drop_below"][0], "ex/s",
               ref_label="ours, drop"),
    ]


def run(quick: bool = False, repeats: int = 3, hf_ds=None) -> list[Result]:
    if quick:
        return (run_arrays(per_shard=8, limit=48, buffer=8, batch_size=8, repeats=1)
                + run_resume(per_shard=8, buffer=8, batch_size=8, cut=2, repeats=1)
                + [r for kind in ("image", "bytes")
                   for r in run_media(kind, per_shard=8, limit=48, buffer=8, batch_size=8, repeats=1)]
                + run_image_dataset(n=64, limit=48, buffer=8, batch_size=8, repeats=1)
                + run_text(n_rows=2_000, limit=320, buffer=50, repeats=1, hf_ds=hf_ds)
                + run_batched_map(n_rows=2_000, limit=320, buffer=50, map_batch=8, repeats=1))
    return (run_arrays(repeats=repeats) + run_resume(repeats=repeats) + run_media("image", repeats=repeats) + run_media("bytes", repeats=repeats)
            + run_image_dataset(repeats=repeats) + run_text(repeats=repeats, hf_ds=hf_ds)
            + run_batched_map(repeats=repeats))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes: only checks that everything runs")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each variant, taking turns (best is kept)")
    ap.add_argument("--sharing", choices=("file_descriptor", "file_system"), default=None,
                    help="torch's sharing strategy for the workers' tensors (default: torch's own default)")
    args = ap.parse_args()
    import torch.multiprocessing

    if args.sharing:
        torch.multiprocessing.set_sharing_strategy(args.sharing)
    title = f"shuffle through StatefulDataLoader ({WORKERS} workers, {torch.multiprocessing.get_sharing_strategy()})"
    print_section(title, run(args.quick, args.repeats))


if __name__ == "__main__":
    main()
