"""Saving and loading states: the binary state file (JSON + raw blobs), exact numpy dtypes, PIL
images, per-rank lists, nesting limits, atomic writes, and the Trainer callback's use of them."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pickle
import struct

import numpy as np
import pytest
from datasets import Dataset

import resumable_iterable as ri
from resumable_iterable import atomic_files
from resumable_iterable import state_files as sf
from resumable_iterable.state_codec import MAX_DEPTH
from resumable_iterable.cli import main as cli_main

try:
    from PIL import Image as PIL_Image
except ImportError:  # pragma: no cover
    PIL_Image = None
needs_pil = pytest.mark.skipif(PIL_Image is None, reason="Pillow is not installed")
needs_trainer = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "transformers", "accelerate", "torchdata")),
    reason="needs torch, transformers, accelerate and torchdata")


def big(i: int = 0, n: int = 4096) -> np.ndarray:
    return np.arange(n, dtype=np.float32) + i


def arrays_equal(a, b) -> bool:
    return type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def consume(ds, k):
    it = iter(ds)
    for _ in range(k):
        next(it)
    return ds


def gen_rows(n):
    for i in range(n[0]):
        yield {"id": i, "x": big(i), "blob": bytes([i % 256]) * 3000, "small": np.arange(3) + i}


def big_pipeline(n=40, buffer=8):
    return ri.IterableDataset.from_generator(gen_rows, gen_kwargs={"n": [n]}).shuffle(seed=3, buffer_size=buffer)


def ids(ds):
    return [ex["id"] for ex in ds]


# --------------------------------------------------------------------------- the binary state file


def test_a_state_file_saved_with_a_byte_order_mark_loads(tmp_path, capsys):
    """A JSON state opened and saved again in an editor that writes UTF-8 with a byte order mark
    (Windows Notepad did) was refused as invalid JSON, by load_state and by inspect alike."""
    ds = consume(ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(30))}), num_shards=3)
                 .shuffle(seed=1, buffer_size=5), 7)
    for state in (ds.state_dict(), [ds.state_dict()] * 2):
        path = tmp_path / "state.json"
        ri.save_state(state, path)
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
        assert ri.load_state(path) == state and ri.loads_state(path.read_bytes()) == state
        assert ri.loads_state(path.read_bytes().decode("utf-8")) == state
    def build():
        return ri.to_iterable_dataset(Dataset.from_dict({"id": list(range(30))}), num_shards=3).shuffle(
            seed=1, buffer_size=5)

    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(ds.state_dict()).encode())
    again = build()
    again.load_state_dict(ri.load_state(path))
    assert ids(again) == ids(build())[7:]
    assert cli_main(["inspect", str(path)]) == 0
    capsys.readouterr()


def test_large_values_are_stored_raw_and_resume_exactly(tmp_path):
    full = ids(big_pipeline())
    for k in (0, 1, 17, 39, 40):
        ds = consume(big_pipeline(), k)
        path = tmp_path / f"s{k}.ri"
        ri.save_state(ds.state_dict(), path)
        raw = path.read_bytes()
        buffered = sum(len(c) for c in ds.state_dict()["state"]["buffer"])
        if buffered:
            assert raw.startswith(sf.MAGIC)
            # each buffered example: 16 KB array + 3000 bytes, stored raw (no base64)
            assert len(raw) <= 1.1 * buffered * (big().nbytes + 3000) + 4096
        resumed = big_pipeline()
        resumed.load_state(path)
        assert full[:k] + ids(resumed) == full


def test_loaded_arrays_are_writable_and_own_their_memory(tmp_path):
    state = {"format": "demo", "a": big(), "b": big(1).reshape(64, 64), "bytes": b"\x01" * 5000}
    ri.save_state(state, tmp_path / "s.ri")
    for back in (ri.load_state(tmp_path / "s.ri"), ri.loads_state((tmp_path / "s.ri").read_bytes())):
        assert arrays_equal(back["a"], state["a"]) and arrays_equal(back["b"], state["b"])
        assert back["bytes"] == state["bytes"] and type(back["bytes"]) is bytes
        for arr in (back["a"], back["b"]):
            assert arr.flags.writeable and arr.flags.owndata and arr.flags.c_contiguous
        assert not np.shares_memory(back["a"], back["b"])
        back["a"][0] = 99  # writable: no copy needed by the user


def test_non_contiguous_and_zero_size_arrays(tmp_path):
    base = np.arange(20000, dtype=np.int64).reshape(100, 200)
    state = {"t": base.T, "s": base[::3, 1::2], "e": np.zeros((0, 5), np.float32), "f": np.asfortranarray(base)}
    ri.save_state(state, tmp_path / "s.ri")
    back = ri.load_state(tmp_path / "s.ri")
    for k in state:
        assert back[k].dtype == state[k].dtype and np.array_equal(back[k], state[k])


def test_small_states_stay_json_text(tmp_path):
    state = {"format": "demo", "a": np.arange(3), "b": b"xy"}
    ri.save_state(state, tmp_path / "s.json")
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["checksum"].startswith("sha256:")
    assert arrays_equal(ri.load_state(tmp_path / "s.json")["a"], state["a"])


def _old_checksum(body):
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_files_in_the_former_json_format_still_load(tmp_path):
    # written by the JSON-only codec: dtype as a string, base64 data, a top-level checksum
    body = {"format": "demo", "arr": {"__ri__": "ndarray", "dtype": "<i4", "shape": [2, 2], "b64": "AQAAAAIAAAADAAAABAAAAA=="},
            "big": {"__ri__": "ndarray", "dtype": ">f8", "shape": [300],
                    "b64": __import__("base64").b64encode(np.arange(300, dtype=">f8").tobytes()).decode()},
            "s": {"__ri__": "npscalar", "dtype": "<i2", "b64": "BwA="}, "b": {"__ri__": "bytes", "b64": "AP8="},
            "t": {"__ri__": "tuple", "items": [1, {"__ri__": "float", "v": "nan"}]}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(dict(body, checksum=_old_checksum(body)), indent=2))
    for back in (ri.load_state(path), ri.loads_state(path.read_text()), ri.loads_state(path.read_bytes())):
        assert arrays_equal(back["arr"], np.array([[1, 2], [3, 4]], np.int32))
        assert back["big"].dtype == np.dtype(">f8") and np.array_equal(back["big"], np.arange(300))
        assert back["s"] == np.int16(7) and back["b"] == b"\x00\xff" and back["t"][0] == 1


def _damage_cases(raw: bytes, json_len: int):
    data_offset = sf.align(64 + json_len)
    yield "truncated header", raw[:40], "truncated"
    yield "truncated within its first 8 bytes", raw[:5], "binary state file is truncated"
    yield "truncated JSON", raw[: 64 + json_len // 2], "truncated"
    yield "truncated blob", raw[: data_offset + 100], "truncated"
    yield "one byte short", raw[:-1], "truncated"
    yield "extra bytes", raw + b"\x00", "extra bytes"
    flip = bytearray(raw)
    flip[64 + json_len // 2] ^= 0x01
    yield "JSON byte flipped", bytes(flip), "checksum does not match"
    flip = bytearray(raw)
    flip[data_offset + 10] ^= 0x40
    yield "blob byte flipped", bytes(flip), "blob 0 .* does not match its checksum"
    flip = bytearray(raw)
    flip[-3] ^= 0x01
    yield "last blob byte flipped", bytes(flip), "does not match its checksum"
    flip = bytearray(raw)
    flip[9] = 7
    yield "version", bytes(flip), "unsupported binary state file version"
    flip = bytearray(raw)
    flip[16:24] = struct.pack("<Q", 10**15)
    yield "JSON length", bytes(flip), "truncated"


def test_truncated_or_damaged_binary_files_are_refused(tmp_path):
    ds = consume(big_pipeline(), 5)
    path = tmp_path / "s.ri"
    ds.save_state(path)
    raw = path.read_bytes()
    json_len = struct.unpack("<Q", raw[16:24])[0]
    for name, data, message in _damage_cases(raw, json_len):
        bad = tmp_path / "bad.ri"
        bad.write_bytes(data)
        with pytest.raises(ValueError, match=message):
            big_pipeline().load_state(bad)
        with pytest.raises(ValueError, match=message):
            ri.loads_state(data)
    # the CLI reports it in one line
    bad.write_bytes(raw[:-1])
    assert cli_main(["inspect", str(bad)]) == 1


def test_a_damaged_blob_is_reported_as_damage_not_as_a_malformed_value(tmp_path):
    """A flipped byte in a blob was reported as "state holds a malformed encoded value of kind
    'ndarray': blob 0 ... does not match its checksum", which reads as a bug of the writer; and a
    file cut within its first 8 bytes as "neither a binary state file nor UTF-8 JSON"."""
    ri.save_state({"format": "demo", "a": big(), "b": b"x" * 5000}, tmp_path / "s")
    raw = bytearray((tmp_path / "s").read_bytes())
    raw[-3] ^= 0x01
    (tmp_path / "s").write_bytes(raw)
    for load in (lambda: ri.load_state(tmp_path / "s"), lambda: ri.loads_state(bytes(raw))):
        with pytest.raises(ValueError, match="does not match its checksum") as e:
            load()
        assert "malformed" not in str(e.value)
    (tmp_path / "s").write_bytes(raw[:3])
    with pytest.raises(ValueError, match="binary state file is truncated"):
        ri.load_state(tmp_path / "s")


def test_random_damage_to_a_binary_file_is_refused_or_harmless(tmp_path):
    import random

    rng = random.Random(11)
    full = ids(big_pipeline())
    ds = consume(big_pipeline(), 6)
    ds.save_state(tmp_path / "s.ri")
    raw = (tmp_path / "s.ri").read_bytes()
    outcomes = {"refused": 0, "harmless": 0}
    cuts = sorted(rng.sample(range(len(raw)), 40)) + list(range(0, 200, 7))
    for n in cuts:  # a file cut anywhere is refused
        with pytest.raises(ValueError):
            ri.loads_state(raw[:n])
    for _ in range(60):
        bad = bytearray(raw)
        for _ in range(rng.randint(1, 3)):
            bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
        try:
            state = ri.loads_state(bytes(bad))
        except ValueError:
            outcomes["refused"] += 1
            continue
        # only padding between blobs is not checksummed: the state is then the same
        resumed = big_pipeline()
        resumed.load_state_dict(state)
        assert ids(resumed) == full[6:]
        outcomes["harmless"] += 1
    assert outcomes["refused"] > 40, outcomes


def test_damaged_blob_table_and_references(tmp_path):
    def container(doc: dict) -> bytes:
        body = json.dumps(doc).encode()
        head = struct.pack("<8sIIQQ32s", sf.MAGIC, 1, 0, len(body), 16, hashlib.sha256(body).digest())
        return head + body + bytes(sf.align(64 + len(body)) - 64 - len(body)) + bytes(16)

    h = sf.blob_hasher(sf.BLOB_HASH)(bytes(16))
    ok = {"blobs": [[0, 16, h]], "hash": sf.BLOB_HASH, "value": {"a": {"__ri__": "ndarray", "dtype": "<i8", "shape": [2], "blob": 0}}}
    assert arrays_equal(ri.loads_state(container(ok))["a"], np.zeros(2, np.int64))
    bad_docs = [
        (dict(ok, blobs=[[0, 17, h]]), "blob table is damaged"),
        (dict(ok, blobs=[[-1, 16, h]]), "blob table is damaged"),
        (dict(ok, blobs="x"), "blob table is damaged"),
        (dict(ok, hash="md5"), "unknown blob checksum"),
        (dict(ok, value={"a": {"__ri__": "ndarray", "dtype": "<i8", "shape": [3], "blob": 0}}), "do not hold an array of shape"),
        (dict(ok, value={"a": {"__ri__": "ndarray", "dtype": "<i8", "shape": [2], "blob": 1}}), "does not hold"),
        (dict(ok, value={"a": {"__ri__": "ndarray", "dtype": "|O", "shape": [2], "blob": 0}}), "malformed"),
        (dict(ok, value={"a": {"__ri__": "bytes", "blob": True}}), "does not hold"),
        ({"value": 1}, "unexpected JSON document"),
    ]
    for doc, message in bad_docs:
        with pytest.raises(ValueError, match=message):
            ri.loads_state(container(doc))
    # a blob reference in JSON text is refused too
    with pytest.raises(ValueError, match="binary blob"):
        ri.loads_state(json.dumps({"a": {"__ri__": "bytes", "blob": 0}}))


def test_save_is_atomic_and_encodes_before_writing(tmp_path, monkeypatch):
    path = tmp_path / "s.ri"
    ri.save_state({"format": "demo", "a": big()}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError, match="cannot store a value of type object"):
        ri.save_state({"format": "demo", "a": big(1), "bad": [object()]}, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["s.ri"]

    def failing_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk full"):
        ri.save_state({"format": "demo", "a": big(2)}, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["s.ri"]  # no temporary file left


def test_a_full_disk_while_saving_names_the_file_and_leaves_it_as_it_was(tmp_path, monkeypatch):
    """ENOSPC in the middle of a write (or a rename that fails) raised the bare OSError, which names no
    file: a Trainer or a loop saving several files could not tell which one, nor that it was unharmed."""
    import errno
    import io

    from resumable_iterable import atomic_files

    path = tmp_path / "s.ri"
    ri.save_state({"format": "demo", "a": big()}, path)
    before = path.read_bytes()

    class FullDisk(io.FileIO):
        def write(self, b):
            super().write(bytes(b)[: len(b) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic_files, "open", lambda p, mode: FullDisk(p, mode.replace("b", "")), raising=False)
    with pytest.raises(OSError, match="No space left") as e:
        ri.save_state({"format": "demo", "a": big(2)}, path)
    assert any(repr(str(path)) in note and "left as it was" in note for note in e.value.__notes__)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["s.ri"]
    monkeypatch.undo()

    def failing_replace(src, dst):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(atomic_files.os, "replace", failing_replace)
    with pytest.raises(OSError, match="Input/output error") as e:
        ri.save_state({"format": "demo", "a": big(3)}, path)
    assert any(repr(str(path)) in note for note in e.value.__notes__)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["s.ri"]


def test_saving_where_the_file_cannot_be_written_names_the_file_not_a_temporary_one(tmp_path):
    """A missing folder (or one without write permission) and a path that is a folder raised an
    OSError naming the temporary file save_state writes first ('<path>.tmp.<host>.<pid>.<hex>',
    or '<tmp> -> <path>'): a name the user never gave, which read as if that file were the problem."""
    target = tmp_path / "no" / "such" / "folder" / "s.ri"
    with pytest.raises(FileNotFoundError) as e:
        ri.save_state({"format": "demo"}, target)
    assert e.value.filename == str(target) and ".tmp." not in str(e.value) and e.value.filename2 is None
    assert any("left as it was" in note for note in e.value.__notes__)
    (tmp_path / "dir").mkdir()
    with pytest.raises(IsADirectoryError) as e:
        ri.save_state({"format": "demo", "a": big()}, tmp_path / "dir")
    assert e.value.filename == str(tmp_path / "dir") and ".tmp." not in str(e.value) and e.value.filename2 is None
    assert sorted(os.listdir(tmp_path)) == ["dir"] and not os.listdir(tmp_path / "dir")  # no temporary file left


def test_two_threads_saving_to_one_path_each_write_whole_files(tmp_path):
    """Each save_state writes its own temporary file: two threads of one process saving to the same
    path at once both succeed and leave one of the two states whole (a temporary file named after
    the process alone was shared: the later rename failed with FileNotFoundError, and the file
    renamed into place could mix both states, replacing the good file with a damaged one)."""
    import threading

    path = tmp_path / "s.ri"
    errors: list[BaseException] = []
    for _ in range(6):
        barrier = threading.Barrier(2)

        def save(tag):
            state = {"format": "demo", "tag": tag, "a": np.full(1_000_000 if tag else 100_000, tag, np.float32)}
            barrier.wait()
            try:
                ri.save_state(state, path)
            except BaseException as e:  # noqa: BLE001 - recorded, asserted below
                errors.append(e)

        threads = [threading.Thread(target=save, args=(t,)) for t in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        back = ri.load_state(path)
        assert (back["a"] == back["tag"]).all()
        assert os.listdir(tmp_path) == ["s.ri"]


def test_the_temporary_file_of_a_killed_save_is_removed_by_a_later_save(tmp_path):
    """A process killed while saving leaves its temporary file; the next save to that path removes
    it once that process is gone and the file is older than STALE_TMP_SECONDS (a crash-looping job
    left a state-sized file per kill). A live writer's file, a fresh one, and other paths' are kept."""
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "s.ri"
    ri.save_state({"format": "demo", "a": big()}, path)
    code = ("import os, resumable_iterable.state_files as sf, numpy as np\n"
            "os.fsync = lambda fd: os.kill(os.getpid(), 9)\n"  # killed after writing, before the rename
            f"sf.save_state({{'format': 'demo', 'a': np.ones(300_000, np.float32)}}, {str(path)!r})\n")
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == -signal.SIGKILL
    [dead] = [n for n in os.listdir(tmp_path) if n != "s.ri"]
    assert dead.startswith("s.ri.tmp.") and ri.load_state(path)["a"].shape == big().shape  # the old file whole
    host = dead.split(".")[3]
    live = tmp_path / f"s.ri.tmp.{host}.{os.getppid()}.00000000"  # a process that is running
    other = tmp_path / f"t.ri.tmp.{host}.{dead.split('.')[4]}.00000000"  # another path's
    for f in (live, other):
        f.write_bytes(b"x")
    ri.save_state({"format": "demo", "a": big(1)}, path)
    assert sorted(os.listdir(tmp_path)) == sorted(["s.ri", dead, live.name, other.name])  # too recent
    old = time.time() - atomic_files.STALE_TMP_SECONDS - 1
    for f in (dead, live.name, other.name):
        os.utime(tmp_path / f, (old, old))
    ri.save_state({"format": "demo", "a": big(2)}, path)
    assert sorted(os.listdir(tmp_path)) == sorted(["s.ri", live.name, other.name])
    assert (ri.load_state(path)["a"] == big(2)).all()


def test_digest_of_a_written_file(tmp_path):
    for state in ({"format": "demo", "a": big()}, {"format": "demo", "a": 1}):
        enc = sf.encode_state(state)
        enc.write(tmp_path / "f")
        assert sf.state_file_digest(tmp_path / "f") == enc.digest
    # JSON text: the SHA-256 of the whole file, as the Trainer callback always recorded
    assert sf.state_file_digest(tmp_path / "f") == hashlib.sha256((tmp_path / "f").read_bytes()).hexdigest()


# --------------------------------------------------------------------------- numpy dtypes


def _dtypes():
    point = np.dtype([("x", "<f4"), ("y", ">i2"), ("tag", "S3")])
    return [
        point,
        np.dtype([("id", "<i8"), ("p", point), ("v", "<f8", (2, 3)), ("u", "<U4")]),
        np.dtype({"names": ["a", "b"], "formats": ["u1", "<f8"], "offsets": [0, 8], "itemsize": 24}),
        np.dtype([("a", "u1"), ("b", "<i4")], align=True),
        np.dtype({"names": ["a"], "formats": ["<i4"], "titles": ["the a"]}),
        np.dtype(">i4"), np.dtype(">f8"), np.dtype("<M8[ns]"), np.dtype(">M8[D]"), np.dtype("<m8[us]"),
        np.dtype("<U7"), np.dtype(">U3"), np.dtype("S5"), np.dtype("V6"), np.dtype("?"), np.dtype("<c16"),
        np.dtype("<f2"),
    ]


def _sample(dt: np.dtype, n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8).tobytes()
    arr = np.frombuffer(raw, dtype=dt).copy()
    if dt.kind in "fc" or dt.fields is not None:
        return arr  # compared bytewise, NaN payloads included
    if dt.kind in "Mm":
        return np.arange(n).astype(dt)
    if dt.kind == "U":
        return np.array([f"é{i}"[: dt.itemsize // 4] for i in range(n)], dtype=dt)
    if dt.kind == "b":
        return arr.view(np.uint8) % 2 == 1
    return arr


@pytest.mark.parametrize("dt", _dtypes(), ids=str)
def test_dtypes_are_kept_exactly(tmp_path, dt):
    for n in (3, 2000):  # inline base64 and a raw blob
        arr = _sample(dt, n)
        scalar = arr[1]
        state = {"arr": arr, "scalar": scalar, "nd": arr[: n - n % 2].reshape(2, -1)}
        ri.save_state(state, tmp_path / "s")
        for back in (ri.load_state(tmp_path / "s"), ri.loads_state(ri.dumps_state(state))):
            assert back["arr"].dtype == dt and back["arr"].dtype.str == dt.str
            assert back["arr"].dtype.descr == dt.descr and back["arr"].dtype.itemsize == dt.itemsize
            assert back["arr"].tobytes() == arr.tobytes() and back["nd"].shape == state["nd"].shape
            # numpy scalars are native-endian, and a str_/bytes_ scalar is as long as its value
            assert type(back["scalar"]) is type(scalar) and back["scalar"].dtype == scalar.dtype
            assert back["scalar"].tobytes() == scalar.tobytes()
            assert back["arr"].dtype.isalignedstruct == dt.isalignedstruct


def _same(a, b) -> bool:
    """Exact equality of decoded values: types, dtypes and bytes included (NaN == NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def test_random_values_round_trip_exactly_in_both_formats(tmp_path):
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import given
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    dtypes = st.one_of(hnp.scalar_dtypes(), hnp.integer_dtypes(endianness="?"), hnp.floating_dtypes(endianness="?"),
                       hnp.datetime64_dtypes(endianness="?"), hnp.byte_string_dtypes(), hnp.unicode_string_dtypes(endianness="?"),
                       hnp.array_dtypes(subtype_strategy=hnp.scalar_dtypes(), min_size=1, max_size=3))
    arrays = dtypes.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=2, max_side=40)))
    leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5),
                       st.binary(max_size=2000), arrays)
    values = st.recursive(leaves, lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.tuples(kids, kids),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), kids, max_size=3)), max_leaves=12)

    @hypothesis.settings(max_examples=60, deadline=None)
    @given(values)
    def check(value):
        state = {"format": "x", "v": value}
        ri.save_state(state, tmp_path / "s")
        for back in (ri.load_state(tmp_path / "s"), ri.loads_state(ri.dumps_state(state))):
            assert _same(back, state)

    check()


def test_object_arrays(tmp_path):
    arr = np.empty(3, dtype=object)
    arr[:] = [1, "a", (2, 3)]
    back = ri.load_state(_saved(tmp_path, {"o": arr}))["o"]
    assert back.dtype == object and back.tolist() == [1, "a", (2, 3)]
    with pytest.raises(TypeError, match="holds Python objects"):
        ri.save_state({"o": np.zeros(2, dtype=[("a", "O"), ("b", "<i4")])}, tmp_path / "x")


@pytest.mark.parametrize("dtype,shape", [("V0", [2**62]), ("S0", [2**62]), ("<U0", [2**62]), ("<i8", [2**200]),
                                         ("<i8", "x"), ("<i8", [1, -1])])
def test_shapes_that_do_not_fit_their_data_are_refused(dtype, shape):
    raw = {"a": {"__ri__": "ndarray", "dtype": dtype, "shape": shape, "b64": ""}}
    with pytest.raises(ValueError, match="malformed encoded value of kind 'ndarray'"):
        ri.loads_state(json.dumps(raw))


def _saved(tmp_path, state):
    ri.save_state(state, tmp_path / "s")
    return tmp_path / "s"


@pytest.mark.parametrize("dtype", [
    "O", "|O", "object", [1], {"names": ["a"], "formats": ["O"], "offsets": [0], "itemsize": 8},
    {"names": ["a"], "formats": ["<i4"], "offsets": [-1], "itemsize": 8}, {"names": "ab"},
    {"subdtype": "<i4", "shape": [-1]}, "__import__('os').system('true')", 5,
])
def test_bad_dtypes_are_refused(dtype):
    text = ri.dumps_state({"format": "x"})
    raw = json.loads(text)
    del raw["checksum"]
    raw["a"] = {"__ri__": "ndarray", "dtype": dtype, "shape": [1], "b64": "AAAAAAAAAAA="}
    with pytest.raises(ValueError, match="malformed encoded value"):
        ri.loads_state(json.dumps(raw))


# --------------------------------------------------------------------------- PIL images


def _image(mode: str, size=(13, 7), seed=0):
    rng = np.random.default_rng(seed)
    if mode == "P":
        img = PIL_Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8), "RGB").quantize(37)
        return img
    if mode == "I;16":
        return PIL_Image.frombytes(mode, size, rng.integers(0, 256, size[0] * size[1] * 2, dtype=np.uint8).tobytes())
    probe = PIL_Image.new(mode, (1, 1))
    nbytes = len(probe.tobytes())
    img = PIL_Image.frombytes(mode, size, rng.integers(0, 256, size[0] * size[1] * nbytes, dtype=np.uint8).tobytes())
    if mode == "PA":
        img.putpalette(list(range(256)) * 3)
    return img


def image_key(img):
    return (img.mode, img.size, img.tobytes(), img.getpalette() if "P" in img.mode else None)


@needs_pil
@pytest.mark.parametrize("mode", ["1", "L", "LA", "P", "RGB", "RGBA", "I;16", "I", "F", "CMYK", "YCbCr", "RGBX", "PA", "HSV"])
def test_pil_images_round_trip_losslessly(tmp_path, mode):
    small, large = _image(mode), _image(mode, size=(300, 200), seed=1)
    state = {"imgs": [small, large], "nested": {"t": (small,)}}
    ri.save_state(state, tmp_path / "s")
    for back in (ri.load_state(tmp_path / "s"), ri.loads_state(ri.dumps_state(state))):
        for a, b in zip(state["imgs"] + [small], back["imgs"] + [back["nested"]["t"][0]]):
            assert isinstance(b, PIL_Image.Image)
            assert image_key(b) == image_key(a)


@needs_pil
def test_a_binary_state_file_writes_large_images_as_raw_pixels_without_encoding(tmp_path, monkeypatch):
    """PNG-encoding an image costs milliseconds (seconds for a buffer of them at every checkpoint):
    a binary state file stores a large image's pixels as a blob; JSON text keeps PNG (smaller)."""
    large, small = _image("RGB", size=(300, 200), seed=2), _image("RGB")
    encoded = []
    real_save = PIL_Image.Image.save
    monkeypatch.setattr(PIL_Image.Image, "save", lambda img, *a, **k: (encoded.append(img.size), real_save(img, *a, **k)))
    ri.save_state({"buffer": [large, small]}, tmp_path / "s")
    assert encoded == [small.size]  # the small one only (it stays in the JSON document)
    back = ri.load_state(tmp_path / "s")["buffer"]
    assert [image_key(b) for b in back] == [image_key(large), image_key(small)]
    encoded.clear()
    ri.dumps_state({"buffer": [large]})
    assert encoded == [large.size]


@needs_pil
def test_palette_images_whose_palette_is_shorter_than_their_indices_keep_their_pixels(tmp_path):
    """A palette image (a segmentation mask of class indices) made by Image.new("P") has an empty
    palette, or a short one after putpalette: PNG writes only the palette's entries, in as few bits
    as they need, so a small such image came back from a state with its indices cut to 0/1; and
    one without a palette made saving fail inside Pillow (UnboundLocalError)."""
    empty = PIL_Image.new("P", (9, 4))
    empty.putdata([i % 21 for i in range(36)])
    short = empty.copy()
    short.putpalette([0, 0, 0, 255, 255, 255])
    full = empty.copy()
    full.putpalette(bytes(range(256)) * 3)
    # pickled (as a DataLoader worker sends it), an empty palette becomes none: PNG cannot write that
    unpickled = pickle.loads(pickle.dumps(empty))
    assert unpickled.palette is None
    state = {"masks": [empty, short, full, unpickled]}
    ri.save_state(state, tmp_path / "s")
    for back in (ri.load_state(tmp_path / "s"), ri.loads_state(ri.dumps_state(state))):
        assert [image_key(b) for b in back["masks"]] == [image_key(a) for a in state["masks"]]
        assert back["masks"] == state["masks"]


@needs_pil
def test_damaged_image_data_is_refused():
    text = ri.dumps_state({"img": _image("RGB")})
    raw = json.loads(text)
    del raw["checksum"]
    raw["img"]["png"] = {"__ri__": "bytes", "b64": "iVBORw0KGgoAAAANSUhEUgAA"}
    with pytest.raises(ValueError, match="malformed encoded value of kind 'image'"):
        ri.loads_state(json.dumps(raw))
    raw["img"] = {"__ri__": "image", "mode": "RGB", "size": [10**6, 10**6], "raw": {"__ri__": "bytes", "b64": "AAAA"}}
    with pytest.raises(ValueError, match="does not match its data"):
        ri.loads_state(json.dumps(raw))


@needs_pil
def test_hf_image_column_in_a_shuffle_buffer_resumes_exactly(tmp_path):
    from datasets import Features, Image, Value

    rng = np.random.default_rng(0)
    imgs = [PIL_Image.fromarray(rng.integers(0, 256, (20 + i % 5, 30, 3), dtype=np.uint8), "RGB") for i in range(30)]
    imgs[3] = imgs[3].convert("L")
    imgs[4] = imgs[4].convert("RGBA")
    hf = Dataset.from_dict({"id": list(range(30)), "image": imgs}, features=Features({"id": Value("int64"), "image": Image()}))

    def build():
        return ri.to_iterable_dataset(hf, num_shards=3).shuffle(seed=5, buffer_size=8)

    def key(ex):
        return ex["id"], image_key(ex["image"])

    full = [key(ex) for ex in build()]
    assert isinstance(next(iter(build()))["image"], PIL_Image.Image)
    for k in (0, 1, 9, 29, 30):
        ds = build()
        it = iter(ds)
        head = [key(next(it)) for _ in range(k)]
        path = tmp_path / f"s{k}"
        ds.save_state(path)  # PIL images in the buffer: saved losslessly
        resumed = build()
        resumed.load_state(path)
        assert head + [key(ex) for ex in resumed] == full


# --------------------------------------------------------------------------- nesting limits


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,
    '{"a":' * 100_000 + "1" + "}" * 100_000,
    '{"format": "x", "deep": ' + "[" * 5000 + "]" * 5000 + "}",
    '{"format": "x", "deep": ' + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "}",
])
def test_deeply_nested_documents_raise_value_error(tmp_path, text):
    with pytest.raises(ValueError, match="nested|not valid JSON|must be a JSON object"):
        ri.loads_state(text)
    (tmp_path / "deep.json").write_text(text)
    with pytest.raises(ValueError):
        ri.load_state(tmp_path / "deep.json")
    # with a checksum entry: computing the checksum must not blow up either
    if text.startswith("{"):
        with pytest.raises(ValueError):
            ri.loads_state('{"checksum": "sha256:00", ' + text[1:])


def test_deeply_nested_binary_file_raises_value_error():
    body = ('{"blobs":[],"hash":"sha256","value":' + "[" * 100_000 + "]" * 100_000 + "}").encode()
    head = struct.pack("<8sIIQQ32s", sf.MAGIC, 1, 0, len(body), 0, hashlib.sha256(body).digest())
    data = head + body + bytes(sf.align(64 + len(body)) - 64 - len(body))
    with pytest.raises(ValueError, match="nested"):
        ri.loads_state(data)


def test_deeply_nested_states_cannot_be_saved(tmp_path):
    deep: list = []
    node = deep
    for _ in range(100_000):
        node.append([])
        node = node[0]
    loop: list = []
    loop.append(loop)
    deep_dict: dict = {}
    d = deep_dict
    for _ in range(MAX_DEPTH + 1):
        d[1] = {}  # non-string keys: tagged dicts, three JSON levels each
        d = d[1]
    for state in ({"format": "x", "deep": deep}, {"format": "x", "loop": loop}, {"format": "x", "d": deep_dict}):
        with pytest.raises(ValueError, match="nested more than"):
            ri.dumps_state(state)
        with pytest.raises(ValueError, match="nested more than"):
            ri.save_state(state, tmp_path / "s")
        assert not os.listdir(tmp_path)


def test_nesting_below_the_limit_round_trips(tmp_path):
    value: list = [1]
    for _ in range(MAX_DEPTH - 5):
        value = [value]
    state = {"format": "x", "v": value}
    assert ri.loads_state(ri.dumps_state(state)) == state
    ri.save_state(state, tmp_path / "s")
    assert ri.load_state(tmp_path / "s") == state


# --------------------------------------------------------------------------- lists of per-rank states


def _rank_states(with_arrays: bool):
    states = []
    for rank in range(2):
        src = big_pipeline() if with_arrays else ri.to_iterable_dataset(
            Dataset.from_dict({"id": list(range(100))}), num_shards=4).shuffle(seed=1, buffer_size=8)
        ds = ri.split_dataset_by_node(src, rank=rank, world_size=2)
        states.append(consume(ds, 3 + rank).state_dict())
    return states


@pytest.mark.parametrize("with_arrays", [False, True])
def test_a_list_of_per_rank_states_saves_loads_and_inspects(tmp_path, capsys, with_arrays):
    states = _rank_states(with_arrays)
    path = tmp_path / "ranks"
    ri.save_state(states, path)
    assert path.read_bytes().startswith(sf.MAGIC) == with_arrays
    back = ri.load_state(path)
    assert isinstance(back, list) and len(back) == 2
    for rank, (a, b) in enumerate(zip(states, back)):
        src = big_pipeline() if with_arrays else ri.to_iterable_dataset(
            Dataset.from_dict({"id": list(range(100))}), num_shards=4).shuffle(seed=1, buffer_size=8)
        expected = ri.split_dataset_by_node(src, rank=rank, world_size=2)
        resumed = ri.split_dataset_by_node(src, rank=rank, world_size=2)
        consume_n = 3 + rank
        resumed.load_state_dict(b)
        assert ids(resumed) == ids(expected)[consume_n:]
    text = ri.dumps_state(states)
    assert [s["fingerprint"] for s in ri.loads_state(text)] == [s["fingerprint"] for s in states]
    assert cli_main(["inspect", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [s["label"] for s in report["states"]] == ["rank 0 of 2", "rank 1 of 2"]


def test_damaged_list_of_states_is_refused():
    text = ri.dumps_state(_rank_states(False))
    with pytest.raises(ValueError, match="checksum does not match"):
        ri.loads_state(text.replace('"offset": ', '"offset": 1', 1))
    with pytest.raises(TypeError, match="a list of states"):
        ri.dumps_state("not a state")


@pytest.mark.parametrize("what", ["state", "list of states", "any document"])
def test_every_bit_flip_in_the_checksum_key_name_is_refused(what):
    """One flipped bit in the name "checksum" used to hide the checksum: the text then read as a
    plain JSON state, and the rest of it went unchecked."""
    doc = {"state": lambda: consume(big_pipeline(), 11).state_dict(), "list of states": lambda: _rank_states(False),
           "any document": lambda: {"step": 3}}[what]()
    text = ri.dumps_state(doc).encode()
    at = text.index(b'"checksum"') + 1
    flips = 0
    for i in range(at, at + len("checksum")):
        for bit in range(7):  # the 8th bit makes the text invalid UTF-8: refused as JSON already
            damaged = bytearray(text)
            damaged[i] ^= 1 << bit
            if damaged[i] in b'"\\' or damaged[i] < 0x20:
                continue  # a quote, backslash or control character: not valid JSON, refused as such
            flips += 1
            with pytest.raises(ValueError, match="checksum under the name"):
                ri.loads_state(bytes(damaged))
    assert flips >= 50


def test_a_state_with_an_unknown_top_level_entry_is_refused():
    state = consume(big_pipeline(), 11).state_dict()
    with pytest.raises(ValueError, match=r"unknown top-level entries \['chdcksum'\]"):
        big_pipeline().load_state_dict(dict(state, chdcksum="x"))
    resumed = big_pipeline()
    resumed.load_state_dict(json.loads(ri.dumps_state(state)))  # json.load of a file: "checksum" is known
    assert ids(resumed) == ids(big_pipeline())[11:]


# --------------------------------------------------------------------------- Trainer callback


class _Opaque:
    pass


def _collate(batch):
    import torch

    return {"ids": torch.tensor([ex["ids"] for ex in batch])}


def _recorder():
    from trainer_support import Recorder

    return Recorder()


def _trainer(out, ds, **kw):
    import transformers

    from resumable_iterable.integrations.transformers import ResumableDataCallback

    args = transformers.TrainingArguments(
        output_dir=str(out), max_steps=kw.pop("max_steps", 8), per_device_train_batch_size=4,
        save_steps=kw.pop("save_steps", 1000), dataloader_num_workers=0, report_to="none", use_cpu=True,
        logging_strategy="no", remove_unused_columns=False, disable_tqdm=True, **kw)
    model = _recorder()
    trainer = transformers.Trainer(model=model, args=args, train_dataset=ds, data_collator=_collate)
    ResumableDataCallback.attach(trainer)
    return trainer, model


def _array_rows(fn=lambda ex: {"vec": np.full(512, ex["ids"], np.float32)}):
    import torch  # noqa: F401 - as in a training script: torch is imported before the dataset is built

    hf = Dataset.from_dict({"ids": list(range(40))})
    return ri.to_iterable_dataset(hf, num_shards=4).map(fn).shuffle(seed=7, buffer_size=8)


@pytest.mark.torch
@needs_trainer
def test_trainer_refuses_an_unsavable_state_before_writing_the_checkpoint(tmp_path):
    ds = _array_rows(lambda ex: {"obj": _Opaque()})  # buffered examples hold an object no state can store
    trainer, model = _trainer(tmp_path / "run", ds, save_steps=3)
    with pytest.raises(TypeError, match=r"ResumableDataCallback: cannot save the data state of step 3 .*_Opaque"):
        trainer.train()
    assert len(model.seen) == 3 * 4
    # the error came before the Trainer wrote anything of checkpoint-3: no folder, no partial file
    assert not (tmp_path / "run" / "checkpoint-3").exists()
    leftovers = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    assert leftovers == []


@pytest.mark.torch
@needs_trainer
def test_trainer_saves_large_buffered_arrays_in_a_binary_file_and_resumes_exactly(tmp_path):
    import transformers

    from resumable_iterable.integrations.transformers import STATE_FILE

    a, model_a = _trainer(tmp_path / "a", _array_rows())
    a.train()

    class Crash(Exception):
        pass

    class CrashAfterSave(transformers.TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            raise Crash()

    b, model_b = _trainer(tmp_path / "run", _array_rows(), save_steps=5)
    b.add_callback(CrashAfterSave())
    with pytest.raises(Crash):
        b.train()
    ckpt = tmp_path / "run" / "checkpoint-5"
    path = ckpt / STATE_FILE
    assert path.read_bytes().startswith(sf.MAGIC)  # 8 buffered 2 KB arrays: stored raw
    recorded = json.loads((ckpt / "trainer_state.json").read_text())["stateful_callbacks"]["ResumableDataCallback"]
    assert recorded["attributes"]["data_state_sha256"] == sf.state_file_digest(path)
    assert cli_main(["inspect", str(path)]) == 0

    c, model_c = _trainer(tmp_path / "run", _array_rows())
    c.train(resume_from_checkpoint=str(ckpt))
    assert model_b.seen[:20] + model_c.seen == model_a.seen


# --------------------------------------------------------------------------- exact types


def _exactly(a, b) -> bool:
    """``a`` and ``b`` equal with the same types all the way down (and the same fields for times)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_exactly(x, y) for x, y in zip(a.values(), b.values()))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_exactly(x, y) for x, y in zip(a, b))
    return repr(a) == repr(b) and getattr(a, "fold", 0) == getattr(b, "fold", 0)


def _time_values():
    import datetime as dt
    import zoneinfo

    import pandas as pd

    paris = zoneinfo.ZoneInfo("Europe/Paris")
    return [dt.datetime(2020, 10, 25, 2, 30, fold=1, tzinfo=paris), dt.datetime(2020, 3, 29, 2, 30, tzinfo=paris),
            dt.datetime(2020, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=-3), "X")), dt.datetime(2020, 1, 1, fold=1),
            dt.datetime(2020, 1, 2, tzinfo=dt.timezone.utc), dt.time(1, 2, tzinfo=dt.timezone(dt.timedelta(hours=1))),
            pd.Timestamp("2020-01-01 00:00:00.000000001"), pd.Timestamp("2020-01-01 00:00:00.000000001", tz="Europe/Paris"),
            pd.Timestamp("2020-01-01", tz="UTC"), pd.Timestamp(np.datetime64(5, "s")), pd.Timedelta(1, "ns"),
            pd.Timedelta(5, "ms"), pd.NaT, bytearray(b"\x00\x01"), bytearray(3000)]


def test_dates_times_and_bytearrays_come_back_as_the_same_types(tmp_path):
    """A subclass was stored as its base type: a pandas Timestamp (a datetime) lost its nanoseconds
    and came back a datetime, a ZoneInfo zone came back a fixed offset (and fold was lost), a
    bytearray came back bytes, and pd.NaT was saved as text that no load could read."""
    values = _time_values()
    ri.save_state({"format": "x", "v": values}, tmp_path / "s")
    for back in (ri.load_state(tmp_path / "s")["v"], ri.loads_state(ri.dumps_state({"v": values}))["v"]):
        for a, b in zip(values, back):
            assert _exactly(a, b), (a, b)
    assert back[-3] is values[-3]  # pd.NaT


def test_empty_numpy_strings_and_trailing_nuls_come_back(tmp_path):
    """numpy gives an empty string scalar (np.str_(''), dtype <U0) one NUL character of bytes:
    saved as such, the state could never be loaded again ("4 bytes cannot hold a scalar of <U0") -
    what a map after with_format("numpy") below a shuffle buffer made of an empty text. And a
    bytes_/str_ scalar ending in NULs (binary data often does) came back without them, as an
    array's item does."""
    values = [np.str_(""), np.bytes_(b""), np.bytes_(b"ab\x00\x00"), np.str_("a\x00"), np.bytes_(b"\x00"),
              np.array(["xy", "z"], ">U2")[1]]
    ri.save_state({"format": "x", "v": values}, tmp_path / "s")
    for back in (ri.load_state(tmp_path / "s")["v"], ri.loads_state(ri.dumps_state({"v": values}))["v"]):
        for a, b in zip(values, back, strict=True):
            assert type(b) is type(a) and b.dtype == a.dtype and len(b) == len(a) and b.tobytes() == a.tobytes()
    # the empty strings of states saved before, with their NUL character, load
    text = json.dumps({"v": {"__ri__": "npscalar", "dtype": "<U0", "b64": "AAAAAA=="},
                       "w": {"__ri__": "npscalar", "dtype": "|S0", "b64": "AA=="}})
    assert ri.loads_state(text) == {"v": np.str_(""), "w": np.bytes_(b"")}

    hf = Dataset.from_dict({"id": list(range(12)), "text": ["" if i % 3 else f"t{i}" for i in range(12)]})

    def build():
        return ri.to_iterable_dataset(hf, num_shards=2).with_format("numpy").map(lambda ex: {"n": 1}).shuffle(
            seed=2, buffer_size=4)

    def through_a_file(state):
        ri.save_state(state, tmp_path / "s")
        return ri.load_state(tmp_path / "s")

    from harness import assert_resumes_exactly

    assert_resumes_exactly(build, roundtrip=through_a_file)


def test_slices_of_a_memory_mapped_token_file_in_a_shuffle_buffer_resume_exactly(tmp_path):
    """A generator yielding slices of an np.memmap (a token file, as nanoGPT reads one) below a
    shuffle buffer could not be saved: "cannot store a value of type numpy.memmap". Such a slice
    is stored as its values and comes back as a plain array."""
    from harness import assert_resumes_exactly

    path = tmp_path / "tokens.bin"
    np.arange(3000, dtype=np.uint16).tofile(path)

    def chunks(shards):
        data = np.memmap(path, dtype=np.uint16, mode="r")
        for s in shards:
            for i in range(s * 1000, (s + 1) * 1000, 200):
                yield {"x": data[i:i + 200]}

    def build():
        return ri.IterableDataset.from_generator(chunks, gen_kwargs={"shards": [0, 1, 2]}).shuffle(seed=1, buffer_size=4)

    assert type(next(iter(build()))["x"]) is np.memmap

    def through_a_file(state):
        ri.save_state(state, tmp_path / "s")
        return ri.load_state(tmp_path / "s")

    assert_resumes_exactly(build, roundtrip=through_a_file)
    back = ri.loads_state(ri.dumps_state({"x": np.memmap(path, dtype=np.uint16, mode="r")[5:9]}))["x"]
    assert type(back) is np.ndarray and back.dtype == np.uint16 and back.tolist() == [5, 6, 7, 8]


def test_complex_numbers_come_back_exactly(tmp_path):
    """A Python complex (the .item() of a numpy complex scalar, a map computing a spectrum) made
    save_state raise TypeError, while numpy's complex arrays and scalars were stored."""
    values = [1 + 2j, complex(-0.0, float("inf")), complex(float("nan"), -1e-310), 0j]
    ri.save_state({"format": "x", "v": values}, tmp_path / "s")
    for back in (ri.load_state(tmp_path / "s")["v"], ri.loads_state(ri.dumps_state({"v": values}))["v"]):
        assert all(type(b) is complex for b in back)
        assert [(repr(b.real), repr(b.imag)) for b in back] == [(repr(a.real), repr(a.imag)) for a in values]
    raw = json.loads(ri.dumps_state({"c": 1j}))
    del raw["checksum"]
    raw["c"]["v"] = ["1", 2]
    with pytest.raises(ValueError, match="malformed encoded value of kind 'complex'"):
        ri.loads_state(json.dumps(raw))


def test_hf_timestamp_ns_column_in_a_shuffle_buffer_resumes_exactly(tmp_path):
    import pyarrow as pa

    table = pa.table({"id": list(range(20)),
                      "ts": pa.array([1_600_000_000_000_000_001 + i for i in range(20)], pa.timestamp("ns")),
                      "tz": pa.array([1_600_000_000_000_000 + i for i in range(20)], pa.timestamp("us", tz="Europe/Paris"))})
    hf = Dataset(table)

    def build():
        return ri.to_iterable_dataset(hf, num_shards=2).shuffle(seed=0, buffer_size=5)

    full = list(build())
    ds = build()
    head = [ex for _, ex in zip(range(3), ds)]
    ds.save_state(tmp_path / "s")
    resumed = build()
    resumed.load_state(tmp_path / "s")
    assert _exactly(head + list(resumed), full)


class _Sub(dict):
    pass


@pytest.mark.parametrize("make", [
    lambda: __import__("collections").OrderedDict(b=1, a=2),
    lambda: __import__("collections").namedtuple("P", "x y")(1, 2),
    lambda: __import__("enum").IntEnum("E", "A").A,
    lambda: _Sub(a=1),
    lambda: np.ma.masked_array([1, 2], mask=[0, 1]),
    lambda: memoryview(b"ab"),
    lambda: __import__("datetime").datetime(2020, 1, 1, tzinfo=__import__("zoneinfo").ZoneInfo.no_cache("UTC")).replace(
        tzinfo=type("TZ", (__import__("datetime").tzinfo,), {"utcoffset": lambda s, d: None})()),
], ids=["OrderedDict", "namedtuple", "IntEnum", "dict subclass", "masked array", "memoryview", "other tzinfo"])
def test_values_that_would_come_back_as_another_type_are_refused_naming_where(tmp_path, make):
    """These were saved as their base type (or crashed with an unrelated error): a resumed run then
    yielded a dict for an OrderedDict, an int for an IntEnum... The save refuses them, saying where."""
    state = {"format": "x", "state": {"buffer": [[{"id": 1, "col": make()}]]}}
    with pytest.raises(TypeError, match=r"cannot store .* \(at state\['state'\]\['buffer'\]\[0\]\[0\]\['col'\]"):
        ri.dumps_state(state)
    with pytest.raises(TypeError, match=r"\['col'\]"):
        ri.save_state(state, tmp_path / "s")


@needs_pil
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "TIFF", "GIF", "plain", "plain-info", "P-RGBA-palette", "LAB",
                                 "PNG-iTXt", "ICO"])
def test_pil_images_come_back_equal_of_their_class_with_their_info(tmp_path, fmt):
    """PIL's == compares the class and info too: a decoded JPEG (a JpegImageFile, as a map over an
    HF Image column gives) came back a PngImageFile or a plain Image without its info (dpi, exif,
    ICC profile), a P image's RGBA palette lost its alpha, so the resumed examples differed."""
    import io

    rng = np.random.default_rng(0)
    base = PIL_Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8), "RGB")
    if fmt == "plain":
        img = base
    elif fmt == "plain-info":
        img = base.copy()
        img.info["dpi"] = (72, 72)
    elif fmt == "P-RGBA-palette":
        img = PIL_Image.new("P", (4, 4))
        img.putpalette([1, 2, 3, 4, 5, 6, 7, 8], "RGBA")
    elif fmt == "LAB":
        img = base.convert("LAB")
    else:
        buf = io.BytesIO()
        exif = base.getexif()
        exif[0x010F] = "camera"
        # a PNG's international text (XMP metadata is one) is an iTXt, a str subclass; an ICO's
        # sizes a set: both were refused, so a buffer of such images could not be saved at all
        text = __import__("PIL.PngImagePlugin").PngImagePlugin.PngInfo()
        text.add_itxt("XML:com.adobe.xmp", "<x:xmpmeta/>", lang="en", tkey="xmp")
        kwargs = {"JPEG": {"dpi": (300, 300), "exif": exif.tobytes()}, "TIFF": {"dpi": (72.5, 72.5)},
                  "PNG-iTXt": {"pnginfo": text}}.get(fmt, {})
        (base.convert("P") if fmt == "GIF" else base).save(buf, format=fmt.split("-")[0], **kwargs)
        img = PIL_Image.open(io.BytesIO(buf.getvalue()))
        img.load()
    state = {"format": "x", "v": [img, img.resize((100, 100)) if img.mode != "P" else img]}
    ri.save_state(state, tmp_path / "s")
    for back in (ri.load_state(tmp_path / "s")["v"], ri.loads_state(ri.dumps_state(state))["v"]):
        for a, b in zip(state["v"], back):
            assert type(b) is type(a) and b == a and b.info == a.info and b.format == a.format
            assert [(type(v), getattr(v, "lang", 0), getattr(v, "tkey", 0)) for v in b.info.values()] == [
                (type(v), getattr(v, "lang", 0), getattr(v, "tkey", 0)) for v in a.info.values()]
            assert image_key(b) == image_key(a) and b.palette.mode == a.palette.mode if a.palette else True


def test_a_pil_image_subclass_of_the_users_is_refused():
    if PIL_Image is None:
        pytest.skip("Pillow is not installed")

    class Mine(PIL_Image.Image):
        pass

    img = Mine()
    img.__setstate__([{}, "L", (2, 2), None, b"\0\0\0\0"])
    with pytest.raises(TypeError, match=r"PIL image of class .*Mine.*\(at state\['v'\]\)"):
        ri.dumps_state({"v": img})


@pytest.mark.parametrize("value", [{1, (2, "a")}, frozenset({b"x", 1.5}), set()], ids=["set", "frozenset", "empty"])
def test_sets_round_trip_as_their_type(tmp_path, value):
    """Sets are stored item by item and come back as the same type (an ICO image's info holds one)."""
    state = {"format": "x", "v": [value]}
    ri.save_state(state, tmp_path / "s")
    for back in (ri.load_state(tmp_path / "s")["v"][0], ri.loads_state(ri.dumps_state(state))["v"][0]):
        assert type(back) is type(value) and back == value


# --------------------------------------------------------------------------- torch tensors


def _tensors():
    torch = pytest.importorskip("torch")
    x = torch.arange(12.0).reshape(3, 4)
    out = [x.t(), x[:, ::2], torch.tensor(3.5), torch.zeros(0, 3), torch.randn(3, dtype=torch.complex64).conj(),
           torch.ones(3, requires_grad=True), torch.arange(5).flip(0), torch.randn(40, 30)]
    for dt in (torch.bfloat16, torch.float16, torch.float64, torch.complex128, torch.bool, torch.int8, torch.uint8,
               torch.int32, torch.int64, torch.float8_e4m3fn):
        out.append((torch.randn(50, 7) * 10).to(dt))
    return out


def _same_tensor(a, b) -> bool:
    import torch

    if type(b) is not torch.Tensor or (a.dtype, a.shape, a.requires_grad) != (b.dtype, b.shape, b.requires_grad):
        return False
    if not a.numel():
        return not b.numel()
    as_bytes = [t.detach().resolve_conj().contiguous().reshape(-1).view(torch.uint8) for t in (a, b)]
    return torch.equal(*as_bytes)


def test_torch_tensors_round_trip_exactly_in_both_formats(tmp_path):
    """A map returning tensors (a tokenizer with return_tensors="pt") below a shuffle buffer puts
    them in the state: save_state refused it with a TypeError, so such a pipeline could not be
    checkpointed with buffer_state="examples". Tensors come back of the same dtype (bfloat16 and
    float8 included, which numpy lacks), shape, bytes and requires_grad, and writable."""
    values = _tensors()
    state = {"format": "x", "v": values, "nested": {"t": (values[2],)}}
    ri.save_state(state, tmp_path / "s")
    with open(tmp_path / "s", "rb") as f:
        assert f.read(len(ri.state_files.MAGIC)) == ri.state_files.MAGIC  # the large ones as raw blobs
    for back in (ri.load_state(tmp_path / "s"), ri.loads_state(ri.dumps_state(state))):
        assert all(_same_tensor(a, b) for a, b in zip(values, back["v"], strict=True))
        assert _same_tensor(values[2], back["nested"]["t"][0])
        back["v"][7].add_(1)  # writable, its own memory


def test_torch_tensors_that_cannot_be_stored_exactly_are_refused_naming_where():
    torch = pytest.importorskip("torch")
    for bad, what in [(torch.nn.Parameter(torch.zeros(2)), "torch.nn.parameter.Parameter"),
                      (torch.zeros(2).to_sparse(), "sparse_coo"), (torch.zeros(2, device="meta"), "device meta")]:
        with pytest.raises(TypeError, match=what) as e:
            ri.dumps_state({"buffer": [{"ids": bad}]})
        assert "state['buffer'][0]['ids']" in str(e.value)
    raw = json.loads(ri.dumps_state({"t": torch.zeros(2)}))
    del raw["checksum"]
    for field, value in [("dtype", "Tensor"), ("dtype", "qint8"), ("dtype", 5), ("shape", [3]), ("shape", [-2])]:
        damaged = {**raw, "t": {**raw["t"], field: value}}
        with pytest.raises(ValueError, match="malformed encoded value of kind 'tensor'"):
            ri.loads_state(json.dumps(damaged))


def test_a_map_returning_torch_tensors_below_a_shuffle_buffer_resumes_exactly_from_saved_states(tmp_path):
    torch = pytest.importorskip("torch")
    from harness import assert_resumes_exactly

    hf = Dataset.from_dict({"id": list(range(24))})

    def build():
        return (ri.to_iterable_dataset(hf, num_shards=3)
                .map(lambda ex: {"ids": torch.arange(ex["id"], ex["id"] + 300), "half": torch.full((2,), ex["id"] / 3,
                                                                                                 dtype=torch.bfloat16)})
                .shuffle(seed=4, buffer_size=5)
                .map(lambda ex: {"ids": ex["ids"].tolist(), "half": [str(ex["half"].dtype), ex["half"].tolist()]}))

    def through_a_file(state):
        ri.save_state(state, tmp_path / "s")
        return ri.load_state(tmp_path / "s")

    assert_resumes_exactly(build, roundtrip=through_a_file)
