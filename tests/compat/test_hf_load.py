"""HF ``datasets``' ``tests/test_load.py``: its tests of ``load_dataset(<format>, ..., streaming=True)`` on
local files, ported to ``resumable_iterable.load_dataset``.

Upstream: https://github.com/huggingface/datasets, commit b7cb10b0e38ab8bbefdb142d0279bc85ac8c7ab8,
file ``tests/test_load.py`` (fixtures from ``tests/fixtures/files.py``, built here). Test names are
upstream's; upstream's ``streaming=[False, True]`` parametrizations run as the streaming case.
``test_load_dataset_streaming_compressed_files`` reads Hub copies of one JSON Lines file, plain,
compressed and archived; the port writes them locally (same first row) and reads the same data
files from there. The other tests of that file load from the Hub, from dataset scripts or map-style
datasets (not ported; see ``docs/compat.md``).
"""

from __future__ import annotations

import bz2
import csv
import gzip
import json
import os
import zipfile

import pyarrow as pa
import pytest
from datasets import Features, Value

import resumable_iterable as ri
from hf_helpers import DATA

pytestmark = pytest.mark.compat


def _csv(path):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["col_1", "col_2", "col_3"])
        writer.writeheader()
        for item in DATA:
            writer.writerow(item)
    return str(path)


def _jsonl(path):
    with open(path, "w") as f:
        for item in DATA:
            f.write(json.dumps(item) + "\n")
    return str(path)


def _text(path):
    with open(path, "w") as f:
        for item in ["0", "1", "2", "3"]:
            f.write(item + "\n")
    return str(path)


def _zip(path, files, with_dir):
    with zipfile.ZipFile(path, "w") as f:
        for file in files:
            name = os.path.basename(file)
            f.write(file, arcname=os.path.join("main_dir", name) if with_dir else name)
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Upstream's session fixtures, by name."""
    d = tmp_path_factory.mktemp("data")
    out = {"csv_path": _csv(d / "dataset.csv"), "jsonl_path": _jsonl(d / "dataset.jsonl"),
           "text_path": _text(d / "dataset.txt")}
    pairs = {"csv": [out["csv_path"], _csv(d / "dataset2.csv")],
             "jsonl": [out["jsonl_path"], _jsonl(d / "dataset2.jsonl")],
             "text": [out["text_path"], _text(d / "dataset2.txt")]}
    for kind, files in pairs.items():
        out[f"zip_{kind}_path"] = _zip(d / f"{kind}-dataset.zip", files, with_dir=False)
        out[f"zip_{kind}_with_dir_path"] = _zip(d / f"dataset_with_dir.{kind}.zip", files, with_dir=True)
    out["bz2_csv_path"] = str(d / "dataset.csv.bz2")
    with open(out["csv_path"], "rb") as f, bz2.open(out["bz2_csv_path"], "wb") as g:
        g.write(f.read())
    out["jsonl_gz_path"] = str(d / "dataset.jsonl.gz")
    with open(out["jsonl_path"], "rb") as orig_file, gzip.open(out["jsonl_gz_path"], "wb") as zipped_file:
        zipped_file.writelines(orig_file)
    return out


def test_load_dataset_streaming_gz_json(data):
    data_files = data["jsonl_gz_path"]
    ds = ri.load_dataset("json", split="train", data_files=data_files, streaming=True)
    assert isinstance(ds, ri.IterableDataset)
    ds_item = next(iter(ds))
    assert ds_item == {"col_1": "0", "col_2": 0, "col_3": 0.0}


@pytest.fixture(scope="module")
def compressed_files(tmp_path_factory):
    """The files of upstream's Hub repo ``hf-internal-testing/compressed_files``, written locally: one
    JSON Lines file (first row as upstream asserts it) plain, gzipped, xz'd, zstd'd, and in a zip
    and a tar archive."""
    import io
    import lzma
    import tarfile

    d = tmp_path_factory.mktemp("compressed_files")
    rows = [{"tokens": ["Ministeri", "de", "Justícia", "d'Espanya"], "ner_tags": [1, 2, 2, 2],
             "langs": ["ca", "ca", "ca", "ca"], "spans": ["PER: Ministeri de Justícia d'Espanya"]},
            {"tokens": ["Hola"], "ner_tags": [0], "langs": ["ca"], "spans": []}]
    raw = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode()
    (d / "sample.jsonl").write_bytes(raw)
    (d / "sample.jsonl.gz").write_bytes(gzip.compress(raw))
    (d / "sample.jsonl.xz").write_bytes(lzma.compress(raw))
    with pa.output_stream(str(d / "sample.jsonl.zst"), compression="zstd") as f:  # no zstandard needed
        f.write(raw)
    with zipfile.ZipFile(d / "sample.zip", "w") as z:
        z.writestr("sample.jsonl", raw)
    with tarfile.open(d / "sample.tar", "w") as t:
        info = tarfile.TarInfo("sample.jsonl")
        info.size = len(raw)
        t.addfile(info, io.BytesIO(raw))
    return d


@pytest.mark.parametrize(
    "path",
    [
        "sample.jsonl",
        "sample.jsonl.gz",
        "sample.tar",
        "sample.jsonl.xz",
        "sample.zip",
        "sample.jsonl.zst",  # upstream: require_zstandard (HF reads it with zstandard; ours with pyarrow)
    ],
)
def test_load_dataset_streaming_compressed_files(path, compressed_files):
    data_files = str(compressed_files / path)  # upstream: https://huggingface.co/datasets/<repo>/resolve/main/<path>
    if data_files[-3:] in ("zip", "tar"):  # we need to glob "*" inside archives
        data_files = data_files[-3:] + "://*::" + data_files
    ds = ri.load_dataset("json", split="train", data_files=data_files, streaming=True)
    assert isinstance(ds, ri.IterableDataset)
    ds_item = next(iter(ds))
    assert ds_item == {
        "tokens": ["Ministeri", "de", "Justícia", "d'Espanya"],
        "ner_tags": [1, 2, 2, 2],
        "langs": ["ca", "ca", "ca", "ca"],
        "spans": ["PER: Ministeri de Justícia d'Espanya"],
    }


@pytest.mark.parametrize("path_extension", ["csv", "csv.bz2"])
def test_load_dataset_streaming_csv(path_extension, data):
    paths = {"csv": data["csv_path"], "csv.bz2": data["bz2_csv_path"]}
    data_files = str(paths[path_extension])
    features = Features({"col_1": Value("string"), "col_2": Value("int32"), "col_3": Value("float32")})
    ds = ri.load_dataset("csv", split="train", data_files=data_files, features=features, streaming=True)
    assert isinstance(ds, ri.IterableDataset)
    ds_item = next(iter(ds))
    assert ds_item == {"col_1": "0", "col_2": 0, "col_3": 0.0}


def _zip_params(kind):
    return pytest.mark.parametrize("data_file", [
        f"zip_{kind}_path",
        f"zip_{kind}_with_dir_path",
        f"{kind}_path",
    ])


def _count_streaming(ds, first):
    ds_item_counter = 0
    for ds_item in ds:
        if ds_item_counter == 0:
            assert ds_item == first
        ds_item_counter += 1
    return ds_item_counter


@_zip_params("csv")
def test_load_dataset_zip_csv(data_file, data):
    expected_size = 8 if data_file.startswith("zip") else 4
    features = Features({"col_1": Value("string"), "col_2": Value("int32"), "col_3": Value("float32")})
    ds = ri.load_dataset("csv", split="train", data_files=data[data_file], features=features, streaming=True)
    assert _count_streaming(ds, {"col_1": "0", "col_2": 0, "col_3": 0.0}) == expected_size


@_zip_params("jsonl")
def test_load_dataset_zip_jsonl(data_file, data):
    expected_size = 8 if data_file.startswith("zip") else 4
    features = Features({"col_1": Value("string"), "col_2": Value("int32"), "col_3": Value("float32")})
    ds = ri.load_dataset("json", split="train", data_files=data[data_file], features=features, streaming=True)
    assert _count_streaming(ds, {"col_1": "0", "col_2": 0, "col_3": 0.0}) == expected_size


@_zip_params("text")
def test_load_dataset_zip_text(data_file, data):
    expected_size = 8 if data_file.startswith("zip") else 4
    ds = ri.load_dataset("text", split="train", data_files=data[data_file], streaming=True)
    assert _count_streaming(ds, {"text": "0"}) == expected_size


@pytest.fixture
def data_dir_with_arrow(tmp_path):
    from datasets.arrow_writer import ArrowWriter

    data_dir = tmp_path / "data_dir"
    data_dir.mkdir()
    for split, value in (("train", "foo"), ("test", "bar")):
        with ArrowWriter(path=os.path.join(data_dir, f"{split}.arrow")) as writer:
            writer.write_table(pa.Table.from_pydict({"col_1": [value] * 10}))
            num_examples, num_bytes = writer.finalize()
        assert num_examples == 10
        assert num_bytes > 0
    return str(data_dir)


def test_load_dataset_arrow(data_dir_with_arrow):
    ds = ri.load_dataset("arrow", split="train", data_dir=data_dir_with_arrow, streaming=True)
    assert _count_streaming(ds, {"col_1": "foo"}) == 10


def test_load_dataset_text_with_unicode_new_lines(tmp_path):
    text = "\n".join(["First", "Second\u2029with Unicode new line", "Third"])
    path = tmp_path / "dataset_with_unicode_new_lines.txt"
    path.write_text(text, encoding="utf-8")
    ds = ri.load_dataset("text", split="train", data_files=str(path), streaming=True)
    assert len(list(ds)) == 3  # upstream: ds.num_rows of the map-style dataset


def test_load_dataset_with_unsupported_extensions(tmp_path):
    path = _text(tmp_path / "dataset.abc")
    ds = ri.load_dataset("text", split="train", data_files=path, streaming=True)
    assert len(list(ds)) == 4  # upstream: ds.num_rows of the map-style dataset
