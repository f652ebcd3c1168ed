"""The global random generators of a DataLoader worker, saved with its state and restored on resume.

A ``collate_fn`` that masks at random (``DataCollatorForLanguageModeling``) or a ``map`` that
augments with ``torch.rand`` / ``np.random`` / ``random`` draws from the worker's *global*
generators, which torch seeds when the worker starts. A resumed worker is seeded again, so the
same examples would come out masked or augmented differently. With ``save_worker_rng=True``
(``resumable_iterable.StatefulDataLoader``, ``ResumableDataCallback.attach``) each worker's
dataset state also holds the three generators' states (``"rng"``), taken when the worker
produced the batch that state follows, and a worker resumed with the same number of workers
sets them back before it reads on: the continuation is then the uninterrupted run's, random
draws included. A state loaded with another number of workers (elastic resume) cannot give each
new worker an old worker's draws: its workers keep their fresh seeds.

The entry is plain JSON (base64 text and integers)::

    {"torch": "<base64 of torch.get_rng_state()>",
     "numpy": {"key": "<base64 of 624 uint32>", "pos": int, "has_gauss": int, "gauss": float},
     "random": {"version": int, "state": "<base64 of 625 uint32>", "gauss_next": float | null}}

Taking the three states costs about 0.1 ms (numpy's is the slow one), once per state the loader
takes (``snapshot_every_n_steps``): why it is asked for, not the default. The encoded entry is
reused while the generators have not moved, so torchdata's per-batch delta does not resend it.
"""

from __future__ import annotations

import base64
import math
import random
from typing import Any

import numpy as np
import torch

_TORCH_BYTES = torch.get_rng_state().numel()  # the CPU generator's state (5056 bytes)
_MT_WORDS = 624


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any, size: int, where: str) -> bytes:
    if type(text) is not str:
        raise ValueError(f"{where} must be base64 text, got {type(text).__name__}")
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ValueError(f"{where} is not base64 text") from None
    if len(data) != size:
        raise ValueError(f"{where} holds {len(data)} bytes, expected {size}")
    return data


class _Capture:
    """The last states taken and their encoding: unchanged generators give the same entry."""

    raw: tuple | None = None
    entry: dict | None = None


_last = _Capture()


def rng_state() -> dict:
    """The ``"rng"`` entry of this process's global generators now (see the module doc)."""
    t = torch.get_rng_state().numpy().tobytes()
    n = np.random.get_state()  # ("MT19937", key, pos, has_gauss, cached_gaussian)
    r = random.getstate()  # (version, 625 ints, gauss_next)
    key = n[1].tobytes()
    raw = (t, key, n[2], n[3], n[4], r)
    if _last.raw is not None and _last.raw == raw:
        entry = _last.entry
    else:
        entry = {"torch": _b64(t),
                 "numpy": {"key": _b64(key), "pos": int(n[2]), "has_gauss": int(n[3]), "gauss": float(n[4])},
                 "random": {"version": r[0], "state": _b64(np.array(r[1], dtype=np.uint32).tobytes()),
                            "gauss_next": r[2]}}
        _last.raw, _last.entry = raw, entry
    return {"torch": entry["torch"], "numpy": dict(entry["numpy"]), "random": dict(entry["random"])}


def _check_keys(value: Any, keys: tuple, where: str) -> dict:
    if not isinstance(value, dict) or set(value) != set(keys):
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise ValueError(f"{where} must be an object with keys {list(keys)}, got {got}")
    return value


def _check_int(value: Any, lo: int, hi: int, where: str) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise ValueError(f"{where} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _check_float(value: Any, where: str, allow_none: bool = False) -> None:
    if allow_none and value is None:
        return
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")


def decode_rng_state(entry: Any, where: str = "state 'rng'") -> tuple:
    """Check an ``"rng"`` entry completely and return the three states :func:`set_rng_state` sets;
    raises ``ValueError`` naming the field."""
    _check_keys(entry, ("torch", "numpy", "random"), where)
    t = torch.frombuffer(bytearray(_unb64(entry["torch"], _TORCH_BYTES, f"{where} 'torch'")), dtype=torch.uint8)
    n = _check_keys(entry["numpy"], ("key", "pos", "has_gauss", "gauss"), f"{where} 'numpy'")
    key = np.frombuffer(_unb64(n["key"], 4 * _MT_WORDS, f"{where} 'numpy' 'key'"), dtype=np.uint32).copy()
    _check_int(n["pos"], 0, _MT_WORDS, f"{where} 'numpy' 'pos'")
    _check_int(n["has_gauss"], 0, 1, f"{where} 'numpy' 'has_gauss'")
    _check_float(n["gauss"], f"{where} 'numpy' 'gauss'")
    r = _check_keys(entry["random"], ("version", "state", "gauss_next"), f"{where} 'random'")
    _check_int(r["version"], 0, 2**31, f"{where} 'random' 'version'")
    words = np.frombuffer(_unb64(r["state"], 4 * (_MT_WORDS + 1), f"{where} 'random' 'state'"), dtype=np.uint32)
    if int(words[-1]) > _MT_WORDS:  # the last word is the position in the key
        raise ValueError(f"{where} 'random' 'state' ends with position {int(words[-1])}, expected 0..{_MT_WORDS}")
    _check_float(r["gauss_next"], f"{where} 'random' 'gauss_next'", allow_none=True)
    return (t, ("MT19937", key, n["pos"], n["has_gauss"], float(n["gauss"])),
            (r["version"], tuple(int(w) for w in words), r["gauss_next"]))


def set_rng_state(decoded: tuple) -> None:
    """Set this process's global generators to what :func:`decode_rng_state` gave."""
    t, n, r = decoded
    torch.set_rng_state(t)
    np.random.set_state(n)
    random.setstate(r)
