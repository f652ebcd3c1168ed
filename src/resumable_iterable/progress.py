"""Progress reporting for work that must re-read data (fast-forwarding non-seekable sources,
replaying a shuffle buffer): a tqdm bar on an interactive terminal, log lines otherwise.

Below :data:`THRESHOLD` items the work is short and nothing is shown. "Interactive" means that
standard error is a terminal; elsewhere (CI, notebooks, log files) a line is logged at ``INFO``
level on the ``resumable_iterable`` logger when the work starts and when it ends.
"""

from __future__ import annotations

import itertools
import logging
import sys
import time
from typing import Iterator

logger = logging.getLogger("resumable_iterable")

#: below this many items, re-reading is silent
THRESHOLD = 10_000
_CHUNK = 4096  # the bar is updated every _CHUNK items, to keep the loop cheap


def _interactive() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress(total: int, what: str):
    """A context manager with ``update(n)``: a tqdm bar when interactive, log lines otherwise,
    nothing when ``total`` is below :data:`THRESHOLD`."""
    if total < THRESHOLD:
        return _NullBar()
    if _interactive():
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=what, unit="ex", leave=False, file=sys.stderr)
    return _LogBar(total, what)


def fast_forward(it: Iterator, n: int, what: str) -> int:
    """Consume ``n`` items of ``it`` (reporting progress); return how many were there."""
    count = 0
    with progress(n, what) as bar:
        while count < n:
            want = min(_CHUNK, n - count)
            got = sum(1 for _ in itertools.islice(it, want))
            count += got
            bar.update(got)
            if got < want:  # the iterator ran out
                break
    return count


class _NullBar:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n: int = 1) -> None:
        pass


class _LogBar(_NullBar):
    """Logs when the work starts and when it ends (with how much was done and how long it took)."""

    def __init__(self, total: int, what: str):
        self.total, self.what, self.done = total, what, 0
        self.start = 0.0

    def __enter__(self):
        self.start = time.perf_counter()
        logger.info("%s: %d examples to re-read", self.what, self.total)
        return self

    def __exit__(self, *exc):
        logger.info("%s: %d examples re-read in %.1f s", self.what, self.done, time.perf_counter() - self.start)
        return False

    def update(self, n: int = 1) -> None:
        self.done += n
