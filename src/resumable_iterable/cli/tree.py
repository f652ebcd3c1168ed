"""What one saved node tree says, read beside its pipeline shape: for each node its kind,
parameters and plain state fields; for a source, how far each shard has been read (the length of
a shard is known for in-memory Arrow sources); for a shuffle, the fill of its buffer; for an
interleave, how many peeked examples it holds; for a map or filter, the inputs it holds.

The result is a tree of plain dicts (``analyse_node``) that ``render.py`` draws and ``--json``
prints. A state that does not match its shape raises :class:`~.document.InspectError`.
"""

from __future__ import annotations

from typing import Any

from ..nodes.shuffle import BLOCK as SHUFFLE_BLOCK
from ..nodes.source import shard_order, split_positions
from ..nodes.worker_positions import buffer_entries
from ..state import is_position
from .document import InspectError

#: the fields of a source state (plus ``stop``, set on the shards a plan segment hands off)
SOURCE_FIELDS = {"shard_seed", "shard_pos", "offset"}
_HIDDEN_FIELDS = {"node", "children", "rng", "buffer", "peeked", "prev", "digest", "retry"}


def source_order(params: dict, state: dict) -> list[int]:
    """The shard ids of a source in the order its state reads them."""
    return shard_order(list(params.get("shard_ids") or range(params.get("total_shards", 0))), state.get("shard_seed"))


def shard_rows(params: dict, node: str, shard: int) -> int | None:
    """Rows of a shard when the pipeline parameters determine it (in-memory Arrow sources)."""
    if node == "arrow" and isinstance(params.get("num_rows"), int) and isinstance(params.get("total_shards"), int):
        return len(split_positions(params["num_rows"], params["total_shards"], shard, contiguous=True))
    return None


def leaf_of(shape: dict) -> tuple[dict, bool | None]:
    """The source at the bottom of a single-input chain, and whether a shuffle above sets its
    shard order (``None``: a ``global_shuffle`` above, where the question does not apply)."""
    shuffled: bool | None = False
    while shape.get("children"):
        shuffled = shuffle_below(shape.get("node"), shape, shuffled)
        shape = shape["children"][0]
    return shape, shuffled


def shuffle_below(kind: Any, params: dict, shuffled: bool | None) -> bool | None:
    """Whether a shuffle sets the shard order of the sources below a node of ``kind`` (with the
    pipeline ``params``), given ``shuffled`` for the node itself: a ``shuffle`` sets it, a
    ``global_shuffle`` decides the order itself (``None``), ``skip`` / ``take`` and
    ``concatenate_datasets(axis=1)`` keep their inputs' shards in order (``shuffle_shards`` does
    not pass through them)."""
    if kind == "shuffle":
        return True
    if kind == "global_shuffle":
        return None
    if kind in ("skip", "take") or (kind == "concat" and params.get("axis") == 1):
        return False
    return shuffled


def leaf_state(state: Any) -> Any:
    """The state of the source at the bottom of a single-input chain of node states."""
    while isinstance(state, dict) and isinstance(state.get("children"), list) and len(state["children"]) == 1:
        state = state["children"][0]
    return state


def buffer_fill(buffer: list, buffer_state: str) -> int:
    """Examples held by a saved shuffle buffer (``buffer_state="examples"`` saves them in chunks)."""
    chunked = buffer_state == "examples" and all(isinstance(c, list) for c in buffer)
    return sum(len(c) for c in buffer) if chunked else len(buffer)


def source_progress(params: dict, state: dict, first: int = 0) -> dict:
    """Per-shard status (done / reading / pending / handed off) and rows read of a source state.
    The shard positions before ``first`` and from ``stop`` on belong to other segments of an
    elastic plan (handed off)."""
    kind = params.get("node", "source")
    order = source_order(params, state)
    pos, offset = state["shard_pos"], state["offset"]
    stop = state.get("stop")
    shards = []
    for i, sid in enumerate(order):
        rows = shard_rows(params, kind, sid)
        if (stop is not None and i >= stop) or i < first:
            status, read = "handed off", None
        elif i < pos:
            status, read = "done", rows
        elif i == pos:
            status, read = "reading", offset
        else:
            status, read = "pending", 0
        shards.append({"shard": sid, "status": status, "read": read, "rows": rows})
    counted = [s for s in shards if s["status"] != "handed off"]
    known = all(s["rows"] is not None for s in counted)
    return {
        "order": "shuffled" if state.get("shard_seed") is not None else "natural",
        "shards": shards,
        "done": sum(s["status"] == "done" for s in shards),
        "reading": sum(s["status"] == "reading" and (s["read"] or 0) > 0 for s in shards),
        "rows_read": sum(s["read"] for s in counted) if known else None,
        "rows_total": sum(s["rows"] for s in counted) if known else None,
    }


def _summary_fields(state: dict) -> dict:
    out: dict[str, Any] = {}
    for k, v in state.items():
        if k in _HIDDEN_FIELDS or k in SOURCE_FIELDS or k == "stop":
            continue
        if v is None or isinstance(v, (bool, int, float, str)):
            out[k] = v
        elif isinstance(v, (list, tuple)):
            short = len(v) <= 8 and all(x is None or isinstance(x, (bool, int, float, str)) for x in v)
            out[k] = list(v) if short else f"{len(v)} items"
    return out


def analyse_node(shape: dict, state: dict, where: str, first: int = 0) -> dict:
    """The report of a node state and, recursively, of its children's states (``first``: the first
    shard position an elastic-plan segment owns, see :func:`source_progress`)."""
    if not isinstance(shape, dict) or not isinstance(state, dict):
        raise InspectError(f"{where}: a pipeline node must be an object")
    kind = shape.get("node")
    if state.get("node") != kind:
        raise InspectError(f"{where}: the state describes a {state.get('node')!r} node where the pipeline has "
                           f"{kind!r} (damaged or edited state)")
    params = {k: v for k, v in shape.items() if k not in ("node", "children")}
    report: dict = {"node": kind, "params": params, "state": _summary_fields(state)}
    if SOURCE_FIELDS <= set(state) and "children" not in state:
        for key in ("shard_seed", "shard_pos", "offset", "stop"):  # what the progress is worked out from
            value = state.get(key)
            if not (type(value) is int or (key in ("stop", "shard_seed") and value is None)):
                null = " or null" if key == "shard_seed" else ""
                raise InspectError(f"{where} ({kind}): '{key}' must be an integer (a plain int){null}, got "
                                   f"{type(value).__name__} {value!r}")
        try:
            report["source"] = source_progress(shape, state, first)
        except (TypeError, ValueError, IndexError, KeyError) as e:
            raise InspectError(f"{where} ({kind}): malformed source state: {e}") from None
    if kind == "shuffle" and "buffer" in state:
        mode = params.get("buffer_state", "examples")
        stored = {"examples": "examples", "replay": "positions", "drop": "nothing"}.get(mode, mode)
        buf = state["buffer"]
        if mode == "examples" and type(params.get("buffer_size")) is int:
            try:  # a DataLoader worker may describe it by arithmetic (``nodes/worker_positions.py``)
                buf = buffer_entries(buf, params["buffer_size"], SHUFFLE_BLOCK, f"{where} ({kind})")
            except ValueError as e:
                raise InspectError(str(e)) from None
        if mode == "examples" and isinstance(buf, list):  # a DataLoader worker may log positions instead
            chunked = all(isinstance(c, list) for c in buf)
            held = sum(map(is_position, [e for c in buf for e in c] if chunked else buf))
            if held:
                fill = buffer_fill(buf, mode)
                stored = (f"{'all' if held == fill else held} as positions, re-read on resume (examples a "
                          "DataLoader worker read straight from the sources)")
        report["buffer"] = {"fill": buffer_fill(buf, mode) if isinstance(buf, list) else None,
                            "size": params.get("buffer_size"), "stored": stored,
                            "draining": bool(state.get("draining"))}
    if kind == "permuted" and type(state.get("pos")) is int and type(params.get("count")) is int:
        # a global shuffle's part of the epoch's permutation: positions read of those it yields
        report["permutation"] = {"read": state["pos"], "total": params["count"]}
    if kind == "interleave" and isinstance(state.get("peeked"), list):
        report["peeked"] = sum(1 for p in state["peeked"] if p is not None)
    if kind in ("map", "filter") and (state.get("retry") or state.get("prev") is not None):
        rows = state.get("retry")
        if params.get("batched"):  # a batch in progress: its rows (``retry``) or where it began (``prev``)
            report["held"] = (f"a batch in progress: its {len(rows)} input rows held" if rows
                              else "a batch in progress: where it began held (prev)")
        elif isinstance(rows, list):
            report["held"] = f"{len(rows)} input example(s) held, processed first on resume"
    kids_shape, kids_state = shape.get("children", []), state.get("children", [])
    if not isinstance(kids_state, list):
        raise InspectError(f"{where} ({kind}): 'children' must be a list of child states, got "
                           f"{type(kids_state).__name__} {kids_state!r} (damaged or edited state)")
    if len(kids_shape) != len(kids_state):
        raise InspectError(f"{where} ({kind}): {len(kids_state)} child states for {len(kids_shape)} inputs")
    report["children"] = [analyse_node(s, t, f"{where}/{kind}[{i}]", first)
                          for i, (s, t) in enumerate(zip(kids_shape, kids_state))]
    return report
