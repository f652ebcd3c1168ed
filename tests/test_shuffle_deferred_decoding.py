"""A shuffle right above an Arrow source that decodes media buffers the files and decodes what it
yields (as HF decodes after its shuffle): the same examples, several times less to hold, send to
the main process and save.

* the examples are those of the same shuffle decoding in the source (``buffer_state="replay"``
  does, and ``decode(False).shuffle().decode()`` is the pattern users wrote by hand);
* every cut point resumes exactly (state through ``dumps_state``/``loads_state``), with a map
  painting on the images in place after the shuffle;
* the buffer and the state hold the files; a state saved before (decoded images, no ``retry``)
  loads and resumes exactly;
* an example whose decoding raises is kept in the state and decoded again first on resume;
* through ``StatefulDataLoader`` with 2 workers, and an elastic resume to 3 workers.
"""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image")
from datasets import Dataset, Features, Value  # noqa: E402
from datasets import Image as ImageFeature  # noqa: E402

import resumable_iterable as ri  # noqa: E402
from harness import assert_resumes_exactly, codec_roundtrip  # noqa: E402


def jpeg(k: int, side: int = 40) -> bytes:
    grid = np.arange(side * side * 3, dtype=np.int64).reshape(side, side, 3)
    out = io.BytesIO()
    Image.fromarray(((grid * 7 + k * 31) % 251).astype(np.uint8)).save(out, "JPEG", quality=90)
    return out.getvalue()


def image_dataset(n: int = 30, corrupt: int | None = None) -> Dataset:
    files = [{"bytes": b"not an image" if k == corrupt else jpeg(k), "path": None} for k in range(n)]
    return Dataset.from_dict({"id": list(range(n)), "label": [[k % 3] for k in range(n)], "image": files},
                             features=Features({"id": Value("int64"), "label": [Value("int64")],
                                                "image": ImageFeature()}))


HF = image_dataset()


def digest(ex: dict) -> tuple:
    img = ex["image"]
    return ex["id"], ex["label"], type(img).__name__, img.mode, img.size, hashlib.sha1(img.tobytes()).hexdigest()


def shuffled(hf: Dataset = HF, **kw):
    return ri.to_iterable_dataset(hf, num_shards=3).shuffle(seed=5, buffer_size=kw.pop("buffer_size", 7), **kw)


def test_the_examples_are_those_decoded_in_the_source():
    ours = [digest(ex) for ex in shuffled()]
    decoded_in_source = [digest(ex) for ex in shuffled(buffer_state="replay")]  # replay does not defer
    by_hand = [digest(ex) for ex in ri.to_iterable_dataset(HF, num_shards=3).decode(False)
               .shuffle(seed=5, buffer_size=7).decode()]
    assert ours == decoded_in_source == by_hand
    assert sorted(d[0] for d in ours) == list(range(len(HF)))
    assert {d[2] for d in ours} == {"JpegImageFile"}


def test_the_buffer_and_the_state_hold_the_files():
    ds = shuffled()
    it = iter(ds)
    next(it)
    st = ds.state_dict()["state"]
    held = [ex for chunk in st["buffer"] for ex in chunk]
    assert len(held) == 7 and st["retry"] == []
    assert all(type(ex["image"]) is dict and type(ex["image"]["bytes"]) is bytes for ex in held)


def paint(ex: dict) -> dict:
    """A map editing its input in place: decoded images are the shuffle's own, never a state's."""
    ex["image"].load()
    ex["image"].paste((255, 0, 0), (0, 0, 4, 4))
    ex["label"].append(-1)
    return ex


@pytest.mark.parametrize("after", ["none", "paint", "batch"])
def test_every_cut_point_resumes_exactly(after):
    def build():
        ds = shuffled()
        if after == "paint":
            ds = ds.map(paint)
        if after == "batch":
            return ds.batch(4).map(lambda b: {"d": [digest({"id": i, "label": lab, "image": im}) for i, lab, im
                                                    in zip(b["id"], b["label"], b["image"])]},
                                   remove_columns=["id", "label", "image"])
        return ds.map(lambda ex: {"d": digest(ex)}, remove_columns=["id", "label", "image"])

    assert_resumes_exactly(build, roundtrip=codec_roundtrip)


def _decoded_state(state: dict) -> dict:
    """``state`` as a version without deferred decoding saved it: decoded images, no ``retry``."""
    sh = state["state"]
    del sh["retry"]
    sh["buffer"] = [[{**ex, "image": ImageFeature().decode_example(ex["image"])} for ex in chunk]
                    for chunk in sh["buffer"]]
    return state


@pytest.mark.parametrize("cut", [0, 3, 12, 25])
def test_a_state_saved_with_decoded_images_loads_and_resumes_exactly(cut):
    full = [digest(ex) for ex in shuffled()]
    ds = shuffled()
    it = iter(ds)
    for _ in range(cut):
        next(it)
    state = codec_roundtrip(_decoded_state(ds.state_dict()))
    assert all(isinstance(ex["image"], Image.Image) for ch in state["state"]["buffer"] for ex in ch)
    resumed = shuffled()
    resumed.load_state_dict(state)

    def pixels(d):  # a decoded image read back from a state is a PIL image of another class
        return d[:2] + d[3:]

    assert [pixels(digest(ex)) for ex in resumed] == [pixels(d) for d in full[cut:]]
    # the next epoch defers again
    resumed.set_epoch(1)
    again = shuffled()
    again.set_epoch(1)
    assert [digest(ex) for ex in resumed] == [digest(ex) for ex in again]


def test_a_file_that_fails_to_decode_stays_in_the_state_and_is_decoded_again_first(monkeypatch):
    full = [digest(ex) for ex in shuffled()]
    real = ImageFeature.decode_example
    failing = {"id": full[9][0], "left": 1}
    target = HF[failing["id"]]["image"]
    target_bytes = target.tobytes()

    def flaky(self, value, token_per_repo_id=None):
        img = real(self, value, token_per_repo_id=token_per_repo_id)
        if failing["left"] and img.tobytes() == target_bytes:
            failing["left"] -= 1
            raise OSError("transient read error")
        return img

    monkeypatch.setattr(ImageFeature, "decode_example", flaky)
    ds = shuffled()
    got = []
    with pytest.raises(OSError) as info:
        for ex in ds:
            got.append(digest(ex))
    assert "decoding a buffered example as it left the buffer" in " ".join(info.value.__notes__)
    state = codec_roundtrip(ds.state_dict())
    assert [ex["id"] for ex in state["state"]["retry"]] == [failing["id"]]
    resumed = shuffled()
    resumed.load_state_dict(state)
    assert got + [digest(ex) for ex in resumed] == full


def test_a_corrupt_file_raises_again_on_resume_and_is_never_lost():
    hf = image_dataset(corrupt=4)
    ds = shuffled(hf)
    got = []
    with pytest.raises(Exception) as first:
        for ex in ds:
            got.append(ex["id"])
    state = codec_roundtrip(ds.state_dict())
    assert [ex["id"] for ex in state["state"]["retry"]] == [4] and 4 not in got
    resumed = shuffled(hf)
    resumed.load_state_dict(state)
    with pytest.raises(type(first.value)) as again:
        next(iter(resumed))
    assert "retried from the state" in " ".join(again.value.__notes__)


def test_malformed_retry_is_refused():
    ds = shuffled()
    state = ds.state_dict()
    state["state"]["retry"] = [{"id": 1}, {"id": 2}]
    with pytest.raises(ValueError, match="'retry' must hold at most one example"):
        shuffled().load_state_dict(state)
    plain = ri.to_iterable_dataset(HF, num_shards=3).decode(False).shuffle(seed=5, buffer_size=7)
    with pytest.raises(ValueError, match=r"unexpected \['retry'\]"):
        plain.load_state_dict(shuffled().state_dict())


torch = pytest.importorskip("torch")


def digests(batch: list) -> list:
    return [digest(ex) for ex in batch]


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")
@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
@pytest.mark.parametrize("positions", [True, False])
def test_through_the_loader_with_workers_and_an_elastic_resume(positions):
    """The files buffered undecoded cross as where they came from (a few integers, the rows re-read
    and decoded as they leave the buffer after a resume); with ``worker_positions=False`` as the
    files themselves. Every cut resumes exactly, and so does an elastic resume, in JSON too."""
    from resumable_iterable.nodes.worker_positions import is_derived

    full = sorted(digest(ex) for ex in shuffled())

    def make(workers: int = 2):
        return ri.StatefulDataLoader(shuffled(worker_positions=positions), batch_size=3, num_workers=workers,
                                     collate_fn=digests)

    dl = make()
    batches, states = [], [ri.dumps_state(dl.state_dict())]
    for b in dl:
        batches.append(b)
        states.append(ri.dumps_state(dl.state_dict()))
    assert sorted(d for b in batches for d in b) == full
    worker = ri.loads_state(states[3])["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]
    if positions:
        assert "buffers" not in worker and is_derived(worker["state"]["buffer"])
        assert "bytes" not in json.dumps(worker)  # JSON: no file in the state
    else:
        held = list(worker["buffers"]["0"])
        assert held and all(type(ex["image"]) is dict and type(ex["image"]["bytes"]) is bytes for ex in held)
    for cut in (0, 2, 5, len(batches) - 1):
        again = make()
        again.load_state_dict(ri.loads_state(states[cut]))
        assert [d for b in again for d in b] == [d for b in batches[cut:] for d in b], cut
    elastic = make(3)
    elastic.load_state_dict(ri.loads_state(states[4]))
    rest = [d for b in elastic for d in b]
    assert sorted([d for b in batches[:4] for d in b] + rest) == full


# ---------------------------------------------------------------------- data files (Parquet, Arrow IPC)
# Files whose schema carries HF features (load_dataset's Hub and local files): the source decodes
# their media columns as HF does, and a shuffle right above it buffers the files.


@pytest.fixture(scope="module")
def image_files(tmp_path_factory):
    import pyarrow as pa

    d = tmp_path_factory.mktemp("images")
    paths = {"parquet": [], "arrow": []}
    for k, part in enumerate((HF.select(range(0, 12)), HF.select(range(12, 30)))):
        paths["parquet"].append(str(d / f"part{k}.parquet"))
        part.to_parquet(paths["parquet"][-1])
        paths["arrow"].append(str(d / f"part{k}.arrow"))
        table = part.flatten_indices().data.table
        with pa.ipc.new_file(paths["arrow"][-1], table.schema) as w:
            w.write_table(table)
    return paths


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_image_files_are_decoded_as_hf_decodes_them(image_files, fmt):
    import datasets

    paths = image_files[fmt]
    theirs = datasets.load_dataset(fmt, data_files=paths, split="train", streaming=True)
    ours = ri.IterableDataset.from_files(paths, fmt)
    assert [digest(ex) for ex in ours] == [digest(ex) for ex in theirs]
    assert [ex["image"] for ex in ours.decode(False)] == [ex["image"] for ex in theirs.decode(False)]
    assert [digest(ex) for ex in ours.decode(False).decode()] == [digest(ex) for ex in theirs]


def files_shuffled(paths, **kw):
    return ri.IterableDataset.from_parquet(paths).shuffle(seed=5, buffer_size=7, **kw)


def test_a_shuffle_above_image_files_buffers_the_files_and_resumes_exactly(image_files):
    paths = image_files["parquet"]
    ds = files_shuffled(paths)
    it = iter(ds)
    next(it)
    held = [ex for chunk in ds.state_dict()["state"]["buffer"] for ex in chunk]
    assert held and all(type(ex["image"]) is dict for ex in held)
    assert ([digest(ex) for ex in files_shuffled(paths)]
            == [digest(ex) for ex in files_shuffled(paths, buffer_state="replay")])
    assert_resumes_exactly(lambda: files_shuffled(paths).map(lambda ex: {"d": digest(ex)},
                                                             remove_columns=["id", "label", "image"]),
                           roundtrip=codec_roundtrip, max_cuts=12)


@pytest.mark.parametrize("cut", [1, 9])
def test_a_state_saved_when_files_were_not_decoded_resumes_with_every_image_decoded(image_files, cut):
    """Before, these sources yielded the files undecoded: such a state's buffer holds files and no
    ``retry``; the resumed pass decodes them as they leave the buffer (and new rows in the source)."""
    paths = image_files["parquet"]
    full = [digest(ex) for ex in files_shuffled(paths)]
    ds = files_shuffled(paths)
    it = iter(ds)
    for _ in range(cut):
        next(it)
    state = codec_roundtrip(ds.state_dict())
    del state["state"]["retry"]
    resumed = files_shuffled(paths)
    resumed.load_state_dict(state)
    assert [digest(ex) for ex in resumed] == full[cut:]


def test_replay_and_global_shuffle_over_image_files_decode(image_files):
    paths = image_files["parquet"]
    ds = ri.IterableDataset.from_parquet(paths)
    for shuffled_ds in (ds.shuffle(seed=1, buffer_size=5, buffer_state="replay"), ds.shuffle(seed=1, buffer_size=None)):
        out = list(shuffled_ds)
        assert sorted(ex["id"] for ex in out) == list(range(len(HF)))
        assert {type(ex["image"]).__name__ for ex in out} == {"JpegImageFile"}


# ---------------------------------------------------------------------- column operations in between
COLUMN_OPS = {
    "select": lambda d: d.select_columns(["image", "id", "label"]),
    "remove": lambda d: d.remove_columns("label"),
    "rename": lambda d: d.rename_columns({"image": "img", "id": "i"}),
}


def named(ex: dict) -> dict:
    return {"id": ex.get("id", ex.get("i")), "label": ex.get("label"), "image": ex.get("image", ex.get("img"))}


@pytest.mark.parametrize("op", list(COLUMN_OPS))
def test_column_operations_between_the_source_and_the_shuffle_keep_the_files_in_the_buffer(op):
    def build(**kw):
        return COLUMN_OPS[op](ri.to_iterable_dataset(HF, num_shards=3)).shuffle(seed=5, buffer_size=7, **kw)

    ds = build()
    it = iter(ds)
    next(it)
    held = [named(ex) for chunk in ds.state_dict()["state"]["buffer"] for ex in chunk]
    assert held and all(type(ex["image"]) is dict for ex in held)
    assert [digest(named(ex)) for ex in build()] == [digest(named(ex)) for ex in build(buffer_state="replay")]
    assert_resumes_exactly(lambda: build().map(lambda ex: {"d": digest(named(ex))}, remove_columns=list(ex_keys(op))),
                           roundtrip=codec_roundtrip, max_cuts=10)
    # a state saved before decoding was deferred (decoded images, no retry) resumes exactly
    full = [digest(named(ex)) for ex in build()]
    ds = build()
    it = iter(ds)
    for _ in range(4):
        next(it)
    state = ds.state_dict()
    del state["state"]["retry"]
    for chunk in state["state"]["buffer"]:
        for ex in chunk:
            key = "img" if "img" in ex else "image"
            ex[key] = ImageFeature().decode_example(ex[key])
    resumed = build()
    resumed.load_state_dict(codec_roundtrip(state))
    assert [digest(named(ex))[:2] + digest(named(ex))[3:] for ex in resumed] == [d[:2] + d[3:] for d in full[4:]]


def ex_keys(op: str) -> list:
    return {"select": ["image", "id", "label"], "remove": ["id", "image"], "rename": ["i", "label", "img"]}[op]


@pytest.mark.parametrize("target", ["buffered", "incoming"])
def test_a_decoding_error_after_loading_an_old_state_loses_nothing(image_files, monkeypatch, target):
    """A state saved before (files in the buffer, no ``retry``): decoding a buffered file as it
    leaves (kept in ``retry``) or the incoming rows in the source (re-read) raises; a state taken
    then resumes with every example once, in order."""
    paths = image_files["parquet"]
    full = [digest(ex) for ex in files_shuffled(paths)]
    ds = files_shuffled(paths)
    it = iter(ds)
    for _ in range(3):
        next(it)
    state = codec_roundtrip(ds.state_dict())
    del state["state"]["retry"]
    buffered = {ex["image"]["bytes"] for chunk in state["state"]["buffer"] for ex in chunk}
    real = ImageFeature.decode_example
    failing = {"left": 1}

    def flaky(self, value, token_per_repo_id=None):
        if failing["left"] and (value["bytes"] in buffered) == (target == "buffered"):
            failing["left"] -= 1
            raise OSError("transient read error")
        return real(self, value, token_per_repo_id=token_per_repo_id)

    monkeypatch.setattr(ImageFeature, "decode_example", flaky)
    first = files_shuffled(paths)
    first.load_state_dict(state)
    got = []
    with pytest.raises(OSError):
        for ex in first:
            got.append(digest(ex))
    after = codec_roundtrip(first.state_dict())
    assert (after["state"]["retry"] is not None and len(after["state"]["retry"]) == 1) == (target == "buffered")
    resumed = files_shuffled(paths)
    resumed.load_state_dict(after)

    def pixels(d):  # an image decoded before the error is saved decoded, and read back as a PNG image
        return d[:2] + d[3:]

    assert [pixels(d) for d in got] + [pixels(digest(ex)) for ex in resumed] == [pixels(d) for d in full[3:]]
