"""``pack(seq_len)``: both modes against a plain-Python reference, exact at every cut point, alone
and under shuffle / interleave / map, and through DataLoader workers."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import resumable_iterable as ri
from harness import assert_loader_resumes_exactly, assert_resumes_exactly, codec_roundtrip

RNG = np.random.default_rng(0)
DOCS = [RNG.integers(1, 1000, size=int(n)).tolist() for n in RNG.integers(0, 23, size=40)]


def docs(n_shards=4):
    return ri.IterableDataset.from_dict({"input_ids": DOCS, "labels": [[-t for t in d] for d in DOCS],
                                         "doc": list(range(len(DOCS)))}, num_shards=n_shards)


def reference_concat(documents, seq_len, sep=None, drop_last=False):
    flat, pos = [], []
    for d in documents:
        d = d + ([sep] if sep is not None else [])
        flat += d
        pos += list(range(len(d)))
    out = [(flat[i:i + seq_len], pos[i:i + seq_len]) for i in range(0, len(flat), seq_len)]
    if out and drop_last and len(out[-1][0]) < seq_len:
        out.pop()
    return out


def reference_greedy(documents, seq_len, sep=None):
    chunks, cur = [], []
    for d in documents:
        d = d + ([sep] if sep is not None else [])
        if cur and len(cur) + len(d) > seq_len:
            chunks.append(cur)
            cur = []
        cur = cur + d
        while len(cur) > seq_len:
            chunks.append(cur[:seq_len])
            cur = cur[seq_len:]
        if len(cur) == seq_len:
            chunks.append(cur)
            cur = []
    if cur:
        chunks.append(cur)
    return chunks


@pytest.mark.parametrize("seq_len", [1, 7, 16, 64])
@pytest.mark.parametrize("sep", [None, 0])
def test_concat_matches_reference(seq_len, sep):
    got = list(docs().pack(seq_len, separator=sep, position_ids=True))
    ref = reference_concat(DOCS, seq_len, sep)
    assert [g["input_ids"] for g in got] == [r[0] for r in ref]
    assert [g["position_ids"] for g in got] == [r[1] for r in ref]
    assert all(len(g["input_ids"]) == seq_len for g in got[:-1])
    dropped = list(docs().pack(seq_len, separator=sep, drop_last=True))
    assert [g["input_ids"] for g in dropped] == [r[0] for r in reference_concat(DOCS, seq_len, sep, drop_last=True)]


@pytest.mark.parametrize("seq_len", [5, 16, 40])
def test_greedy_keeps_documents_whole(seq_len):
    got = list(docs().pack(seq_len, mode="greedy", separator=2, document_lengths=True, columns=["input_ids", "labels"]))
    assert [g["input_ids"] for g in got] == reference_greedy(DOCS, seq_len, 2)
    assert all(g["labels"] == [-t if t != 2 else 2 for t in g["input_ids"]] for g in got)
    assert all(sum(g["document_lengths"]) == len(g["input_ids"]) <= seq_len for g in got)
    # no token lost: the chunks hold every document (with its separator) once
    assert sum(len(g["input_ids"]) for g in got) == sum(len(d) + 1 for d in DOCS)


def test_multiple_columns_and_errors():
    got = list(docs().pack(8, columns=["input_ids", "labels"], separator={"input_ids": 9, "labels": -100}))
    assert all(len(g["labels"]) == len(g["input_ids"]) for g in got)
    assert set(got[0]) == {"input_ids", "labels"}
    with pytest.raises(ValueError, match="seq_len"):
        docs().pack(0)
    with pytest.raises(ValueError, match="mode"):
        docs().pack(8, mode="bfd")
    with pytest.raises(ValueError, match="one value for each packed column"):
        docs().pack(8, columns=["input_ids", "labels"], separator={"input_ids": 9})
    bad = ri.IterableDataset.from_list([{"input_ids": [1, 2], "labels": [1]}])
    with pytest.raises(ValueError, match="equal length"):
        list(bad.pack(4, columns=["input_ids", "labels"]))
    assert docs().pack(8, position_ids=True).column_names == ["input_ids", "position_ids"]


def _rows(rows):
    yield from rows


@pytest.mark.parametrize("bad", ["some text", None, 7, np.int64(7), {"a": 1}])
@pytest.mark.parametrize("position_ids", [False, True])
def test_a_packed_column_that_is_not_a_token_list_is_named(bad, position_ids):
    # a string was packed as its characters, None or a number failed with "object is not iterable"
    ds = ri.IterableDataset.from_generator(_rows, gen_kwargs={"rows": [{"input_ids": [1, 2]}, {"input_ids": bad}]})
    with pytest.raises(TypeError, match="pack: column 'input_ids' must hold a list of token ids"):
        list(ds.pack(3, position_ids=position_ids))


def test_a_packed_column_may_not_be_one_pack_adds():
    with pytest.raises(ValueError, match=r"\['position_ids'\] cannot be packed when position_ids=True"):
        docs().map(lambda ex: {"position_ids": ex["labels"]}).pack(8, columns=["input_ids", "position_ids"],
                                                                   position_ids=True)
    with pytest.raises(ValueError, match="document_lengths=True adds"):
        docs().pack(8, columns=["document_lengths"], document_lengths=True)


PIPELINES = {
    "concat": lambda: docs().pack(8, separator=0, position_ids=True),
    "concat_long_docs": lambda: docs(2).pack(3, document_lengths=True),
    "greedy": lambda: docs().pack(12, mode="greedy", separator=0, document_lengths=True),
    "greedy_drop_last": lambda: docs().pack(30, mode="greedy", drop_last=True),
    "shuffle_then_pack": lambda: docs().shuffle(seed=1, buffer_size=6).pack(10, separator=0),
    "pack_then_shuffle": lambda: docs().pack(10, separator=0).shuffle(seed=2, buffer_size=4),
    "map_pack_batch": lambda: docs().map(lambda ex: {"input_ids": ex["input_ids"][::-1]}).pack(9).batch(3),
    "interleave_pack": lambda: ri.interleave_datasets([docs(2), docs(2).map(lambda ex: {"input_ids": ex["input_ids"][:3]})],
                                                      probabilities=[0.6, 0.4], seed=3).pack(11, mode="greedy"),
}


@pytest.mark.parametrize("mode", ["concat", "greedy"])
@pytest.mark.parametrize("option", ["position_ids", "document_lengths"])
def test_empty_documents_at_the_end_resume(mode, option):
    # without a separator an empty document starts where the carried tokens end: the state taken
    # after the last chunk held that start and was refused on load
    def build():
        return ri.IterableDataset.from_dict({"input_ids": [[1, 2, 3], [], [4, 5], [], []]}).pack(
            3, mode=mode, **{option: True})

    assert len(assert_resumes_exactly(build, roundtrip=codec_roundtrip)) == 2
    ds = build()
    list(ds)
    done = build()
    done.load_state_dict(codec_roundtrip(ds.state_dict()))  # the state after the pass
    assert list(done) == []


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_pack_resumes_at_every_cut(name):
    assert_resumes_exactly(PIPELINES[name], roundtrip=codec_roundtrip)


@pytest.mark.parametrize("workers", [0, 2])
def test_pack_through_stateful_dataloader(workers):
    pytest.importorskip("torch")
    assert_loader_resumes_exactly(lambda: docs().shuffle(seed=5, buffer_size=5).pack(8, separator=0, position_ids=True),
                                  workers=workers, batch_size=None,
                                  item=lambda chunk: (chunk["input_ids"], chunk["position_ids"]),
                                  cuts=lambda n: (1, 3, n - 1))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("before,after", [(4, 3), (3, 8)])
def test_loader_resumes_with_another_batch_size(workers, before, after):
    """A StatefulDataLoader state saved with batch_size B loads with B': every remaining example once
    (and, without workers, in the same order)."""
    pytest.importorskip("torch")
    from torchdata.stateful_dataloader import StatefulDataLoader

    def build():
        return docs().select_columns(["doc"]).shuffle(seed=3, buffer_size=5)

    full = [int(i) for b in StatefulDataLoader(build(), batch_size=before, num_workers=workers) for i in b["doc"]]
    dl = StatefulDataLoader(build(), batch_size=before, num_workers=workers)
    head = []
    for step, b in enumerate(dl):
        head += [int(i) for i in b["doc"]]
        if step == 2:
            state = dl.state_dict()
            break
    dl2 = StatefulDataLoader(build(), batch_size=after, num_workers=workers)
    dl2.load_state_dict(state)
    tail = [int(i) for b in dl2 for i in b["doc"]]
    assert sorted(head + tail) == sorted(full) == list(range(len(DOCS)))
    if workers == 0:
        assert head + tail == full


@pytest.mark.parametrize("before,after", [(4, 3), (3, 8), (5, 1)])
def test_dataset_batch_resumes_with_another_batch_size(before, after):
    """A state saved with ``batch(B)`` loads into the same pipeline with ``batch(B')``, also when the
    state holds the rows of a batch interrupted by an error."""
    from harness import codec_roundtrip as rt

    def build(size, fail_at=None):
        state = {"armed": fail_at is not None}

        def f(ex):
            if state["armed"] and ex["doc"] == fail_at:
                state["armed"] = False
                raise RuntimeError("boom")
            return {}
        return docs().select_columns(["doc"]).shuffle(seed=1, buffer_size=4).map(f).batch(size)

    flat = [i for b in build(before) for i in b["doc"]]
    for cut in (0, 2, 5):
        ds = build(before)
        it = iter(ds)
        head = [i for _ in range(cut) for i in next(it)["doc"]]
        resumed = build(after)
        resumed.load_state_dict(rt(ds.state_dict()))
        batches = [b["doc"] for b in resumed]
        assert all(len(b) == after for b in batches[:-1])
        assert head + [i for b in batches for i in b] == flat
    # a state taken after an error holds the rows of the unfinished batch
    ds = build(before, fail_at=flat[before + 1])
    got = []
    with pytest.raises(RuntimeError):
        for b in ds:
            got += b["doc"]
    resumed = build(after)
    resumed.load_state_dict(rt(ds.state_dict()))
    assert got + [i for b in resumed for i in b["doc"]] == flat


def test_trainer_resumes_packed_prefetched_data_exactly(tmp_path):
    """The pre-training recipe of docs/pretraining.md end to end: tokenized documents shuffled,
    packed into fixed chunks and read ahead in a thread, fed to a transformers.Trainer that is
    interrupted right after a checkpoint and resumed: the resumed run trains on exactly the chunks
    the uninterrupted run did."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from trainer_support import Crash, CrashAfterSave, Recorder

    from resumable_iterable.integrations.transformers import ResumableDataCallback

    def corpus():
        return (docs().select_columns(["input_ids"]).shuffle(seed=3, buffer_size=6)
                .pack(8, separator=0, drop_last=True).prefetch(4))

    def trainer(out):
        args = transformers.TrainingArguments(output_dir=str(out), max_steps=7, per_device_train_batch_size=4,
                                              save_steps=3, report_to="none", use_cpu=True, logging_strategy="no",
                                              remove_unused_columns=False, disable_tqdm=True)
        model = Recorder(width=8)
        t = transformers.Trainer(model=model, args=args, train_dataset=corpus())
        ResumableDataCallback.attach(t)
        return t, model

    full_t, full = trainer(tmp_path / "full")
    full_t.train()
    cut_t, head = trainer(tmp_path / "cut")
    cut_t.add_callback(CrashAfterSave(3))
    with pytest.raises(Crash):
        cut_t.train()
    resumed_t, tail = trainer(tmp_path / "cut")
    resumed_t.train(resume_from_checkpoint=True)
    assert len(full.seen) == 7 * 4
    assert head.seen[:3 * 4] + tail.seen == full.seen
    # once the trainers are gone, so are the threads reading ahead for their loaders' iterators (the
    # callback's mark on the Trainer's state kept them alive, until the garbage collector ran)
    del full_t, cut_t, resumed_t
    deadline = time.monotonic() + 5
    while any(t.name == "resumable_iterable-prefetch" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "resumable_iterable-prefetch" for t in threading.enumerate())


@pytest.mark.parametrize("saved,new", [(2, 1), (2, 3), (0, 2)])
@pytest.mark.parametrize("kind", ["pack", "pack_greedy", "prefetch"])
def test_elastic_resume_of_pack_and_prefetch(kind, saved, new):
    """A ri.StatefulDataLoader state saved with W workers loads with W': the rest of the epoch
    yields every remaining token chunk (or example) exactly once."""
    pytest.importorskip("torch")

    def build():
        base = docs().select_columns(["input_ids", "doc"]).shuffle(seed=2, buffer_size=4)
        if kind == "prefetch":
            return base.select_columns(["doc"]).prefetch(3)
        return base.pack(6, separator=0, mode="greedy" if kind == "pack_greedy" else "concat")

    def key(b):
        return tuple(b["doc"].tolist()) if kind == "prefetch" else tuple(b["input_ids"])

    full = [key(b) for b in ri.StatefulDataLoader(build(), batch_size=None if kind != "prefetch" else 2,
                                                  num_workers=saved)]
    dl = ri.StatefulDataLoader(build(), batch_size=None if kind != "prefetch" else 2, num_workers=saved)
    head = []
    for b in dl:
        head.append(key(b))
        if len(head) == 4:
            state = dl.state_dict()
            break
    dl2 = ri.StatefulDataLoader(build(), batch_size=None if kind != "prefetch" else 2, num_workers=new)
    dl2.load_state_dict(state)
    tail = [key(b) for b in dl2]
    flat = sorted(x for k in head + tail for x in (k if kind == "prefetch" else [k]))
    expected = sorted(x for k in full for x in (k if kind == "prefetch" else [k]))
    assert flat == expected


@pytest.mark.parametrize("mode", ["concat", "greedy"])
def test_an_empty_document_has_no_piece_in_document_lengths(mode):
    """Without a separator an empty document (an empty text tokenized) got a length of 0 in
    ``document_lengths`` when it fell inside a chunk (not when it fell on a chunk's start): a
    zero-length sequence in ``cu_seqlens``, one document more than ``position_ids`` shows. Its
    pieces are those of the non-empty documents, the same wherever it falls; still exact at every cut."""
    def build():
        return ri.IterableDataset.from_dict({"input_ids": [[1, 2], [], [3], [], [], [4, 5, 6], [], [7]]}).pack(
            4, mode=mode, position_ids=True, document_lengths=True)

    got = assert_resumes_exactly(build, roundtrip=codec_roundtrip)
    for chunk in got:
        assert 0 not in chunk["document_lengths"] and sum(chunk["document_lengths"]) == len(chunk["input_ids"])
        assert len(chunk["document_lengths"]) == chunk["position_ids"].count(0) + (chunk["position_ids"][0] != 0)
