"""Rejection of states that do not belong to the pipeline, and of malformed or damaged states."""

from __future__ import annotations

import copy
import json

import pytest

import resumable_iterable as ri
from data import HF_B, src
from harness import take


def build():
    return src(4).map(lambda ex: {"y": 1}).shuffle(seed=3, buffer_size=6).batch(3)


def saved_state(k: int = 4) -> dict:
    ds = build()
    take(iter(ds), k)
    return json.loads(json.dumps(ds.state_dict()))


def test_state_of_another_pipeline_is_rejected_with_the_difference():
    state = saved_state()
    other = src(4).map(lambda ex: {"y": 1}).shuffle(seed=3, buffer_size=7).batch(3)
    with pytest.raises(ValueError, match="buffer_size.*6 in the state but 7"):
        other.load_state_dict(state)
    other = src(3).map(lambda ex: {"y": 1}).shuffle(seed=3, buffer_size=6).batch(3)
    with pytest.raises(ValueError, match="different pipeline"):
        other.load_state_dict(state)
    other = src(4).shuffle(seed=3, buffer_size=6).batch(3)
    with pytest.raises(ValueError, match="'map' node where this pipeline has 'arrow'|different pipeline"):
        other.load_state_dict(state)



def test_a_fix_that_adds_a_step_is_told_to_fix_the_function_instead():
    """The trainer's fix after a map error: a filter dropping the bad examples, added before the
    map. The state (taken after the error) is refused, as it must be, but the message said only
    which node differs; it now says that functions are not part of a state while steps are, so a
    pipeline rebuilt with the function fixed loads it."""
    def tokenize(ex):
        if ex["id"] == 13:
            raise KeyError("text")
        return {"n": 1}

    ds = src(3).map(tokenize)
    with pytest.raises(KeyError):
        list(ds)
    state = json.loads(json.dumps(ds.state_dict()))
    with pytest.raises(ValueError, match=r"the state has a 'arrow' node where this pipeline has 'filter' \(a state "
                                         r"loads into the pipeline it was saved from, step for step; the functions "
                                         r"given to map/filter are not part of it"):
        src(3).filter(lambda ex: ex["id"] != 13).map(tokenize).load_state_dict(state)
    fixed = src(3).map(lambda ex: {"n": 1})
    fixed.load_state_dict(state)  # the function fixed: loads, and retries the example first
    assert next(iter(fixed))["id"] == 13

def test_unknown_version_and_format():
    state = saved_state()
    bad = dict(state, version=99)
    with pytest.raises(ValueError, match="unsupported state version 99"):
        build().load_state_dict(bad)
    with pytest.raises(ValueError, match="not a resumable_iterable state"):
        build().load_state_dict({"epoch": 0})
    with pytest.raises(TypeError):
        build().load_state_dict([1, 2])


def test_a_document_holding_states_says_what_it_is():
    """A DataLoader's or Trainer's state, or a list of per-rank states, given to the dataset: the
    error says what the document holds and where it loads (it said only that the format is None)."""
    state = saved_state()
    loader_state = {"_snapshot": {"_worker_snapshots": {"worker_0": {"dataset_state": state}}}}
    with pytest.raises(ValueError, match=r"not a resumable_iterable state .*: it is a document holding 1 pipeline "
                                         r"state\(s\) \(at /_snapshot/_worker_snapshots/worker_0/dataset_state\).*"
                                         r"loader.load_state_dict"):
        build().load_state_dict(loader_state)
    trainer = {"format": "resumable_iterable.trainer", "loader_state": {"dataset_state": state, "_num_yielded": 1}}
    with pytest.raises(ValueError, match="ResumableDataCallback"):
        build().load_state_dict(trainer)
    with pytest.raises(TypeError, match=r"a list holding 2 pipeline state\(s\) \(at /0, /1\), one per rank"):
        build().load_state_dict([state, state])
    with pytest.raises(ValueError, match=r"expected 'resumable_iterable.state'\)$"):
        build().load_state_dict({"epoch": 0})  # nothing inside: nothing more to say



@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_dataset_state_given_to_the_loader_says_what_it_is(num_workers):
    """The other way round: ``loader.load_state_dict(dataset.state_dict())`` (a script that saved
    the dataset's state, resumed by one that uses a loader) said only that the state has neither
    '_snapshot' nor '_num_yielded'; it now says it is a dataset's state and where it loads."""
    pytest.importorskip("torch")
    pytest.importorskip("torchdata")
    loader = ri.StatefulDataLoader(build(), batch_size=None, num_workers=num_workers)
    with pytest.raises(ValueError, match=r"neither '_snapshot' .* nor '_num_yielded' \(main process\); it is a "
                                         r"dataset's state \(dataset.state_dict\(\)\): load it into the dataset"):
        loader.load_state_dict(saved_state())
    plan = ri.redistribute_states([saved_state()], 1)[0]
    if plan.get("format") == "resumable_iterable.elastic_plan":
        with pytest.raises(ValueError, match="it is an elastic plan"):
            loader.load_state_dict(plan)
    with pytest.raises(ValueError, match=r"\(main process\)$"):
        loader.load_state_dict({"epoch": 0})  # nothing known: nothing more to say

def _edit(state, path, value):
    s = copy.deepcopy(state)
    d = s["state"]
    for p in path[:-1]:
        d = d[p]
    d[path[-1]] = value
    return s


# paths into the node tree of build(): batch -> shuffle -> map -> arrow
SHUFFLE = ["children", 0]
MAP = ["children", 0, "children", 0]
ARROW = ["children", 0, "children", 0, "children", 0]


@pytest.mark.parametrize("path,value,match", [
    (ARROW + ["offset"], -1, "out of range"),
    (ARROW + ["offset"], 10**6, "past the end"),
    (ARROW + ["offset"], "3", "must be an integer"),
    (ARROW + ["shard_pos"], 9, "out of range"),
    (ARROW + ["shard_seed"], 1.5, "must be an integer"),
    (MAP + ["index"], None, "must be an integer"),
    (SHUFFLE + ["rng_pos"], 5000, "out of range"),
    (SHUFFLE + ["rng"], {"bit_generator": "MT19937"}, "PCG64"),
    (SHUFFLE + ["rng"], {"bit_generator": "PCG64", "state": {"state": "x", "inc": 1}}, "not a valid( PCG64)? generator state"),
    (SHUFFLE + ["buffer"], [{"id": 1}] * 50, "more than buffer_size"),
    (SHUFFLE + ["buffer"], "abc", "list of examples"),
    (SHUFFLE + ["draining"], 1, "true or false"),
    (SHUFFLE + ["node"], "map", "describes a 'map' node"),
    (SHUFFLE + ["extra"], 1, "unexpected \\['extra'\\]"),
])
def test_malformed_node_states_are_rejected_before_anything_is_yielded(path, value, match):
    state = _edit(saved_state(), path, value)
    ds = build()
    with pytest.raises(ValueError, match=match):
        ds.load_state_dict(state)
    # the failed load changed nothing: the dataset still iterates from the start
    assert [b["id"] for b in ds] == [b["id"] for b in build()]


def test_missing_keys_are_named():
    state = saved_state()
    del state["state"]["children"][0]["rng_pos"]
    with pytest.raises(ValueError, match="missing \\['rng_pos'\\]"):
        build().load_state_dict(state)
    state = saved_state()
    del state["pipeline"]
    with pytest.raises(ValueError, match="missing its 'pipeline'"):
        build().load_state_dict(state)


def test_damaged_or_truncated_state_files(tmp_path):
    ds = build()
    take(iter(ds), 5)
    path = tmp_path / "state.json"
    ds.save_state(path)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match="not valid JSON \\(truncated or damaged"):
        build().load_state(path)
    path.write_text(text.replace('"offset": 0', '"offset": 1', 1) if '"offset": 0' in text else text.replace("3", "4", 1))
    with pytest.raises(ValueError, match="checksum does not match"):
        build().load_state(path)
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match="not UTF-8"):
        build().load_state(path)


def test_unknown_options_are_named():
    with pytest.raises(ValueError, match="unknown stopping_strategy 'most_exhausted'"):
        ri.interleave_datasets([src(2), src(2, HF_B)], stopping_strategy="most_exhausted")
    with pytest.raises(ValueError, match="unknown buffer_state"):
        src().shuffle(seed=1, buffer_state="nope")
    with pytest.raises(ValueError, match="probabilities must be non-negative and sum to 1"):
        ri.interleave_datasets([src(2), src(2, HF_B)], probabilities=[0.5, 0.6])
    with pytest.raises(ValueError, match="2 probabilities for 3 datasets"):
        ri.interleave_datasets([src(2), src(2, HF_B), src(1)], probabilities=[0.5, 0.5])
    with pytest.raises(ValueError, match="not in the dataset"):
        src().select_columns(["nope"])
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        src().batch(0)
    with pytest.raises(ValueError, match="non-negative integer"):
        src().take(-1)


def test_map_error_names_node_shard_and_example_and_state_before_still_resumes():
    def boom(ex):
        if ex["id"] == 37:
            raise RuntimeError("bad example")
        return {"y": ex["id"]}

    ds = src(4).map(boom)
    it = iter(ds)
    got = take(it, 30)
    state = json.loads(json.dumps(ds.state_dict()))
    with pytest.raises(RuntimeError, match="bad example") as info:
        for ex in it:
            got.append(ex)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "map(test_map_error" in notes and "shard 2, row 7" in notes and "example #37" in notes
    assert [e["id"] for e in got] == list(range(37))
    # resuming from the state taken before the error replays exactly what followed it
    ds2 = src(4).map(lambda ex: {"y": ex["id"]})
    ds2.load_state_dict(state)
    assert [e["id"] for e in ds2] == list(range(30, 60))


@pytest.mark.parametrize("kind", ["map", "filter", "map_with_indices"])
def test_a_state_taken_after_a_function_error_retries_the_failing_example(kind):
    """Nothing is skipped silently: the state after the error holds the failing example."""
    fixed = {"ok": False}

    def fn(ex, *idx):
        if ex["id"] == 37 and not fixed["ok"]:
            raise RuntimeError("bad example")
        return {"y": ex["id"], "i": idx[0] if idx else None} if kind != "filter" else ex["id"] % 2 == 1

    def build():
        ds = src(4)
        if kind == "filter":
            return ds.filter(fn)
        return ds.map(fn, with_indices=kind == "map_with_indices")

    fixed["ok"] = True
    full = list(build())
    fixed["ok"] = False
    ds = build()
    head = []
    with pytest.raises(RuntimeError, match="bad example"):
        for ex in ds:
            head.append(ex)
    state = json.loads(json.dumps(ds.state_dict()))
    # loaded with the function still failing: the same example fails again, nothing is skipped
    again = build()
    again.load_state_dict(state)
    with pytest.raises(RuntimeError, match="bad example") as info:
        list(again)
    assert "example #37 (retried from the state)" in " ".join(info.value.__notes__)
    # loaded once the function is fixed: the failing example comes first, then the rest
    fixed["ok"] = True
    resumed = build()
    resumed.load_state_dict(state)
    assert head + list(resumed) == full


def test_batched_map_error_leaves_the_batch_unconsumed():
    calls = {"n": 0}

    def flaky(batch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("transient")
        return {"y": [i + 1 for i in batch["id"]]}

    ds = src(2).map(flaky, batched=True, batch_size=8)
    it = iter(ds)
    got = take(it, 16)
    with pytest.raises(OSError, match="transient") as info:
        take(it, 1)
    assert "the batch of examples #16..#23" in " ".join(info.value.__notes__)
    ds2 = src(2).map(flaky, batched=True, batch_size=8)
    ds2.load_state_dict(ds.state_dict())  # the state after the error retries the failed batch
    assert [e["id"] for e in got + list(ds2)] == list(range(60))


def test_filter_without_a_function_keeps_every_row():
    """``filter(None)`` keeps everything (as HF's map-style ``Dataset.filter(None)``; HF's iterable
    filter raises TypeError), also rows whose first column is an empty list, and in batched mode
    with ``input_columns``."""
    import datasets

    hf = datasets.Dataset.from_dict({"tags": [[], [1], []], "x": [1, 2, 3]})
    expected = list(hf.filter(None))
    assert len(expected) == 3
    for kwargs in ({}, {"batched": True}, {"batched": True, "input_columns": ["x"]}, {"input_columns": ["tags"]}):
        assert list(ri.to_iterable_dataset(hf).filter(None, **kwargs)) == expected, kwargs
