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

**A collator's own generator.** ``DataCollatorForLanguageModeling(seed=...)`` draws its masks
from a generator of its own (``generator``: a ``torch.Generator`` with ``return_tensors="pt"``, a
numpy ``Generator`` with ``"np"``), which it makes from its seed the first time it collates in a
process (``seed + worker id`` in a DataLoader worker): a resumed process would mask from the seed
again. With ``save_worker_rng=True`` the loader (and the Trainer callback) wraps such a
``collate_fn`` in :class:`CollatorRng`, which the dataset's session holds (``collator_rng``): each
state the dataset gives in that process - in a worker, when it produced a batch; in the main
process, when the loader takes its state - also holds that generator's state (``"collator"`` in
``"rng"``, only that entry in the main process, whose global generators are the training
loop's), and a state loaded sets it back just before the collator's next batch. Entry::

    "collator": {"torch": "<base64 of Generator.get_state()>"}      # or
    "collator": {"numpy": {"bit_generator": "PCG64", "state": {...}, "has_uint32": int, "uinteger": int}}

No entry (the collator had not collated in that process yet, or another number of workers
re-dealt the state): the collator's generator starts again from its seed at its next batch, as in
a new process.
"""

from __future__ import annotations

import base64
import math
import os
import random
from typing import Any

import numpy as np
import torch

from ...nodes.checks import check_rng

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


# ============================================================================ a collator's own generator

_GLOBAL_KEYS = ("torch", "numpy", "random")
_NESTED = ("collate_fn", "data_collator", "func")  # InlineSmallTensors, transformers' RemoveColumnsCollator, partial


def _owns_generator(obj: Any) -> bool:
    """``obj`` keeps a generator of its own: a torch / numpy one now, or none yet with a ``seed``
    to make it from (``DataCollatorForLanguageModeling`` makes it at its first batch)."""
    gen = getattr(obj, "generator", None)
    if isinstance(gen, (torch.Generator, np.random.Generator)):
        return True
    return gen is None and hasattr(obj, "generator") and getattr(obj, "seed", None) is not None


def collator_with_generator(collate_fn: Any) -> Any | None:
    """The collator inside ``collate_fn`` (through ``InlineSmallTensors``, transformers'
    ``RemoveColumnsCollator`` and ``functools.partial``) that keeps a generator of its own, or ``None``."""
    obj = collate_fn
    for _ in range(8):
        if obj is None:
            return None
        if _owns_generator(obj):
            return obj
        obj = next((getattr(obj, a) for a in _NESTED if getattr(obj, a, None) is not None), None)
    return None


class CollatorRng:
    """A ``collate_fn`` whose collator keeps a generator of its own (:func:`collator_with_generator`):
    :meth:`state` gives that generator's entry, :meth:`load` sets one back before the next batch.

    The entry is that of the generator as it stands in this process after the batches collated
    here; a collator that has not collated in this process yet has none (it would start from its
    seed). A state loaded (:meth:`load`) is set on the collator just before its next batch in this
    process - it may make its generator only then - and until then :meth:`state` gives it."""

    def __init__(self, collate_fn: Any, collator: Any):
        self.collate_fn = collate_fn
        self.collator = collator
        self._drew_in: int | None = None  # the process in which the collator last collated
        self._loaded: tuple | None = None  # (process, entry, decoded): loaded, not set yet
        self._then: tuple | None = None  # (process, decoded): set after the next batch (:meth:`after_next_batch`)
        self._instead: tuple | None = None  # (process, entry, decoded): set before the next batch (:meth:`before_next_batch`)
        self._cache: tuple = (None, None)  # (raw state, entry) last encoded

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        pid = os.getpid()
        loaded, instead = self._loaded, self._instead
        if loaded is not None or instead is not None:
            self._loaded = self._instead = None
            if instead is not None and instead[0] == pid:
                _set_generator(self.collator, instead[2])
            elif loaded is not None and loaded[0] == pid:
                _set_generator(self.collator, loaded[2])
        self._drew_in = pid
        then = self._then
        if then is None:
            return self.collate_fn(*args, **kwargs)
        try:
            return self.collate_fn(*args, **kwargs)
        finally:
            self._then = None
            if then[0] == pid:
                _set_generator(self.collator, then[1])

    def state(self) -> dict | None:
        """The ``"collator"`` entry of this process now, or ``None`` (see the class doc)."""
        pid = os.getpid()
        for pending in (self._instead, self._loaded):
            if pending is not None and pending[0] == pid:
                return pending[1]
        if self._drew_in != pid:
            return None
        gen = self.collator.generator
        if isinstance(gen, torch.Generator):
            raw = gen.get_state().numpy().tobytes()
            if self._cache[0] != raw:
                self._cache = (raw, {"torch": _b64(raw)})
            return {"torch": self._cache[1]["torch"]}
        if isinstance(gen, np.random.Generator):
            st = gen.bit_generator.state
            if st.get("bit_generator") != "PCG64":
                raise TypeError(f"save_worker_rng: the collate_fn's numpy generator is a {st.get('bit_generator')}; "
                                "only PCG64 (np.random.default_rng) can be saved")
            return {"numpy": {"bit_generator": "PCG64", "state": dict(st["state"]),
                              "has_uint32": int(st["has_uint32"]), "uinteger": int(st["uinteger"])}}
        return None  # no generator made (yet): it starts from its seed

    def load(self, entry: dict | None, decoded: Any) -> None:
        """Set the collator's generator to ``entry`` (checked: ``decoded``) before its next batch in
        this process; ``None``: make it again from its seed then."""
        self._loaded = (os.getpid(), entry, decoded)

    def before_next_batch(self, entry: dict, decoded: Any) -> None:
        """Set the collator's generator to ``entry`` (checked: ``decoded``) just before its next
        batch in this process, whatever state is loaded in between (the Trainer without workers:
        the generator when the checkpoint was saved, an evaluation's draws included)."""
        self._instead = (os.getpid(), entry, decoded)

    def after_next_batch(self, decoded: Any) -> None:
        """Set the collator's generator to ``decoded`` once it has collated its next batch in this
        process (the Trainer without workers: accelerate had collated that batch ahead before the
        evaluation, which may collate with the same collator, and the checkpoint)."""
        self._then = (os.getpid(), decoded)

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d["_cache"] = (None, None)
        return d

    def __repr__(self) -> str:
        return f"CollatorRng({self.collate_fn!r})"


def wrap_collator(collate_fn: Any) -> CollatorRng | None:
    """``collate_fn`` wrapped in a :class:`CollatorRng` when a collator in it keeps its own
    generator; ``None`` otherwise (nothing to save). A ``collate_fn`` that holds a
    :class:`CollatorRng` already (a loader of ours made with ``save_worker_rng=True``) gives that one."""
    obj = collate_fn
    for _ in range(8):
        if obj is None or isinstance(obj, CollatorRng):
            break
        obj = next((getattr(obj, a) for a in _NESTED if getattr(obj, a, None) is not None), None)
    if isinstance(obj, CollatorRng):
        return obj
    collator = collator_with_generator(collate_fn)
    return None if collator is None else CollatorRng(collate_fn, collator)


def decode_collator_entry(entry: Any, where: str) -> tuple:
    """Check a ``"collator"`` entry; return what :func:`_set_generator` sets."""
    if not isinstance(entry, dict) or len(entry) != 1 or next(iter(entry)) not in ("torch", "numpy"):
        got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise ValueError(f"{where} must be an object with one key, 'torch' or 'numpy', got {got}")
    if "torch" in entry:
        raw = _unb64(entry["torch"], _TORCH_BYTES, f"{where} 'torch'")
        return ("torch", torch.frombuffer(bytearray(raw), dtype=torch.uint8))
    check_rng(entry["numpy"], where, "numpy")
    return ("numpy", entry["numpy"])


def _set_generator(collator: Any, decoded: tuple | None) -> None:
    """Give ``collator`` the generator state ``decoded`` (``None``: its seed's, made at its next
    batch). A collator with ``create_rng`` (transformers') makes its generator for this process
    with it first, so that it keeps the one set."""
    make = getattr(collator, "create_rng", None)
    if decoded is None:
        if callable(make):
            collator.generator = None  # made again from the seed (+ worker id) at its next batch
        return
    kind, value = decoded
    if callable(make):
        make("pt" if kind == "torch" else "np")
    gen = getattr(collator, "generator", None)
    if kind == "torch" and isinstance(gen, torch.Generator):
        gen.set_state(value)
    elif kind == "numpy" and isinstance(gen, np.random.Generator) and gen.bit_generator.state["bit_generator"] == "PCG64":
        gen.bit_generator.state = value
    else:
        raise ValueError(f"the state holds the collate_fn's {kind} generator, but its collator "
                         f"{type(collator).__name__} now has {type(gen).__name__}: was it built otherwise "
                         "(return_tensors)?")


def decode_worker_rng(entry: Any, where: str = "state 'rng'") -> tuple:
    """Check a dataset state's ``"rng"`` entry completely: the global generators (``"torch"``,
    ``"numpy"``, ``"random"``; a worker's) and/or the collator's generator (``"collator"``).
    Returns ``(globals decoded or None, (collator entry, decoded) or None)``."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be an object, got {type(entry).__name__}")
    extra = set(entry) - {*_GLOBAL_KEYS, "collator"}
    present = [k for k in _GLOBAL_KEYS if k in entry]
    if extra or (present and len(present) != 3) or not entry:
        raise ValueError(f"{where} must be an object with keys {list(_GLOBAL_KEYS)} and/or 'collator', "
                         f"got {sorted(entry)}")
    globals_ = decode_rng_state({k: entry[k] for k in _GLOBAL_KEYS}, where) if present else None
    collator = None
    if "collator" in entry:
        collator = (entry["collator"], decode_collator_entry(entry["collator"], f"{where} 'collator'"))
    return globals_, collator
