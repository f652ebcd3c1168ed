"""Per-example functions the facade runs through an ordinary per-example ``map`` node, so that
they get everything a map has (exactness at every cut point, worker/rank splits, elastic
resume, replay and global-shuffle support) without a node kind of their own:

* :class:`ApplyFeatures` - HF ``features`` applied to an example the way HF ``datasets`` applies
  them (``cast``, ``cast_column``, ``decode``, ``from_generator(features=...)``): a column the
  example lacks is filled with ``None``, then the example is encoded with the features (e.g. a
  ``ClassLabel`` name becomes its id, ``Value("float32")`` turns ints into floats) and decoded
  (e.g. ``Image()`` bytes become a PIL image, unless ``decode=False``); a column the features
  lack is dropped. Each value is first given what HF's Arrow cast gives it (or refused as that
  cast refuses it) by the checks of ``value_checks.py``, built once per column.
* :class:`AddColumn` - ``add_column(name, column)``: value ``column[index]`` for example ``index``.

Both are plain picklable objects (DataLoader workers receive them).
"""

from __future__ import annotations

from typing import Any

from .value_checks import class_ids, feature_check, time_check


def _audio_storage(value: Any) -> dict | None:
    """The ``{bytes, path}`` that HF's ``Audio`` stores for a file path, the file's bytes or such a
    dict (what its Arrow cast gives, and its ``encode_example`` when ``torchcodec`` is installed),
    or ``None`` for a value only ``Audio.encode_example`` encodes (an array, a decoder, a PCM file).
    Computed here because that method needs ``torchcodec`` for every value, where HF's Arrow cast
    of paths and bytes needs nothing (``cast_column(..., Audio(decode=False))`` without it)."""
    import os

    if isinstance(value, str):
        return {"bytes": None, "path": value}
    if isinstance(value, os.PathLike):
        return {"bytes": None, "path": os.path.abspath(os.fspath(value))}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": value, "path": None}
    if isinstance(value, dict) and value.keys() <= {"bytes", "path"}:
        path = value.get("path")
        if isinstance(path, str) and path.endswith("pcm"):
            return None
        if path is not None and os.path.isfile(path):
            return {"bytes": None, "path": path}
        if value.get("bytes") is not None or path is not None:
            return {"bytes": value.get("bytes"), "path": path}
    return None


class ApplyFeatures:
    keeps_arrow_rows = True  # HF's cast stays on its Arrow path (``arrow_batches.arrow_rooted``)

    def __init__(self, features: Any, json_text: tuple = (), keep_other_columns: bool = False,
                 arrow_rows: bool = False):
        self.features = features
        #: the rows come from Arrow-backed sources through nodes HF keeps on its Arrow path: HF's
        #: Arrow cast keeps a ``ClassLabel`` id out of the labels' range, where its Python encoding
        #: (a generator, after a map) raises ``ValueError``
        self.arrow_rows = bool(arrow_rows)
        #: columns cast from HF's ``Json`` to a string: their values become their JSON text, as
        #: HF's Arrow cast of the JSON text storage gives (not Python's ``str`` of a dict)
        self.json_text = tuple(json_text)
        #: keep the columns the features lack (``cast_column`` of a dataset whose columns are unknown)
        self.keep_other_columns = bool(keep_other_columns)
        self._checks: dict | None = None
        self._times: list = []  # the columns of time ``Value`` s (with ``_checks``)
        self._audio: dict | None = None  # the ``Audio`` columns, and features without them

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_checks": None, "_times": [], "_audio": None}

    def checks(self) -> dict:
        """column -> the check of the numbers (and times) its feature holds (see :func:`feature_check`)."""
        if self._checks is None:
            ids = getattr(self, "arrow_rows", False)  # (unpickled from an earlier release: without it)
            found = ((name, feature_check(name, f, ids)) for name, f in self.features.items())
            self._checks = {name: check for name, check in found if check is not None}
            self._times = [name for name, f in self.features.items() if time_check(name, f) is not None]
        return self._checks

    def __call__(self, example: dict) -> None:
        features = self.features
        for name in features:
            if name not in example:
                example[name] = None
        if self.json_text:
            from datasets.utils.json import ujson_dumps

            for name in self.json_text:
                if example[name] is not None:
                    example[name] = ujson_dumps(example[name])
        for name, check in self.checks().items():  # before encoding: HF's encoding truncates floats to ints
            v = example[name]
            if v is not None:
                example[name] = check(v)
        try:
            encoded = self._encode(example)
        except (TypeError, ValueError, KeyError) as e:
            raise type(e)(self._which(example, e)) from e
        decoded = features.decode_example(encoded)
        for name in self._times:  # the cast's value: encoding makes a pandas Timestamp (ns) a datetime
            decoded[name] = example[name]
        # the example becomes the features' columns, in their order, and nothing else (as HF: a cast
        # of a dataset whose columns are unknown, e.g. after a map, keeps only the features' columns).
        # Edited in place and returned as None: a map keeps such an example as it is, where a
        # returned dict would go onto the example's other columns
        if not self.keep_other_columns:
            example.clear()
        example.update(decoded)
        return None

    def _encode(self, example: dict) -> dict:
        """``features.encode_example(example)``, with the paths and bytes of ``Audio`` columns
        encoded by :func:`_audio_storage` (as HF's Arrow cast does)."""
        features = self.features
        if self._audio is None:
            if getattr(self, "arrow_rows", False):  # the ids are checked (``checks``), not encoded again
                features = class_ids(features)
            audio = [name for name, f in features.items() if type(f).__name__ == "Audio"]
            self._audio = {"columns": audio, "features": features,
                           "rest": type(features)({k: f for k, f in features.items() if k not in audio})}
        features = self._audio["features"]
        stored = {}
        for name in self._audio["columns"]:
            value = _audio_storage(example[name])
            if value is None and example[name] is not None:
                return features.encode_example(example)  # HF's encoder (torchcodec) for this value
            stored[name] = value
        if not stored:
            return features.encode_example(example)
        encoded = self._audio["rest"].encode_example(example)
        return {name: stored[name] if name in stored else encoded[name] for name in features}

    def _which(self, example: dict, error: Exception) -> str:
        """``error`` of encoding ``example``, naming the column whose value does not fit its feature."""
        from datasets.features.features import encode_nested_example

        features = self._audio["features"] if self._audio is not None else self.features  # as encoded
        for name, feature in features.items():
            value = example.get(name)
            if type(feature).__name__ == "Audio" and _audio_storage(value) is not None:
                continue  # encoded without HF's encoder (see ``_encode``)
            try:
                encode_nested_example(feature, value)
            except Exception:  # noqa: BLE001 - this column is the one
                shown = repr(value)
                shown = shown if len(shown) <= 80 else shown[:77] + "..."
                return f"cast: column {name!r}: value {shown} does not fit {feature}: {error}"
        return f"cast: {error}"

    def __repr__(self) -> str:
        return f"ApplyFeatures({list(self.features)})"


class AddColumn:
    def __init__(self, name: str, column: Any):
        self.name = name
        self.column = column

    def __call__(self, example: dict, index: int) -> dict:
        if self.name in example:
            raise ValueError(f"add_column: column {self.name!r} is already in the dataset")
        try:
            value = self.column[index]
        except IndexError:
            raise IndexError(f"add_column({self.name!r}): the column has {len(self.column)} values but the dataset "
                             f"has more examples (example #{index})") from None
        return {self.name: value}

    def __repr__(self) -> str:
        return f"AddColumn({self.name!r})"
