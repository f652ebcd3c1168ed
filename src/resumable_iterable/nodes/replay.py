"""Replay mode of the shuffle buffer (``buffer_state="replay"``): not available yet."""

from __future__ import annotations


def require_replay_support(child) -> None:
    raise NotImplementedError(
        "shuffle(buffer_state='replay') is not implemented yet; use 'examples' (exact) or 'drop' (lossy)"
    )
