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
exit status 1.

Run as ``resumable-iterable inspect ...`` or ``python -m resumable_iterable.cli inspect ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any, Sequence

from .nodes.source import shard_order, split_positions
from .state import (FORMAT, PLAN_FORMAT, TRAINER_FORMAT, check_envelope, find_documents, fingerprint,
                    inline_buffers, loads_state)

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
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InspectError(f"{path} is not a JSON state (not UTF-8 text)") from None
    try:
        return loads_state(text)
    except ValueError as e:
        raise InspectError(f"{path}: {e}") from None


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
    return {"path": path, "label": label, "kind": "state", "version": env["version"],
            "fingerprint": env["fingerprint"], "epoch": env["epoch"], "split": split,
            "tree": analyse_node(env["pipeline"], env["state"], f"{path}:state")}


def analyse_plan(path: str, plan: dict) -> list[dict]:
    segments = plan.get("segments")
    if not isinstance(segments, list):
        raise InspectError(f"elastic plan at {path}: 'segments' must be a list")
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
        if isinstance(seg.get("state"), dict):
            entry["tree"] = analyse_node(seg["pipeline"], seg["state"], f"{where}:state")
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
        out.append(entry)
    return out


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
    return {"file": name, "kind": kind, "info": info, "loaders": loader_positions(doc), "states": states}


def inspect_file(path: str) -> dict:
    return inspect_document(read_document(path), path)


# ============================================================================ rendering


def bar(read: int | None, rows: int | None, width: int) -> str:
    if rows is None or read is None:
        return "[" + ("?" * width) + "]"
    filled = width if rows == 0 else round(width * min(read, rows) / rows)
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


def _one_line(e: BaseException) -> str:
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
    except InspectError as e:
        print(f"resumable-iterable: error: {_one_line(e)}", file=sys.stderr)
        return 1
    text = (json.dumps(report, indent=2, default=str) if args.json
            else render(report, width=max(4, args.width), max_shards=max(1, args.max_shards)))
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head`: the reader left, which is not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through a subprocess in the tests
    sys.exit(main())
