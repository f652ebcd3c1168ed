"""Per-example functions the facade runs through an ordinary per-example ``map`` node, so that
they get everything a map has (exactness at every cut point, worker/rank splits, elastic
resume, replay and global-shuffle support) without a node kind of their own:

* :class:`ApplyFeatures` - HF ``features`` applied to an example the way HF ``datasets`` applies
  them (``cast``, ``cast_column``, ``decode``, ``from_generator(features=...)``): a column the
  example lacks is filled with ``None``, then the example is encoded with the features (e.g. a
  ``ClassLabel`` name becomes its id, ``Value("float32")`` turns ints into floats) and decoded
  (e.g. ``Image()`` bytes become a PIL image, unless ``decode=False``).
* :class:`AddColumn` - ``add_column(name, column)``: value ``column[index]`` for example ``index``.

Both are plain picklable objects (DataLoader workers receive them).
"""

from __future__ import annotations

from typing import Any


class ApplyFeatures:
    def __init__(self, features: Any):
        self.features = features

    def __call__(self, example: dict) -> dict:
        features = self.features
        for name in features:
            if name not in example:
                example[name] = None
        return features.decode_example(features.encode_example(example))

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
