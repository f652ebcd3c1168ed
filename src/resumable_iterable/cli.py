"""``resumable-iterable inspect STATE.json``: what a saved state says, without loading any data.

The file may be anything that holds pipeline states: a state written by ``save_state`` /
``dumps_state``, the data-state file the Trainer callback writes into checkpoints, or the state
of a (torchdata) ``StatefulDataLoader`` saved as JSON, which holds one pipeline state per
DataLoader worker. Every pipeline state found inside (an object with
``"format": "resumable_iterable.state"``, or a segment of an elastic-resume plan) is shown with
its path in the document, its pipeline tree (node kinds and parameters), how far each source
shard has been read (a text bar per shard; the length of a shard is known for in-memory Arrow
sources), the fill of every shuffle buffer, the epoch, and the loader-level positions
(workers, batches yielded, which worker yields next).

``--json`` prints the same report as JSON. A file that is missing, truncated, damaged or edited
(checksum or fingerprint mismatch), or holds no state, ends with a one-line error on stderr and
exit status 1. A state that can be shown but that ``load_state_dict`` would refuse (as far as
its pipeline shape tells: see :func:`check_node`) is shown, then each problem gets one line on
stderr (and an entry of ``"problems"`` in the JSON report), and the exit status is 1.

Run as ``resumable-iterable inspect ...`` or ``python -m resumable_iterable.cli inspect ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any, Sequence

from .nodes.base import check_int
from .nodes.interleave import BLOCK as INTERLEAVE_BLOCK
from .nodes.shuffle import BLOCK as SHUFFLE_BLOCK
from .nodes.source import shard_order, split_positions
from .loader.plan import check_plan_envelope
from .state import (FORMAT, MAX_EPOCH, PLAN_FORMAT, TRAINER_FORMAT, check_envelope, find_documents, fingerprint,
                    inline_buffers, loads_state)
from .state_files import MAGIC

_SOURCE_FIELDS = {"shard_seed", "shard_pos", "offset"}
_HIDDEN_FIELDS = {"node", "children", "rng", "buffer", "peeked", "prev", "digest", "retry"}


class InspectError(ValueError):
    """The file cannot be inspected (the message is one line)."""


# ============================================================================ reading


def read_document(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InspectError(f"cannot read {path}: {e.strerror or e}") from None
    if raw.startswith(MAGIC):  # a binary state file (save_state of large buffered arrays)
        text: str | bytes = raw
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InspectError(f"{path} is not a JSON state (not UTF-8 text)") from None
    try:
        return loads_state(text)
    except ValueError as e:
        raise InspectError(f"{path}: {e}") from None
    except RecursionError:
        raise InspectError(f"{path}: the JSON is nested too deeply to be a state") from None


def find_states(doc: Any) -> list[tuple[str, str, dict]]:
    """``(path, kind, obj)`` for each pipeline state (``"state"``) or elastic plan (``"plan"``) in ``doc``."""
    return [(path, "state" if obj["format"] == FORMAT else "plan", obj)
            for path, obj in find_documents(doc, (FORMAT, PLAN_FORMAT))]


def label_for(path: str) -> str:
    """A short human label for where a state sits in its document."""
    parts = [p for p in path.split("/") if p]
    for p in reversed(parts):
        m = re.fullmatch(r"(worker|rank|process)[_ -]?(\d+)", p)
        if m:
            return f"{m.group(1)} {m.group(2)}"
    if parts and parts[-1] in ("dataset_state", "state") and len(parts) == 1:
        return "dataset"
    if len(parts) >= 1 and parts[0].isdigit() and len(parts) == 1:
        return f"item {parts[0]}"
    return "pipeline" if not parts else path


# ============================================================================ analysing


def describe_split(split: Any) -> str | None:
    """``{"ranks": [[rank, world_size], ...], "worker": [id, num_workers] | None}`` in words."""
    if not isinstance(split, dict):
        return None
    parts = []
    for r in split.get("ranks") or ():
        if isinstance(r, (list, tuple)) and len(r) == 2:
            parts.append(f"rank {r[0]} of {r[1]}")
    w = split.get("worker")
    if isinstance(w, (list, tuple)) and len(w) == 2:
        parts.append(f"DataLoader worker {w[0]} of {w[1]}")
    return ", ".join(parts) or None


def source_order(params: dict, state: dict) -> list[int]:
    return shard_order(list(params.get("shard_ids") or range(params.get("total_shards", 0))), state.get("shard_seed"))


def shard_rows(params: dict, node: str, shard: int) -> int | None:
    """Rows of a shard when the pipeline parameters determine it (in-memory Arrow sources)."""
    if node == "arrow" and isinstance(params.get("num_rows"), int) and isinstance(params.get("total_shards"), int):
        return len(split_positions(params["num_rows"], params["total_shards"], shard, contiguous=True))
    return None


def source_progress(params: dict, state: dict) -> dict:
    kind = params.get("node", "source")
    order = source_order(params, state)
    pos, offset = state["shard_pos"], state["offset"]
    stop = state.get("stop")
    shards = []
    for i, sid in enumerate(order):
        rows = shard_rows(params, kind, sid)
        if stop is not None and i >= stop:
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
    out = {}
    for k, v in state.items():
        if k in _HIDDEN_FIELDS or k in _SOURCE_FIELDS or k == "stop":
            continue
        if v is None or isinstance(v, (bool, int, float, str)):
            out[k] = v
        elif isinstance(v, (list, tuple)):
            short = len(v) <= 8 and all(x is None or isinstance(x, (bool, int, float, str)) for x in v)
            out[k] = list(v) if short else f"{len(v)} items"
    return out


def analyse_node(shape: dict, state: dict, where: str) -> dict:
    if not isinstance(shape, dict) or not isinstance(state, dict):
        raise InspectError(f"{where}: a pipeline node must be an object")
    kind = shape.get("node")
    if state.get("node") != kind:
        raise InspectError(f"{where}: the state describes a {state.get('node')!r} node where the pipeline has "
                           f"{kind!r} (damaged or edited state)")
    params = {k: v for k, v in shape.items() if k not in ("node", "children")}
    report: dict = {"node": kind, "params": params, "state": _summary_fields(state)}
    if _SOURCE_FIELDS <= set(state) and "children" not in state:
        try:
            report["source"] = source_progress(shape, state)
        except (TypeError, ValueError, IndexError, KeyError) as e:
            raise InspectError(f"{where} ({kind}): malformed source state: {e}") from None
    if kind == "shuffle" and "buffer" in state:
        mode = params.get("buffer_state", "examples")
        stored = {"examples": "examples", "replay": "positions", "drop": "nothing"}.get(mode, mode)
        buf = state["buffer"]
        fill = None
        if isinstance(buf, list):  # buffer_state="examples" saves the examples in chunks (lists)
            chunked = mode == "examples" and all(isinstance(c, list) for c in buf)
            fill = sum(len(c) for c in buf) if chunked else len(buf)
        report["buffer"] = {"fill": fill,
                            "size": params.get("buffer_size"), "stored": stored,
                            "draining": bool(state.get("draining"))}
    if kind == "interleave" and isinstance(state.get("peeked"), list):
        report["peeked"] = sum(1 for p in state["peeked"] if p is not None)
    kids_shape, kids_state = shape.get("children", []), state.get("children", [])
    if len(kids_shape) != len(kids_state):
        raise InspectError(f"{where} ({kind}): {len(kids_state)} child states for {len(kids_shape)} inputs")
    report["children"] = [analyse_node(s, t, f"{where}/{kind}[{i}]")
                          for i, (s, t) in enumerate(zip(kids_shape, kids_state))]
    return report


def analyse_state(path: str, env: dict) -> dict:
    try:
        env = inline_buffers(env)  # a state taken in a DataLoader worker
        check_envelope(env)
    except (TypeError, ValueError) as e:
        raise InspectError(f"state at {path}: {e}") from None
    if fingerprint(env["pipeline"]) != env["fingerprint"]:
        raise InspectError(f"state at {path}: its fingerprint does not match its pipeline (edited or damaged)")
    split = describe_split(env.get("split"))
    label = label_for(path)
    if split and (label in ("pipeline", "dataset") or label.startswith(("item ", "/"))):
        label = split
    tree = analyse_node(env["pipeline"], env["state"], f"{path}:state")
    problems: list[str] = []
    check_node(env["pipeline"], env["state"], f"{path}:state", problems)
    return {"path": path, "label": label, "kind": "state", "version": env["version"],
            "fingerprint": env["fingerprint"], "epoch": env["epoch"], "split": split,
            "tree": tree, "problems": problems}


def analyse_plan(path: str, plan: dict) -> list[dict]:
    try:
        check_plan_envelope(plan, f"elastic plan at {path}")
    except (TypeError, ValueError) as e:
        raise InspectError(str(e)) from None
    segments = plan["segments"]
    out = []
    for i, seg in enumerate(segments):
        where = f"{path}/segments/{i}"
        if not isinstance(seg, dict) or not isinstance(seg.get("pipeline"), dict):
            raise InspectError(f"{where}: a plan segment needs a pipeline")
        if fingerprint(seg["pipeline"]) != seg.get("fingerprint"):
            raise InspectError(f"{where}: its fingerprint does not match its pipeline (edited or damaged)")
        target = describe_split(plan.get("target"))
        entry = {"path": where, "label": f"{target or label_for(path)}: segment {i}", "kind": "plan segment",
                 "version": plan.get("version"), "fingerprint": seg["fingerprint"], "epoch": plan.get("epoch"),
                 "split": describe_split(seg.get("split"))}
        entry["problems"] = problems = []
        if isinstance(seg.get("state"), dict):
            entry["tree"] = analyse_node(seg["pipeline"], seg["state"], f"{where}:state")
            check_node(seg["pipeline"], seg["state"], f"{where}:state", problems)
        else:
            start = seg.get("start")
            entry["start"] = start
            leaf = seg["pipeline"]
            while leaf.get("children"):
                leaf = leaf["children"][0]
            try:
                order = source_order(leaf, start)
                entry["fresh_shards"] = order[start["shard_pos"]: start.get("stop") or len(order)]
            except (TypeError, KeyError, ValueError, IndexError) as e:
                raise InspectError(f"{where}: malformed segment start {start!r}: {e}") from None
            check_start(seg["pipeline"], start, f"{where}:start", problems)
        out.append(entry)
    return out

# ============================================================================ checking


_U64 = 2**64 - 1
_SOURCE_KEYS = {"node", "shard_seed", "shard_pos", "offset", "stop"}


def _param_int(params: dict, key: str) -> int | None:
    v = params.get(key)
    return v if type(v) is int else None


def _int_fields(kind: Any, params: dict, nkids: int) -> dict[str, tuple[int, int | None]]:
    """The integer fields of a node's state, with the bounds ``(lo, hi)`` the pipeline shape gives."""
    if kind == "skip":
        return {"skipped": (0, _param_int(params, "n"))}
    if kind == "take":
        return {"taken": (0, _param_int(params, "n"))}
    if kind == "repeat":
        return {"round": (0, _param_int(params, "num_times"))}
    if kind == "shuffle":
        fields = {"seed": (0, _U64), "epoch": (0, MAX_EPOCH), "rng_pos": (0, SHUFFLE_BLOCK)}
        if params.get("buffer_state") == "replay":
            fields["digest"] = (0, _U64)
        return fields
    if kind == "global_shuffle":
        return {"seed": (0, _U64), "epoch": (0, MAX_EPOCH)}
    if kind == "permuted":
        return {"pos": (0, _param_int(params, "count"))}
    if kind == "concat" and params.get("axis") == 0:
        return {"index": (0, nkids)}
    if kind == "interleave":
        return {"rng_pos": (0, INTERLEAVE_BLOCK), "cycle": (0, max(nkids - 1, 0))}
    if kind in ("map", "filter"):
        return {"index": (0, None), "skip": (0, None)}
    if kind == "step":
        return {"seen": (0, None)}
    return {}


def _int_ok(state: dict, key: str, where: str, problems: list[str], lo: int = 0, hi: int | None = None,
            none_ok: bool = False) -> bool:
    """Check one integer field as loading the state would; record the problem, if any."""
    if key not in state:
        problems.append(f"{where}: state field '{key}' is missing")
        return False
    try:
        check_int(state, key, where, lo=lo, hi=hi, none_ok=none_ok)
    except ValueError as e:
        problems.append(str(e))
        return False
    return True


def _check_source(shape: dict, state: dict, where: str, shuffled: bool | None, problems: list[str]) -> None:
    ids = shape.get("shard_ids")
    if not isinstance(ids, list):
        ids = list(range(_param_int(shape, "total_shards") or 0))
    n = len(ids)
    if set(state) != _SOURCE_KEYS:
        problems.append(f"{where}: source state fields {sorted(state)} are not {sorted(_SOURCE_KEYS)}")
        return
    ok = _int_ok(state, "shard_seed", where, problems, hi=_U64, none_ok=True)
    if ok and shuffled is True and state["shard_seed"] is None:
        problems.append(f"{where}: 'shard_seed' is null, but a shuffle above this source sets its shard order")
        ok = False
    elif ok and shuffled is False and state["shard_seed"] is not None:
        problems.append(f"{where}: 'shard_seed' is {state['shard_seed']}, but no shuffle above this source sets "
                        "its shard order (it must be null)")
        ok = False
    ok = _int_ok(state, "shard_pos", where, problems, hi=n) and ok
    ok = _int_ok(state, "offset", where, problems, hi=2**63 - 1) and ok
    if ok:
        ok = _int_ok(state, "stop", where, problems, lo=state["shard_pos"], hi=n, none_ok=True)
    if not ok:
        return
    end = n if state["stop"] is None else state["stop"]
    if state["shard_pos"] < end:
        sid = shard_order(ids, state["shard_seed"])[state["shard_pos"]]
        rows = shard_rows(shape, shape.get("node"), sid)
        if rows is not None and state["offset"] > rows:
            problems.append(f"{where}: 'offset' = {state['offset']} is past the end of shard {sid} ({rows} rows)")
    elif state["offset"] != 0:
        problems.append(f"{where}: 'offset' must be 0 once every shard is read, got {state['offset']}")


def check_node(shape: dict, state: dict, where: str, problems: list[str], shuffled: bool | None = False) -> None:
    """Record in ``problems`` what ``load_state_dict`` would refuse in a node state, as far as the
    pipeline shape tells without the pipeline itself: counters out of range or of the wrong type,
    offsets past the end of shards whose length the shape records, a shard seed present without a
    ``shuffle`` above (or missing with one), a shuffle buffer over its size. ``shuffled`` says whether
    a shuffle above sets the shard order here (``None``: not applicable)."""
    kind = shape.get("node")
    here = f"{where} ({kind})"
    params = {k: v for k, v in shape.items() if k not in ("node", "children")}
    kids_shape = shape.get("children") or []
    kids_state = state.get("children") or []
    if not kids_shape and _SOURCE_KEYS & set(state) - {"node"}:
        _check_source(shape, state, here, shuffled, problems)
        return
    fields = _int_fields(kind, params, len(kids_shape))
    for key, (lo, hi) in fields.items():
        _int_ok(state, key, here, problems, lo=lo, hi=hi)
    for key, v in state.items():  # every other counter of a state is non-negative too
        if key not in fields and type(v) is int and v < 0:
            problems.append(f"{here}: '{key}' = {v} is negative")
    if "draining" in state and type(state["draining"]) is not bool:
        problems.append(f"{here}: 'draining' must be true or false, got {state['draining']!r}")
    if kind == "shuffle":
        size, buf = params.get("buffer_size"), state.get("buffer")
        if not isinstance(buf, list):
            problems.append(f"{here}: 'buffer' must be a list, got {type(buf).__name__}")
        elif type(size) is int:
            chunked = params.get("buffer_state", "examples") == "examples" and all(isinstance(c, list) for c in buf)
            fill = sum(len(c) for c in buf) if chunked else len(buf)
            if fill > size:
                problems.append(f"{here}: the buffer holds {fill} examples, more than buffer_size={size}")
    if kind in ("interleave", "concat") and "exhausted" in state:
        ex = state["exhausted"]
        if not isinstance(ex, list) or len(ex) != len(kids_shape) or not all(type(b) is bool for b in ex):
            problems.append(f"{here}: 'exhausted' must be a list of {len(kids_shape)} booleans")
    below = True if kind == "shuffle" else (None if kind == "global_shuffle" else shuffled)
    if kind in ("map", "filter") and isinstance(state.get("prev"), dict) and kids_shape:
        check_node(kids_shape[0], state["prev"], f"{where}.prev", problems, below)
    for i, (s, t) in enumerate(zip(kids_shape, kids_state)):
        if isinstance(s, dict) and isinstance(t, dict):
            check_node(s, t, f"{where}/{kind}[{i}]", problems, below)


def _leaf(shape: dict) -> tuple[dict, bool | None]:
    """The source at the bottom of a single-input chain, and whether a shuffle above sets its order."""
    shuffled: bool | None = False
    while shape.get("children"):
        if shape.get("node") == "shuffle":
            shuffled = True
        elif shape.get("node") == "global_shuffle":
            shuffled = None
        shape = shape["children"][0]
    return shape, shuffled


def check_start(pipeline: dict, start: dict, where: str, problems: list[str]) -> None:
    """A fresh plan segment's start (already type-checked by ``check_plan_envelope``)."""
    leaf, shuffled = _leaf(pipeline)
    ids = leaf.get("shard_ids")
    n = len(ids) if isinstance(ids, list) else None
    if n is not None and start["stop"] > n:
        problems.append(f"{where}: 'stop' = {start['stop']} is past the {n} shards of the segment")
    if shuffled is True and start["shard_seed"] is None:
        problems.append(f"{where}: 'shard_seed' is null, but a shuffle above the source sets its shard order")
    elif shuffled is False and start["shard_seed"] is not None:
        problems.append(f"{where}: 'shard_seed' is {start['shard_seed']}, but no shuffle above the source sets "
                        "its shard order (it must be null)")


def loader_positions(doc: Any, path: str = "") -> list[dict]:
    """Loader-level positions of (torchdata) ``StatefulDataLoader`` states found in ``doc``."""
    out: list[dict] = []
    if not isinstance(doc, dict):
        if isinstance(doc, list):
            for i, v in enumerate(doc):
                out.extend(loader_positions(v, f"{path}/{i}"))
        return out
    if isinstance(doc.get("_snapshot"), dict):
        snap = doc["_snapshot"]
        main = snap.get("_main_snapshot") or {}
        workers = main.get("_num_workers")
        last = snap.get("_last_yielded_worker_id")
        entry = {"path": path or "/", "num_workers": workers, "batches_yielded": snap.get("_snapshot_step"),
                 "last_worker": last, "finished": doc.get("_iterator_finished")}
        if isinstance(workers, int) and workers > 0 and isinstance(last, int):
            entry["next_worker"] = (last + 1) % workers
        out.append(entry)
        return out
    if "_num_yielded" in doc and ("dataset_state" in doc or "fetcher_state" in doc):
        out.append({"path": path or "/", "num_workers": 0, "batches_yielded": doc.get("_num_yielded"),
                    "finished": doc.get("_iterator_finished")})
        return out
    for k, v in doc.items():
        if isinstance(v, (dict, list)) and k not in ("state", "pipeline"):
            out.extend(loader_positions(v, f"{path}/{k}"))
    return out


def inspect_document(doc: Any, name: str = "state") -> dict:
    """The inspection report of a decoded document (see the module docstring)."""
    found = find_states(doc)
    if not found:
        raise InspectError(f"{name}: no resumable_iterable state found in it")
    states: list[dict] = []
    for path, kind, obj in found:
        states.extend(analyse_plan(path, obj) if kind == "plan" else [analyse_state(path, obj)])
    top = doc.get("format") if isinstance(doc, dict) else None
    kind = {FORMAT: "pipeline state", PLAN_FORMAT: "elastic-resume plan",
            TRAINER_FORMAT: "Trainer checkpoint data state"}.get(top, "document holding pipeline states")
    info = {}
    if top == TRAINER_FORMAT:
        info = {k: doc.get(k) for k in ("global_step", "process_index", "num_processes", "loader")}
    problems = [p for st in states for p in st.pop("problems")]
    return {"file": name, "kind": kind, "info": info, "loaders": loader_positions(doc), "states": states,
            "problems": problems}


def inspect_file(path: str) -> dict:
    return inspect_document(read_document(path), path)


# ============================================================================ rendering


def bar(read: int | None, rows: int | None, width: int) -> str:
    if rows is None or read is None:
        return "[" + ("?" * width) + "]"
    filled = width if rows == 0 else max(0, round(width * min(read, rows) / rows))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def _fmt_value(v: Any) -> str:
    if isinstance(v, list):
        if v and all(isinstance(x, int) for x in v) and v == list(range(v[0], v[0] + len(v))) and len(v) > 3:
            return f"[{v[0]}..{v[-1]}]"
        if len(v) > 8:
            return "[" + ", ".join(map(str, v[:8])) + f", ... ({len(v)} items)]"
    return repr(v) if isinstance(v, str) else str(v)


def _render_node(node: dict, prefix: str, last: bool, root: bool, lines: list[str], width: int,
                 max_shards: int) -> None:
    head = "" if root else ("`- " if last else "|- ")
    params = " ".join(f"{k}={_fmt_value(v)}" for k, v in node["params"].items() if k != "shard_ids")
    lines.append(f"{prefix}{head}{node['node']}" + (f"  {params}" if params else ""))
    inner = prefix + ("" if root else ("   " if last else "|  "))
    detail = inner + ("|  " if node["children"] else "   ")
    fields = " ".join(f"{k}={_fmt_value(v)}" for k, v in node["state"].items())
    if "buffer" in node:
        b = node["buffer"]
        what = {"examples": "examples stored", "positions": "positions stored (replay)",
                "nothing": "not stored (buffer_state='drop')"}[b["stored"]] if b["stored"] in (
            "examples", "positions", "nothing") else b["stored"]
        fill = f"{b['fill']}/{b['size']}" if b["stored"] != "nothing" else f"-/{b['size']}"
        lines.append(f"{detail}buffer {fill}, {what}{', draining' if b['draining'] else ''}")
    if "peeked" in node:
        lines.append(f"{detail}peeked examples held: {node['peeked']}")
    if fields:
        lines.append(f"{detail}{fields}")
    if "source" in node:
        src = node["source"]
        total = ""
        if src["rows_total"] is not None:
            pct = 100.0 * src["rows_read"] / src["rows_total"] if src["rows_total"] else 100.0
            total = f", {src['rows_read']}/{src['rows_total']} rows read ({pct:.0f}%)"
        shards = src["shards"]
        lines.append(f"{detail}{len(shards)} shards in {src['order']} order: {src['done']} done{total}")
        shown = shards if len(shards) <= max_shards else shards[:max_shards]
        idw = max(len(str(s["shard"])) for s in shards) if shards else 1
        for s in shown:
            if s["status"] == "handed off":
                lines.append(f"{detail}  shard {s['shard']:>{idw}}  (handed off to another segment)")
                continue
            if s["rows"] is not None:
                count = f"{s['read']}/{s['rows']}"
            elif s["status"] == "done":
                count = "all rows"
            else:
                count = f"{s['read']} rows"
            lines.append(f"{detail}  shard {s['shard']:>{idw}}  {bar(s['read'], s['rows'], width) if s['rows'] is not None else ' ' * (width + 2)}"
                         f"  {count}  {s['status']}")
        if len(shards) > len(shown):
            lines.append(f"{detail}  ... {len(shards) - len(shown)} more shards (--max-shards to show them)")
    kids = node["children"]
    for i, child in enumerate(kids):
        _render_node(child, inner, i == len(kids) - 1, False, lines, width, max_shards)


def render(report: dict, width: int = 24, max_shards: int = 32) -> str:
    lines = [f"{report['file']}: {report['kind']}"]
    if report["info"]:
        lines.append("  " + ", ".join(f"{k}: {v}" for k, v in report["info"].items() if v is not None))
    for ld in report["loaders"]:
        parts = [f"loader at {ld['path']}:"]
        if ld.get("num_workers") is not None:
            parts.append(f"{ld['num_workers']} worker(s)," if ld["num_workers"] else "single process,")
        if ld.get("batches_yielded") is not None:
            parts.append(f"{ld['batches_yielded']} batches yielded")
        if ld.get("next_worker") is not None:
            parts.append(f"- next batch from worker {ld['next_worker']}")
        if ld.get("finished"):
            parts.append("- pass finished")
        lines.append("  " + " ".join(parts))
    for st in report["states"]:
        lines.append("")
        where = f" at {st['path']}" if st["path"] != "/" else ""
        extra = ""
        if st.get("split") and st["split"] != st["label"]:
            extra = f" ({'read by' if st['kind'] == 'state' else 'saved by'} {st['split']})"
        lines.append(f"[{st['label']}]{where}  epoch {st['epoch']}, fingerprint {st['fingerprint']}{extra}")
        if "tree" in st:
            _render_node(st["tree"], "  ", True, True, lines, width, max_shards)
        else:
            lines.append(f"  fresh segment: reads shard(s) {st['fresh_shards']} from their beginning")
    return "\n".join(lines)


# ============================================================================ entry point


def _one_line(e: BaseException | str) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="resumable-iterable",
                                     description="Tools for resumable_iterable states.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("inspect", help="show what a saved state holds (pipeline, shard progress, buffers)",
                       description="Show the pipeline tree of a saved state with per-shard progress, "
                                   "shuffle-buffer fill, epoch and DataLoader worker positions.")
    p.add_argument("path", help="a JSON state file (save_state, a Trainer checkpoint's data state, a "
                                "StatefulDataLoader state saved as JSON)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--width", type=int, default=24, help="width of the progress bars (default 24)")
    p.add_argument("--max-shards", type=int, default=32, help="shards listed per source (default 32)")
    args = parser.parse_args(argv)
    try:
        report = inspect_file(os.fspath(args.path))
        text = (json.dumps(report, indent=2, default=str) if args.json
                else render(report, width=max(4, args.width), max_shards=max(1, args.max_shards)))
    except (ValueError, TypeError, RecursionError) as e:  # InspectError, and anything a malformed file provokes
        message = f"{args.path}: the document is nested too deeply" if isinstance(e, RecursionError) else e
        print(f"resumable-iterable: error: {_one_line(message)}", file=sys.stderr)
        return 1
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head`: the reader left, which is not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    for problem in report["problems"]:  # the report is shown, but this state would not load
        print(f"resumable-iterable: error: {_one_line(problem)}", file=sys.stderr)
    return 1 if report["problems"] else 0


if __name__ == "__main__":  # pragma: no cover - exercised through a subprocess in the tests
    sys.exit(main())
