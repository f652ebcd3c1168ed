"""The ``inspect`` report of a whole file: every pipeline state and elastic-plan segment found in
it (checked against its fingerprint, its node tree analysed by ``tree.py`` and checked by
``checks.py``), what kind of document holds them (a state, a plan, a Trainer checkpoint's data
state, a ``StatefulDataLoader`` state), and the loader-level positions around them.

The report is plain JSON-able data: ``render.py`` draws it, ``--json`` prints it as it is.
"""

from __future__ import annotations

import json
from typing import Any

from ..loader.plan import check_plan_envelope
from ..loader.resume import check_seeds, shape_nodes
from ..state import (FORMAT, PLAN_FORMAT, TRAINER_FORMAT, TRAINER_VERSION, check_envelope, fingerprint,
                     inline_buffers)
from .checks import check_loader, check_node, check_start
from .document import (InspectError, checkpoint_step, digest_of, find_states, label_for, loader_positions,
                       read_document, recorded_digests, split_label, state_file_of)
from .tree import analyse_node, leaf_of, leaf_state, source_order


def analyse_state(path: str, env: dict) -> dict:
    """The report entry of the pipeline state ``env`` found at ``path`` in its document."""
    try:
        env = inline_buffers(env)  # a state taken in a DataLoader worker
        check_envelope(env)
    except (TypeError, ValueError) as e:
        raise InspectError(f"state at {path}: {e}") from None
    if fingerprint(env["pipeline"]) != env["fingerprint"]:
        raise InspectError(f"state at {path}: its fingerprint does not match its pipeline (edited or damaged)")
    split = split_label(env.get("split"))
    label = label_for(path)
    if split and (label in ("pipeline", "dataset") or label.startswith(("item ", "/"))):
        label = split
    elif split and "rank " in split and "".join(path.split("/")[1:2]).isdigit():
        label = split  # a worker of one of the ranks' loaders in a list: "worker 0" would name several states
    rng = env.get("rng")  # the worker's global generators and / or the collator's own (save_worker_rng)
    tree = analyse_node(env["pipeline"], env["state"], f"{path}:state")
    problems: list[str] = []
    check_node(env["pipeline"], env["state"], f"{path}:state", problems)
    _check_seeds(env, env["pipeline"], path, problems)
    return {"path": path, "label": label, "kind": "state", "version": env["version"],
            "fingerprint": env["fingerprint"], "epoch": env["epoch"], "split": split,
            "worker_rng": isinstance(rng, dict) and "torch" in rng,
            "collator_rng": isinstance(rng, dict) and "collator" in rng, "drawn_seeds": _drawn_seeds(env),
            "tree": tree, "problems": problems}


def _segment_ranges(found: list) -> dict:
    """For every segment of the elastic plans in a document, keyed by its path: ``(saved, pos, stop)``
    with ``saved`` what identifies the saved process the segment comes from, ``pos`` the shard
    position it reads (or starts at, for a fresh one) and ``stop`` where it ends (``None``: the end).
    Malformed segments are left out (their report says what is wrong)."""
    out = {}
    for path, kind, plan in found:
        if kind != "plan" or not isinstance(plan.get("segments"), list):
            continue
        for i, seg in enumerate(plan["segments"]):
            if not isinstance(seg, dict):
                continue
            where = seg.get("start") if seg.get("state") is None else leaf_state(seg.get("state"))
            if isinstance(where, dict) and type(where.get("shard_pos")) is int:
                saved = (seg.get("fingerprint"), json.dumps(seg.get("split"), sort_keys=True, default=str),
                         plan.get("epoch"))
                stop = where.get("stop")
                out[f"{path}/segments/{i}"] = (saved, where["shard_pos"], stop if type(stop) is int else None)
    return out


def _segment_first(ranges: dict, where: str) -> int:
    """The first shard position that the running segment at ``where`` owns. Elastic resume carves the
    shards a segment had not touched into a new segment, which ends the first one there (``stop``),
    so the segments of one saved process own consecutive ranges of its shard order: the positions
    before this segment's are those of the siblings that stop at or before where it reads. Its own
    state does not tell them from shards it finished (they were shown as read by it)."""
    if where not in ranges:
        return 0
    saved, pos, _ = ranges[where]
    stops = [stop for other, (s, _, stop) in ranges.items()
             if other != where and s == saved and stop is not None and stop <= pos]
    return max(stops, default=0)


def analyse_plan(path: str, plan: dict, ranges: dict | None = None) -> list[dict]:
    """One report entry per segment of the elastic plan found at ``path``: a node tree for a segment
    that carries a state, the shards it will read from their beginning for a fresh one (``ranges``:
    what :func:`_segment_ranges` found in the whole document, to tell the shards of other segments)."""
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
        target = split_label(plan.get("target"))
        entry = {"path": where, "label": f"{target or label_for(path)}: segment {i}", "kind": "plan segment",
                 "version": plan.get("version"), "fingerprint": seg["fingerprint"], "epoch": plan.get("epoch"),
                 "split": split_label(seg.get("split"))}
        entry["problems"] = problems = []
        if isinstance(seg.get("state"), dict):
            entry["tree"] = analyse_node(seg["pipeline"], seg["state"], f"{where}:state",
                                         _segment_first(ranges or {}, where))
            check_node(seg["pipeline"], seg["state"], f"{where}:state", problems)
        else:
            start = seg.get("start")
            entry["start"] = start
            leaf, _ = leaf_of(seg["pipeline"])
            try:
                order = source_order(leaf, start)
                entry["fresh_shards"] = order[start["shard_pos"]: start.get("stop") or len(order)]
            except (TypeError, KeyError, ValueError, IndexError) as e:
                raise InspectError(f"{where}: malformed segment start {start!r}: {e}") from None
            check_start(seg["pipeline"], start, f"{where}:start", problems)
        out.append(entry)
    if out:  # the plan's seeds (loading it would refuse a malformed entry)
        _check_seeds(plan, segments[0]["pipeline"], path, out[0]["problems"])
    return out


def _drawn_seeds(doc: dict) -> int:
    """How many seeds drawn at build time a state records (``"seeds"``; 0 when malformed)."""
    seeds = doc.get("seeds")
    return len(seeds) if isinstance(seeds, list) else 0


def _check_seeds(doc: dict, shape: dict, path: str, problems: list[str]) -> None:
    """A malformed ``"seeds"`` entry (which loading refuses) recorded in ``problems``."""
    if doc.get("seeds") is not None:
        try:
            check_seeds(doc["seeds"], shape_nodes(shape), path)
        except ValueError as e:
            problems.append(str(e))


def inspect_document(doc: Any, name: str = "state", checkpoint_step: int | None = None) -> dict:
    """The inspection report of a decoded document (see the package docstring); ``checkpoint_step``:
    the step of the Trainer checkpoint folder it was read from, if any."""
    found = find_states(doc)
    if not found:
        raise InspectError(f"{name}: no resumable_iterable state found in it")
    states: list[dict] = []
    ranges = _segment_ranges(found)
    for path, kind, obj in found:
        states.extend(analyse_plan(path, obj, ranges) if kind == "plan" else [analyse_state(path, obj)])
    top = doc.get("format") if isinstance(doc, dict) else None
    kind = {FORMAT: "pipeline state", PLAN_FORMAT: "elastic-resume plan",
            TRAINER_FORMAT: "Trainer checkpoint data state"}.get(top, "document holding pipeline states")
    info = {}
    problems = [p for st in states for p in st.pop("problems")]
    if top == TRAINER_FORMAT:
        info = {k: doc.get(k) for k in ("global_step", "process_index", "num_processes", "loader")}
        _check_trainer(doc, name, checkpoint_step, problems)
    loaders = loader_positions(doc)
    for ld in loaders:
        check_loader(_at(doc, ld["path"]), f"loader at {ld['path']}", problems)
    return {"file": name, "kind": kind, "info": info, "loaders": loaders, "states": states,
            "problems": problems}


def _check_trainer(doc: dict, name: str, checkpoint_step: int | None, problems: list[str]) -> None:
    """What the Trainer callback refuses in its data-state file, before the states inside: another
    version of the file, or (in a checkpoint folder) a file written at another step."""
    if doc.get("version") != TRAINER_VERSION:
        problems.append(f"{name}: a Trainer data state of version {doc.get('version')!r}; the callback reads "
                        f"version {TRAINER_VERSION} and refuses it")
    step = doc.get("global_step")
    if checkpoint_step is not None and step != checkpoint_step:
        problems.append(f"{name}: written at step {step!r}, but it is in the folder of the checkpoint of step "
                        f"{checkpoint_step}: the callback refuses it (copied from another checkpoint?)")


def _at(doc: Any, path: str) -> Any:
    """The object at ``path`` (``/key/0/...``, as ``loader_positions`` names them) in ``doc``
    (``None`` when a key holding ``/`` makes the path ambiguous)."""
    try:
        for part in (p for p in path.split("/") if p):
            doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    except (KeyError, IndexError, ValueError, TypeError):
        return None
    return doc


def inspect_file(path: str) -> dict:
    """The inspection report of the file at ``path`` (a Trainer checkpoint folder: its data-state file)."""
    report = inspect_document(read_document(path), path, checkpoint_step(path))
    file = state_file_of(path)
    digests = recorded_digests(file)
    if digests and digest_of(file) not in digests:
        report["problems"].append(f"{path}: this file is not the one the checkpoint's trainer_state.json records (its "
                                  "digest differs): the callback refuses it on resume (edited, or another run's?)")
    return report
