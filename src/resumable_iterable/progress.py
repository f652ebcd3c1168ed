"""Progress reporting for work that must re-read data (fast-forwarding non-seekable sources,
replaying a shuffle buffer): a tqdm bar on an interactive terminal, a log line otherwise."""

from __future__ import annotations

import itertools
import logging
import sys
from typing import Iterator

logger = logging.getLogger("resumable_iterable")

#: below this many items, re-reading is silent
THRESHOLD = 10_000


def _interactive() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def fast_forward(it: Iterator, n: int, what: str) -> int:
    """Consume ``n`` items of ``it``; return how many were there."""
    if n < THRESHOLD:
        return sum(1 for _ in itertools.islice(it, n))
    if _interactive():
        from tqdm.auto import tqdm

        count = 0
        with tqdm(total=n, desc=what, unit="ex", leave=False) as bar:
            for _ in itertools.islice(it, n):
                count += 1
                if count % 4096 == 0:
                    bar.update(4096)
            bar.update(count % 4096)
        return count
    logger.info("%s: skipping %d examples", what, n)
    count = sum(1 for _ in itertools.islice(it, n))
    logger.info("%s: done", what)
    return count


def progress(total: int, what: str):
    """A context-managed counter: tqdm when interactive and large, a no-op bar otherwise."""
    if total >= THRESHOLD and _interactive():
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=what, unit="ex", leave=False)
    if total >= THRESHOLD:
        logger.info("%s: %d examples", what, total)
    return _NullBar()


class _NullBar:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n: int = 1) -> None:
        pass
