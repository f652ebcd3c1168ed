"""Clear errors instead of crashes or silence (issue 10): epochs past int64, shard seeds that do not
match the shuffles of the pipeline, numpy integers as arguments, a missing local path given to
``load_dataset``, and ``resumable-iterable inspect`` on states that would not load."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest

import resumable_iterable as ri
from data import HF, HF_B, gen_src, src
from harness import assert_resumes_exactly, json_roundtrip, take
from resumable_iterable.cli import main

EPOCH_MAX = 2**63 - 1


def ids(ds):
    return [ex["id"] for ex in ds]


def state_after(ds, k):
    take(iter(ds), k)
    return json_roundtrip(ds.state_dict())


def assert_unchanged(ds, build):
    """A failed load changed nothing: the dataset still iterates from the start, like a fresh one."""
    assert ids(ds) == ids(build())


def sources(node_state):
    """Every source state in a node-state tree."""
    if "shard_seed" in node_state:
        yield node_state
    for c in node_state.get("children", ()):
        yield from sources(c)


# =========================================================================== 1. epochs beyond int64


def shuffled():
    return src(4).shuffle(seed=3, buffer_size=5)


def test_set_epoch_refuses_an_epoch_beyond_int64_and_keeps_the_old_one():
    ds = shuffled()
    ds.set_epoch(2)
    for bad in (2**63, 2**64, -1):
        with pytest.raises(ValueError, match=r"epoch must be an integer in \[0, 2\*\*63 - 1\], got"):
            ds.set_epoch(bad)
    assert ds.epoch == 2
    ds.set_epoch(EPOCH_MAX)  # the largest epoch works end to end
    assert sorted(ids(ds)) == list(range(60))


@pytest.mark.parametrize("where", ["envelope", "shuffle node"])
def test_a_state_with_an_epoch_beyond_int64_is_refused_and_changes_nothing(where):
    state = state_after(shuffled(), 7)
    if where == "envelope":
        state["epoch"] = 2**63
    else:
        state["state"]["epoch"] = 2**63
    ds = shuffled()
    with pytest.raises(ValueError, match=r"'epoch'.*2\*\*63|epoch.*2\*\*63"):
        ds.load_state_dict(state)
    assert_unchanged(ds, shuffled)
    # the largest epoch itself is a valid state
    ok = state_after(shuffled(), 0)
    ok["epoch"] = ok["state"]["epoch"] = EPOCH_MAX
    ds.load_state_dict(ok)


def test_global_shuffle_and_elastic_plan_epochs_beyond_int64_are_refused():
    def build():
        return src(4).shuffle(seed=1, buffer_size=None)

    state = state_after(build(), 5)
    state["state"]["epoch"] = 2**63
    ds = build()
    with pytest.raises(ValueError, match=r"'epoch'"):
        ds.load_state_dict(state)
    assert_unchanged(ds, build)

    parts = [ri.split_dataset_by_node(shuffled(), rank=r, world_size=2) for r in range(2)]
    plans = ri.redistribute_states([state_after(p, 3) for p in parts], world_size=1)
    plan = json_roundtrip(plans[0])
    plan["epoch"] = 2**63
    ds = ri.split_dataset_by_node(shuffled(), rank=0, world_size=1)
    with pytest.raises(ValueError, match=r"'epoch'"):
        ds.load_state_dict(plan)
    assert_unchanged(ds, lambda: ri.split_dataset_by_node(shuffled(), rank=0, world_size=1))


# =========================================================================== 2. shard seeds


def test_a_null_shard_seed_under_a_shuffle_is_refused():
    state = state_after(shuffled(), 7)
    (source,) = sources(state["state"])
    assert source["shard_seed"] is not None
    source["shard_seed"] = None
    ds = shuffled()
    with pytest.raises(ValueError, match=r"'shard_seed' is null, but a shuffle\(\) above this source sets"):
        ds.load_state_dict(state)
    assert_unchanged(ds, shuffled)


def test_a_shard_seed_without_a_shuffle_above_is_refused():
    def build():
        return src(4).map(lambda ex: {"y": 1})

    state = state_after(build(), 7)
    (source,) = sources(state["state"])
    source["shard_seed"] = 12345
    ds = build()
    with pytest.raises(ValueError, match=r"'shard_seed' is 12345, but no shuffle\(\) above this source"):
        ds.load_state_dict(state)
    assert_unchanged(ds, build)


def test_shard_seeds_follow_each_input_of_an_interleave():
    """One input shuffled, the other not: swapping their seeds is refused both ways."""
    def build():
        return ri.interleave_datasets([src(4).shuffle(seed=1, buffer_size=3), src(2, HF_B)])

    state = state_after(build(), 9)
    a, b = sources(state["state"])
    assert a["shard_seed"] is not None and b["shard_seed"] is None
    for edit in ({"a": None}, {"b": 7}):
        bad = copy.deepcopy(state)
        ba, bb = sources(bad["state"])
        if "a" in edit:
            ba["shard_seed"] = edit["a"]
        else:
            bb["shard_seed"] = edit["b"]
        ds = build()
        with pytest.raises(ValueError, match="'shard_seed'"):
            ds.load_state_dict(bad)
        assert_unchanged(ds, build)


@pytest.mark.parametrize("name,build", [
    ("shuffle over repeat", lambda: src(3).repeat(2).shuffle(seed=2, buffer_size=4)),
    ("repeat over shuffle", lambda: src(3).shuffle(seed=2, buffer_size=4).repeat(2)),
    ("shuffle over interleave", lambda: ri.interleave_datasets(
        [src(2), src(2, HF_B)], stopping_strategy="all_exhausted").shuffle(seed=5, buffer_size=4)),
    ("concat of shuffled and plain", lambda: ri.concatenate_datasets([gen_src(3).shuffle(seed=1, buffer_size=2),
                                                                      src(2, HF_B)])),
    ("shuffle over shuffle", lambda: src(4).shuffle(seed=1, buffer_size=3).shuffle(seed=2, buffer_size=3)),
])
def test_valid_states_of_shuffled_compositions_still_load(name, build):
    assert_resumes_exactly(build, max_cuts=6)


def test_shard_seed_check_holds_for_rank_splits_and_elastic_plans():
    def part(rank, world):
        return ri.split_dataset_by_node(shuffled(), rank=rank, world_size=world)

    heads, states = [], []
    for r in range(2):
        ds = part(r, 2)
        it = iter(ds)
        heads += [ex["id"] for ex in take(it, 4)]
        states.append(json_roundtrip(ds.state_dict()))
    plans = [json_roundtrip(p) for p in ri.redistribute_states(states, world_size=3)]
    tails = []
    for r, plan in enumerate(plans):
        ds = part(r, 3)
        ds.load_state_dict(plan)
        tails += ids(ds)
    assert sorted(heads + tails) == list(range(60))
    # a plan segment whose source lost its shard seed is refused
    seg = next(s for p in plans for s in p["segments"] if s["state"] is not None)
    bad = next(p for p in plans if seg in p["segments"])
    r = plans.index(bad)
    for s in sources(seg["state"]):
        s["shard_seed"] = None
    ds = part(r, 3)
    with pytest.raises(ValueError, match="'shard_seed' is null"):
        ds.load_state_dict(bad)


# =========================================================================== 3. numpy integers as arguments


I = np.int64


@pytest.mark.parametrize("name,plain,numpy_", [
    ("take", lambda: src().take(8), lambda: src().take(I(8))),
    ("skip", lambda: src().skip(8), lambda: src().skip(np.int32(8))),
    ("repeat", lambda: src().repeat(2), lambda: src().repeat(np.uint8(2))),
    ("shard", lambda: src().shard(2, 1), lambda: src().shard(I(2), I(1))),
    ("batch", lambda: src().batch(4), lambda: src().batch(I(4))),
    ("batched map", lambda: src().map(lambda b: b, batched=True, batch_size=4),
     lambda: src().map(lambda b: b, batched=True, batch_size=I(4))),
    ("batched filter", lambda: src().filter(lambda b: [True] * len(b["id"]), batched=True, batch_size=4),
     lambda: src().filter(lambda b: [True] * len(b["id"]), batched=True, batch_size=I(4))),
    ("shuffle", lambda: src().shuffle(seed=1, buffer_size=10), lambda: src().shuffle(seed=I(1), buffer_size=I(10))),
    ("global shuffle", lambda: src().shuffle(seed=1, buffer_size=None),
     lambda: src().shuffle(seed=I(1), buffer_size=None)),
    ("split_dataset_by_node", lambda: ri.split_dataset_by_node(src(), rank=0, world_size=2),
     lambda: ri.split_dataset_by_node(src(), rank=I(0), world_size=I(2))),
    ("interleave_datasets", lambda: ri.interleave_datasets([src(), src(2, HF_B)], probabilities=[0.5, 0.5], seed=0),
     lambda: ri.interleave_datasets([src(), src(2, HF_B)], probabilities=[0.5, 0.5], seed=I(0))),
    ("to_iterable_dataset", lambda: ri.to_iterable_dataset(HF, num_shards=2),
     lambda: ri.to_iterable_dataset(HF, num_shards=I(2))),
])
def test_numpy_integers_work_like_ints_and_states_hold_plain_ints(name, plain, numpy_):
    assert list(numpy_()) == list(plain())
    # json_roundtrip uses the plain json module: it fails on a numpy scalar anywhere in the state
    sa, sb = state_after(plain(), 3), state_after(numpy_(), 3)
    assert sb == sa  # same pipeline shape and fingerprint, same positions and seeds, as plain ints


def test_set_epoch_accepts_numpy_integers():
    a, b = shuffled(), shuffled()
    a.set_epoch(1)
    b.set_epoch(np.int64(1))
    assert type(b.epoch) is int and ids(b) == ids(a)
    json.dumps(b.state_dict())


def test_redistribute_states_accepts_numpy_integers():
    parts = [ri.split_dataset_by_node(shuffled(), rank=r, world_size=2) for r in range(2)]
    states = [state_after(p, 3) for p in parts]
    plans = ri.redistribute_states(states, world_size=np.int64(3))
    assert json_roundtrip(plans) == ri.redistribute_states(states, world_size=3)


@pytest.mark.parametrize("call,message", [
    (lambda: src().take(True), "take(n) must be a non-negative integer, got bool True"),
    (lambda: src().take("3"), "take(n) must be a non-negative integer, got str '3'"),
    (lambda: src().skip(2.0), "skip(n) must be a non-negative integer, got float 2.0"),
    (lambda: src().take(np.int64(-1)), "take(n) must be a non-negative integer, got -1"),
    (lambda: src().repeat(np.float64(2)), "repeat(num_times) must be a non-negative integer or None, got float64"),
    (lambda: src().batch(np.int64(0)), "batch_size must be a positive integer, got 0"),
    (lambda: src().shuffle(seed=-1), "seed must be an integer in [0, 2**64 - 1], got -1"),
    (lambda: src().shuffle(seed=1, buffer_size=np.bool_(True)), "buffer_size must be a positive integer, got bool"),
    (lambda: src().shard(np.int64(2), np.int64(2)), "index must be in [0, 2), got 2"),
    (lambda: ri.split_dataset_by_node(src(), rank=2, world_size=np.int64(2)),
     "rank must be an integer in [0, 1], got 2"),
    (lambda: ri.split_dataset_by_node(src(), rank=0, world_size=0), "world_size must be a positive integer, got 0"),
    (lambda: ri.interleave_datasets([src(), src()], seed="0"),
     "seed must be an integer in [0, 2**64 - 1], got str '0'"),
    (lambda: ri.to_iterable_dataset(HF, num_shards=np.int64(0)), "num_shards must be a positive integer, got 0"),
    (lambda: shuffled().set_epoch(1.0), "epoch must be an integer in [0, 2**63 - 1], got float 1.0"),
])
def test_bad_integer_arguments_say_what_was_expected_and_given(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)


def test_states_still_require_plain_ints():
    """A numpy integer (kept as such by the state codec) in a loaded state is refused, and the message
    does not contradict itself."""
    state = state_after(shuffled(), 5)
    (source,) = sources(state["state"])
    source["offset"] = np.int64(source["offset"])
    state = ri.loads_state(ri.dumps_state(state))
    ds = shuffled()
    with pytest.raises(ValueError, match=r"'offset' must be an integer \(a plain int\), got int64"):
        ds.load_state_dict(state)
    assert_unchanged(ds, shuffled)


# =========================================================================== 4. load_dataset with a missing local path


@pytest.fixture
def no_hub(monkeypatch):
    """Any attempt to reach the Hub fails the test."""
    import huggingface_hub

    def refuse(*args, **kwargs):
        raise AssertionError(f"the Hub was asked for {args} {kwargs}")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_files", refuse)
    return refuse


@pytest.mark.parametrize("path", ["./no_such_folder", "no_such_folder/", "../no_such/folder", "absolute",
                                  "data/../x", "a--b/c"])
def test_a_missing_local_path_is_named_without_asking_the_hub(tmp_path, monkeypatch, no_hub, path):
    monkeypatch.chdir(tmp_path)
    if path == "absolute":
        path = str(tmp_path / "no" / "such")
    with pytest.raises(FileNotFoundError, match="does not exist") as info:
        ri.load_dataset(path)
    assert repr(path) in str(info.value)
    assert "neither a local folder or file nor a Hub dataset repo id" in str(info.value)


def test_a_repo_id_shaped_path_still_goes_to_the_hub(tmp_path, monkeypatch, no_hub):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssertionError, match="the Hub was asked"):
        ri.load_dataset("user/repo")


# =========================================================================== 5. inspect flags what would not load


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_build():
    return src(4).map(lambda ex: ex).shuffle(seed=1, buffer_size=4).take(40)


MAP_SRC = ["children", 0, "children", 0, "children", 0]  # take -> shuffle -> map -> arrow


def edited_state(tmp_path, *edits):
    state = state_after(cli_build(), 6)
    for path, value in edits:
        d = state["state"]
        for p in path[:-1]:
            d = d[p]
        d[path[-1]] = value
    file = tmp_path / "state.json"
    ri.save_state(state, file)  # re-checksummed: only validation can catch it
    return file, state


@pytest.mark.parametrize("edits,messages", [
    ([(MAP_SRC + ["offset"], 10**9), (MAP_SRC + ["shard_pos"], 0)],
     ["'offset' = 1000000000 is past the end of shard"]),
    ([(["taken"], -3)], ["'taken' = -3 is out of range [0, 40]"]),
    ([(["taken"], 41)], ["'taken' = 41 is out of range [0, 40]"]),
    ([(["children", 0, "children", 0, "index"], "x")], ["'index' must be an integer (a plain int), got str 'x'"]),
    ([(MAP_SRC + ["shard_seed"], None)], ["'shard_seed' is null, but a shuffle above this source"]),
    ([(MAP_SRC + ["shard_pos"], 9)], ["'shard_pos' = 9 is out of range [0, 4]"]),
    ([(["children", 0, "rng_pos"], 5000), (["children", 0, "epoch"], 2**63)],
     ["'epoch' = 9223372036854775808 is out of range [0, 2**63 - 1]", "'rng_pos' = 5000 is out of range"]),
    ([(["children", 0, "buffer"], [[{"id": 1}] * 5])], ["the buffer holds 5 examples, more than buffer_size=4"]),
])
def test_inspect_flags_each_problem_on_one_line_and_exits_1(tmp_path, capsys, edits, messages):
    file, state = edited_state(tmp_path, *edits)
    with pytest.raises(ValueError):  # inspect agrees with loading
        cli_build().load_state_dict(state)
    code, out, err = run(capsys, "inspect", str(file))
    assert code == 1
    assert "take  n=40" in out  # the report is still shown
    lines = err.splitlines()
    assert len(lines) == len(messages), err
    for line, message in zip(lines, messages):
        assert line.startswith("resumable-iterable: error: /:state") and message in line, line
    code, out, err = run(capsys, "inspect", str(file), "--json")
    assert code == 1 and len(json.loads(out)["problems"]) == len(messages)


def test_inspect_of_a_valid_state_reports_no_problem(tmp_path, capsys):
    file, state = edited_state(tmp_path)
    cli_build().load_state_dict(state)
    code, out, err = run(capsys, "inspect", str(file), "--json")
    assert code == 0 and err == "" and json.loads(out)["problems"] == []


def test_inspect_flags_a_shard_seed_without_a_shuffle(tmp_path, capsys):
    ds = src(4)
    state = state_after(ds, 3)
    state["state"]["shard_seed"] = 5
    ri.save_state(state, tmp_path / "s.json")
    code, _, err = run(capsys, "inspect", str(tmp_path / "s.json"))
    assert code == 1 and err.count("\n") == 1 and "no shuffle above this source" in err


def test_inspect_flags_malformed_elastic_plans(tmp_path, capsys):
    parts = [ri.split_dataset_by_node(shuffled(), rank=r, world_size=2) for r in range(2)]
    plans = ri.redistribute_states([state_after(p, 3) for p in parts], world_size=3)
    plan = json_roundtrip(plans[0])
    plan["epoch"] = 2**63
    ri.save_state(plan, tmp_path / "plan.json")
    code, out, err = run(capsys, "inspect", str(tmp_path / "plan.json"))
    assert code == 1 and out == "" and err.count("\n") == 1 and "'epoch'" in err
    # a fresh segment whose start runs past its shards
    plans = [json_roundtrip(p) for p in plans]
    fresh = next((s for p in plans for s in p["segments"] if s["start"] is not None), None)
    assert fresh is not None
    fresh["start"]["stop"] = 99
    ri.save_state({"ranks": plans}, tmp_path / "plans.json")
    code, out, err = run(capsys, "inspect", str(tmp_path / "plans.json"))
    assert code == 1 and "'stop' = 99 is past the" in err and err.count("\n") == 1


@pytest.mark.parametrize("text", ["[" * 100000, '{"a": ' * 5000 + "1" + "}" * 5000])
def test_deeply_nested_json_is_one_line(tmp_path, capsys, text):
    path = tmp_path / "deep.json"
    path.write_text(text)
    code, out, err = run(capsys, "inspect", str(path))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("resumable-iterable: error: ") and "Traceback" not in err


def test_inspect_problems_in_a_subprocess(tmp_path):
    file, _ = edited_state(tmp_path, (MAP_SRC + ["offset"], 10**9), (MAP_SRC + ["shard_pos"], 0))
    out = subprocess.run([sys.executable, "-m", "resumable_iterable.cli", "inspect", str(file)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "take  n=40" in out.stdout
    assert out.stderr.count("\n") == 1 and "past the end of shard" in out.stderr


def test_shard_seed_check_agrees_with_nodes_that_block_the_shard_order():
    """take/skip and concatenate(axis=1) do not pass a shuffle's shard order on: their sources keep a null
    seed, and states of such pipelines load; a shuffle fed from several shard groups marks its groups."""
    from data import HF_B, src as source
    from harness import assert_resumes_exactly

    for build in (lambda: source().take(30).shuffle(seed=1, buffer_size=4),
                  lambda: source().skip(5).shuffle(seed=1, buffer_size=4),
                  lambda: ri.concatenate_datasets([source(1), source(1, HF_B).rename_column("id", "j")
                                                   .rename_column("text", "u")], axis=1).shuffle(seed=2, buffer_size=3),
                  lambda: source().shuffle(seed=3, buffer_size=4, max_buffer_input_shards=2)):
        assert_resumes_exactly(build, max_cuts=6)


@pytest.mark.parametrize("combine", [ri.interleave_datasets, ri.concatenate_datasets])
def test_combining_an_hf_iterable_dataset_names_it_and_says_how_to_build_ours(combine):
    """HF's ``datasets.IterableDataset`` passed beside ours: the error names HF's class (not a bare
    ``IterableDataset``, which reads as if ours were refused) and points at ``ri.load_dataset``."""
    from datasets import Dataset
    hf = Dataset.from_dict({"x": [1, 2]}).to_iterable_dataset()
    ours = ri.to_iterable_dataset(Dataset.from_dict({"x": [3, 4]}))
    with pytest.raises(TypeError, match=r"dataset 1 is a datasets\.IterableDataset, not a resumable_iterable"
                                        r"\.IterableDataset \(build it with resumable_iterable\.load_dataset"):
        combine([ours, hf])
    with pytest.raises(TypeError, match=r"dataset 0 is a builtins\.list, .*to_iterable_dataset"):
        combine([[1, 2], ours])


def test_hf_split_dataset_by_node_given_ours_says_which_function_to_call():
    """``from datasets.distributed import split_dataset_by_node`` (HF's docs' habit) applied to our
    dataset failed with ``AttributeError: ... no attribute '_distributed'``: it now names ours."""
    from datasets import Dataset
    from datasets.distributed import split_dataset_by_node as hf_split
    ours = ri.to_iterable_dataset(Dataset.from_dict({"x": list(range(8))}), num_shards=4)
    with pytest.raises(TypeError, match=r"use resumable_iterable\.split_dataset_by_node \(same arguments\)"):
        hf_split(ours, rank=1, world_size=2)
    assert [r["x"] for r in ri.split_dataset_by_node(ours, rank=1, world_size=2)] == [2, 3, 6, 7]
