"""Global shuffle of random-access sources (``shuffle(buffer_size=None)``): not available yet."""

from __future__ import annotations


def make_global_shuffle(child, seed):
    raise NotImplementedError("shuffle(buffer_size=None) (global shuffle) is not implemented yet")
