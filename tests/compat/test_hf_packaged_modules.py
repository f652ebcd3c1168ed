"""HF ``datasets``' tests of its file builders (``tests/packaged_modules/``), ported to
``resumable_iterable.load_dataset`` at the public-API level.

Upstream: https://github.com/huggingface/datasets, commit b7cb10b0e38ab8bbefdb142d0279bc85ac8c7ab8,
files ``tests/packaged_modules/test_parquet.py``, ``test_arrow.py``, ``test_text.py``, ``test_csv.py``,
``test_json.py``, ``test_imagefolder.py`` and ``test_folder_based_builder.py`` (through ``imagefolder``).
Test names and fixtures are upstream's. How the port was done (``docs/compat.md``):

- Upstream drives a builder's private ``_generate_tables`` / ``_generate_examples`` (or
  ``download_and_prepare`` then ``as_dataset``); the port reads the same files with
  ``ri.load_dataset(<builder>, data_files=... | data_dir=..., streaming=True)``, which is what these
  builders serve. Assertions on the Arrow table become assertions on the rows yielded (a column dict
  built from them), on the Arrow schema the ``features`` (``decode(False)`` for the stored value of
  an ``Image`` column); assertions on private ``gen_kwargs`` are dropped, their public effect (the
  columns of the rows) kept.
- Tests of the builders' configs (``*Config`` name and ``data_files`` checks, pandas-version
  plumbing), of HF's ``FolderBasedBuilder`` class, of Hub files (``remote=True``) and of HF's
  agent-trace JSON mode (needs ``teich``, upstream skips too) are left out. Upstream's
  ``streaming=[False, True]`` parametrizations run as the streaming case.
- Expected failures are ``xfail(strict=True)`` naming their cause (constants below).
"""

from __future__ import annotations

import json
import shutil
import textwrap

import numpy as np
import pytest
from datasets import ClassLabel, Features, Image, Value

import resumable_iterable as ri
from hf_helpers import assert_resumes

pytestmark = pytest.mark.compat

# ---------------------------------------------------------------------------- cause groups
# Every xfail names one of these (docs/compat.md lists them with the cases).
READ_ERROR_LOG = ("deliberate difference: a file that cannot be parsed raises a ValueError naming the file and shard "
                  "(HF's message follows); HF logs 'Failed to read file ...' at ERROR and re-raises pandas' error")


def xfail(reason: str):
    return pytest.mark.xfail(reason=reason, strict=True)


def _columns(rows: list[dict]) -> dict:
    """The rows as a column dict, as upstream's ``pa_table.to_pydict()`` (columns in first-seen order)."""
    names: dict = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return {name: [row.get(name) for row in rows] for name in names}


@pytest.fixture(scope="session")
def image_file(tmp_path_factory):
    """Upstream's ``tests/features/data/test_image_rgb.jpg``: an RGB JPEG (built here, no download)."""
    from PIL import Image as PILImage

    path = tmp_path_factory.mktemp("data") / "test_image_rgb.jpg"
    pixels = np.arange(32 * 24 * 3, dtype=np.uint8).reshape(24, 32, 3)
    PILImage.fromarray(pixels).save(path)
    return str(path)


################################
#
#   tests/packaged_modules/test_parquet.py
#
################################

DATA = [
    {"col_1": "0", "col_2": 0, "col_3": 0.0},
    {"col_1": "1", "col_2": 1, "col_3": 1.0},
    {"col_1": "2", "col_2": 2, "col_3": 2.0},
    {"col_1": "3", "col_2": 3, "col_3": 3.0},
]


def _write_parquet(path, num_row_groups):
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema({"col_1": pa.string(), "col_2": pa.int64(), "col_3": pa.float64()})
    with open(path, "wb") as f:
        writer = pq.ParquetWriter(f, schema=schema)
        pa_table = pa.Table.from_pydict({k: [DATA[i][k] for i in range(len(DATA))] for k in DATA[0]}, schema=schema)
        for _ in range(num_row_groups):
            writer.write_table(pa_table)
        writer.close()
    return str(path)


@pytest.fixture(scope="session")
def parquet_path(tmp_path_factory):
    return _write_parquet(tmp_path_factory.mktemp("data") / "dataset.parquet", 1)


@pytest.fixture(scope="session")
def multi_row_groups_parquet_path(tmp_path_factory):
    return _write_parquet(tmp_path_factory.mktemp("data") / "multi_row_groups_dataset.parquet", 4)


def test_parquet_reshard(multi_row_groups_parquet_path):
    ds = ri.load_dataset("parquet", data_files=multi_row_groups_parquet_path, split="train", streaming=True)
    assert ds.num_shards == 1
    expected = list(ds)
    resharded_ds = ds.reshard()
    assert resharded_ds.num_shards == 4
    assert list(resharded_ds) == expected
    # added: the resharded dataset resumes exactly at every cut point
    assert assert_resumes(lambda: ri.load_dataset("parquet", data_files=multi_row_groups_parquet_path,
                                                  split="train").reshard()) == expected


def test_parquet_columns(parquet_path):
    ds = ri.load_dataset("parquet", data_files=parquet_path, split="train", streaming=True)
    full_features = ds.features
    assert len(ds.features) == 3
    assert len(next(iter(ds))) == 3
    ds = ri.load_dataset("parquet", data_files=parquet_path, split="train", streaming=True, columns=["col_1"])
    assert len(ds.features) == 1
    assert len(next(iter(ds))) == 1
    ds = ri.load_dataset(
        "parquet", data_files=parquet_path, split="train", streaming=True, columns=["col_1"], features=full_features
    )
    assert len(ds.features) == 1
    assert len(next(iter(ds))) == 1


################################
#
#   tests/packaged_modules/test_text.py
#
################################


@pytest.fixture
def text_file(tmp_path):
    filename = tmp_path / "text.txt"
    data = textwrap.dedent(
        """\
        Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.
        Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.
        Duis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur.
        Excepteur sint occaecat cupidatat non proident, sunt in culpa qui officia deserunt mollit anim id est laborum.

        Second paragraph:
        Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.
        Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.
        Duis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur.
        Excepteur sint occaecat cupidatat non proident, sunt in culpa qui officia deserunt mollit anim id est laborum.
        """  # noqa: E501
    )
    with open(filename, "w", encoding="utf-8") as f:
        f.write(data)
    return str(filename)


@pytest.fixture
def text_file_with_image(tmp_path, image_file):
    filename = tmp_path / "text_with_image.txt"
    with open(filename, "w", encoding="utf-8") as f:
        f.write(image_file)
    return str(filename)


@pytest.mark.parametrize("keep_linebreaks", [True, False])
def test_text_linebreaks(text_file, keep_linebreaks):
    with open(text_file, encoding="utf-8") as f:
        expected_content = f.read().splitlines(keepends=keep_linebreaks)
    ds = ri.load_dataset("text", data_files=text_file, split="train", streaming=True,
                         keep_linebreaks=keep_linebreaks, encoding="utf-8")
    generated_content = _columns(list(ds))["text"]
    assert generated_content == expected_content


def test_text_cast_image(text_file_with_image):
    with open(text_file_with_image, encoding="utf-8") as f:
        image_file = f.read().splitlines()[0]
    ds = ri.load_dataset("text", data_files=text_file_with_image, split="train", streaming=True, encoding="utf-8",
                         features=Features({"image": Image()}))
    assert ds.features["image"] == Image()  # upstream: the Arrow type of the table's column
    generated_content = _columns(list(ds.decode(False)))["image"]
    assert generated_content == [{"path": image_file, "bytes": None}]


@pytest.mark.parametrize("sample_by", ["line", "paragraph", "document"])
def test_text_sample_by(sample_by, text_file):
    with open(text_file, encoding="utf-8") as f:
        expected_content = f.read()
    if sample_by == "line":
        expected_content = expected_content.splitlines()
    elif sample_by == "paragraph":
        expected_content = expected_content.split("\n\n")
    elif sample_by == "document":
        expected_content = [expected_content]

    def build():
        return ri.load_dataset("text", data_files=text_file, split="train", streaming=True, sample_by=sample_by,
                               encoding="utf-8", chunksize=100)

    generated_content = _columns(list(build()))["text"]
    assert generated_content == expected_content
    assert_resumes(build)  # added: a resume at every cut point (the file read 100 characters at a time)


################################
#
#   tests/packaged_modules/test_csv.py
#
################################


@pytest.fixture
def csv_file(tmp_path):
    filename = tmp_path / "file.csv"
    data = textwrap.dedent(
        """\
        header1,header2
        1,2
        10,20
        """
    )
    with open(filename, "w") as f:
        f.write(data)
    return str(filename)


@pytest.fixture
def malformed_csv_file(tmp_path):
    filename = tmp_path / "malformed_file.csv"
    data = textwrap.dedent(
        """\
        header1,header2
        1,2
        10,20,
        """
    )
    with open(filename, "w") as f:
        f.write(data)
    return str(filename)


@pytest.fixture
def csv_file_with_image(tmp_path, image_file):
    filename = tmp_path / "csv_with_image.csv"
    data = textwrap.dedent(
        f"""\
        image
        {image_file}
        """
    )
    with open(filename, "w") as f:
        f.write(data)
    return str(filename)


@pytest.fixture
def csv_file_with_label(tmp_path):
    filename = tmp_path / "csv_with_label.csv"
    data = textwrap.dedent(
        """\
        label
        good
        bad
        good
        """
    )
    with open(filename, "w") as f:
        f.write(data)
    return str(filename)


@pytest.fixture
def csv_file_with_int_list(tmp_path):
    filename = tmp_path / "csv_with_int_list.csv"
    data = textwrap.dedent(
        """\
        int_list
        1 2 3
        4 5 6
        7 8 9
        """
    )
    with open(filename, "w") as f:
        f.write(data)
    return str(filename)


@pytest.mark.parametrize("check_log", [pytest.param(True, marks=xfail(READ_ERROR_LOG)), False],
                         ids=["as_hf", "error_only"])
def test_csv_generate_tables_raises_error_with_malformed_csv(csv_file, malformed_csv_file, caplog, check_log):
    # check_log=False: the error without HF's log record, which we do not write (the error names the file)
    import os

    ds = ri.load_dataset("csv", data_files=[csv_file, malformed_csv_file], split="train", streaming=True)
    with pytest.raises(ValueError, match="Error tokenizing data"):
        for _ in ds:
            pass
    if check_log:
        assert any(
            record.levelname == "ERROR"
            and "Failed to read file" in record.message
            and os.path.basename(malformed_csv_file) in record.message
            for record in caplog.records
        )


def test_csv_cast_image(csv_file_with_image):
    with open(csv_file_with_image, encoding="utf-8") as f:
        image_file = f.read().splitlines()[1]
    ds = ri.load_dataset("csv", data_files=csv_file_with_image, split="train", streaming=True, encoding="utf-8",
                         features=Features({"image": Image()}))
    assert ds.features["image"] == Image()
    generated_content = _columns(list(ds.decode(False)))["image"]
    assert generated_content == [{"path": image_file, "bytes": None}]


def test_csv_cast_label(csv_file_with_label):
    with open(csv_file_with_label, encoding="utf-8") as f:
        labels = f.read().splitlines()[1:]
    ds = ri.load_dataset("csv", data_files=csv_file_with_label, split="train", streaming=True, encoding="utf-8",
                         features=Features({"label": ClassLabel(names=["good", "bad"])}))
    assert ds.features["label"] == ClassLabel(names=["good", "bad"])
    generated_content = _columns(list(ds))["label"]
    assert generated_content == [ClassLabel(names=["good", "bad"]).str2int(label) for label in labels]


def test_csv_convert_int_list(csv_file_with_int_list):
    ds = ri.load_dataset("csv", data_files=csv_file_with_int_list, split="train", streaming=True, encoding="utf-8",
                         sep=",", converters={"int_list": lambda x: [int(i) for i in x.split()]})
    rows = list(ds)
    assert all(isinstance(row["int_list"], list) for row in rows)  # upstream: a list-typed Arrow column
    generated_content = _columns(rows)["int_list"]
    assert generated_content == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_csv_generate_tables_skips_malformed_row_with_on_bad_lines_skip(csv_file, malformed_csv_file):
    ds = ri.load_dataset("csv", data_files=[malformed_csv_file], split="train", streaming=True, on_bad_lines="skip")
    rows = list(ds)
    assert len(rows) == 1
    assert _columns(rows) == {"header1": [1], "header2": [2]}


################################
#
#   tests/packaged_modules/test_json.py
#
################################


def _write(tmp_path, name, data, encoding=None):
    filename = tmp_path / name
    with open(filename, "w", encoding=encoding) as f:
        f.write(data)
    return str(filename)


_THREE_LINES = """\
{"col_1": -1}
{"col_1": 1, "col_2": 2}
{"col_1": 10, "col_2": 20}
"""
_LIST_OF_DICTS = """\
[
    {"col_1": -1},
    {"col_1": 1, "col_2": 2},
    {"col_1": 10, "col_2": 20}
]
"""
_LIST_OF_DICTS_FIELD = """\
{
    "field1": 1,
    "field2": "aabb",
    "field3": [
        {"col_1": -1},
        {"col_1": 1, "col_2": 2},
        {"col_1": 10, "col_2": 20}
    ]
}
"""
_SORTED_COLUMNS = """\
[
    {"ID": 0, "Language": "Language-0", "Topic": "Topic-0"},
    {"ID": 1, "Language": "Language-1", "Topic": "Topic-1"},
    {"ID": 2, "Language": "Language-2", "Topic": "Topic-2"}
]
"""
_LISTS_OF_DICTS_OF_VARYING_KEYS = """\
{"col_1": [{"a": 0}, {"b": 0}]}
{"col_1": [{"c": 0}, {"d": 0}]}
"""

_messages = [
    {"role": "user", "content": "Turn on the living room lights and play my electronic music playlist."},
    {
        "role": "assistant",
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "control_light", "arguments": {"room": "living room", "state": "on"}},
            },
            {
                "type": "function",
                "function": {
                    "name": "play_music",
                    "arguments": {
                        "playlist": "electronic"
                    },  # mixed-type here since keys ["playlist"] and ["room", "state"] are different
                },
            },
        ],
    },
    {"role": "tool", "name": "control_light", "content": "The lights in the living room are now on."},
    {"role": "tool", "name": "play_music", "content": "The music is now playing."},
    {"role": "assistant", "content": "Done!"},
]

# upstream's fixtures, by name: (file name, content, encoding)
JSON_FIXTURES = {
    "json_file": ("file.json", '{\n    "col_1": 1,\n    "col_2": 2\n}\n', None),
    "jsonl_file": ("file.jsonl", _THREE_LINES, None),
    "ndjson_file": ("file.ndjson", _THREE_LINES, None),
    "jsonl_file_utf16_encoded": ("file_utf16_encoded.jsonl", _THREE_LINES, "utf-16"),
    "json_file_with_list_of_dicts": ("file_with_list_of_dicts.json", _LIST_OF_DICTS, None),
    "json_file_with_list_of_strings": (
        "file_with_list_of_strings.json", '[\n    "First text.",\n    "Second text.",\n    "Third text."\n]\n', None),
    "json_file_with_list_of_dicts_field": ("file_with_list_of_dicts_field.json", _LIST_OF_DICTS_FIELD, None),
    "json_file_with_list_of_strings_field": (
        "file.json",
        '{\n    "field1": 1,\n    "field2": "aabb",\n    "field3": [\n        "First text.",\n'
        '        "Second text.",\n        "Third text."\n    ]\n}\n', None),
    "json_file_with_dict_of_lists_field": (
        "file.json",
        '{\n    "field1": 1,\n    "field2": "aabb",\n    "field3": {\n        "col_1": [-1, 1, 10],\n'
        '        "col_2": [null, 2, 20]\n    }\n}\n', None),
    "json_file_with_list_of_dicts_with_sorted_columns": ("file.json", _SORTED_COLUMNS, None),
    "json_file_with_list_of_dicts_with_sorted_columns_field": (
        "file.json",
        '{\n    "field1": 1,\n    "field2": "aabb",\n    "field3": '
        + textwrap.indent(_SORTED_COLUMNS, "    ").lstrip() + "}\n", None),
    "jsonl_file_with_mix_of_str_and_int": ("file.jsonl", '{"col_1": -1}\n{"col_1": 1}\n{"col_1": "foo"}\n', None),
    "jsonl_file_with_dicts_of_varying_keys": (
        "file.jsonl", '{"col_1": {"a": 0}}\n{"col_1": {"b": 0}}\n{"col_1": {"c": 0}}\n', None),
    "jsonl_file_with_lists_of_dicts_of_varying_keys": ("file.jsonl", _LISTS_OF_DICTS_OF_VARYING_KEYS, None),
    "jsonl_file_with_lists_of_dicts_of_varying_keys_and_bom": (
        "file_with_bom.jsonl", _LISTS_OF_DICTS_OF_VARYING_KEYS, "utf-8-sig"),
    "jsonl_file_with_messages": ("file.jsonl", json.dumps({"messages": _messages}), None),
}


def _json_fixture(tmp_path, name):
    return _write(tmp_path, *JSON_FIXTURES[name])


EXPECTED_ONE = {"col_1": [1], "col_2": [2]}
EXPECTED_THREE = {"col_1": [-1, 1, 10], "col_2": [None, 2, 20]}
EXPECTED_LIST_OF_STRINGS = {"text": ["First text.", "Second text.", "Third text."]}
EXPECTED_MIX = {"col_1": [-1, 1, "foo"]}
EXPECTED_DICTS_WITH_VARYING_KEYS = {"col_1": [{"a": 0}, {"b": 0}, {"c": 0}]}
EXPECTED_LISTS_OF_DICTS_WITH_VARYING_KEYS = {"col_1": [[{"a": 0}, {"b": 0}], [{"c": 0}, {"d": 0}]]}
EXPECTED_MESSAGES = {"messages": [_messages]}


@pytest.mark.parametrize(
    "file_fixture, config_kwargs, expected",
    [
        ("json_file", {}, EXPECTED_ONE),
        ("jsonl_file", {}, EXPECTED_THREE),
        ("ndjson_file", {}, EXPECTED_THREE),
        ("jsonl_file_utf16_encoded", {"encoding": "utf-16"}, EXPECTED_THREE),
        ("json_file_with_list_of_dicts", {}, EXPECTED_THREE),
        ("json_file_with_list_of_dicts_field", {"field": "field3"}, EXPECTED_THREE),
        ("json_file_with_list_of_strings", {}, EXPECTED_LIST_OF_STRINGS),
        ("json_file_with_list_of_strings_field", {"field": "field3"}, EXPECTED_LIST_OF_STRINGS),
        ("json_file_with_dict_of_lists_field", {"field": "field3"}, EXPECTED_THREE),
        ("jsonl_file_with_mix_of_str_and_int", {}, EXPECTED_MIX),
        ("jsonl_file_with_dicts_of_varying_keys", {}, EXPECTED_DICTS_WITH_VARYING_KEYS),
        ("jsonl_file_with_lists_of_dicts_of_varying_keys", {}, EXPECTED_LISTS_OF_DICTS_WITH_VARYING_KEYS),
        ("jsonl_file_with_lists_of_dicts_of_varying_keys_and_bom", {}, EXPECTED_LISTS_OF_DICTS_WITH_VARYING_KEYS),
        ("jsonl_file_with_messages", {}, EXPECTED_MESSAGES),
    ],
)
def test_json_generate_tables(file_fixture, config_kwargs, expected, tmp_path):
    data_file = _json_fixture(tmp_path, file_fixture)
    ds = ri.load_dataset("json", data_files=data_file, split="train", streaming=True, **config_kwargs)
    out = _columns(list(ds))
    assert out == expected


_MISSING_FEATURES = Features({"col_1": Value("int64"), "col_2": Value("int64"), "missing_col": Value("string")})


@pytest.mark.parametrize(
    "file_fixture, config_kwargs",
    [
        ("jsonl_file", {"features": _MISSING_FEATURES}),
        ("json_file_with_list_of_dicts", {"features": _MISSING_FEATURES}),
        ("json_file_with_list_of_dicts_field", {"field": "field3", "features": _MISSING_FEATURES}),
    ],
)
def test_json_generate_tables_with_missing_features(file_fixture, config_kwargs, tmp_path):
    data_file = _json_fixture(tmp_path, file_fixture)
    ds = ri.load_dataset("json", data_files=data_file, split="train", streaming=True, **config_kwargs)
    assert _columns(list(ds)) == {"col_1": [-1, 1, 10], "col_2": [None, 2, 20], "missing_col": [None, None, None]}


@pytest.mark.parametrize(
    "file_fixture, config_kwargs",
    [
        ("json_file_with_list_of_dicts_with_sorted_columns", {}),
        ("json_file_with_list_of_dicts_with_sorted_columns_field", {"field": "field3"}),
    ],
)
def test_json_generate_tables_with_sorted_columns(file_fixture, config_kwargs, tmp_path):
    data_file = _json_fixture(tmp_path, file_fixture)
    ds = ri.load_dataset("json", data_files=data_file, split="train", streaming=True, **config_kwargs)
    assert list(_columns(list(ds))) == ["ID", "Language", "Topic"]


def test_json_load_dataset_without_droid_marker_stays_ordinary_json(tmp_path):
    rows = [
        {"type": "session_start", "id": "droid-session", "version": 2},
        {
            "type": "message",
            "id": "message-1",
            "timestamp": "2026-06-02T18:55:30.274Z",
            "message": {"role": "user", "content": [{"type": "text", "text": "Inspect the project"}]},
        },
    ]
    trace_file = _write(tmp_path, "droid_missing_marker.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    dataset = ri.load_dataset("json", data_files=trace_file, split="train", streaming=True)
    first = next(iter(dataset))  # upstream: dataset[0] of a map-style dataset
    assert list(first) == ["type", "id", "version", "timestamp", "message"]  # upstream: column_names
    assert first["type"] == "session_start"


################################
#
#   tests/packaged_modules/test_imagefolder.py
#
################################


@pytest.fixture
def data_files_with_labels_no_metadata(tmp_path, image_file):
    """Upstream's fixture is the ``DataFilesDict`` of this folder; ours is the folder (``data_dir=``)."""
    data_dir = tmp_path / "data_files_with_labels_no_metadata"
    for label in ("cat", "dog"):
        (data_dir / label).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(image_file, data_dir / label / f"image_{label}.jpg")
    return str(data_dir)


@pytest.fixture
def image_file_with_metadata(tmp_path, image_file):
    image_filename = tmp_path / "image_rgb.jpg"
    shutil.copyfile(image_file, image_filename)
    image_metadata_filename = tmp_path / "metadata.jsonl"
    image_metadata = textwrap.dedent(
        """\
        {"file_name": "image_rgb.jpg", "caption": "Nice image"}
        """
    )
    with open(image_metadata_filename, "w", encoding="utf-8") as f:
        f.write(image_metadata)
    return str(image_filename), str(image_metadata_filename)


def _metadata(fmt, rows):
    if fmt == "jsonl":
        return "".join(json.dumps({"file_name": name, "caption": caption}) + "\n" for name, caption in rows)
    return "file_name,caption\n" + "".join(f"{name},{caption}\n" for name, caption in rows)


@pytest.fixture(params=["jsonl", "csv"])
def data_files_with_one_split_and_metadata(request, tmp_path, image_file):
    data_dir = tmp_path / "imagefolder_data_dir_with_metadata_one_split"
    (data_dir / "subdir").mkdir(parents=True, exist_ok=True)
    for name in ("image_rgb.jpg", "image_rgb2.jpg", "subdir/image_rgb3.jpg"):
        shutil.copyfile(image_file, data_dir / name)
    rows = [("image_rgb.jpg", "Nice image"), ("image_rgb2.jpg", "Nice second image"),
            ("subdir/image_rgb3.jpg", "Nice third image")]
    (data_dir / f"metadata.{request.param}").write_text(_metadata(request.param, rows), encoding="utf-8")
    return str(data_dir), {"train": 4}  # the folder and the number of data files of each split


@pytest.fixture(params=["jsonl", "csv"])
def data_files_with_two_splits_and_metadata(request, tmp_path, image_file):
    data_dir = tmp_path / "imagefolder_data_dir_with_metadata_two_splits"
    for split in ("train", "test"):
        (data_dir / split).mkdir(parents=True, exist_ok=True)
    for name in ("train/image_rgb.jpg", "train/image_rgb2.jpg", "test/image_rgb3.jpg"):
        shutil.copyfile(image_file, data_dir / name)
    (data_dir / "train" / f"metadata.{request.param}").write_text(
        _metadata(request.param, [("image_rgb.jpg", "Nice train image"),
                                  ("image_rgb2.jpg", "Nice second train image")]), encoding="utf-8")
    (data_dir / "test" / f"metadata.{request.param}").write_text(
        _metadata(request.param, [("image_rgb3.jpg", "Nice test image")]), encoding="utf-8")
    return str(data_dir), {"train": 3, "test": 2}


@pytest.fixture
def data_files_with_zip_archives(tmp_path, image_file):
    from PIL import Image as PILImage
    from PIL import ImageOps

    data_dir = tmp_path / "imagefolder_data_dir_with_zip_archives"
    archive_dir = data_dir / "archive"
    subdir = archive_dir / "subdir"
    subdir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(image_file, archive_dir / "image_rgb.jpg")
    # make sure they're two different images
    ImageOps.flip(PILImage.open(image_file)).save(subdir / "image_rgb2.jpg")
    (archive_dir / "metadata.jsonl").write_text(
        _metadata("jsonl", [("image_rgb.jpg", "Nice image"), ("subdir/image_rgb2.jpg", "Nice second image")]),
        encoding="utf-8")
    shutil.make_archive(archive_dir, "zip", archive_dir)
    shutil.rmtree(str(archive_dir))
    return str(data_dir), {"train": 1}


def test_generate_examples_with_labels(data_files_with_labels_no_metadata):
    # there are no metadata.jsonl files in this test case
    ds = ri.load_dataset("imagefolder", data_dir=data_files_with_labels_no_metadata, split="train", streaming=True,
                         drop_labels=False)
    assert ds.features == Features({"image": Image(), "label": ClassLabel(names=["cat", "dog"])})
    dataset = list(ds)
    label_feature = ds.features["label"]

    assert dataset[0]["label"] == label_feature._str2int["cat"]
    assert dataset[1]["label"] == label_feature._str2int["dog"]


@pytest.mark.parametrize("drop_metadata", [None, True, False])
@pytest.mark.parametrize("drop_labels", [None, True, False])
def test_generate_examples_drop_labels(data_files_with_labels_no_metadata, drop_metadata, drop_labels):
    # upstream also asserts the private gen_kwargs (add_labels is not bool(drop_labels)); their effect is the columns
    ds = ri.load_dataset("imagefolder", data_dir=data_files_with_labels_no_metadata, split="train", streaming=True,
                         drop_metadata=drop_metadata, drop_labels=drop_labels)
    examples = list(ds)
    assert len(examples) == 2
    # removing the labels explicitly requires drop_labels=True
    if not drop_labels:
        assert all(
            example.keys() == {"image", "label"} and all(val is not None for val in example.values())
            for example in examples
        )
    else:
        assert all(
            example.keys() == {"image"} and all(val is not None for val in example.values()) for example in examples
        )


@pytest.mark.parametrize("drop_metadata", [None, True, False])
@pytest.mark.parametrize("drop_labels", [None, True, False])
def test_generate_examples_drop_metadata(image_file_with_metadata, drop_metadata, drop_labels):
    image_file, image_metadata_file = image_file_with_metadata
    ds = ri.load_dataset("imagefolder", data_files={"train": [image_file, image_metadata_file]}, split="train",
                         streaming=True, drop_metadata=drop_metadata, drop_labels=drop_labels)
    # since the dataset has metadata, removing the metadata explicitly requires drop_metadata=True
    add_metadata = not bool(drop_metadata)
    # since the dataset has metadata, adding the labels explicitly requires drop_labels=False
    add_labels = False
    expected_columns = {"image"}
    if add_metadata:
        expected_columns.add("caption")
    if add_labels:
        expected_columns.add("label")
    result = list(ds)
    assert len(result) == 1
    example = result[0]
    assert example.keys() == expected_columns
    for column in expected_columns:
        assert example[column] is not None


def _check_splits_with_metadata(data_dir, num_files):
    datasets = ri.load_dataset("imagefolder", data_dir=data_dir, streaming=True)
    for split, num_data_files in num_files.items():
        expected_num_of_images = num_data_files - 1  # don't count the metadata file
        assert split in datasets
        dataset = list(datasets[split])
        assert len(dataset) == expected_num_of_images
        # make sure each sample has its own image and metadata
        assert len({example["image"].filename for example in dataset}) == expected_num_of_images
        assert len({example["caption"] for example in dataset}) == expected_num_of_images
        assert all(example["caption"] is not None for example in dataset)


# upstream parametrizes these with streaming in [False, True]: the port is the streaming case
def test_data_files_with_metadata_and_single_split(data_files_with_one_split_and_metadata):
    _check_splits_with_metadata(*data_files_with_one_split_and_metadata)


def test_data_files_with_metadata_and_multiple_splits(data_files_with_two_splits_and_metadata):
    _check_splits_with_metadata(*data_files_with_two_splits_and_metadata)


def test_data_files_with_metadata_and_archives(data_files_with_zip_archives):
    data_dir, num_files = data_files_with_zip_archives
    datasets = ri.load_dataset("imagefolder", data_dir=data_dir, streaming=True)
    for split, num_of_archives in num_files.items():  # the metadata file is inside the archive
        expected_num_of_images = 2 * num_of_archives
        assert split in datasets
        dataset = list(datasets[split])
        assert len(dataset) == expected_num_of_images
        # make sure each sample has its own image and metadata
        assert len({np.array(example["image"])[0, 0, 0] for example in dataset}) == expected_num_of_images
        assert len({example["caption"] for example in dataset}) == expected_num_of_images
        assert all(example["caption"] is not None for example in dataset)


def test_data_files_with_wrong_metadata_file_name(tmp_path, image_file):
    data_dir = tmp_path / "data_dir_with_bad_metadata"
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(image_file, data_dir / "image_rgb.jpg")
    image_metadata_filename = data_dir / "bad_metadata.jsonl"  # bad file
    image_metadata_filename.write_text('{"file_name": "image_rgb.jpg", "caption": "Nice image"}\n', encoding="utf-8")
    dataset = ri.load_dataset("imagefolder", data_dir=str(data_dir), split="train", streaming=True)
    # check that there are no metadata, since the metadata file name doesn't have the right name
    assert "caption" not in dataset.column_names


def test_data_files_with_custom_image_file_name_column_in_metadata_file(tmp_path, image_file):
    data_dir = tmp_path / "data_dir_with_custom_file_name_metadata"
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(image_file, data_dir / "image_rgb.jpg")
    image_metadata_filename = data_dir / "metadata.jsonl"
    # with bad column "bad_file_name" instead of "file_name"
    image_metadata_filename.write_text('{"picture_file_name": "image_rgb.jpg", "caption": "Nice image"}\n',
                                       encoding="utf-8")
    dataset = ri.load_dataset("imagefolder", data_dir=str(data_dir), split="train", streaming=True)
    assert "picture" in dataset.features
    assert "picture_file_name" not in dataset.features


def test_data_files_with_with_metadata_in_different_formats(tmp_path, image_file):
    data_dir = tmp_path / "data_dir_with_metadata_in_different_format"
    data_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(image_file, data_dir / "image_rgb.jpg")
    (data_dir / "metadata.jsonl").write_text('{"file_name": "image_rgb.jpg", "caption": "Nice image"}\n',
                                             encoding="utf-8")
    (data_dir / "metadata.csv").write_text("file_name,caption\nimage_rgb.jpg,Nice image\n", encoding="utf-8")
    with pytest.raises(ValueError) as exc_info:
        ds = ri.load_dataset("imagefolder", data_dir=str(data_dir), split="train", streaming=True)
        list(ds)  # upstream: download_and_prepare(); ours may raise when the files are read
    assert "metadata files with different extensions" in str(exc_info.value)


################################
#
#   tests/packaged_modules/test_folder_based_builder.py
#
################################
# Upstream tests HF's generic FolderBasedBuilder with a dummy subclass reading .txt files (column
# "base"); the public builder of that machinery here is "imagefolder": the files are images, the column
# "image", upstream's "additional_feature" metadata column is kept. The remote=True cases read Hub files
# (left out: no network); the other upstream tests are covered by the test_imagefolder.py ports above.


def _image_folder(tmp_path, image_file, name, files, metadata=None):
    data_dir = tmp_path / name
    for file in files:
        (data_dir / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(image_file, data_dir / file)
    if metadata is not None:
        (data_dir / "metadata.jsonl").write_text(metadata, encoding="utf-8")
    return str(data_dir)


def test_inferring_labels_from_data_dirs(tmp_path, image_file):
    data_dir = _image_folder(tmp_path, image_file, "data_files_with_labels_no_metadata",
                             ["class0/file0.jpg", "class1/file1.jpg"])
    ds = ri.load_dataset("imagefolder", data_dir=data_dir, split="train", streaming=True, drop_labels=False)
    assert ds.features["label"] == ClassLabel(names=["class0", "class1"])
    # upstream reads the private generator (label names); the dataset yields them encoded
    assert all(ds.features["label"].int2str(example["label"]) in {"class0", "class1"} for example in ds)


@pytest.mark.parametrize("drop_labels", [None, True, False])
def test_data_files_with_different_levels_no_metadata(tmp_path, image_file, drop_labels):
    data_dir = _image_folder(tmp_path, image_file, "data_files_with_different_levels",
                             ["class0/file0.jpg", "subdir/class1/file1.jpg"])
    ds = ri.load_dataset("imagefolder", data_dir=data_dir, split="train", streaming=True, drop_labels=drop_labels)
    examples = list(ds)
    assert len(examples) == 2
    if drop_labels is not False:
        # with None (default) we should drop labels if files are on different levels in dir structure
        assert "label" not in ds.features
        assert all(example.keys() == {"image"} for example in examples)
    else:
        assert "label" in ds.features
        assert isinstance(ds.features["label"], ClassLabel)
        assert all(example.keys() == {"image", "label"} for example in examples)


@pytest.mark.parametrize("drop_labels", [None, True, False])
def test_data_files_with_one_label_no_metadata(tmp_path, image_file, drop_labels):
    data_dir = _image_folder(tmp_path, image_file, "data_files_with_one_label", ["file0.jpg", "file1.jpg"])
    ds = ri.load_dataset("imagefolder", data_dir=data_dir, split="train", streaming=True, drop_labels=drop_labels)
    examples = list(ds)
    assert len(examples) == 2
    if drop_labels is not False:
        # with None (default) we should drop labels if only one label is found (=if there is a single dir)
        assert "label" not in ds.features
        assert all(example.keys() == {"image"} for example in examples)
    else:
        assert "label" in ds.features
        assert isinstance(ds.features["label"], ClassLabel)
        assert all(example.keys() == {"image", "label"} for example in examples)


def _metadata_of(file_name):
    return json.dumps({"file_name": file_name, "additional_feature": "Malicious file"}) + "\n"


def _assert_invalid_file_name_is_rejected(tmp_path, image_file, name, file_name):
    (tmp_path / "outside").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(image_file, tmp_path / "outside" / "secret.jpg")
    data_dir = _image_folder(tmp_path, image_file, name, ["file.jpg"], _metadata_of(file_name))
    # upstream: "Invalid metadata file_name"; ours says what is wrong with it (leaving its folder, a scheme)
    with pytest.raises(ValueError, match="Invalid metadata file_name"):
        list(ri.load_dataset("imagefolder", data_dir=data_dir, split="train", streaming=True))


@pytest.mark.parametrize(
    "malicious_file_name",
    [
        "../outside/secret.jpg",  # relative traversal
        "../../outside/secret.jpg",  # deeper relative traversal
        "subdir/../../outside/secret.jpg",  # traversal hidden after a valid segment
        "dummy/../../../etc/passwd",  # valid segment then escapes past the root (review on #8325)
        "subdir/../../../../outside/secret.jpg",  # deep escape after a valid segment
    ],
)
def test_data_files_with_metadata_path_traversal_is_rejected(tmp_path, image_file, malicious_file_name):
    # Regression test for https://github.com/huggingface/datasets/issues/8324
    _assert_invalid_file_name_is_rejected(tmp_path, image_file, "data_dir_with_traversal_metadata",
                                          malicious_file_name)


def test_data_files_with_metadata_absolute_path_is_rejected(tmp_path, image_file):
    # Regression test for https://github.com/huggingface/datasets/issues/8324
    _assert_invalid_file_name_is_rejected(tmp_path, image_file, "data_dir_with_absolute_metadata",
                                          str(tmp_path / "outside" / "secret.jpg"))


@pytest.mark.parametrize(
    "malicious_file_name",
    [
        "file://../../outside/secret.jpg",  # fsspec local scheme + traversal
        "local://../../outside/secret.jpg",  # fsspec local scheme + traversal
        "file://../outside/secret.jpg",  # scheme where os.path.normpath mangles the "../" away
        "file:///etc/passwd",  # absolute-looking local scheme
        "file://outside/secret.jpg",  # scheme without traversal
    ],
)
def test_data_files_with_metadata_url_scheme_is_rejected(tmp_path, image_file, malicious_file_name):
    _assert_invalid_file_name_is_rejected(tmp_path, image_file, "data_dir_with_scheme_metadata", malicious_file_name)


def test_data_files_with_metadata_legitimate_subdir_reference(tmp_path, image_file):
    metadata = textwrap.dedent(
        """\
        {"file_name": "file.jpg", "additional_feature": "Same-dir file"}
        {"file_name": "subdir/file2.jpg", "additional_feature": "Subdir file"}
        {"file_name": "./subdir/file2.jpg", "additional_feature": "Subdir file with dot prefix"}
        """
    )
    data_dir = _image_folder(tmp_path, image_file, "data_dir_with_subdir_metadata", ["file.jpg", "subdir/file2.jpg"],
                             metadata)
    ds = ri.load_dataset("imagefolder", data_dir=data_dir, split="train", streaming=True)
    examples = list(ds.decode(False))  # upstream's "base" is the file's path
    assert len(examples) == 3
    assert all(example["image"] is not None for example in examples)
    import os

    assert all(os.path.isfile(example["image"]["path"]) for example in examples)


def test_data_files_with_custom_file_name_column_in_metadata_file(tmp_path, image_file):
    # with column "image_file_name" instead of "file_name" (upstream: "text_file_name" for its "text" files)
    data_dir = _image_folder(tmp_path, image_file, "data_dir_with_custom_file_name_metadata", ["file.jpg"],
                             '{"image_file_name": "file.jpg", "additional_feature": "Dummy file"}\n')
    ds = ri.load_dataset("imagefolder", data_dir=data_dir, split="train", streaming=True)
    assert all("image" in example and "image_file_name" not in example for example in ds)


def test_data_files_with_custom_file_names_column_in_metadata_file_large_string_list(tmp_path, image_file):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data_dir = _image_folder(tmp_path, image_file, "data_dir_with_custom_file_names_metadata", ["file.jpg"])
    pq.write_table(
        pa.Table.from_arrays(
            [
                pa.array([["file.jpg"]], type=pa.list_(pa.large_string())),
                pa.array(["Dummy file"], type=pa.large_string()),
            ],
            names=["image_file_names", "additional_feature"],
        ),
        f"{data_dir}/metadata.parquet",
    )
    ds = ri.load_dataset("imagefolder", data_dir=data_dir, split="train", streaming=True)
    examples = list(ds.decode(False))
    assert len(examples) == 1
    assert "image" in examples[0] and "image_file_names" not in examples[0]
    assert len(examples[0]["image"]) == 1 and examples[0]["image"][0]["path"].endswith("file.jpg")


################################
#
#   tests/packaged_modules/test_arrow.py
#
################################


def _arrow_file(path, new_writer):
    import pyarrow as pa

    testdata = [[1, 1, 1], [0, 100, 6], [1, 90, 900]]
    schema = pa.schema([pa.field("input_ids", pa.list_(pa.int32()))])
    table = pa.Table.from_arrays([pa.array(testdata, type=pa.list_(pa.int32()))], schema=schema)
    with open(path, "wb") as f:
        with new_writer(f, schema) as writer:
            writer.write_table(table)
    return str(path)


@pytest.fixture
def arrow_file_streaming_format(tmp_path):
    import pyarrow as pa

    return _arrow_file(tmp_path / "stream.arrow", pa.ipc.new_stream)


@pytest.fixture
def arrow_file_file_format(tmp_path):
    import pyarrow as pa

    return _arrow_file(tmp_path / "file.arrow", pa.ipc.new_file)


@pytest.fixture
def arrow_file_with_invalid_offsets(tmp_path):
    import struct

    import pyarrow as pa

    filename = tmp_path / "invalid-offsets.arrow"
    table = pa.table({"col": pa.array([b"A", b"B"])})
    with open(filename, "wb") as f:
        with pa.ipc.new_stream(f, table.schema) as writer:
            writer.write_table(table)

    payload = bytearray(filename.read_bytes())
    schema_message_start = payload.index(b"\xff\xff\xff\xff")
    schema_metadata_length = struct.unpack_from("<I", payload, schema_message_start + 4)[0]
    record_batch_start = (schema_message_start + 8 + schema_metadata_length + 7) & ~7
    record_batch_metadata_length = struct.unpack_from("<I", payload, record_batch_start + 4)[0]
    record_batch_body_start = (record_batch_start + 8 + record_batch_metadata_length + 7) & ~7

    assert struct.unpack_from("<iii", payload, record_batch_body_start) == (0, 1, 2)
    # Keep every offset inside the data buffer while making them non-monotonic.
    struct.pack_into("<iii", payload, record_batch_body_start, 0, 2, 1)
    filename.write_bytes(payload)
    return str(filename)


@pytest.mark.parametrize("file_fixture", ["arrow_file_streaming_format", "arrow_file_file_format"])
def test_arrow_generate_tables(file_fixture, request):
    data_file = request.getfixturevalue(file_fixture)
    ds = ri.load_dataset("arrow", data_files=data_file, split="train", streaming=True)
    expected = {"input_ids": [[1, 1, 1], [0, 100, 6], [1, 90, 900]]}
    assert _columns(list(ds)) == expected


def test_arrow_generate_tables_rejects_invalid_record_batch(arrow_file_with_invalid_offsets):
    import pyarrow as pa

    with open(arrow_file_with_invalid_offsets, "rb") as f:
        record_batch = pa.ipc.open_stream(f).read_next_batch()

    record_batch.validate()
    with pytest.raises(pa.ArrowInvalid):
        record_batch.validate(full=True)

    ds = ri.load_dataset("arrow", data_files=arrow_file_with_invalid_offsets, split="train", streaming=True)
    with pytest.raises(pa.ArrowInvalid):
        next(iter(ds))
