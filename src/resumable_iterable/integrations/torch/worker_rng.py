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

Users hand the collator over in many shapes (``lambda b: collator(b)``, a closure, a bound method
of their own class, a callable object holding it, a ``torch`` / numpy ``Generator`` of their own):
:func:`find_generators` looks for them once, when the loader is built, without calling anything,
and every generator it finds is saved (several: ``"collator": {"several": [entry or null, ...]}``).
Generators found that cannot be saved, and any found with ``save_worker_rng=False``, are named in
a :class:`CollatorRngWarning`: a resume would otherwise draw differently in silence.
"""

from __future__ import annotations

import base64
import math
import os
import random
import warnings
from typing import Any

import numpy as np
import torch

from ...nodes.checks import check_rng
from .collator_search import NESTED, Slot, describe, find_generators

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
class CollatorRngWarning(UserWarning):
    """A ``collate_fn`` draws from a random generator of its own that is not saved with the data
    state: after a resume its draws differ from the uninterrupted run's."""


def _encode(gen: Any, cache: list, i: int) -> dict | None:
    """The entry of one generator (``None``: none made yet)."""
    if isinstance(gen, torch.Generator):
        raw = gen.get_state().numpy().tobytes()
        if cache[i][0] != raw:
            cache[i] = (raw, _b64(raw))
        return {"torch": cache[i][1]}
    if isinstance(gen, np.random.Generator):
        st = gen.bit_generator.state
        if st.get("bit_generator") != "PCG64":
            raise TypeError(f"save_worker_rng: the collate_fn's numpy generator is a {st.get('bit_generator')}; "
                            "only PCG64 (np.random.default_rng) can be saved")
        return {"numpy": {"bit_generator": "PCG64", "state": dict(st["state"]),
                          "has_uint32": int(st["has_uint32"]), "uinteger": int(st["uinteger"])}}
    return None


class CollatorRng:
    """A ``collate_fn`` that draws from generators of its own (:func:`find_generators`): :meth:`state`
    gives their entry, :meth:`load` sets one back before the next batch.

    The entry is that of the generators as they stand in this process after the batches collated
    here; a collate_fn that has not collated in this process yet has none (a collator would start
    from its seed). A state loaded (:meth:`load`) is set just before the next batch in this
    process - a collator may make its generator only then - and until then :meth:`state` gives it.
    One generator: ``{"torch": ...}`` or ``{"numpy": ...}``; several: ``{"several": [entry or
    null, ...]}`` in the order :func:`find_generators` gives them."""

    def __init__(self, collate_fn: Any, found: Any):
        self.collate_fn = collate_fn
        if not isinstance(found, list):  # a collator given alone
            found = [("collator", Slot(found, None, "fixed", describe(found)))]
        self.targets: list[tuple[str, Slot]] = found
        self._drew_in: int | None = None  # the process in which the collate_fn last collated
        self._loaded: tuple | None = None  # (process, entry, decoded): loaded, not set yet
        self._then: tuple | None = None  # (process, decoded): set after the next batch (:meth:`after_next_batch`)
        self._instead: tuple | None = None  # (process, entry, decoded): set before the next batch (:meth:`before_next_batch`)
        self._cache: list = [(None, None)] * len(found)  # per generator: (raw state, base64) last encoded

    @property
    def collator(self) -> Any:
        """The first collator (or generator) found."""
        return self.targets[0][1].get()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        pid = os.getpid()
        loaded, instead = self._loaded, self._instead
        if loaded is not None or instead is not None:
            self._loaded = self._instead = None
            if instead is not None and instead[0] == pid:
                _set_generators(self.targets, instead[2])
            elif loaded is not None and loaded[0] == pid:
                _set_generators(self.targets, loaded[2])
        self._drew_in = pid
        then = self._then
        if then is None:
            return self.collate_fn(*args, **kwargs)
        try:
            return self.collate_fn(*args, **kwargs)
        finally:
            self._then = None
            if then[0] == pid:
                _set_generators(self.targets, then[1])

    def state(self) -> dict | None:
        """The ``"collator"`` entry of this process now, or ``None`` (see the class doc)."""
        pid = os.getpid()
        for pending in (self._instead, self._loaded):
            if pending is not None and pending[0] == pid:
                return pending[1]
        if self._drew_in != pid:
            return None
        entries = []
        for i, (kind, slot) in enumerate(self.targets):
            obj = slot.get()
            entries.append(_encode(getattr(obj, "generator", None) if kind == "collator" else obj, self._cache, i))
        if len(entries) == 1:
            return entries[0]
        return None if all(e is None for e in entries) else {"several": entries}

    def check(self, decoded: Any) -> None:
        """Refuse (``ValueError``) a decoded entry for another number of generators than this
        collate_fn's, before anything of the state is applied."""
        _match(self.targets, decoded)

    def load(self, entry: dict | None, decoded: Any) -> None:
        """Set the generators to ``entry`` (checked: ``decoded``) before the next batch in this
        process; ``None``: a collator makes its generator again from its seed then (a generator
        held directly is left as it is)."""
        _match(self.targets, decoded)
        self._loaded = (os.getpid(), entry, decoded)

    def before_next_batch(self, entry: dict, decoded: Any) -> None:
        """Set the generators to ``entry`` (checked: ``decoded``) just before the next batch in
        this process, whatever state is loaded in between (the Trainer without workers: the
        generators when the checkpoint was saved, an evaluation's draws included)."""
        _match(self.targets, decoded)
        self._instead = (os.getpid(), entry, decoded)

    def after_next_batch(self, decoded: Any) -> None:
        """Set the generators to ``decoded`` once the collate_fn has collated its next batch in
        this process (the Trainer without workers: accelerate had collated that batch ahead before
        the evaluation, which may collate with the same collator, and the checkpoint)."""
        _match(self.targets, decoded)
        self._then = (os.getpid(), decoded)

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d["_cache"] = [(None, None)] * len(self.targets)
        return d

    def __repr__(self) -> str:
        return f"CollatorRng({self.collate_fn!r})"


def _existing(collate_fn: Any) -> CollatorRng | None:
    obj = collate_fn
    for _ in range(8):
        if obj is None or isinstance(obj, CollatorRng):
            break
        obj = next((getattr(obj, a) for a in NESTED if getattr(obj, a, None) is not None), None)
    return obj if isinstance(obj, CollatorRng) else None


def wrap_collator(collate_fn: Any, where: str = "StatefulDataLoader") -> CollatorRng | None:
    """``collate_fn`` wrapped in a :class:`CollatorRng` when it draws from generators of its own
    (:func:`find_generators`); ``None`` otherwise (nothing to save). A ``collate_fn`` that holds a
    :class:`CollatorRng` already (a loader of ours made with ``save_worker_rng=True``) gives that
    one. Generators found that cannot be saved are named in a :class:`CollatorRngWarning`."""
    existing = _existing(collate_fn)
    if existing is not None:
        return existing
    found, unsaved = find_generators(collate_fn, (CollatorRng,))
    if unsaved:
        warnings.warn(f"{where}: save_worker_rng=True cannot save what the collate_fn {describe(collate_fn)} draws "
                      f"from: {'; '.join(unsaved)}. After a resume its draws differ from the uninterrupted run's.",
                      CollatorRngWarning, stacklevel=3)
    return CollatorRng(collate_fn, found) if found else None


def warn_unsaved_collator(collate_fn: Any, where: str, fix: str) -> None:
    """With ``save_worker_rng=False``: a :class:`CollatorRngWarning` when ``collate_fn`` draws from a
    seeded generator of its own (:func:`find_generators`), which is then not saved."""
    if collate_fn is None or _existing(collate_fn) is not None:
        return
    found, _ = find_generators(collate_fn, (CollatorRng,))
    if found:
        name = describe(collate_fn)
        paths = ", ".join(slot.path for _, slot in found if slot.path != name)
        warnings.warn(f"{where}: the collate_fn {name} draws from a random generator of its own"
                      f"{f' ({paths})' if paths else ''}, which save_worker_rng=False does not save with the data "
                      f"state: after a resume "
                      f"its draws (an MLM collator's masks) start again from its seed and differ from the "
                      f"uninterrupted run's. {fix}", CollatorRngWarning, stacklevel=3)


def decode_collator_entry(entry: Any, where: str) -> tuple:
    """Check a ``"collator"`` entry; return what :func:`_set_generators` sets."""
    if isinstance(entry, dict) and set(entry) == {"several"}:
        items = entry["several"]
        if not isinstance(items, list) or len(items) < 2:
            raise ValueError(f"{where} 'several' must be a list of two or more entries (or nulls)")
        return ("several", [None if e is None else _decode_one(e, f"{where} 'several' [{i}]")
                            for i, e in enumerate(items)])
    return _decode_one(entry, where)


def _decode_one(entry: Any, where: str) -> tuple:
    if not isinstance(entry, dict) or len(entry) != 1 or next(iter(entry)) not in ("torch", "numpy"):
        got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise ValueError(f"{where} must be an object with one key, 'torch' or 'numpy' (or 'several'), got {got}")
    if "torch" in entry:
        raw = _unb64(entry["torch"], _TORCH_BYTES, f"{where} 'torch'")
        return ("torch", torch.frombuffer(bytearray(raw), dtype=torch.uint8))
    check_rng(entry["numpy"], where, "numpy")
    return ("numpy", entry["numpy"])


def _match(targets: list, decoded: tuple | None) -> list:
    """``decoded`` as one decoded entry (or ``None``) per generator of ``targets``."""
    if decoded is None:
        return [None] * len(targets)
    got = decoded[1] if decoded[0] == "several" else [decoded]
    if len(got) != len(targets):
        raise ValueError(f"the state holds {len(got)} generator(s) of the collate_fn, but it now draws from "
                         f"{len(targets)} ({', '.join(slot.path for _, slot in targets)}): was it built otherwise?")
    return got


def _set_generators(targets: list, decoded: tuple | None) -> None:
    for (kind, slot), d in zip(targets, _match(targets, decoded)):
        obj = slot.get()
        if kind == "collator":
            _set_generator(obj, d)
        elif d is not None:
            _set_state(obj, d, slot.path)


def _set_state(gen: Any, decoded: tuple, what: str) -> None:
    kind, value = decoded
    if kind == "torch" and isinstance(gen, torch.Generator):
        gen.set_state(value)
    elif kind == "numpy" and isinstance(gen, np.random.Generator) and gen.bit_generator.state["bit_generator"] == "PCG64":
        gen.bit_generator.state = value
    else:
        raise ValueError(f"the state holds the collate_fn's {kind} generator, but {what} "
                         f"now has {type(gen).__name__}: was it built otherwise (return_tensors)?")


def _set_generator(collator: Any, decoded: tuple | None) -> None:
    """Give ``collator`` the generator state ``decoded`` (``None``: its seed's, made at its next
    batch). A collator with ``create_rng`` (transformers') makes its generator for this process
    with it first, so that it keeps the one set."""
    make = getattr(collator, "create_rng", None)
    if decoded is None:
        if callable(make):
            collator.generator = None  # made again from the seed (+ worker id) at its next batch
        return
    kind, _ = decoded
    if callable(make):
        make("pt" if kind == "torch" else "np")
    _set_state(getattr(collator, "generator", None), decoded, f"its collator {type(collator).__name__}")


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
