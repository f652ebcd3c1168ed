"""A real Ctrl-C landing in the library's own code, at every point it can land.

A ``SIGINT`` is not raised where the user's code runs but wherever the main thread is when the
interpreter next checks for signals. CPython 3.11 checks as a call made by Python code returns
(C functions, ``next()`` included), at the start of a Python function or of a generator resuming
after ``yield``, and at a loop's backward jump - and nowhere else: not between a ``for`` loop
receiving an item and storing it, not between two stores. The deterministic tests here trace every
frame of the library, opcode by opcode, and raise ``KeyboardInterrupt`` at the *k*-th such check
point of a run, for every *k* (``Interrupter``); a state taken once the exception has left
``next()`` must resume exactly (JSON round trip, fresh pipeline). Other Pythons check at other
points: the soak test at the end sends real timer signals instead.
"""

from __future__ import annotations

import dis
import json
import os
import random
import signal
import sys
import threading
import time
import zlib

import pytest

import resumable_iterable as ri

# a generator closed while an interrupt is raised reports it as unraisable
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
cpython_311 = pytest.mark.skipif(sys.version_info[:2] != (3, 11) or sys.gettrace() is not None,
                                 reason="the check points are those of CPython 3.11; a tracer (coverage) is in use")

LIB = os.sep + "resumable_iterable" + os.sep
_POINTS: dict = {}


def check_points(code) -> frozenset:
    """Offsets of ``code`` where CPython 3.11 may run a signal handler: right after a ``CALL``, right
    after ``RESUME`` (a function starting, a generator resuming), at ``JUMP_BACKWARD``."""
    points = _POINTS.get(code)
    if points is None:
        ins = list(dis.get_instructions(code))
        points = {b.offset for a, b in zip(ins, ins[1:])
                  if a.opname == "CALL" or (a.opname == "RESUME" and a.arg < 2)}
        points |= {a.offset for a in ins if a.opname == "JUMP_BACKWARD"}
        points = _POINTS[code] = frozenset(points)
    return points


class Interrupter:
    """Raise ``KeyboardInterrupt`` at the ``nth`` check point (from 0) met in the library's frames
    of this thread; ``where`` tells where it was raised (``None``: the run met fewer)."""

    def __init__(self, nth: int):
        self.nth, self.seen, self.where = nth, 0, None

    def _frames(self, frame, event, arg):
        if LIB not in frame.f_code.co_filename:
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return self._opcodes

    def _opcodes(self, frame, event, arg):
        if event == "opcode" and frame.f_lasti in check_points(frame.f_code):
            self.seen += 1
            if self.seen - 1 == self.nth:
                sys.settrace(None)
                self.where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} ({frame.f_code.co_name})"
                raise KeyboardInterrupt
        return self._opcodes

    def __enter__(self):
        sys.settrace(self._frames)
        return self

    def __exit__(self, *exc):
        sys.settrace(None)


def rows(n: int, base: int = 0):
    for i in range(n):
        yield {"id": base + i, "ids": list(range(100 * i, 100 * i + i % 4 + 1)), "lab": list(range(i % 4 + 1))}


def gen(n: int, base: int = 0) -> ri.IterableDataset:
    return ri.IterableDataset.from_generator(rows, gen_kwargs={"n": n, "base": base})


def table(n: int) -> ri.IterableDataset:
    return ri.IterableDataset.from_dict({"id": list(range(n)), "t": [f"x{i}" for i in range(n)]}, num_shards=2)


class Batches:
    """``ds.iter(batch_size)`` iterated by ``for``, with the dataset's state."""

    def __init__(self, ds: ri.IterableDataset, batch_size: int):
        self.ds, self.batch_size = ds, batch_size

    def __iter__(self):
        return self.ds.iter(batch_size=self.batch_size)

    def state_dict(self) -> dict:
        return self.ds.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.ds.load_state_dict(state)


P = [0.3, 0.7]
PIPELINES = {
    "interleave_probabilities": lambda: ri.interleave_datasets([gen(5), gen(6, 100)], probabilities=P, seed=1),
    "interleave_all_exhausted": lambda: ri.interleave_datasets([gen(2), gen(5, 100)],
                                                               stopping_strategy="all_exhausted"),
    "interleave_without_replacement": lambda: ri.interleave_datasets(
        [gen(3), gen(5, 100)], probabilities=P, seed=2, stopping_strategy="all_exhausted_without_replacement"),
    "shuffle": lambda: gen(10).shuffle(seed=3, buffer_size=4),
    "pack": lambda: gen(8).pack(3, columns="ids", separator=-1),
    "pack_columns_positions": lambda: gen(6).pack(3, columns=["ids", "lab"], separator=-1, position_ids=True),
    "pack_greedy": lambda: gen(7).pack(4, columns=["ids"], mode="greedy", document_lengths=True),
    "concatenate_axis1": lambda: ri.concatenate_datasets(
        [gen(4).select_columns(["id"]), gen(5, 100).rename_column("id", "x").remove_columns(["lab"])], axis=1),
    "skip_take_repeat": lambda: gen(4).skip(1).repeat(2).take(5),
    "map_remove_columns": lambda: gen(4).map(lambda e: {"y": e["id"]}, remove_columns=["ids"]),
    "group": lambda: gen(7).map(lambda e: {"k": e["id"] // 3}).batch(by_column="k"),
    "prefetch": lambda: gen(6).prefetch(2),
    "shuffle_replay": lambda: gen(10).shuffle(seed=3, buffer_size=4, buffer_state="replay"),
    "shuffle_replay_nested": lambda: gen(9).map(lambda e, i: {"i": i}, with_indices=True).repeat(2).shuffle(
        seed=2, buffer_size=3, buffer_state="replay").shuffle(seed=4, buffer_size=2, buffer_state="replay"),
    "shuffle_replay_interleave": lambda: ri.interleave_datasets([table(5), gen(4, 100).select_columns(["id"])],
                                                                probabilities=P, seed=5).shuffle(
        seed=1, buffer_size=3, buffer_state="replay"),
    "format_rows_numpy": lambda: gen(6).with_format("numpy"),
    "format_rows_pandas_shuffled": lambda: gen(5).shuffle(seed=2, buffer_size=2).with_format("pandas"),
    "format_batch_numpy": lambda: gen(7).batch(3).with_format("numpy"),
    "format_table_batches_torch": lambda: table(7).batch(3).with_format("torch"),
    "format_iter_batches_numpy": lambda: Batches(gen(7).with_format("numpy"), 3),
    "mixed": lambda: ri.interleave_datasets([table(4), gen(3, 100).select_columns(["id"])], probabilities=P, seed=3)
    .shuffle(seed=1, buffer_size=3).batch(2),
}


def text(x) -> str:
    return json.dumps(x, sort_keys=True, default=repr)


@cpython_311
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_a_ctrl_c_at_every_second_check_point_loses_nothing(name):
    """Every second check point (which half: by the pipeline's name), to keep the suite's time
    bounded; every one of them in ``make soak`` (below)."""
    interrupt_at_check_points(name, step=2)


@cpython_311
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_a_ctrl_c_at_every_check_point_loses_nothing(name, soak):
    if not soak:
        pytest.skip("every check point: make soak (every second one runs above)")
    interrupt_at_check_points(name, step=1)


def interrupted_run(ds, nth: int) -> tuple[list, str | None]:
    """The examples ``ds`` yields until a Ctrl-C lands at its ``nth`` check point, and where it
    landed (``None``: the run ended first)."""
    head = []
    with Interrupter(nth) as ctrl_c:
        try:
            for x in ds:
                head.append(x)
        except KeyboardInterrupt:
            pass
    return head, ctrl_c.where


def interrupt_at_check_points(name: str, step: int) -> None:
    build = PIPELINES[name]
    full = [text(x) for x in build()]
    bad = []
    nth = zlib.crc32(name.encode()) % step
    tried = 0
    while True:
        ds = build()
        head, where = interrupted_run(ds, nth)
        if where is None:
            break
        resumed = build()
        resumed.load_state_dict(json.loads(json.dumps(ds.state_dict())))
        got = [text(x) for x in head] + [text(x) for x in resumed]
        if got != full:
            bad.append(f"{where}: {len(head)} + {len(got) - len(head)} examples, expected {len(full)}")
        nth += step
        tried += 1
    print(f"[ctrl-c] {name}: {tried} interrupts, {len(bad)} lost or repeated examples")
    assert tried > 25
    assert not bad, f"{len(bad)} of {tried} interrupts lost or repeated examples:\n" + "\n".join(bad[:10])
    deadline = time.monotonic() + 5  # no reading thread of a prefetch is left behind
    while time.monotonic() < deadline and any(t.name.startswith("resumable_iterable-") for t in threading.enumerate()):
        time.sleep(0.01)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("resumable_iterable-")]


# ---------------------------------------------------------------------- real timer signals


SOAK_PIPELINES = {
    "interleave": lambda n: ri.interleave_datasets([gen(n), gen(n, 10**6)], probabilities=P, seed=4),
    "shuffle_batch": lambda n: gen(n).shuffle(seed=5, buffer_size=50).batch(4),
    "pack": lambda n: gen(n).pack(5, columns="ids", separator=-1),
    "concatenate_axis1": lambda n: ri.concatenate_datasets(
        [gen(n).select_columns(["id"]), gen(n, 10**6).rename_column("id", "x").select_columns(["x"])], axis=1),
    "repeat_take": lambda n: gen(n // 10).repeat(None).take(n),
}


@pytest.mark.slow
@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals reach the main thread")
@pytest.mark.parametrize("name", sorted(SOAK_PIPELINES))
def test_timer_signals_lose_nothing(name, soak):
    """Real timer signals (``SIGALRM``) raising ``KeyboardInterrupt`` wherever the interpreter takes them (any
    Python, any check point), after a random delay; the state taken after each resumes exactly."""
    build = SOAK_PIPELINES[name]
    n = 2000
    took = time.perf_counter()
    full = list(build(n))
    took = time.perf_counter() - took  # the delays fall within a run
    full = [text(x) for x in full]
    rng = random.Random(name)

    armed = [False]

    def interrupt(signum, frame):
        if armed[0]:  # once, and only while the loop runs
            armed[0] = False
            raise KeyboardInterrupt

    # pytest-timeout's alarm (its signal method) is put back afterwards
    old, timeout = signal.signal(signal.SIGALRM, interrupt), signal.getitimer(signal.ITIMER_REAL)
    interrupted = bad = 0
    try:
        for _ in range(200 if soak else 25):
            ds = build(n)
            head = []
            armed[0] = True
            try:
                signal.setitimer(signal.ITIMER_REAL, max(1e-4, rng.uniform(0.02, 0.98) * took))
                for x in ds:
                    head.append(x)
                armed[0] = False
            except KeyboardInterrupt:
                interrupted += 1
            signal.setitimer(signal.ITIMER_REAL, 0)
            resumed = build(n)
            resumed.load_state_dict(json.loads(json.dumps(ds.state_dict())))
            bad += [text(x) for x in head] + [text(x) for x in resumed] != full
    finally:
        signal.signal(signal.SIGALRM, old)
        if timeout[0]:
            signal.setitimer(signal.ITIMER_REAL, *timeout)
    print(f"[ctrl-c soak] {name}: {interrupted} interrupts, {bad} lost or repeated examples")
    assert interrupted and not bad


# ---------------------------------------------------------------------- what a format hands back


def _interrupted_holding(build, after: int):
    """A dataset interrupted while it held an example back (``held`` in its state) after yielding
    ``after`` rows, the rows it yielded and where the interrupt landed."""
    nth = 0
    while True:
        ds = build()
        head, where = interrupted_run(ds, nth)
        assert where is not None, "no interrupt left an example held"
        if len(head) == after and "held" in ds.state_dict()["state"]:
            return ds, head, where
        nth += 1


@cpython_311
def test_an_example_a_format_did_not_hand_out_resumes_in_any_format():
    """The example a Ctrl-C left in the format is kept unformatted (``held``, in the state of the
    pipeline's root): a state taken then resumes with it first, with or without the format."""
    ds, head, where = _interrupted_holding(lambda: gen(6).with_format("numpy"), after=2)
    assert where.startswith("format"), where
    state = json.loads(json.dumps(ds.state_dict()))
    assert state["state"]["held"] == [next(iter(gen(6).skip(2)))]
    plain = gen(6)
    plain.load_state_dict(state)
    assert [int(x["id"]) for x in head] + [x["id"] for x in plain] == list(range(6))
    again = gen(6).with_format("numpy")
    again.load_state_dict(state)
    assert [int(x["id"]) for x in head] + [int(x["id"]) for x in again] == list(range(6))
    assert "held" not in again.state_dict()["state"]


def test_a_malformed_held_field_is_refused():
    ds = gen(3)
    state = ds.state_dict()
    for bad in ([], [1], {"id": 1}):
        state["state"]["held"] = bad
        with pytest.raises(ValueError, match="'held'"):
            gen(3).load_state_dict(state)
