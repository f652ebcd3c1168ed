"""The readable ``inspect`` report: the report of ``report.py`` drawn as text, one block per state
with its pipeline drawn as a tree, a progress bar per source shard, the fill of each
shuffle buffer, and one line per DataLoader with its workers and batches yielded.
"""

from __future__ import annotations

from typing import Any


def bar(read: int | None, rows: int | None, width: int) -> str:
    """``[####----]``: ``read`` of ``rows`` in ``width`` characters (``[????]`` when unknown)."""
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
    if "held" in node:
        lines.append(f"{detail}{node['held']}")
    if fields:
        lines.append(f"{detail}{fields}")
    if "permutation" in node:
        perm = node["permutation"]
        pct = 100.0 * perm["read"] / perm["total"] if perm["total"] else 100.0
        lines.append(f"{detail}{bar(perm['read'], perm['total'], width)}  {perm['read']}/{perm['total']} "
                     f"positions of the permutation read ({pct:.0f}%)")
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
    """The report as text: bars ``width`` characters wide, at most ``max_shards`` shards per source."""
    lines = [f"{report['file']}: {report['kind']}"]
    if report["info"]:
        lines.append("  " + ", ".join(f"{k}: {v}" for k, v in report["info"].items() if v is not None))
    for ld in report["loaders"]:
        parts = [f"loader at {ld['path']}:"]
        if ld.get("num_workers") is not None:
            parts.append(f"{ld['num_workers']} worker(s)," if ld["num_workers"] else "single process,")
        if ld.get("batches_yielded") is not None:
            parts.append(f"{ld['batches_yielded']} batches yielded")
        if ld.get("since_snapshot"):
            parts.append(f"(the workers' states are those of its snapshot after batch {ld['snapshot_step']}: "
                         f"resuming replays the {ld['since_snapshot']} batch(es) since)")
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
        if st.get("worker_rng"):
            lines.append("  the worker's random generators (torch, numpy, random) are saved: set back on resume")
        if st.get("collator_rng"):
            lines.append("  the collator's own random generator is saved: set back on resume")
        if st.get("drawn_seeds"):
            lines.append(f"  {st['drawn_seeds']} seed(s) drawn when the pipeline was built without one: a rebuilt "
                         "pipeline adopts them on load (its later epochs are the saved run's)")
        if "tree" in st:
            _render_node(st["tree"], "  ", True, True, lines, width, max_shards)
        else:
            lines.append(f"  fresh segment: reads shard(s) {st['fresh_shards']} from their beginning")
    return "\n".join(lines)
