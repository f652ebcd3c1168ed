"""``skip(n)`` and ``take(n)``.

State: ``{"node", "skipped"|"taken", "children"}`` - a count, updated before each yield. ``take``
never pulls an example beyond the *n*-th from its child, so the child's state stays exact.
"""

from __future__ import annotations

from typing import Iterator

from .base import Node, as_int, check_int


def _check_count(name: str, n: int) -> int:
    return as_int(n, f"{name}(n)")


class SkipNode(Node):
    kind = "skip"

    def __init__(self, child: Node, n: int):
        self.n = _check_count("skip", n)
        super().__init__([child])

    def params(self) -> dict:
        return {"n": self.n}

    def _own_state(self) -> dict:
        return {"skipped": 0}

    def _validate_own(self, state: dict, where: str) -> None:
        check_int(state, "skipped", where, hi=self.n)

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        it = iter(self.children[0])
        while st["skipped"] < self.n:
            if next(it, _END) is _END:
                return
            st["skipped"] += 1
        yield from it


class TakeNode(Node):
    kind = "take"

    def __init__(self, child: Node, n: int):
        self.n = _check_count("take", n)
        super().__init__([child])

    def params(self) -> dict:
        return {"n": self.n}

    def _own_state(self) -> dict:
        return {"taken": 0}

    def _validate_own(self, state: dict, where: str) -> None:
        check_int(state, "taken", where, hi=self.n)

    def _iter(self) -> Iterator[dict]:
        st = self._state_dict
        if st["taken"] >= self.n:
            return
        for ex in self.children[0]:
            st["taken"] += 1
            yield ex
            if st["taken"] >= self.n:
                return


_END = object()
