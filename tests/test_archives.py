"""Data files inside zip archives (``load_dataset("json" | "csv" | "text", data_files="x.zip")``), as
HF's streaming readers read them (``nodes/archives.py``):

* the rows, their order and ``num_shards`` equal HF's streaming ``load_dataset`` for archives with
  several members, nested folders, members of other extensions, hidden files and ``__MACOSX/``,
  empty archives, and a zip with plain files in one split (an archive is one shard);
* every cut point resumes exactly (JSON round trip), under a shuffle buffer and a replay shuffle,
  through ``StatefulDataLoader`` with 2 workers, and elastically from 2 workers to 3;
* a state is refused over an archive rebuilt with other members or in another order; a member
  that vanished since the dataset was built is named;
* tar archives are refused as HF's streaming mode refuses them, and zips given as Parquet files.
* HF's fsspec URLs ``zip://<glob>::<archive>`` / ``tar://<glob>::<archive>`` in ``data_files``:
  each member matched is a data file (a shard), the rows equal HF's and every cut point resumes.
"""

from __future__ import annotations

import gzip
import json
import os
import zipfile
from collections import Counter

import pytest

import resumable_iterable as ri
from harness import assert_resumes_exactly, json_roundtrip

EXT = {"csv": "csv", "json": "jsonl", "text": "txt"}


def content(fmt: str, tag: str, n: int) -> str:
    if fmt == "csv":
        return "a,b\n" + "".join(f"{tag}{i},{i}\n" for i in range(n))
    if fmt == "json":
        return "".join(json.dumps({"a": f"{tag}{i}", "b": i}) + "\n" for i in range(n))
    return "".join(f"{tag}{i}\n" for i in range(n))


def write_zip(path, members):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members:
            z.writestr(name, data)
    return str(path)


def layout(tmp_path, fmt):
    """A zip with nested folders, hidden files, ``__MACOSX/``, a member of another extension and a
    gzipped member; a plain file; a second zip; an empty zip."""
    e = EXT[fmt]
    c = lambda tag, n: content(fmt, tag, n)  # noqa: E731
    first = write_zip(tmp_path / "first.zip", [
        (f"z.{e}", c("Z", 3)), (f"d2/x.{e}", c("X", 2)), (f"d1/sub/y.{e}", c("Y", 4)), (f"d1/w.{e}", c("W", 1)),
        (f"a.{e}", c("A", 5)), ("README.md", c("M", 2)), (f".hidden.{e}", c("H", 1)),
        (f"__MACOSX/._a.{e}", c("X", 1)), (f".git/k.{e}", c("G", 1)), (f"_kept.{e}", c("K", 2))])
    plain = tmp_path / f"plain.{e}"
    plain.write_text(c("P", 6))
    second = write_zip(tmp_path / "second.zip", [(f"b.{e}", c("B", 7)), (f"a.{e}", c("Q", 3))])
    empty = write_zip(tmp_path / "empty.zip", [])
    return [first, str(plain), empty, second]


EXPECTED = (["M0", "M1", "K0", "K1", "A0", "A1", "A2", "A3", "A4", "Z0", "Z1", "Z2", "W0", "Y0", "Y1", "Y2", "Y3",
             "X0", "X1"] + [f"P{i}" for i in range(6)] + ["Q0", "Q1", "Q2"] + [f"B{i}" for i in range(7)])


def first_column(rows):
    return [next(iter(r.values())) for r in rows]


@pytest.mark.parametrize("fmt", ["csv", "json", "text"])
def test_rows_order_and_shards_equal_hf_streaming(tmp_path, fmt):
    import datasets

    files = layout(tmp_path, fmt)
    ds = ri.load_dataset(fmt, data_files=files, split="train")
    assert ds.num_shards == 4
    assert first_column(ds) == EXPECTED
    hf = datasets.load_dataset(fmt, data_files=files, split="train", streaming=True)
    assert hf.num_shards == ds.num_shards
    assert list(ds) == list(hf)
    only = ri.load_dataset(fmt, data_files=files[0], split="train")
    assert list(only) == list(datasets.load_dataset(fmt, data_files=files[0], split="train", streaming=True))


def test_a_zip_is_known_by_its_first_bytes_and_its_members_may_be_compressed(tmp_path):
    """HF opens a file whose extension it does not know as a zip when it starts as one; a
    ``.gz`` member is decompressed as a ``.gz`` file is (HF does so for CSV only)."""
    z = write_zip(tmp_path / "data.bin", [("a.txt", "1\n2\n")])
    assert first_column(ri.load_dataset("text", data_files=z, split="train")) == ["1", "2"]
    g = write_zip(tmp_path / "g.zip", [("a.jsonl.gz", gzip.compress(b'{"a": 1}\n{"a": 2}\n'))])
    assert list(ri.load_dataset("json", data_files=g, split="train")) == [{"a": 1}, {"a": 2}]


def build(files, fmt, shuffle=None):
    ds = ri.load_dataset(fmt, data_files=files, split="train")
    if shuffle == "buffer":
        ds = ds.map(lambda ex: {"n": len(str(ex))}).shuffle(seed=3, buffer_size=5)
    elif shuffle == "replay":
        ds = ds.shuffle(seed=4, buffer_size=6, buffer_state="replay")
    return ds


@pytest.mark.parametrize("fmt", ["csv", "json", "text"])
@pytest.mark.parametrize("shuffle", [None, "buffer", "replay"])
def test_every_cut_point_resumes_exactly(tmp_path, fmt, shuffle):
    files = layout(tmp_path, fmt)
    full = assert_resumes_exactly(lambda: build(files, fmt, shuffle))
    assert sorted(first_column(full)) == sorted(EXPECTED)


def test_json_reader_options_and_text_options_resume_exactly(tmp_path):
    z = write_zip(tmp_path / "t.zip", [("a.txt", "p1\n\np2\n\n\np3\n"), ("b.txt", "q1\nq2\n\nq3")])
    for options in ({"sample_by": "paragraph"}, {"sample_by": "document"}, {"keep_linebreaks": True, "chunksize": 3}):
        assert_resumes_exactly(lambda: ri.load_dataset("text", data_files=z, split="train", **options))
    import datasets

    para = ri.load_dataset("text", data_files=z, split="train", sample_by="paragraph")
    assert list(para) == list(datasets.load_dataset("text", data_files=z, split="train", streaming=True,
                                                    sample_by="paragraph"))


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
def test_loader_with_two_workers_resumes_exactly_and_elastically_with_three(tmp_path):
    pytest.importorskip("torchdata")
    files = layout(tmp_path, "json")

    def loader(workers):
        return ri.StatefulDataLoader(build(files, "json"), batch_size=3, num_workers=workers)

    full = [b["a"] for b in loader(2)]
    assert sorted(a for b in full for a in b) == sorted(EXPECTED)
    for k in (1, 4, 7, len(full) - 1):
        ld = loader(2)
        head = []
        for b in ld:
            head.append(b["a"])
            if len(head) == k:
                state = json_roundtrip(ld.state_dict())
                break
        same = loader(2)
        same.load_state_dict(state)
        assert head + [b["a"] for b in same] == full, f"cut {k}"
        more = loader(3)  # elastic: 2 -> 3 workers, every example not yet yielded exactly once
        more.load_state_dict(state)
        got = Counter(a for b in head + [b["a"] for b in more] for a in b)
        assert got == Counter(EXPECTED), f"cut {k}, 2 -> 3 workers"


def test_a_state_over_a_rebuilt_archive_is_refused(tmp_path):
    z = write_zip(tmp_path / "a.zip", [("a.txt", "1\n2\n"), ("b.txt", "3\n4\n")])
    ds = ri.load_dataset("text", data_files=z, split="train")
    it = iter(ds)
    next(it), next(it), next(it)
    state = json_roundtrip(ds.state_dict())
    write_zip(z, [("b.txt", "3\n4\n"), ("c.txt", "1\n2\n")])  # another member in its place
    with pytest.raises(ValueError, match="the data files are not those the state was saved with"):
        ri.load_dataset("text", data_files=z, split="train").load_state_dict(state)
    write_zip(z, [("a.txt", "1\n2\n"), ("b.txt", "3\n4\n")])  # rebuilt alike (members written again): loads
    again = ri.load_dataset("text", data_files=z, split="train")
    again.load_state_dict(state)
    assert first_column(again) == ["4"]
    moved = tmp_path / "moved"
    moved.mkdir()
    os.replace(z, moved / "a.zip")  # the same archive in another folder still resumes
    there = ri.load_dataset("text", data_files=str(moved / "a.zip"), split="train")
    there.load_state_dict(state)
    assert first_column(there) == ["4"]


def test_a_member_that_vanished_or_shrank_is_named(tmp_path):
    z = write_zip(tmp_path / "a.zip", [("a.txt", "1\n2\n"), ("b.txt", "3\n4\n")])
    ds = ri.load_dataset("text", data_files=z, split="train")
    write_zip(z, [("a.txt", "1\n2\n")])
    with pytest.raises(ValueError, match=r"'b\.txt' in data file .*a\.zip.*no longer in the archive"):
        list(ds)
    ds = ri.load_dataset("csv", data_files=write_zip(tmp_path / "c.zip", [("a.csv", "x\n1\n"), ("e.csv", "")]),
                         split="train")
    with pytest.raises(ValueError, match=r"cannot read 'e\.csv' in data file .*c\.zip"):
        list(ds)


def test_tar_archives_and_zipped_parquet_files_are_refused(tmp_path):
    import io
    import tarfile

    with tarfile.open(tmp_path / "a.tar.gz", "w:gz") as t:
        info = tarfile.TarInfo("a.txt")
        info.size = 2
        t.addfile(info, io.BytesIO(b"1\n"))
    with pytest.raises(ValueError, match=r"a\.tar\.gz' is a tar archive: tar archives are not read in streaming"
                                         r".*data_files='tar://\*::"):
        ri.load_dataset("text", data_files=str(tmp_path / "a.tar.gz"), split="train")
    z = write_zip(tmp_path / "p.zip", [("a.parquet", b"PAR1")])
    with pytest.raises(ValueError, match=r"p\.zip' is a zip archive: parquet files are not read inside archives"):
        ri.load_dataset("parquet", data_files=z, split="train")



def write_tar(path, members):
    import io
    import tarfile

    with tarfile.open(path, "w:gz" if str(path).endswith(".gz") else "w") as t:
        for name, data in members:
            data = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return str(path)


@pytest.mark.parametrize("kind", ["zip", "tar"])
@pytest.mark.parametrize("fmt", ["csv", "json", "text"])
def test_archive_urls_name_members_as_hf(tmp_path, kind, fmt):
    """``data_files="zip://*.csv::a.zip"`` (HF's fsspec URL; ``tar://`` too): the members the glob
    matches, each a shard, hidden ones and ``README.md`` left out unless named. Ours looked for a file of that name
    (FileNotFoundError); a tar archive could not be read at all."""
    datasets = pytest.importorskip("datasets")
    e = EXT[fmt]
    c = lambda tag, n: content(fmt, tag, n)  # noqa: E731
    members = [(f"b.{e}", c("B", 3)), (f"a.{e}", c("A", 2)), (f"sub/c.{e}", c("C", 2)), (f".h.{e}", c("H", 1)),
               ("README.md", c("M", 1))]
    archive = (write_zip(tmp_path / "a.zip", members) if kind == "zip"
               else write_tar(tmp_path / "a.tar.gz", members))
    for pattern, shards, expected in [("*", 2, ["A0", "A1", "B0", "B1", "B2"]), ("README.md", 1, ["M0"]),
                                      (f"*.{e}", 2, ["A0", "A1", "B0", "B1", "B2"]),
                                      (f"*/*.{e}", 1, ["C0", "C1"]), (f".h.{e}", 1, ["H0"])]:
        url = f"{kind}://{pattern}::{archive}"

        def build():
            return ri.load_dataset(fmt, data_files=url, split="train")

        ds = build()
        assert ds.num_shards == shards, pattern
        rows = list(ds)
        assert first_column(rows) == expected, pattern
        hf = datasets.load_dataset(fmt, data_files=url, split="train", streaming=True)
        assert rows == list(hf), pattern
        assert_resumes_exactly(build)
    packed = [(f"g.{e}.gz", gzip.compress(c("G", 2).encode()))]  # a compressed member is decompressed
    packed = write_zip(tmp_path / "g.zip", packed) if kind == "zip" else write_tar(tmp_path / "g.tar", packed)
    assert first_column(ri.load_dataset(fmt, data_files=f"{kind}://*::{packed}", split="train")) == ["G0", "G1"]
    with pytest.raises(FileNotFoundError, match=r"no data file matches .*nope\*.*the archive .* holds"):
        ri.load_dataset(fmt, data_files=f"{kind}://nope*::{archive}", split="train")
    with pytest.raises(FileNotFoundError, match=r"the archive .*missing.* is not a local file"):
        ri.load_dataset(fmt, data_files=f"{kind}://*::{tmp_path / 'missing'}", split="train")


def test_a_state_over_archive_urls_resumes_moved_and_refuses_other_members(tmp_path):
    tar = write_tar(tmp_path / "a.tar", [("a.txt", "1\n2\n"), ("b.txt", "3\n4\n")])
    ds = ri.load_dataset("text", data_files=f"tar://*::{tar}", split="train")
    it = iter(ds)
    next(it), next(it), next(it)
    state = json_roundtrip(ds.state_dict())
    moved = tmp_path / "moved"
    moved.mkdir()
    os.replace(tar, moved / "a.tar")  # the same archive in another folder still resumes
    there = ri.load_dataset("text", data_files=f"tar://*::{moved / 'a.tar'}", split="train")
    there.load_state_dict(state)
    assert first_column(there) == ["4"]
    write_tar(moved / "a.tar", [("a.txt", "1\n2\n"), ("c.txt", "3\n4\n")])
    with pytest.raises(ValueError, match="the data files are not those the state was saved with"):
        ri.load_dataset("text", data_files=f"tar://*::{moved / 'a.tar'}", split="train").load_state_dict(state)
    ds = ri.load_dataset("text", data_files=f"tar://*::{moved / 'a.tar'}", split="train")
    write_tar(moved / "a.tar", [("a.txt", "1\n2\n")])
    with pytest.raises(ValueError, match=r"c\.txt.* is no longer in the archive"):
        list(ds)
    z = write_zip(tmp_path / "p.zip", [("a.parquet", b"PAR1")])
    with pytest.raises(ValueError, match=r"is in an archive: parquet files are not read inside archives"):
        ri.load_dataset("parquet", data_files=f"zip://*::{z}", split="train")


# ---------------------------------------------------------------------- imagefolder


def png(value: int) -> bytes:
    import io

    import numpy as np
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.full((2, 2, 3), value, np.uint8)).save(out, "PNG")
    return out.getvalue()


def pixel(example) -> int:
    import numpy as np

    return int(np.array(example["image"])[0, 0, 0])


def image_folder(tmp_path):
    """Loose images, then two archives (one with ``__MACOSX/`` junk and a text file)."""
    d = tmp_path / "imgs"
    (d / "loose").mkdir(parents=True)
    for i in range(3):
        (d / "loose" / f"{i}.png").write_bytes(png(i))
    write_zip(d / "a.zip", [("cat/b.png", png(10)), ("cat/a.png", png(11)), ("dog/c.PNG", png(12)),
                            ("notes.txt", b"not an image"), ("__MACOSX/cat/._a.png", b"junk"), ("top.png", png(13))])
    write_zip(d / "b.zip", [(f"dog/{i}.png", png(20 + i)) for i in range(5)])
    return str(d)


def test_imagefolder_images_in_archives_equal_hf_streaming(tmp_path):
    import datasets

    d = image_folder(tmp_path)
    ds = ri.load_dataset("imagefolder", data_dir=d, split="train")
    assert [pixel(e) for e in ds] == [0, 1, 2, 13, 11, 10, 12, 20, 21, 22, 23, 24]
    assert ds.num_shards == 1
    raw = ds.cast_column("image", datasets.Image(decode=False))
    assert next(iter(raw))["image"] == {"bytes": None, "path": os.path.join(d, "loose", "0.png")}
    assert list(raw)[3]["image"]["path"] == f"zip://top.png::{os.path.join(d, 'a.zip')}"
    # HF yields notes.txt as an image too (which fails to decode); with it left out, the same rows
    os.remove(os.path.join(d, "a.zip"))
    write_zip(os.path.join(d, "a.zip"), [("cat/b.png", png(10)), ("top.png", png(13)), ("__MACOSX/._x.png", b"")])
    ours = ri.load_dataset("imagefolder", data_dir=d, split="train", drop_labels=True)
    hf = datasets.load_dataset("imagefolder", data_dir=d, split="train", streaming=True, drop_labels=True)
    assert hf.num_shards == ours.num_shards == 1
    assert ours.features == hf.features
    assert [pixel(e) for e in ours] == [pixel(e) for e in hf]
    assert list(ours.cast_column("image", datasets.Image(decode=False))) == list(
        hf.cast_column("image", datasets.Image(decode=False)))


def test_imagefolder_metadata_inside_an_archive_equals_hf_streaming(tmp_path):
    import datasets

    d = tmp_path / "meta"
    d.mkdir()
    write_zip(d / "a.zip", [("sub/i.png", png(1)), ("sub/j/k.png", png(2)),
                            ("sub/metadata.jsonl", '{"file_name": "j/k.png", "caption": "k"}\n'
                                                   '{"file_name": "i.png", "caption": "i"}\n')])
    ours = ri.load_dataset("imagefolder", data_dir=str(d), split="train")
    hf = datasets.load_dataset("imagefolder", data_dir=str(d), split="train", streaming=True)
    assert ours.features == hf.features
    assert [(pixel(e), e["caption"]) for e in ours] == [(pixel(e), e["caption"]) for e in hf] == [(2, "k"), (1, "i")]
    write_zip(d / "a.zip", [("metadata.jsonl", '{"file_name": "nope.png", "caption": "x"}\n')])
    with pytest.raises(FileNotFoundError, match=r"names 'nope\.png', but the archive .*a\.zip' holds no 'nope\.png'"):
        ri.load_dataset("imagefolder", data_dir=str(d), split="train")


@pytest.mark.parametrize("num_shards", [1, 3])
def test_imagefolder_in_archives_resumes_exactly(tmp_path, num_shards):
    d = image_folder(tmp_path)
    assert_resumes_exactly(lambda: ri.load_dataset("imagefolder", data_dir=d, split="train", num_shards=num_shards)
                           .shuffle(seed=1, buffer_size=4), max_cuts=8)


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
def test_imagefolder_in_archives_through_two_workers_resumes_exactly(tmp_path):
    pytest.importorskip("torchdata")
    d = image_folder(tmp_path)

    def loader():
        ds = ri.load_dataset("imagefolder", data_dir=d, split="train", num_shards=4)
        return ri.StatefulDataLoader(ds.map(lambda e: {"v": pixel(e)}, remove_columns=["image"]),
                                     batch_size=2, num_workers=2)

    full = [b["v"].tolist() for b in loader()]
    for k in (1, 3):
        ld = loader()
        head = []
        for b in ld:
            head.append(b["v"].tolist())
            if len(head) == k:
                state = json_roundtrip(ld.state_dict())
                break
        again = loader()
        again.load_state_dict(state)
        assert head + [b["v"].tolist() for b in again] == full


def test_imagefolder_state_over_a_rebuilt_archive_is_refused(tmp_path):
    d = image_folder(tmp_path)
    ds = ri.load_dataset("imagefolder", data_dir=d, split="train")
    it = iter(ds)
    next(it), next(it), next(it), next(it)
    state = json_roundtrip(ds.state_dict())
    write_zip(os.path.join(d, "b.zip"), [(f"dog/{i}.png", png(20 + i)) for i in (1, 2, 3, 4, 9)])  # one replaced
    with pytest.raises(ValueError, match="the data files are not those the state was saved with"):
        ri.load_dataset("imagefolder", data_dir=d, split="train").load_state_dict(state)


def test_a_folder_of_zips_is_read_as_hf_reads_it(tmp_path):
    """``load_dataset(folder)`` and ``load_dataset("csv", data_dir=...)`` take the zips of a folder
    for data files (they were ignored, leaving out a split); with no format named, a split of zips
    is read in the format of most of the files in them, and a folder of zipped images is an
    ``imagefolder``, as in HF."""
    import datasets

    d = tmp_path / "d"
    d.mkdir()
    write_zip(d / "train.zip", [("a.csv", "a\n1\n2\n"), ("notes.md", "a\n5\n"), ("b.csv", "a\n6\n")])
    write_zip(d / "test.zip", [("b.csv", "a\n3\n")])
    (d / "train_extra.csv").write_text("a\n9\n")
    for ours, hf in [(ri.load_dataset(str(d)), datasets.load_dataset(str(d), streaming=True)),
                     (ri.load_dataset("csv", data_dir=str(d)), datasets.load_dataset("csv", data_dir=str(d),
                                                                                       streaming=True))]:
        assert sorted(ours) == sorted(hf) == ["test", "train"]
        assert {s: list(ours[s]) for s in ours} == {s: list(hf[s]) for s in hf}
        assert ours["train"].num_shards == hf["train"].num_shards == 2
    os.remove(d / "train_extra.csv")
    assert first_column(ri.load_dataset(str(d), split="train")) == [1, 2, 6, 5]
    images = tmp_path / "images"
    images.mkdir()
    write_zip(images / "train.zip", [("cat/a.png", png(1)), ("dog/b.png", png(2))])
    ours = ri.load_dataset(str(images), split="train")
    hf = datasets.load_dataset(str(images), split="train", streaming=True)
    assert ours.features == hf.features
    assert [pixel(e) for e in ours] == [1, 2]
    write_zip(tmp_path / "p.zip", [("a.parquet", b"PAR1")])
    with pytest.raises(ValueError, match=r"p\.zip' is a zip archive, and most files in the split's archives are not"):
        ri.load_dataset(str(tmp_path), data_files="p.zip", split="train")


def test_odd_member_names_are_read(tmp_path):
    """A member named with ``::`` (HF's separator of member and archive), a leading ``/`` or ``./``:
    each read once, in the walk order (HF fails on the first two)."""
    z = write_zip(tmp_path / "odd.zip", [("a::b.txt", "x\ny\n"), ("/abs.txt", "abs\n"), ("./dot/k.txt", "k\n")])
    assert first_column(ri.load_dataset("text", data_files=z, split="train")) == ["x", "y", "abs", "k"]


@pytest.mark.parametrize("fmt", ["csv", "json", "text"])
def test_a_damaged_member_is_named_with_its_archive(tmp_path, fmt):
    """zipfile's ``BadZipFile`` (a CRC mismatch found while reading) escaped naming neither."""
    data = content(fmt, "v", 50).encode()
    path = tmp_path / "bad.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"a.{EXT[fmt]}", data)
    raw = bytearray(path.read_bytes())
    raw[raw.find(data[:8]) + 5] ^= 1  # one bit of the stored data flipped: its CRC no longer matches
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=rf"cannot read 'a\.{EXT[fmt]}' in data file .*bad\.zip.*the archive is damaged"):
        list(ri.load_dataset(fmt, data_files=str(path), split="train"))


def test_a_struct_field_the_first_member_lacks_names_the_member_and_the_first_member(tmp_path):
    """A later member whose objects hold a key the first member's struct lacks is refused (as HF);
    the message named the archive twice, neither member, and called the archive the first data file."""
    path = str(tmp_path / "a.zip")
    write_zip(path, [("a.jsonl", json.dumps({"i": 1, "s": {"x": 1}}) + "\n"),
                     ("b.jsonl", json.dumps({"i": 2, "s": {"x": 2, "y": 3}}) + "\n")])
    with pytest.raises(ValueError) as info:
        list(ri.load_dataset("json", data_files=path, split="train"))
    assert str(info.value) == (
        f"'b.jsonl' in data file {path!r} (shard 0): column 's' has field 's.y' that the first data file "
        f"'zip://a.jsonl::{path}' has not (its type there: struct<x: int64>)")


@pytest.mark.parametrize("members", [
    [("a.json", [{"a": 1, "c": {"x": 1}}, {"a": 2, "c": 5}]), ("b.json", [{"a": 3, "c": [1, 2]}])],
    [("a.json", [{"a": 1, "c": 1}]), ("b.jsonl", [{"a": 2, "s": {"x": 1}}, {"a": 3, "s": {"y": 1}}])],
    [("a.json", [{"a": 1, "c": {"x": 1}}, {"a": 2, "c": 5}]), ("b.jsonl", [{"a": 2, "c": 3}, {"a": 3}])],
    [("a.json", [{"a": 1, "c": 1}]), ("b.json", [{"a": 2, "c": {"x": 1}}, {"a": 3, "c": "s"}]), ("c.json", [{"a": 4}])],
    [("a.jsonl", [{"a": 1, "c": 1}, {"a": 2, "c": "x"}]), ("b.json", [{"a": 3, "c": [1]}])],
], ids=["documents", "document_then_varying_keys", "document_then_lines", "mixed_in_the_second",
        "lines_then_document"])
def test_json_paths_found_in_a_member_carry_on_to_the_next_members_as_hf(tmp_path, members):
    """A zip whose first member is a JSON document (features unknown): HF's reader keeps the Json
    paths each member's first chunk shows and encodes the later members' values there as JSON text
    (a missing one as None); ours looked at each member alone ('c': [1, 2] where HF gives '[1,2]',
    a member lacking 'c' had no 'c'). A document after JSON Lines with Json columns (zipped or
    not) was read without them: a list there failed to cast to Json. Rows as HF's, every cut
    point resumed."""
    import datasets

    def text(name, rows):
        return json.dumps(rows) if name.endswith(".json") else "".join(json.dumps(r) + "\n" for r in rows)

    z = write_zip(tmp_path / "a.zip", [(name, text(name, rows)) for name, rows in members])
    files = [z, write_zip(tmp_path / "b.zip", [(name, text(name, rows)) for name, rows in members])]
    plain = []  # the same files unzipped: a document after JSON Lines takes the first file's Json columns
    for name, rows in members:
        (tmp_path / name).write_text(text(name, rows))
        plain.append(str(tmp_path / name))
    for files in (files, plain):
        ours = ri.load_dataset("json", data_files=files, split="train")
        assert list(ours) == list(datasets.load_dataset("json", data_files=files, split="train", streaming=True))
        assert_resumes_exactly(lambda: ri.load_dataset("json", data_files=files, split="train")
                               .shuffle(seed=1, buffer_size=2, buffer_state="replay"))
