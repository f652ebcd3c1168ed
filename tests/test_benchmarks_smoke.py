"""Keep the benchmark scripts from rotting: run each on tiny sizes. Nothing here asserts on a
timing - only that every benchmark runs and reports a positive figure."""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)

import common  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def data():
    return common.make_hf_dataset(1_200), common.make_hf_dataset(1_200, offset=50_000)


def _check(results, names=None):
    assert results
    for r in results:
        assert isinstance(r, common.Result)
        assert math.isfinite(r.ours) and r.ours >= 0, r
        assert r.ref is None or (math.isfinite(r.ref) and r.ref >= 0), r
    if names is not None:
        assert [r.name for r in results] == names
    text = common.table(results)
    md = common.table(results, markdown=True)
    assert results[0].name in text and results[0].name in md


def test_same_pipelines_give_the_same_examples(data):
    """The benchmark pipelines compute the same thing with both libraries (deterministic ones)."""
    import datasets

    import resumable_iterable as ri

    hf_a, hf_b = data
    for name, pipe in common.PIPELINES.items():
        if "shuffle" in name:
            continue  # random streams differ by design
        ours = list(pipe(ri, ri.to_iterable_dataset(hf_a, num_shards=8), ri.to_iterable_dataset(hf_b, num_shards=8)))
        theirs = list(pipe(datasets, hf_a.to_iterable_dataset(num_shards=8), hf_b.to_iterable_dataset(num_shards=8)))
        assert ours == theirs, name


def test_throughput_runs(data):
    import bench_throughput

    results = bench_throughput.run(repeats=1, hf_scale=0.01, hf_ds=data[0], hf_ds_b=data[1])
    _check(results, list(common.PIPELINES) + ["plain iteration vs raw pyarrow"])
    assert all(r.met is not None for r in results if r.target)


def test_state_runs(data):
    import bench_state

    results = bench_state.run(hf_ds=data[0], number=5, repeats=1)
    _check(results)
    assert sum(r.met is not None for r in results) == 2


def test_save_state_runs(tmp_path):
    import bench_save_state

    results = bench_save_state.run(examples=20, mb=0.01, repeats=1, folder=str(tmp_path))
    _check(results)
    assert sum(r.met is not None for r in results) == 4  # save, save without fsync, load, size
    _check(bench_save_state.run_images(examples=6, side=32, repeats=1, folder=str(tmp_path)))


def test_memory_runs():
    import bench_memory

    _check(bench_memory.run(n_rows=2_000, buffer=300, repeat=2))


def test_dataloader_runs(data):
    pytest.importorskip("torchdata")
    import bench_dataloader

    _check(bench_dataloader.run(hf_ds=data[0], hf_ds_b=data[1], scale=0.005, names=["plain iteration"]))


def test_formatted_runs():
    pytest.importorskip("torchdata")
    import bench_formatted

    results = bench_formatted.run(hf_ds=bench_formatted.make_dataset(600), scale=0.002)
    _check(results)
    checked = [r.name for r in results if r.met is not None]  # the column-wise vs per-example targets
    assert checked == ["column-wise numpy batches vs per-example dicts + collate",
                       "column-wise torch batches vs per-example dicts + collate"]


@pytest.mark.slow  # 27 s (HF's side fills its buffers in each loader): runs with --soak (make soak)
def test_loader_shuffle_runs(data, soak):
    pytest.importorskip("torchdata")
    if not soak:
        pytest.skip("bench_loader_shuffle at --quick sizes takes 27 s: run with --soak (make soak)")
    import bench_loader_shuffle

    results = bench_loader_shuffle.run(quick=True, hf_ds=data[0])
    _check(results)
    assert sum(r.met is not None for r in results) == 3  # the three targets are checked


@pytest.mark.slow  # its mixture runs with --soak (make soak selects the slow tests)
def test_pipelines_run(tmp_path, soak):
    pytest.importorskip("torchdata")
    import bench_pipelines

    # the mixture takes a minute even at --quick sizes (HF's side: its buffer fills before the first
    # batch, in each loader too): only with --soak
    only = ("llm", "vision", "mix") if soak else ("llm", "vision")
    results = bench_pipelines.run(quick=True, folder=str(tmp_path), only=only)
    _check(results)
    assert len(results) == len(only) * 5  # per pipeline: 3 throughputs, state_dict() in one process, the loader's snapshots
    assert all(r.ref is not None for r in results)


def test_pipelines_compute_the_same_as_hf(tmp_path):
    """The LLM and vision pipelines of bench_pipelines.py yield the same tokens and pixels with both
    libraries (before their shuffle; the mixture's random streams differ by design)."""
    import datasets

    import bench_pipelines
    import resumable_iterable as ri

    paths = bench_pipelines.write_jsonl(str(tmp_path), 0.05, files=2)
    got = {}
    for m in (ri, datasets):
        ds = m.load_dataset("json", data_files=paths, split="train", streaming=True)
        ds = ds.map(bench_pipelines.tokenize, batched=True, remove_columns=["id", "url", "text"])
        ds = ds.pack(bench_pipelines.BLOCK, drop_last=True) if m is ri else ds.map(bench_pipelines.group_texts,
                                                                                   batched=True)
        got[m.__name__] = [ex["input_ids"] for ex in ds]
    # group_texts drops each map batch's remainder (of 1000 documents); pack carries it over
    assert got["datasets"] and got["resumable_iterable"][:len(got["datasets"])] == got["datasets"]
    folder = bench_pipelines.write_images(str(tmp_path / "img"), 8)
    ours, theirs = (list(m.load_dataset("imagefolder", data_dir=folder, split="train", streaming=True)
                         .map(bench_pipelines.to_pixels, remove_columns=["image"]).batch(4).with_format("numpy"))
                    for m in (ri, datasets))
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        assert a["pixel_values"].dtype == b["pixel_values"].dtype and np.array_equal(a["pixel_values"], b["pixel_values"])
        assert np.array_equal(a["label"], b["label"])


def test_user_pipelines_run(tmp_path, soak):
    pytest.importorskip("torchdata")
    pytest.importorskip("transformers")
    import bench_user_pipelines

    # --quick runs 3 of the 6 pipelines (HF's loader over the others takes 5-15 s to start and
    # stop): all of them with --soak
    only = tuple(bench_user_pipelines.PIPELINES) if soak else None
    results = bench_user_pipelines.run(quick=True, folder=str(tmp_path), only=only)
    _check(results)
    assert len(results) == len(only or bench_user_pipelines.QUICK)  # --quick: torchdata's loader only
    assert all(r.ref is not None and r.ours > 0 and r.ref > 0 for r in results)


def test_user_pipelines_compute_the_same_as_hf(tmp_path):
    """The deterministic pipelines of bench_user_pipelines.py (the images before their shuffle)
    yield the same with both libraries."""
    import datasets
    import torch

    import bench_user_pipelines as b
    import resumable_iterable as ri

    data = {"corpus": b.write_corpus(str(tmp_path), 400, files=2),
            "jsonl_gz": b.write_jsonl_gz(str(tmp_path), 200, files=2),
            "images": b.write_images(str(tmp_path / "img"), 8)}
    for pipe in (b.jsonl_gz, b.batch_torch):
        ours, theirs = (list(pipe(m, data)) for m in (ri, datasets))
        assert len(ours) == len(theirs) > 0
        for x, y in zip(ours, theirs):
            assert x.keys() == y.keys()
            for k in x:
                same = torch.equal(x[k], y[k]) if isinstance(x[k], torch.Tensor) else x[k] == y[k]
                assert same, (pipe.__name__, k)
    ours, theirs = (list(m.load_dataset("imagefolder", data_dir=data["images"], split="train", streaming=True)
                         .with_format("torch").map(b.flip_crop, remove_columns=["image"])) for m in (ri, datasets))
    assert len(ours) == len(theirs) == 8
    for x, y in zip(ours, theirs):
        assert torch.equal(x["pixel_values"], y["pixel_values"]) and int(x["label"]) == int(y["label"])


def test_run_all_markdown():
    import run_all

    sections = [("t", [common.Result("x", 2.0e6, 1.0e5, "ex/s", target="≥ 10x HF", check="20.0x", met=True),
                       common.Result("y", 5.0, 10.0, "µs"), common.Result("z", 1.0, None, "MB", met=False)])]
    md = run_all.markdown(sections, elapsed=1.0)
    assert "1 met, 1 not met" in md and "| x |" in md and "NOT MET" in md


def test_pack_runs():
    import bench_pack

    results = bench_pack.run(200, repeats=1)
    _check(results)
    assert results[0].met is not None  # the target against the hand-written loop is checked


@pytest.mark.slow  # 7.5 s: runs with --soak (make soak)
def test_arrow_lists_runs(soak):
    if not soak:
        pytest.skip("bench_arrow_lists at small sizes takes 7.5 s: run with --soak (make soak)")
    import bench_arrow_lists

    _check(bench_arrow_lists.run(n_rows=20, width=512, repeats=1, token_rows=40, tokens=512))


def test_json_documents_runs(tmp_path):
    import bench_json_documents

    results = bench_json_documents.run(300, repeats=1, folder=str(tmp_path), memory=False)
    _check(results)
    assert any(r.met is not None for r in results)  # the targets against HF's reader are checked
