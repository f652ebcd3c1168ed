"""Opening the file given to ``inspect``: decoding it, finding the pipeline states and elastic
plans it holds (at any depth), naming each one for the report, and the loader-level positions of
the (torchdata) ``StatefulDataLoader`` states around them.

Nothing here checks a state; a file that cannot be decoded raises :class:`InspectError` with a
one-line message.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ..loader.loader_state import (DATASET_STATE, FETCHER_STATE, ITERATOR_FINISHED, LAST_YIELDED_WORKER_ID,
                                   MAIN_SNAPSHOT, NUM_WORKERS, NUM_YIELDED, SNAPSHOT, SNAPSHOT_STEP,
                                   STEPS_SINCE_SNAPSHOT)
from ..state import FORMAT, PLAN_FORMAT, TRAINER_DATA_FILE, find_documents
from ..state_files import read_state_file, state_file_digest


#: the Trainer callback's data-state file, ``resumable_iterable_state.json`` (``.rankN.json`` per process)
_DATA_FILE = re.compile(r"{}(\.rank\d+)?{}".format(*map(re.escape, os.path.splitext(TRAINER_DATA_FILE))))


class InspectError(ValueError):
    """The file cannot be inspected (the message is one line)."""


def data_state_file(folder: str) -> str:
    """The Trainer callback's data-state file in checkpoint ``folder`` (its default name): the one
    path, or :class:`InspectError` naming the files found, or saying none is there."""
    try:
        found = sorted(n for n in os.listdir(folder) if _DATA_FILE.fullmatch(n))
    except OSError as e:
        raise InspectError(f"cannot read {folder}: {e.strerror or e}") from None
    if len(found) == 1:
        return os.path.join(folder, found[0])
    if not found:
        checkpoints = _checkpoints_in(folder)
        if checkpoints:  # a Trainer's output_dir: its checkpoints hold the data states
            latest = os.path.join(folder, checkpoints[-1])
            shown = (", ".join(checkpoints) if len(checkpoints) <= 4
                     else f"{checkpoints[0]} ... {checkpoints[-1]}, {len(checkpoints)} in all")
            raise InspectError(f"{folder} is a Trainer output folder without a data-state file of its own; its "
                               f"checkpoints ({shown}) hold them: name one, such as the latest, {latest}")
        raise InspectError(f"{folder} is a folder without a data-state file ({TRAINER_DATA_FILE}, as the Trainer "
                           "callback writes): name the state file")
    raise InspectError(f"{folder} holds {len(found)} data-state files, one per process ({', '.join(found)}): "
                       "name the one to inspect")


def _checkpoints_in(folder: str) -> list[str]:
    """The Trainer checkpoint folders (``checkpoint-<step>``) in ``folder`` that hold a data-state
    file, by step."""
    found = []
    for name in os.listdir(folder):
        m = re.fullmatch(r"checkpoint-(\d+)", name)
        sub = os.path.join(folder, name)
        if m and os.path.isdir(sub):
            try:
                if any(_DATA_FILE.fullmatch(n) for n in os.listdir(sub)):
                    found.append((int(m.group(1)), name))
            except OSError:
                continue
    return [name for _, name in sorted(found)]


def state_file_of(path: str) -> str:
    """The file ``inspect`` reads for ``path``: ``path``, or the data-state file of a checkpoint folder."""
    return data_state_file(path) if os.path.isdir(path) else path


def digest_of(path: str) -> str | None:
    """:func:`~resumable_iterable.state_files.state_file_digest` of the file, ``None`` if unreadable."""
    try:
        return state_file_digest(path)
    except (OSError, ValueError):
        return None


def checkpoint_step(path: str) -> int | None:
    """The step of the Trainer checkpoint folder (``checkpoint-<step>``) that ``path`` is, or holds as
    a data-state file; ``None`` for any other path."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if folder != path and not _DATA_FILE.fullmatch(os.path.basename(path)):
        return None
    m = re.fullmatch(r"checkpoint-(\d+)", os.path.basename(os.path.normpath(folder)))
    return int(m.group(1)) if m else None


def recorded_digests(path: str) -> list[str] | None:
    """The digests of process 0's data-state file that the ``trainer_state.json`` beside the file
    ``path`` records (the callback takes on resume only a file with one of them), or ``None`` when
    ``path`` is not such a file or nothing is recorded."""
    if os.path.basename(path) != TRAINER_DATA_FILE:
        return None
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(path)), "trainer_state.json"), encoding="utf-8") as f:
            callbacks = json.load(f).get("stateful_callbacks")
    except (OSError, ValueError, AttributeError):
        return None
    found = []
    for entry in (callbacks.values() if isinstance(callbacks, dict) else ()):
        for e in (entry if isinstance(entry, list) else [entry]):
            digest = e.get("attributes", {}).get("data_state_sha256") if isinstance(e, dict) else None
            if isinstance(digest, str):
                found.append(digest)
    return found or None


def read_document(path: str) -> Any:
    """The decoded content of the state file at ``path`` (JSON text or a binary state file, whose
    blobs are read straight into their arrays: the file was read whole first, which took twice its
    size in memory). ``path`` may be a Trainer checkpoint folder holding one data-state file."""
    path = state_file_of(path)
    try:
        return read_state_file(path)
    except OSError as e:
        raise InspectError(f"cannot read {path}: {e.strerror or e}") from None
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
    if parts and (parts[-1] == DATASET_STATE or (parts[-1] == "state" and len(parts) == 1)):
        return "dataset"  # also a loader state inside another document (a Trainer checkpoint's)
    if len(parts) >= 1 and parts[0].isdigit() and len(parts) == 1:
        return f"item {parts[0]}"
    return "pipeline" if not parts else path


def split_label(split: Any) -> str | None:
    """A saved ``{"ranks": [[rank, world_size], ...], "worker": [id, num_workers] | None}`` in words,
    or ``None`` when it names nothing. Unlike ``plan.describe_split`` (which words a validated split
    for an error message) this takes whatever the file holds, and says only what is there."""
    if not isinstance(split, dict):
        return None
    parts = []
    for r in split.get("ranks") or ():
        if isinstance(r, (list, tuple)) and len(r) in (2, 3):
            parts.append(f"rank {r[0]} of {r[1]}" + (f" (by {r[2]})" if len(r) == 3 else ""))
    w = split.get("worker")
    if isinstance(w, (list, tuple)) and len(w) == 2:
        parts.append(f"DataLoader worker {w[0]} of {w[1]}")
    return ", ".join(parts) or None


def loader_positions(doc: Any, path: str = "") -> list[dict]:
    """Loader-level positions of (torchdata) ``StatefulDataLoader`` states found in ``doc`` (their keys
    are ``loader/loader_state.py``'s, which reads them without importing torchdata)."""
    out: list[dict] = []
    if not isinstance(doc, dict):
        if isinstance(doc, list):
            for i, v in enumerate(doc):
                out.extend(loader_positions(v, f"{path}/{i}"))
        return out
    if isinstance(doc.get(SNAPSHOT), dict):
        snap = doc[SNAPSHOT]
        main = snap.get(MAIN_SNAPSHOT)
        if not isinstance(main, dict):  # damaged or edited: the loader line shows what is left
            main = {}
        workers = main.get(NUM_WORKERS)
        last = snap.get(LAST_YIELDED_WORKER_ID)
        step, since = snap.get(SNAPSHOT_STEP), doc.get(STEPS_SINCE_SNAPSHOT)
        if not (type(since) is int and since > 0 and type(step) is int):
            since = 0
        # with snapshot_every_n_steps > 1 the workers' states are those of the last snapshot, taken
        # ``since`` batches before the state: the loader yielded them all, and replays them on resume
        entry = {"path": path or "/", "num_workers": workers, "batches_yielded": step + since if since else step,
                 "last_worker": last, "finished": doc.get(ITERATOR_FINISHED)}
        if since:
            entry.update(snapshot_step=step, since_snapshot=since)
        if isinstance(workers, int) and workers > 0 and isinstance(last, int):
            entry["next_worker"] = (last + 1 + since) % workers  # in turn, as the loader takes them
        out.append(entry)
        return out
    if NUM_YIELDED in doc and (DATASET_STATE in doc or FETCHER_STATE in doc):
        out.append({"path": path or "/", "num_workers": 0, "batches_yielded": doc.get(NUM_YIELDED),
                    "finished": doc.get(ITERATOR_FINISHED)})
        return out
    for k, v in doc.items():
        if isinstance(v, (dict, list)) and k not in ("state", "pipeline"):
            out.extend(loader_positions(v, f"{path}/{k}"))
    return out
