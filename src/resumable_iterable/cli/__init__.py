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
its pipeline shape tells, and the loader or Trainer checkpoint file around it: see ``checks.py``
and ``report.py``) is shown, then each problem gets one line on
stderr (and an entry of ``"problems"`` in the JSON report), and the exit status is 1.

Run as ``resumable-iterable inspect ...`` or ``python -m resumable_iterable inspect ...`` (or ``.cli``).

This module is the command line (arguments, exit status, error lines); the work is in
``document.py`` (reading the file, finding its states), ``tree.py`` (what a node tree says),
``checks.py`` (what loading would refuse), ``report.py`` (the report of a file) and
``render.py`` (the report as text).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

from .document import InspectError
from .render import render
from .report import inspect_document, inspect_file

__all__ = ["InspectError", "inspect_document", "inspect_file", "main", "render"]


def _one_line(e: BaseException | str) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = argparse.ArgumentParser(prog="resumable-iterable",
                                     description="Tools for resumable_iterable states.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("inspect", help="show what a saved state holds (pipeline, shard progress, buffers)",
                       description="Show the pipeline tree of a saved state with per-shard progress, "
                                   "shuffle-buffer fill, epoch and DataLoader worker positions.")
    p.add_argument("path", help="a state file, JSON text or binary (save_state, a Trainer checkpoint's data "
                                "state, a StatefulDataLoader state saved with save_state or as JSON), or a "
                                "Trainer checkpoint folder holding one data-state file")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--width", type=int, default=24, help="width of the progress bars (default 24)")
    p.add_argument("--max-shards", type=int, default=32, help="shards listed per source (default 32)")
    args = parser.parse_args(argv)
    try:
        report = inspect_file(os.fspath(args.path))
        text = (json.dumps(report, indent=2, default=str) if args.json
                else render(report, width=max(4, args.width), max_shards=max(1, args.max_shards)))
    except (ValueError, TypeError, RecursionError) as e:  # InspectError, and anything a malformed file provokes
        # (a line, not the error: kept in this frame, the error and its traceback would be a cycle)
        line = _one_line(f"{args.path}: the document is nested too deeply" if isinstance(e, RecursionError) else e)
        print(f"resumable-iterable: error: {line}", file=sys.stderr)
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

