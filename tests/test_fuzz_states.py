"""Hostile states: mutated real states are rejected with a clear ValueError/TypeError, or - when a
mutation happens to describe another valid position - load and continue with valid examples only.

Real states come from several pipelines (every node kind, both exact buffer modes, mid-batch
states, rich value types) at several positions. A seeded mutator then edits them: wrong types,
negative / off-by-one / out-of-range / huge (2**200) numbers, NaN and infinities, missing and
extra keys, values swapped in from elsewhere in the state, another version, another pipeline's
fingerprint or tree; and, at the file level, truncated text and flipped, inserted or deleted bytes.

For each mutated state the test requires one of:

* ``ValueError``/``TypeError`` with a message, on load or before the first wrong example
  (a failed load leaves the dataset untouched: it still yields its full run);
* a continuation whose every example is valid: a member of the examples the pipeline can
  produce from its sources (``universe``). Values a state stores as data - the examples of a
  stored shuffle buffer, of an interleave peek or of a map/filter ``retry``, the column names of
  ``concatenate(axis=1)`` -
  are data: edits to them are yielded as edited (use ``save_state``, whose checksum catches any
  edit), so for those only the exception types and termination are checked.

Nothing else may escape (no KeyError, IndexError, OverflowError, RecursionError...), and loading
never unpickles or evaluates anything (``pickle``/``eval``/``exec`` are booby-trapped meanwhile).
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import datetime
import itertools
import json
import math
import os
import pickle
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import resumable_iterable as ri
from data import HF_B, HF_C, gen_src, src
from harness import normalize, take

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("RI_FUZZ_SEED", "20261123"))
#: mutations per real state: 36 in CI (2520 in all), ten times more with --soak
MUTATIONS_PER_STATE = int(os.environ.get("RI_FUZZ_PER_STATE", "36"))


def double(ex):
    return {"y": ex["id"] * 2}


def dup_odd_rowwise(batch):
    ids = [i for i in batch["id"] for _ in range(1 + i % 2)]
    return {"id": ids, "y": [i * 2 for i in ids]}


def tag_index(ex, i):
    return {"i": i}


def rich_gen(shards):
    for s in shards:
        for i in range(8):
            yield {"id": s * 100 + i, "b": bytes([s, i]), "arr": np.arange(i, dtype=np.int16), "tup": (s, i),
                   "f": float("nan") if i == 3 else i / 4, "when": datetime.date(2020, 1, 1 + i),
                   "np": np.float32(i)}


_PARQUET: list[str] = []


def parquet_paths(tmp_root) -> list[str]:
    if not _PARQUET:
        for s, n in enumerate((9, 0, 14)):
            p = os.path.join(tmp_root, f"fz{s}.parquet")
            pq.write_table(pa.table({"id": pa.array(range(s * 100, s * 100 + n), pa.int64())}), p, row_group_size=4)
            _PARQUET.append(p)
    return _PARQUET


def key(ex) -> str:
    return repr(normalize(ex))


def unbatch(batch: dict) -> list[dict]:
    cols = list(batch)
    return [{c: batch[c][j] for c in cols} for j in range(len(batch[cols[0]]))] if cols else []


class Case:
    """A pipeline to fuzz: ``build()``, the examples it can ever yield, and how to check one."""

    def __init__(self, name, build, universe, batched=False, check=None):
        self.name, self.build, self.batched = name, build, batched
        self.universe = {key(x) for x in universe()}
        self.check = check

    def valid(self, ex) -> bool:
        rows = unbatch(ex) if self.batched else [ex]
        if self.check is not None:
            return all(self.check(r) for r in rows)
        return all(key(r) in self.universe for r in rows)


def _axis1_check(ex):
    a = {"id": ex.get("id"), "text": ex.get("text")}
    b = {"id": ex.get("id2"), "text": ex.get("t2")}
    # each input's part is one of its rows, all None (exhausted) or absent (exhausted before its
    # first row: a state can say so, as for an input that is empty)
    ok_a = "id" not in ex or a == {"id": None, "text": None} or key(a) in _AXIS1_A
    ok_b = "id2" not in ex or b == {"id": None, "text": None} or key(b) in _AXIS1_B
    return set(ex) <= {"id", "text", "id2", "t2"} and ok_a and ok_b and bool(ex)


_AXIS1_A = {key(x) for x in src(2, HF_B)}
_AXIS1_B = {key(x) for x in src(2, HF_C)}
_IDS = {x["id"] for x in src(4)}


def cases(tmp_root) -> list[Case]:
    paths = parquet_paths(tmp_root)
    return [
        Case("map_filter_shuffle_batch",
             lambda: src(4).map(double).filter(lambda ex: ex["id"] % 3 != 0).shuffle(seed=3, buffer_size=6).batch(3),
             lambda: src(4).map(double).filter(lambda ex: ex["id"] % 3 != 0), batched=True),
        Case("interleave_replay", lambda: ri.interleave_datasets(
            [src(3).map(double), gen_src(2)], probabilities=[0.6, 0.4], seed=4, stopping_strategy="all_exhausted"
        ).shuffle(seed=5, buffer_size=7, buffer_state="replay"),
            # concatenate_datasets fills the columns an input lacks with None, as interleave_datasets does
            lambda: ri.concatenate_datasets([src(3).map(double), gen_src(2)])),
        Case("concat_skip_take_repeat",
             lambda: ri.concatenate_datasets([src(2, HF_B), gen_src(2, 5)]).skip(3).take(30).repeat(2),
             lambda: ri.concatenate_datasets([src(2, HF_B), gen_src(2, 5)])),
        Case("concat_axis1", lambda: ri.concatenate_datasets(
            [src(2, HF_B), src(2, HF_C).rename_columns({"id": "id2", "text": "t2"})], axis=1).shuffle(
            seed=1, buffer_size=4), lambda: [], check=_axis1_check),
        Case("batched_map_filter_mid_batch", lambda: src(3).map(dup_odd_rowwise, batched=True, batch_size=5,
                                                                remove_columns=["text"]).filter(
            lambda b: [i % 4 != 1 for i in b["id"]], batched=True, batch_size=4),
            lambda: src(3).map(dup_odd_rowwise, batched=True, batch_size=1000, remove_columns=["text"])),
        Case("split_by_node_step", lambda: ri.split_dataset_by_node(src(3).shuffle(seed=1, buffer_size=4), rank=1,
                                                                    world_size=2), lambda: src(3)),
        Case("nested_replay_without_replacement", lambda: ri.interleave_datasets(
            [src(2).shuffle(seed=1, buffer_size=4, buffer_state="replay"), gen_src(2, 6).map(double)],
            probabilities=[0.5, 0.5], seed=2, stopping_strategy="all_exhausted_without_replacement").shuffle(
            seed=6, buffer_size=5, buffer_state="replay"),
            lambda: ri.concatenate_datasets([src(2), gen_src(2, 6).map(double)])),  # (filled columns, as interleave)
        Case("with_indices_replay", lambda: src(4).map(tag_index, with_indices=True).shuffle(
            seed=2, buffer_size=5, buffer_state="replay"), lambda: [],
            check=lambda ex: set(ex) == {"id", "text", "i"} and ex["id"] in _IDS and type(ex["i"]) is int
            and ex["i"] >= 0),
        Case("rich_values", lambda: ri.IterableDataset.from_generator(rich_gen, gen_kwargs={"shards": [0, 1, 2]})
             .shuffle(seed=4, buffer_size=5),
             lambda: ri.IterableDataset.from_generator(rich_gen, gen_kwargs={"shards": [0, 1, 2]})),
        Case("parquet_replay_repeat", lambda: ri.IterableDataset.from_parquet(paths).shuffle(
            seed=8, buffer_size=6, buffer_state="replay").repeat(2),
            lambda: ri.IterableDataset.from_parquet(paths)),
    ]


# ============================================================================ mutations

HOSTILE = [None, True, False, 0, -1, 1, 2**200, -(2**200), 2**64, 1.5, float("nan"), float("inf"), "", "0",
           "state", [], [0], [None], {}, {"node": "map"}, {"__ri__": "bytes", "b64": "@@"},
           {"__ri__": "ndarray", "dtype": "|O", "shape": [1], "b64": "AA=="}, {"__ri__": "nope"}]


def _paths(obj, prefix=()):
    if prefix:
        yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


def _get(obj, path):
    for p in path:
        obj = obj[p]
    return obj


def is_data(state: dict, path) -> bool:
    """Whether ``path`` leads into values a state stores as data: the examples of a stored shuffle
    buffer (a replay buffer, with its ``digest``, holds positions instead), interleave peeks, the
    example a map/filter function raised on (``retry``), the column names of ``concatenate(axis=1)``,
    the rows a batch or a row of ``concatenate(axis=1)`` holds after its input raised (``rows``,
    ``pending``)."""
    node = state
    for p in path:
        if isinstance(node, dict) and (p in ("peeked", "columns", "retry", "rows", "pending") or (p == "buffer" and "digest" not in node)):
            return True
        node = node[p]
    return False


def mutate(state: dict, rng: random.Random, others: list[dict]) -> tuple[dict, str, bool]:
    """One random edit: (mutated state, description, whether it touched stored data)."""
    s = copy.deepcopy(state)
    roll = rng.random()
    if roll < 0.06:  # the envelope
        field = rng.choice(["version", "format", "fingerprint", "epoch", "pipeline", "state"])
        other = rng.choice(others)
        value = rng.choice([other.get(field), *HOSTILE, 2, 0, 1.0, "1"]) if field != "fingerprint" else rng.choice(
            [other["fingerprint"], other["fingerprint"][:-1] + "0", None, 7])
        s[field] = value
        return s, f"envelope {field} = {value!r:.60}", False
    if roll < 0.09:
        field = rng.choice(["format", "version", "fingerprint", "pipeline", "state", "epoch"])
        s.pop(field, None)
        return s, f"envelope without {field}", False
    if roll < 0.11:
        s["extra"] = 1
        return s, "envelope with an extra key (ignored, like JSON metadata)", False
    paths = [("state", *p) for p in _paths(s["state"])] if isinstance(s.get("state"), (dict, list)) else []
    if not paths:
        s["epoch"] = rng.choice(HOSTILE)
        return s, f"envelope epoch = {s['epoch']!r}", False
    path = rng.choice(paths)
    parent, last = _get(s, path[:-1]), path[-1]
    current = parent[last]
    op = rng.random()
    data = is_data(s, path)
    if op < 0.12:
        if isinstance(parent, dict):
            del parent[last]
        else:
            parent.pop(last)
        return s, f"delete {'/'.join(map(str, path))}", data
    if op < 0.2:
        if isinstance(current, dict):
            current[rng.choice(["extra", "node", "children", "__ri__"])] = rng.choice(HOSTILE)
        elif isinstance(current, list):
            current.append(rng.choice(HOSTILE + [copy.deepcopy(current[0]) if current else 0]))
        else:
            parent[last] = [current]
        return s, f"insert into {'/'.join(map(str, path))}", data
    if type(current) is int and op < 0.55:
        value = rng.choice([current - 1, current + 1, current + rng.randint(2, 50), -current - 1, current * 2 + 1,
                            2**200, -(2**200), 2**63, 2**64 - 1 - current])
    elif op < 0.7:  # a value from elsewhere in this state or another pipeline's
        src_state = rng.choice(others)
        value = copy.deepcopy(_get(src_state, rng.choice([("state", *p) for p in _paths(src_state["state"])])))
    else:
        value = copy.deepcopy(rng.choice(HOSTILE))
    parent[last] = value
    return s, f"{'/'.join(map(str, path))} = {value!r:.80}", data


# ============================================================================ the checks


@contextlib.contextmanager
def nothing_is_unpickled_or_evaluated():
    def trap(*a, **k):
        raise AssertionError("loading a state must never unpickle or evaluate anything")

    saved = (pickle.loads, pickle.load, pickle.Unpickler, builtins.eval, builtins.exec)
    pickle.loads = pickle.load = pickle.Unpickler = builtins.eval = builtins.exec = trap
    try:
        yield
    finally:
        pickle.loads, pickle.load, pickle.Unpickler, builtins.eval, builtins.exec = saved


def try_state(case: Case, full: list, state, what: str, data: bool, stats: dict, check_unchanged: bool) -> None:
    cap = 4 * len(case.universe or full) + 200
    ds = case.build()
    try:
        with nothing_is_unpickled_or_evaluated():
            ds.load_state_dict(state)
    except (ValueError, TypeError) as e:
        assert str(e), f"{case.name}: {what}: empty error message"
        stats["rejected on load"] += 1
        if check_unchanged:
            assert [key(x) for x in ds] == full, f"{case.name}: {what}: a failed load changed the dataset"
        return
    except Exception as e:  # noqa: BLE001 - this is what the test hunts
        raise AssertionError(f"{case.name}: {what}: load raised {type(e).__name__}: {e}") from e
    got = 0
    try:
        for ex in itertools.islice(ds, cap + 1):
            got += 1
            assert got <= cap, f"{case.name}: {what}: the continuation does not end"
            if not data:
                assert case.valid(ex), f"{case.name}: {what}: yielded an example it cannot produce: {ex!r:.200}"
    except (ValueError, TypeError) as e:
        assert str(e), f"{case.name}: {what}: empty error message"
        stats["rejected when iterating"] += 1
        return
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001
        if data:  # edited stored examples are data: the pipeline's own functions may fail on them
            stats["loaded: edited stored data"] += 1
            return
        raise AssertionError(f"{case.name}: {what}: iterating raised {type(e).__name__}: {e}") from e
    stats["loaded: valid continuation" if not data else "loaded: edited stored data"] += 1


@pytest.fixture(scope="module")
def real_states(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("fuzz"))
    out = []
    for case in cases(root):
        full = [key(x) for x in case.build()]
        assert full, case.name
        n = len(full)
        for k in sorted({0, 1, n // 3, n // 2 + 1, 2 * n // 3, n - 1, n}):
            ds = case.build()
            take(iter(ds), k)
            out.append((case, full, k, ds.state_dict()))
    return out


def test_mutated_states_are_rejected_or_continue_validly(real_states, capsys, soak):
    rng = random.Random(SEED)
    per_state = MUTATIONS_PER_STATE * (10 if soak else 1)
    stats = collections_counter()
    envelopes = [s for *_, s in real_states]
    tried = 0
    for n_state, (case, full, k, state) in enumerate(real_states):
        # the unmutated state, through the codec, resumes exactly
        base = ri.loads_state(ri.dumps_state(state))
        ds = case.build()
        ds.load_state_dict(copy.deepcopy(base))
        assert [key(x) for x in ds] == full[k:], f"{case.name}: the real state at {k} does not resume"
        for j in range(per_state):
            mutated, what, data = mutate(base, rng, envelopes)
            for _ in range(rng.choice([0, 0, 0, 1, 2])):  # sometimes several edits at once
                mutated, more, more_data = mutate(mutated, rng, envelopes)
                what, data = f"{what}; {more}", data or more_data
            try_state(case, full, mutated, what, data, stats, check_unchanged=(j % 12 == 0))
            tried += 1
    with capsys.disabled():
        print(f"\n[fuzz] {tried} mutated states tried on {len(real_states)} real states of "
              f"{len({c.name for c, *_ in real_states})} pipelines: " + ", ".join(f"{v} {k}" for k, v in sorted(stats.items())))
    assert tried >= 2000
    assert stats["rejected on load"] > tried // 3


def collections_counter():
    import collections

    return collections.Counter()


def _flip(text: str, rng: random.Random) -> bytes:
    b = bytearray(text.encode())
    op = rng.random()
    i = rng.randrange(len(b))
    if op < 0.3:
        return bytes(b[: rng.randrange(len(b))])  # truncated
    if op < 0.6:
        b[i] ^= 1 << rng.randrange(8)  # a flipped bit
    elif op < 0.75:
        del b[i: i + rng.randint(1, 8)]
    elif op < 0.9:
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
    else:
        b[i] = rng.choice(b'0123456789{}[]",:')
    return bytes(b)


def test_damaged_state_files_are_rejected(real_states, tmp_path, capsys):
    rng = random.Random(SEED + 1)
    stats = collections_counter()
    tried = 0
    path = tmp_path / "state.json"
    for case, full, k, state in real_states:
        text = ri.dumps_state(state)
        for _ in range(12):
            damaged = _flip(text, rng)
            path.write_bytes(damaged)
            ds = case.build()
            tried += 1
            try:
                with nothing_is_unpickled_or_evaluated():
                    ds.load_state(path)
            except (ValueError, TypeError) as e:
                assert str(e)
                stats["rejected"] += 1
                continue
            except Exception as e:  # noqa: BLE001
                raise AssertionError(f"{case.name}: damaged file raised {type(e).__name__}: {e}") from e
            # only an edit the checksum cannot see (JSON whitespace) may load: then it is the same state
            assert [key(x) for x in ds] == full[k:]
            stats["loaded unchanged"] += 1
        # an edit with the checksum recomputed is a dict-level edit: rejected or valid
        mutated, what, data = mutate(ri.loads_state(text), rng, [state])
        try:
            text2 = ri.dumps_state(mutated)
        except (TypeError, ValueError):
            continue
        path.write_text(text2)
        tried += 1
        ds = case.build()
        try:
            ds.load_state(path)
        except (ValueError, TypeError):
            stats["rejected"] += 1
            continue
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"{case.name}: {what}: load_state raised {type(e).__name__}: {e}") from e
        stats["re-checksummed edit loaded"] += 1
    with capsys.disabled():
        print(f"\n[fuzz] {tried} damaged state files tried: " + ", ".join(f"{v} {k}" for k, v in sorted(stats.items())))
    assert stats["rejected"] > tried // 2


@pytest.mark.parametrize("bad,match", [
    ({"format": "resumable_iterable.state", "version": True}, "unsupported state version"),
    ({"format": "resumable_iterable.state", "version": 1.0}, "unsupported state version"),
    ({"format": "resumable_iterable.state", "version": "1"}, "unsupported state version"),
    ({"format": ["resumable_iterable.state"], "version": 1}, "not a resumable_iterable state"),
])
def test_envelope_types_are_exact(real_states, bad, match):
    case, _, _, state = real_states[3]
    with pytest.raises(ValueError, match=match):
        case.build().load_state_dict(dict(state, **bad))


@pytest.mark.parametrize("value", [
    {"__ri__": "ndarray", "dtype": "|O", "shape": [1], "b64": "AAAAAAAAAAA="},
    {"__ri__": "npscalar", "dtype": "O", "b64": "AAAAAAAAAAA="},
    {"__ri__": "pickle", "data": "gASVAAAAAAAAAAB9lC4="},
    {"__ri__": "ndarray", "dtype": "<i8", "shape": [2**200], "b64": ""},
    {"__ri__": "ndarray", "dtype": "<i8", "shape": "x", "b64": ""},
    {"__ri__": "dict", "items": [[[1, [2]], 3]]},
    {"__ri__": "float", "v": "__import__('os')"},
    {"__ri__": "decimal", "v": "1e999999999999"},
])
def test_encoded_values_never_run_code(value):
    text = ri.dumps_state({"format": "resumable_iterable.state", "version": 1})
    raw = json.loads(text)
    raw["x"] = value
    del raw["checksum"]
    with nothing_is_unpickled_or_evaluated():
        try:
            out = ri.loads_state(json.dumps(raw))
        except ValueError as e:
            assert "malformed" in str(e) or "unknown kind" in str(e)
            return
    assert not isinstance(out["x"], np.ndarray) or out["x"].dtype != object
    assert math.isnan(out["x"]) if isinstance(out["x"], float) else True
