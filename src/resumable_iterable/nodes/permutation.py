"""A keyed pseudorandom permutation of ``[0, n)`` computed position by position, in O(1) memory.

:class:`IndexPermutation` maps a position ``p`` of the shuffled order to the index ``perm(p)``
of the example read there. Nothing of size ``n`` is ever built: the map is a Feistel network
on a mixed-radix domain ``[0, A) x [0, B)`` just larger than ``[0, n)``, made to fit ``[0, n)``
by *cycle walking*.

* **Feistel network** - a value ``x < A * B`` is read as ``(hi, lo) = divmod(x, B)``. One round
  maps it to ``lo * A + (hi + F(lo)) mod A``, where ``F`` is a keyed multiply-xorshift hash of ``lo`` and
  the round key: the new high part is ``lo`` (in ``[0, B)``), the new low part lies in
  ``[0, A)``, and the radices swap for the next round. Every round can be undone
  (``hi = (new_lo - F(new_hi)) mod A``), so the composition of the rounds is a bijection of
  ``[0, A * B)``, whatever the hash. (Modular addition instead of the textbook XOR is what lets
  the two halves have any sizes, not just powers of two.)
* **Cycle walking** - ``A = ceil(sqrt(n))`` and ``B = ceil(n / A)``, so ``A * B - n < A``: a
  value that lands in ``[n, A * B)`` (a fraction below ``1 / sqrt(n)`` of them) is encrypted
  again until it falls in ``[0, n)``. Following a cycle of a bijection from a point inside
  ``[0, n)`` must come back inside it, so this terminates and restricts the bijection to
  ``[0, n)``.

The round keys come from ``numpy.random.SeedSequence([seed, epoch, ...])``: the same
``(seed, epoch)`` gives the same permutation on every machine and numpy version that keeps
``SeedSequence`` stable (it is part of numpy's documented reproducibility guarantees).

All operations are vectorised over numpy ``uint64`` arrays (overflow wraps, as the hash wants);
a block of 4096 positions costs about a quarter of a millisecond (0.06 µs per position).

This is a pseudorandom permutation, not a uniform draw among all ``n!`` orders (no keyed
construction with a 64-bit seed could be): what matters for training - every example once,
positions uncorrelated with the original order, different keys giving unrelated orders - is
checked statistically in ``tests/test_global_shuffle.py``.
"""

from __future__ import annotations

import math

import numpy as np

ROUNDS = 8

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S29, _S32 = np.uint64(29), np.uint64(32)
_SMALL = 16  # below this many values, cycle walking runs on Python integers (no numpy call overhead)


def _mix(x: np.ndarray, key: np.uint64) -> np.ndarray:
    """Round function: a multiply-xorshift hash of ``x`` keyed by ``key``, its high 32 bits."""
    z = (x ^ key) * _M1
    z = (z ^ (z >> _S29)) * _M2
    return z >> _S32


def _mix_int(x: int, key: int) -> int:
    """:func:`_mix` on Python integers (same values)."""
    z = ((x ^ key) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 29)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z >> 32


class IndexPermutation:
    """The permutation of ``[0, n)`` selected by ``(seed, epoch)``: ``perm(p)`` for any positions ``p``."""

    __slots__ = ("n", "radix", "keys", "int_keys")

    def __init__(self, n: int, seed: int, epoch: int = 0):
        if type(n) is not int or n < 0:
            raise ValueError(f"the permutation size must be a non-negative integer, got {n!r}")
        if type(seed) is not int or not 0 <= seed < 2**64:
            raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")
        if type(epoch) is not int or epoch < 0:
            raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        self.n = n
        a = math.isqrt(n - 1) + 1 if n > 0 else 1  # ceil(sqrt(n))
        b = -(-n // a) if n > 0 else 1
        self.radix = (a, b)
        ss = np.random.SeedSequence([seed, epoch, 0x67C0B])
        self.int_keys = [int(k) for k in ss.generate_state(ROUNDS, dtype=np.uint64)]
        self.keys = [np.uint64(k) for k in self.int_keys]

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        """One pass of the Feistel network over ``[0, A * B)`` (``x``: uint64, not modified).

        The value is split once, the rounds work on the pair ``(hi, lo)`` and the result is joined
        once: integer division is the slowest numpy operation here, so no round divides. ``F`` is
        brought into ``[0, A)`` by a multiply-shift (``F * A >> 32``) and the sum by one conditional
        subtraction (``min(s, s - A)`` in wrapping unsigned arithmetic).
        """
        a, b = self.radix
        if a * b == 1:
            return np.zeros_like(x)
        hi, lo = np.divmod(x, np.uint64(b))  # hi < a, lo < b
        for key in self.keys:
            ua = np.uint64(a)
            s = hi + ((_mix(lo, key) * ua) >> _S32)
            hi, lo = lo, np.minimum(s, s - ua)  # new hi < b, new lo < a
            a, b = b, a
        return hi * np.uint64(b) + lo

    def _encrypt_int(self, x: int) -> int:
        """:meth:`_encrypt` of one Python integer (same values)."""
        a, b = self.radix
        if a * b == 1:
            return 0
        hi, lo = divmod(x, b)
        for key in self.int_keys:
            s = hi + ((_mix_int(lo, key) * a) >> 32)
            hi, lo = lo, (s - a if s >= a else s)
            a, b = b, a
        return hi * b + lo

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """``perm(p)`` for every ``p`` in ``positions`` (integers in ``[0, n)``), as ``int64``."""
        p = np.asarray(positions)
        if p.size and (p.min() < 0 or p.max() >= self.n):
            raise IndexError(f"positions must lie in [0, {self.n})")
        y = self._encrypt(p.astype(np.uint64))
        n = np.uint64(self.n)
        out = np.flatnonzero(y >= n)
        while out.size > _SMALL:
            z = self._encrypt(y[out])
            y[out] = z
            out = out[z >= n]
        for i in out.tolist():
            v = int(y[i])
            while v >= self.n:
                v = self._encrypt_int(v)
            y[i] = v
        return y.astype(np.int64)

    def at(self, position: int) -> int:
        """``perm(position)`` for one position."""
        return int(self(np.array([position], dtype=np.int64))[0])
