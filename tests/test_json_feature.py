"""HF 5.2's ``Json`` feature in JSON Lines files: a column whose values mix types, or whose objects
have varying keys (also inside lists: chat ``messages``), is typed ``Json()`` and yields each value
as written, as HF finds such columns (the first chunk of the first file); rows, features and types
as HF's streaming ``load_dataset("json")``, resumed exactly at every cut point."""

import json

import datasets
import pytest
from datasets import Features, Json, List, Value

import resumable_iterable as ri
from harness import assert_loader_resumes_exactly, assert_resumes_exactly

MESSAGES = [
    {"role": "user", "content": "lights on"},
    {"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "light", "arguments": {"room": "living", "state": "on"}}},
        {"type": "function", "function": {"name": "music", "arguments": {"playlist": "electronic"}}}]},
    {"role": "tool", "name": "light", "content": "on"},
]

LAYOUTS = {
    "mixed_scalars": [{"c": -1}, {"c": 1}, {"c": "foo"}, {"c": "2"}, {"c": True}, {"c": 1.5}, {"c": None}],
    "int_and_float_stay_float": [{"c": 1}, {"c": 1.5}],
    "dict_and_scalar": [{"c": {"a": 1}}, {"c": 2}, {"c": [1, "x"]}],
    "varying_keys_and_nulls": [{"c": {"a": 0}}, {"c": None}, {"c": {"b": 0}}, {"x": 1}],
    "empty_objects": [{"c": {}}, {"c": {}}],
    "lists_of_dicts_of_varying_keys": [{"c": [{"a": 0}, {"b": 0}]}, {"c": [{"c": 0}, {"d": 0}]}],
    "nested": [{"o": {"p": {"a": 1}, "q": 1}}, {"o": {"p": {"b": 1}, "q": 2}}],
    "mixed_inside_list_of_dicts": [{"c": [{"x": 1}, {"x": "s"}]}],
    "messages": [{"messages": MESSAGES, "id": 1}, {"messages": MESSAGES[:1], "id": 2}],
    "top_level_keys_vary": [{"a": 1}, {"b": 2}],
    "late_in_the_first_chunk": [{"c": i, "t": "x" * 40} for i in range(2000)] + [{"c": "late"}],
}


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _hf(files, **kw):
    return datasets.load_dataset("json", data_files=files, split="train", streaming=True, **kw)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_rows_features_and_types_are_hfs(tmp_path, layout):
    path = _write(tmp_path / "d.jsonl", LAYOUTS[layout])
    ours, theirs = ri.load_dataset("json", data_files=path, split="train"), _hf(path)
    rows, expected = list(ours), list(theirs)
    assert rows == expected
    assert [[type(v) for v in r.values()] for r in rows] == [[type(v) for v in r.values()] for r in expected]
    assert ours.features == theirs.features


def test_the_first_file_first_chunk_says_which_columns_are_json(tmp_path):
    """As HF: the first chunk (``chunksize``) of the first file; a later file is encoded there too, and
    a column it mixes that the first file types otherwise is an error naming the line."""
    mixed = _write(tmp_path / "a.jsonl", [{"c": 1}, {"c": "a"}])
    ints = _write(tmp_path / "b.jsonl", [{"c": 2}, {"c": 3}])
    for files in ([mixed, ints], [mixed, mixed]):
        assert list(ri.load_dataset("json", data_files=files, split="train")) == list(_hf(files))
    with pytest.raises(ValueError, match=r"a\.jsonl' \(shard 1\): line 2: column 'c' holds a string"):
        list(ri.load_dataset("json", data_files=[ints, mixed], split="train"))
    keys = _write(tmp_path / "k.jsonl", [{"c": {"a": i}} for i in range(20)] + [{"c": {"b": 1}}])
    assert list(ri.load_dataset("json", data_files=keys, split="train")) == list(_hf(keys))
    assert ri.load_dataset("json", data_files=keys, split="train").features == Features({"c": Json()})


def test_features_given_win(tmp_path):
    mixed = _write(tmp_path / "m.jsonl", [{"c": -1}, {"c": 1}, {"c": "foo"}])
    strings = _write(tmp_path / "s.jsonl", [{"c": "1"}, {"c": "x"}, {"c": None}])
    chat = _write(tmp_path / "c.jsonl", [{"messages": MESSAGES}])
    for path, features in ((mixed, Features({"c": Value("string")})), (strings, Features({"c": Json()})),
                           (chat, Features({"messages": Json()})), (chat, Features({"messages": List(Json())})),
                           (mixed, Features({"c": Json(), "z": Value("string")}))):
        ours = ri.load_dataset("json", data_files=path, split="train", features=features)
        assert list(ours) == list(_hf(path, features=features))
        assert ours.features == features


def _dataset_with_json_columns(tmp_path):
    files = []
    for f in range(3):
        rows = [{"id": 10 * f + i, "v": [i, str(i), {"k": i}, None][i % 4], "messages": MESSAGES[: 1 + i % 3],
                 "o": {"p": {f"k{i % 2}": i}, "q": i}} for i in range(9)]
        files.append(_write(tmp_path / f"f{f}.jsonl", rows))
    return files


def test_json_columns_resume_exactly(tmp_path):
    files = _dataset_with_json_columns(tmp_path)

    def plain():
        return ri.load_dataset("json", data_files=files, split="train")

    assert list(plain()) == list(_hf(files))
    assert_resumes_exactly(plain)
    assert_resumes_exactly(lambda: plain().shuffle(seed=3, buffer_size=5))
    assert_resumes_exactly(lambda: ri.load_dataset("json", data_files=files, split="train", chunksize=200))
    assert_loader_resumes_exactly(lambda: plain().shuffle(seed=1, buffer_size=4), workers=2, batch_size=None,
                                  item=lambda x: json.dumps(x, sort_keys=True), cuts=lambda n: range(1, n, 5))


def test_a_shuffle_state_saved_before_json_columns_still_loads(tmp_path):
    """Before, such a column was read as a struct of every key (``None`` for those an object lacks) and
    the shuffle buffer held those rows: loaded now, they are yielded as saved (JSON columns are decoded
    as read, not deferred past the buffer as media are, so buffered rows are never decoded twice)."""
    path = _write(tmp_path / "d.jsonl", [{"id": i, "c": {f"k{i % 2}": i}} for i in range(8)])

    def build():
        return ri.load_dataset("json", data_files=path, split="train").shuffle(seed=1, buffer_size=3)

    full = list(build())
    ds = build()
    it = iter(ds)
    head = [next(it) for _ in range(2)]
    state = json.loads(json.dumps(ds.state_dict()))
    for chunk in state["state"]["buffer"]:
        for row in chunk:  # as the reader of the earlier release held them
            row["c"] = {"k0": row["c"].get("k0"), "k1": row["c"].get("k1")}
    resumed = build()
    resumed.load_state_dict(state)
    tail = list(resumed)
    assert [r["id"] for r in head + tail] == [r["id"] for r in full]
    assert sum(set(r["c"]) == {"k0", "k1"} for r in tail) == 3  # the 3 buffered rows


def test_a_struct_field_the_first_file_lacks_is_refused_not_dropped(tmp_path):
    """A later file (or chunk) whose objects hold a key the first file's lack was cast to the first
    file's struct, the key silently dropped (``{"b": 1}`` yielded as ``{"a": None}``); HF refuses
    the cast ("Couldn't cast"). A key only the first file has is still null-filled, as in HF."""
    a = _write(tmp_path / "a.jsonl", [{"c": {"a": 1, "z": 0}, "l": [{"x": 1}]}])
    b = _write(tmp_path / "b.jsonl", [{"c": {"a": 2, "b": 1}, "l": [{"x": 2}]}])
    c = _write(tmp_path / "c.jsonl", [{"c": {"a": 3}, "l": [{"x": 3, "y": 1}]}])
    d = _write(tmp_path / "d.jsonl", [{"c": {"a": 4}, "l": [{"x": 4}]}])
    with pytest.raises(ValueError, match=r"b\.jsonl' \(shard 1\): column 'c' has field 'c\.b' that the first"):
        list(ri.load_dataset("json", data_files=[a, b], split="train"))
    with pytest.raises(ValueError, match=r"c\.jsonl' \(shard 1\): column 'l' has field 'l\[\]\.y'"):
        list(ri.load_dataset("json", data_files=[a, c], split="train"))
    assert list(ri.load_dataset("json", data_files=[a, d], split="train")) == list(_hf([a, d])) == [
        {"c": {"a": 1, "z": 0}, "l": [{"x": 1}]}, {"c": {"a": 4, "z": None}, "l": [{"x": 4}]}]
    keys = _write(tmp_path / "k.jsonl", [{"c": {"a": i}} for i in range(20)] + [{"c": {"b": 1}}])
    with pytest.raises(ValueError, match=r"k\.jsonl' \(shard 0\): column 'c' has field 'c\.b'"):
        list(ri.load_dataset("json", data_files=keys, split="train", chunksize=30))  # a later chunk


def test_a_json_column_cast_to_string_is_its_json_text(tmp_path):
    """HF casts the JSON text storage: ``{"k": 2}`` becomes ``'{"k":2}'`` and ``"s"`` ``'"s"'``; ours
    cast the decoded values with Python's ``str`` (``"{'k': 2}"``, not JSON)."""
    path = _write(tmp_path / "d.jsonl", [{"v": [i, "s", {"k": i}, None][i % 4], "m": MESSAGES[:1]} for i in range(8)])
    for cast in (lambda ds: ds.cast_column("v", Value("string")),
                 lambda ds: ds.cast(Features({"v": Value("string"), "m": List(Json())}))):
        ours = cast(ri.load_dataset("json", data_files=path, split="train"))
        assert list(ours) == list(cast(_hf(path)))
        assert_resumes_exactly(lambda: cast(ri.load_dataset("json", data_files=path, split="train")).shuffle(
            seed=0, buffer_size=3))


def test_a_json_document_whose_columns_mix_types_is_read_as_hf_reads_it(tmp_path):
    """A list of objects whose column mixes types: pandas cannot type it and ours refused the file
    ("line 1 is a JSON list, not an object"); HF reads it as JSON Lines with a ``Json`` column, left
    as JSON text (a document's features are unknown when streaming, as ours)."""
    path = tmp_path / "d.json"
    path.write_text(json.dumps([{"c": 1, "n": 0}, {"c": "a", "n": 1}, {"c": {"k": [1]}, "n": 2}]))
    ours = ri.load_dataset("json", data_files=str(path), split="train")
    assert list(ours) == list(_hf(str(path))) == [{"c": "1", "n": 0}, {"c": '"a"', "n": 1},
                                                  {"c": '{"k":[1]}', "n": 2}]
    assert_resumes_exactly(lambda: ri.load_dataset("json", data_files=str(path), split="train"))


@pytest.mark.parametrize("rows", [
    [{"c": "a"}, {"c": 3}],  # pandas types the column, pyarrow refuses it (ArrowTypeError)
    [{"c": None}, {"c": "a"}, {"c": 2.5}],
    [{"c": {"a": 1}}, {"c": {"b": "x"}}],  # pandas filled each object's missing keys with None
    [{"c": [{"a": 1}, {"a": 2, "b": 3}]}],
    [{"modified": 1600000000000, "n": 1}],  # pandas made dates of an integer column named like a date
], ids=["string_then_number", "null_string_float", "varying_keys", "varying_keys_in_list", "date_like_name"])
def test_every_json_document_of_objects_is_read_as_json_lines_as_hf_reads_it(tmp_path, rows):
    """HF 5.2 reads a list of objects as JSON Lines whatever its columns hold; ours read it by pandas
    first and took HF's route only when pandas failed, so a document pandas read was read otherwise:
    an error where HF reads the file, keys filled with None where HF yields the object's JSON text,
    integers made dates."""
    path = tmp_path / "d.json"
    path.write_text(json.dumps(rows))
    ours = ri.load_dataset("json", data_files=str(path), split="train")
    assert list(ours) == list(_hf(str(path)))
    assert_resumes_exactly(lambda: ri.load_dataset("json", data_files=str(path), split="train"))


@pytest.mark.parametrize("op", ["shuffle", "take", "skip"])
def test_json_columns_after_a_python_step_export_and_format_as_hf(tmp_path, op):
    """Json columns (decoded Python values) after a shuffle / take / skip: with_format("arrow" |
    "pandas") and the exports (to_list...) built the table from the decoded values with the
    features' Arrow types, which pyarrow refused ('Could not convert 's' with type str: tried to
    convert to int64'); HF gives the rows (its Arrow rows hold the JSON text)."""
    path = _write(tmp_path / "d.jsonl", [{"i": 1, "m": {"a": 1}, "v": 1}, {"i": 2, "m": {"b": "x"}, "v": "s"},
                                         {"i": 3, "m": None, "v": [1]}])
    step = {"shuffle": lambda d: d.shuffle(seed=1, buffer_size=2), "take": lambda d: d.take(2),
            "skip": lambda d: d.skip(1)}[op]
    ours, theirs = step(ri.load_dataset("json", data_files=path, split="train")), step(_hf(path))

    def rows(ds):  # by "i": the shuffle buffers draw otherwise
        out = {"list": ds.to_list(), "arrow": [r for t in ds.with_format("arrow").iter(2) for r in t.to_pylist()],
               "pandas": next(iter(ds.with_format("pandas").iter(5))).to_dict("records")}
        return {k: sorted(v, key=lambda r: r["i"]) for k, v in out.items()}

    assert rows(ours) == rows(theirs)


def _typed(x):
    """A value with the type of every part of it (numpy scalar vs 0-d array vs str...)."""
    import numpy as np

    if isinstance(x, dict):
        return {k: _typed(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_typed(v) for v in x]
    if isinstance(x, np.ndarray) and x.dtype == object:
        return ("object array", x.shape, [_typed(v) for v in x.ravel()])
    return (type(x).__name__, str(getattr(x, "dtype", "")), getattr(x, "shape", None), repr(x))


JSON_VALUES = [{"i": 0, "x": {"k": 1}}, {"i": 1, "x": [1, 2]}, {"i": 2, "x": "s"}, {"i": 3, "x": 5},
               {"i": 4, "x": 2.5}, {"i": 5, "x": None}, {"i": 6, "x": [1, "a"]}, {"i": 7, "x": True}]
STEPS = {"take": lambda lib, d: d.take(8), "interleave": lambda lib, d: lib.interleave_datasets([d, d.skip(2)]),
         "shuffle_1": lambda lib, d: d.shuffle(seed=0, buffer_size=1)}


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
@pytest.mark.parametrize("step", sorted(STEPS))
def test_json_values_after_an_arrow_path_step_format_as_hf(tmp_path, step, fmt):
    """The values of a Json column after a take / interleave / shuffle (HF's Arrow path) under
    with_format("numpy"): ours gave numpy scalars (np.int64(5), np.str_('s')) where HF gives what it
    gives the decoded value everywhere, 0-d arrays and str (array(5), 's'); a map given after
    with_format receives HF's one-row batch values (np.int64(5), np.float64(2.5), 's'). Rows, rows
    of a map after the format and batches are compared side by side with HF."""
    path = _write(tmp_path / "d.jsonl", JSON_VALUES)
    ours = STEPS[step](ri, ri.load_dataset("json", data_files=path, split="train")).with_format(fmt)
    theirs = STEPS[step](datasets, _hf(path)).with_format(fmt)

    def seen(ds):
        got = []
        list(ds.map(lambda x: got.append(_typed(x)) or {}))
        return got

    assert [_typed(r) for r in ours] == [_typed(r) for r in theirs]
    assert seen(ours) == seen(theirs)
    assert [_typed(b) for b in ours.batch(3)] == [_typed(b) for b in theirs.batch(3)]


@pytest.mark.parametrize("workers", [0, 2])
def test_json_values_after_a_take_resume_exactly_formatted(tmp_path, workers):
    files = [_write(tmp_path / "a.jsonl", JSON_VALUES[:4]), _write(tmp_path / "b.jsonl", JSON_VALUES[4:])]

    def build():  # two shards per input: one per DataLoader worker
        return ri.interleave_datasets([ri.load_dataset("json", data_files=files, split="train").take(8),
                                       ri.load_dataset("json", data_files=files, split="train").skip(1)]
                                      ).with_format("numpy")

    if workers == 0:
        full = assert_resumes_exactly(build)
        assert full[6]["x"] == ("ndarray", "int64", (), 5)  # a 0-d array, as HF's
    else:
        assert_loader_resumes_exactly(build, workers=workers, batch_size=None, item=repr,
                                      cuts=lambda n: range(1, n + 1))
