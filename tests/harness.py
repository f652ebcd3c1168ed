"""The exactness harness: the spec every node and composition must meet.

For every cut point k (0 .. end, or an even spread of them on long runs): iterate a freshly
built pipeline for k examples, take ``state_dict()``, round-trip it through JSON, load it into
*another* freshly built pipeline, iterate to the end and require ``head + tail`` to equal the
uninterrupted run - no example lost, none repeated, same order.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

import numpy as np

import resumable_iterable as ri


def normalize(x: Any) -> Any:
    """Make examples comparable with ``==`` (numpy arrays -> tagged lists)."""
    if isinstance(x, dict):
        return {k: normalize(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(normalize(v) for v in x)
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "fc" and np.isnan(x).any():  # NaN != NaN: compared by its text
            return ("ndarray", str(x.dtype), x.shape, repr(x.tolist()))
        return ("ndarray", str(x.dtype), x.shape, x.tolist())
    if isinstance(x, np.generic):
        if x.dtype.kind in "fc" and np.isnan(x):
            return ("npscalar", str(x.dtype), "nan")
        return ("npscalar", str(x.dtype), x.item())
    return x


def json_roundtrip(state: dict) -> dict:
    return json.loads(json.dumps(state))


def codec_roundtrip(state: dict) -> dict:
    return ri.loads_state(ri.dumps_state(state))


def cut_points(n: int, max_cuts: int | None) -> list[int]:
    if max_cuts is None or n + 1 <= max_cuts:
        return list(range(n + 1))
    pts = set(np.linspace(0, n, max_cuts).round().astype(int).tolist())
    pts.update({0, 1, n - 1, n})
    return sorted(p for p in pts if 0 <= p <= n)


def rows_until_error(ds) -> tuple[list, ValueError | None]:
    """The rows ``ds`` yields, and the ``ValueError`` that ends them (``None`` if none does)."""
    rows = []
    try:
        for row in ds:
            rows.append(row)
    except ValueError as e:
        return rows, e
    return rows, None


def _first_difference(a: list, b: list) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first difference at position {i}: {x!r} != {y!r}"
    return f"lengths differ: {len(a)} vs {len(b)}"


def loader_ids(dl, stop: int | None = None, column: str = "id") -> tuple[list[int], dict | None]:
    """The ``column`` ids of the batches ``dl`` yields, and the loader's JSON round-tripped state
    once ``stop`` ids have come (``None`` when it ran to its end)."""
    out: list[int] = []
    for b in dl:
        out.extend(int(x) for x in b[column])
        if stop is not None and len(out) >= stop:
            return out, json_roundtrip(dl.state_dict())
    return out, None


def take(it, k: int) -> list:
    out = []
    for _ in range(k):
        out.append(next(it))
    return out


def assert_resumes_exactly(build: Callable[[], Any], *, max_cuts: int | None = None,
                           roundtrip: Callable[[dict], dict] = json_roundtrip,
                           cuts: Iterable[int] | None = None, check_continuation: bool = True) -> list:
    """Check the every-cut-point property; return the uninterrupted run."""
    full = [normalize(x) for x in build()]
    points = list(cuts) if cuts is not None else cut_points(len(full), max_cuts)
    for k in points:
        ds = build()
        it = iter(ds)
        head = [normalize(x) for x in take(it, k)]
        assert head == full[:k], f"cut {k}: the head differs from the uninterrupted run"
        state = roundtrip(ds.state_dict())
        if check_continuation and k < len(full):
            # taking a state must not disturb the running pipeline
            assert normalize(next(it)) == full[k], f"cut {k}: state_dict() disturbed the running iteration"
        resumed = build()
        resumed.load_state_dict(state)
        tail = [normalize(x) for x in resumed]
        assert tail == full[k:], (f"cut {k} of {len(full)}: resumed tail has {len(tail)} examples, expected "
                                  f"{len(full) - k}; {_first_difference(tail, full[k:])}")
    return full


def assert_resume_chain(build: Callable[[], Any], steps: list[int],
                        roundtrip: Callable[[dict], dict] = json_roundtrip) -> None:
    """Resume several times in a row: advance, checkpoint, resume in a new pipeline, advance..."""
    full = [normalize(x) for x in build()]
    seen: list = []
    state = None
    for step in steps:
        ds = build()
        if state is not None:
            ds.load_state_dict(state)
        it = iter(ds)
        seen += [normalize(x) for x in take(it, step)]
        state = roundtrip(ds.state_dict())
    ds = build()
    ds.load_state_dict(state)
    seen += [normalize(x) for x in ds]
    assert seen == full, _first_difference(seen, full)


def assert_loader_resumes_exactly(build: Callable[[], Any], *, workers: int, batch_size: int | None,
                                  item: Callable[[Any], Any], cuts: Callable[[int], Iterable[int]],
                                  as_json: bool = False) -> list:
    """The every-cut-point check through torchdata's ``StatefulDataLoader``: run it for ``k`` batches,
    take the loader's state (through ``json.dumps``/``loads`` with ``as_json``), resume it in a new
    loader over a freshly built dataset, and require ``head + tail`` to equal the uninterrupted run
    (``item`` makes a batch comparable; ``cuts(n)`` picks the cut points for ``n`` batches). Returns
    the uninterrupted run."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def run(state=None, stop=None):
        dl = StatefulDataLoader(build(), batch_size=batch_size, num_workers=workers)
        if state is not None:
            dl.load_state_dict(state)
        out = []
        for b in dl:
            out.append(item(b))
            if stop is not None and len(out) == stop:
                return out, json_roundtrip(dl.state_dict()) if as_json else dl.state_dict()
        return out, None

    full, _ = run()
    for k in cuts(len(full)):
        head, state = run(stop=k)
        tail, _ = run(state=state)
        assert head + tail == full, f"cut after {k} of {len(full)} batches ({workers} workers)"
    return full
