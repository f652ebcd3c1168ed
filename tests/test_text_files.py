"""Text files (``load_dataset("text", data_files=...)``, ``format="text"``), as HF's text builder
reads them: one ``{"text": ...}`` row per line, paragraph or file.

* rows equal HF's streaming ``load_dataset("text")`` for every option (universal newlines,
  blank lines, no final newline, non-ASCII text, chunks smaller than a line);
* every cut point resumes exactly (JSON round trip), across chunk boundaries and with a shuffle;
* a file that lost rows since the state names itself; bad options are refused by name;
* through ``StatefulDataLoader`` with 2 workers.
"""

from __future__ import annotations

import pytest

import resumable_iterable as ri
from harness import assert_resumes_exactly

TEXTS = {
    "a.txt": "hello world\r\nsecond line\n\n\nfourth  \n\npara two\nline b",
    "b.txt": "ünïcode ✓\rold mac line\nlast\n",
    "c.txt": "".join(f"line {i}\n" + ("\n" if i % 7 == 0 else "") for i in range(60)),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    paths = []
    for name, text in TEXTS.items():
        (d / name).write_bytes(text.encode("utf-8"))
        paths.append(str(d / name))
    return paths


OPTIONS = [{}, {"keep_linebreaks": True}, {"sample_by": "paragraph"}, {"sample_by": "document"},
           {"chunksize": 5}, {"sample_by": "paragraph", "chunksize": 3}]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_rows_equal_hf_text_builder(files, options):
    import datasets

    ours = ri.load_dataset("text", data_files=files, split="train", **options)
    theirs = datasets.load_dataset("text", data_files=files, split="train", streaming=True, **options)
    assert list(ours) == list(theirs)
    assert ours.column_names == ["text"] and ours.features["text"].dtype == "string"


@pytest.mark.parametrize("options", [{"chunksize": 7}, {"sample_by": "paragraph", "chunksize": 4}])
def test_every_cut_point_resumes_exactly(files, options, monkeypatch):
    from resumable_iterable.nodes.files import FileSource

    def build():
        return ri.IterableDataset.from_files(files, "text", **options)

    monkeypatch.setattr(FileSource, "batch_rows", 4)  # record batches smaller than a chunk, chunks than a file
    assert_resumes_exactly(build)
    assert_resumes_exactly(lambda: build().shuffle(seed=3, buffer_size=5), max_cuts=15)


def test_a_file_that_lost_rows_names_itself(files, tmp_path):
    import shutil

    paths = [shutil.copy(p, tmp_path / f"{k}.txt") for k, p in enumerate(files)]
    ds = ri.IterableDataset.from_files([str(p) for p in paths], "text")
    it = iter(ds)
    for _ in range(16):  # 8 lines of a.txt, 3 of b.txt, 5 of c.txt
        next(it)
    state = ds.state_dict()
    paths[-1].write_text("one line\n")
    resumed = ri.IterableDataset.from_files([str(p) for p in paths], "text")
    resumed.load_state_dict(state)
    with pytest.raises(ValueError, match=r"2\.txt.*the file changed since the state was saved"):
        list(resumed)


def test_bad_options_are_refused_by_name(files):
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['sample'\] for text files"):
        ri.IterableDataset.from_files(files, "text", sample="line")
    with pytest.raises(ValueError, match="sample_by must be 'line', 'paragraph' or 'document'"):
        ri.load_dataset("text", data_files=files, split="train", sample_by="sentence")
    with pytest.raises(ValueError, match="pass format= one of .*'text'"):
        ri.IterableDataset.from_files(files)  # .txt is not taken for a format by itself


def test_a_state_of_lines_is_refused_by_a_pipeline_of_paragraphs(files):
    ds = ri.IterableDataset.from_files(files, "text")
    next(iter(ds))
    paragraphs = ri.IterableDataset.from_files(files, "text", sample_by="paragraph")
    with pytest.raises(ValueError, match="sample_by"):
        paragraphs.load_state_dict(ds.state_dict())


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:.set_vital. is deprecated:UserWarning")
def test_through_the_loader_with_workers(files):
    pytest.importorskip("torchdata")

    def make():
        ds = ri.IterableDataset.from_files(files, "text", chunksize=16).shuffle(seed=1, buffer_size=6)
        return ri.StatefulDataLoader(ds, batch_size=4, num_workers=2)

    dl = make()
    batches, states = [], [ri.dumps_state(dl.state_dict())]
    for b in dl:
        batches.append(b["text"])
        states.append(ri.dumps_state(dl.state_dict()))
    expected = sorted(ex["text"] for ex in ri.IterableDataset.from_files(files, "text"))
    assert sorted(t for b in batches for t in b) == expected
    for cut in (1, 5, len(batches) - 2):
        again = make()
        again.load_state_dict(ri.loads_state(states[cut]))
        assert [b["text"] for b in again] == batches[cut:], cut
