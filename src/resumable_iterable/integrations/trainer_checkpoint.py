"""The data-state file :class:`~resumable_iterable.integrations.transformers.ResumableDataCallback`
keeps in a ``transformers.Trainer`` checkpoint, and how a resume finds it.

Each process writes one file into ``<output_dir>/checkpoint-<step>`` (:data:`STATE_FILE` for the
main process, ``<stem>.rank<N><suffix>`` for the others: :func:`state_file_name`): a state file
(``state_files.py``) holding ``{"format": FORMAT, "version": VERSION, "global_step",
"process_index", "num_processes", "loader", "loader_state"}`` and, with ``save_worker_rng``,
``"main_rng"`` / ``"collator_rng"``. The Trainer records the file's SHA-256 in its
``trainer_state.json`` (:data:`TRAINER_STATE_FILE`). On resume the file is looked for in
``args.resume_from_checkpoint`` and in the checkpoint folder of the step being resumed
(:func:`candidate_folders`); the main process takes only the file whose digest
``trainer_state.json`` records (:func:`expected_digest`, :func:`find_state_file`), and says why it
turned down the others. :func:`read_payload` checks what was found belongs to that step."""

from __future__ import annotations

import os
from typing import Any

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..state import TRAINER_DATA_FILE, TRAINER_FORMAT, TRAINER_VERSION
from ..state_files import load_state, read_state_file, state_file_digest

#: name of the data-state file written into each checkpoint folder (process 0)
STATE_FILE = TRAINER_DATA_FILE
#: ``format`` entry of that file
FORMAT = TRAINER_FORMAT
VERSION = TRAINER_VERSION
#: the Trainer's own state file in a checkpoint folder (written after the data state)
TRAINER_STATE_FILE = "trainer_state.json"


def state_file_name(filename: str, process_index: int = 0) -> str:
    """The data-state file name of a process: ``filename`` for the main one, else ``<stem>.rank<N><suffix>``."""
    if process_index == 0:
        return filename
    stem, ext = os.path.splitext(filename)
    return f"{stem}.rank{process_index}{ext}"


def checkpoint_folder(args: Any, step: int) -> str:
    """The folder of the checkpoint of ``step``."""
    return os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{step}")


def candidate_folders(args: Any, state: Any) -> list[str]:
    """Where a resume looks for the data state: ``args.resume_from_checkpoint`` (when set), then
    the checkpoint folder of ``state.global_step`` (once, if they are the same folder)."""
    out = []
    hint = getattr(args, "resume_from_checkpoint", None)
    if isinstance(hint, str) and hint:
        out.append(hint)
    out.append(checkpoint_folder(args, state.global_step))
    if len(out) == 2 and os.path.normpath(out[0]) == os.path.normpath(out[1]):
        del out[1]  # the same folder: looked at once
    return out


def expected_digest(state: Any, callback_name: str) -> str | None:
    """The digest of the data-state file that ``trainer_state.json`` (the Trainer's ``state``)
    records for the callback named ``callback_name``; raises ``ValueError`` if it records none."""
    entry = (state.stateful_callbacks or {}).get(callback_name)
    if isinstance(entry, list):
        entry = entry[0] if entry else None
    if not isinstance(entry, dict):
        raise ValueError(
            f"ResumableDataCallback: the checkpoint of step {state.global_step} was written without this "
            "callback, so it holds no data state. Resume it without the callback (and with "
            "ignore_data_skip=False, to let the Trainer skip the consumed batches), or restart training."
        )
    digest = (entry.get("attributes") or {}).get("data_state_sha256")
    if digest is None:
        raise ValueError(
            f"ResumableDataCallback: the checkpoint of step {state.global_step} records no data state "
            "(the callback saw no training DataLoader when it was written)"
        )
    return digest


def find_state_file(folders: list[str], name: str, expected: str | None, step: int) -> tuple[str | None, list[str]]:
    """``(path, looked)``: the first file ``name`` in ``folders`` whose digest is ``expected``
    (any, when ``None``), or ``None``; ``looked`` says why each file before it was not taken."""
    looked = []
    for folder in folders:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            looked.append(f"{path} (missing)")
            continue
        try:
            digest = state_file_digest(path)
        except ValueError:
            digest = None  # damaged: load_state says how, if the digest is not checked
        if expected is not None and digest != expected:
            looked.append(f"{path} ({mismatch(path, step)})")
            continue
        return path, looked
    return None, looked


def read_payload(path: str, name: str, step: int) -> dict:
    """The data state in the file at ``path`` (named ``name``), checked to be one of this format
    and version written at ``step``."""
    payload = load_state(path)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or payload.get("version") != VERSION:
        raise ValueError(f"ResumableDataCallback: {name} is not a data state of format {FORMAT} v{VERSION}")
    if payload.get("global_step") != step:
        raise ValueError(f"ResumableDataCallback: {name} was written at step {payload.get('global_step')}, "
                         f"but the checkpoint is at step {step}")
    return payload


def mismatch(path: str, step: int) -> str:
    """Why the data-state file at ``path``, whose digest is not the one ``trainer_state.json``
    records for the checkpoint of ``step``, is not that checkpoint's: damaged, or another's."""
    try:
        payload = read_state_file(path)
    except ValueError as e:
        return f"damaged: {e}"
    saved = payload.get("global_step") if isinstance(payload, dict) else None
    if type(saved) is int and saved != step:
        return f"written at step {saved}: it belongs to another checkpoint"
    return "not the file trainer_state.json records: another run's, or edited"
