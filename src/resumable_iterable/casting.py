"""The HF features of a dataset's examples, changed as HF changes them: ``cast``, ``cast_column``,
``decode`` (media decoding on or off, in threads) and ``resolve_features`` (features inferred from
the first examples). A mixin of :class:`~resumable_iterable.dataset.IterableDataset`: each method
builds a typed dataset with the facade's ``_typed`` (a map of ``nodes/typed.py``'s
``ApplyFeatures``) or gives a source the new features, and chains it with ``_derive``."""

from __future__ import annotations

import copy
from typing import Any

from .features import check_feature_types, infer_features, map_feature, media_only_change
from .nodes.arrow import ArrowSource
from .nodes.arrow_batches import arrow_rooted
from .nodes.checks import as_int
from .nodes.files import FileSource
from .nodes.map import MapNode
from .nodes.typed import ApplyFeatures


class CastingMethods:
    """``cast``, ``cast_column``, ``decode`` and ``resolve_features`` of :class:`~resumable_iterable.dataset.IterableDataset`."""

    def cast(self, features: Any) -> Any:
        """Cast to new HF ``features``, applied to each example as HF does: the examples get the
        features' columns, in their order, a column the features add being ``None`` (as in HF's
        ``IterableDataset``); features lacking one of the dataset's known columns are refused. Where
        the columns are unknown (after a ``map``, from a generator), the examples get the features'
        columns only, as in HF. ``cast(None)``: the examples as they are, features unknown (as HF)."""
        from datasets import Features

        if features is None:  # as HF's IterableDataset: the examples as they are, their features unknown
            return self._derive(self._node.clone(), features=None, column_names=None)
        if not isinstance(features, dict):
            raise TypeError(f"cast: features must be a datasets.Features (or a dict of features), "
                            f"got {type(features).__name__}")
        features = features if isinstance(features, Features) else Features(features)
        check_feature_types(features, "cast")
        if self._column_names is not None:
            # a column the features add is None in every example, as in HF's IterableDataset; one they
            # lack would be dropped (HF raises CastError when iterating): refused here, from the call
            lacking = [c for c in self._column_names if c not in features]
            if lacking:
                raise ValueError(f"cast: the features lack the dataset's column(s) {lacking} (features' "
                                 f"columns {list(features)}): remove them first with remove_columns")
        return self._with_features(features)

    def cast_column(self, column: str, feature: Any) -> Any:
        """Cast one column to ``feature`` (e.g. ``Image(decode=False)``, ``ClassLabel(names=...)``)."""
        from datasets import Features

        check_feature_types({column: feature}, "cast_column")
        if self._features is not None:
            if column not in self._features:
                raise ValueError(f"cast_column: column {column!r} not in the dataset (columns: {list(self._features)})")
            features = Features({**self._features, column: feature})
        elif self._column_names is not None:
            raise ValueError(f"cast_column({column!r}) needs the dataset's features, which are unknown here "
                             "(e.g. after a map): use cast(features) with every column")
        else:  # columns unknown (e.g. from a generator): the other columns stay as they are
            return self._typed(Features({column: feature}), keep_other_columns=True)
        return self._with_features(features)

    def decode(self, enable: bool = True, num_threads: int | None = 0) -> Any:
        """Turn decoding of media features (``Image``, ``Audio``, ``Video``) on or off, as HF does.

        ``num_threads=n`` (> 0): the files are read undecoded and decoded by ``n`` threads, ``2 * n``
        examples at a time (as HF); the examples whose decoding is under way when a state is taken
        are kept in it, undecoded, and decoded again on resume."""
        threads = 0 if num_threads is None else as_int(num_threads, "num_threads", lo=0)
        if self._features is None:  # as HF: nothing says which columns to decode (a silent no-op would
            # leave images decoded after decode(False))
            raise ValueError("decode(): the dataset's features are unknown here (e.g. after a map), so which "
                             "columns to decode is unknown: set them with ds.cast(features) or map(..., features=...) "
                             "first, or call decode() before the map")
        from datasets import Features
        from datasets.features.features import require_decoding

        def with_decode(flag: bool) -> Any:
            def set_decode(feature: Any) -> Any:
                if hasattr(feature, "decode") and hasattr(feature, "__dataclass_fields__"):
                    feature = copy.copy(feature)  # as HF: set on a copy, whether or not `decode` is an __init__ field
                    feature.decode = flag
                return feature

            return Features({k: map_feature(v, set_decode) for k, v in self._features.items()})

        features = with_decode(enable)
        base, node, keep = self, self._node, False
        if isinstance(node, MapNode) and isinstance(node.function, ApplyFeatures):
            # the examples below that map are not decoded yet: decode them the new way there (as HF,
            # which applies its features once), not on top of the old decoding
            base, keep = self._derive(node.children[0], features=self._features), node.function.keep_other_columns
        if not (enable and threads) or not any(require_decoding(f) for f in features.values()):
            return base._with_features(features, keep)  # no threads, or nothing to decode
        below = base._with_features(with_decode(False), keep)
        apply = ApplyFeatures(features, keep_other_columns=keep, arrow_rows=arrow_rooted(below.pipeline))
        typed = MapNode(below.pipeline.clone(), apply, threads=threads)
        return below.derive(typed, features=features, column_names=list(features))

    def _with_features(self, features: Any, keep_other_columns: bool = False) -> Any:
        node = self._node
        if isinstance(node, (ArrowSource, FileSource)) and sorted(features) == sorted(node.features or {}):
            # a source decodes its own media columns: give it the new features when only
            # media features change, so no example is decoded and re-encoded
            if media_only_change(node.features, features):
                typed = self._derive(node.with_features(features), features=features, column_names=list(features))
                # the examples in the features' order, as HF's cast gives them (the source reads the file's)
                return typed if list(features) == list(node.features) else typed.select_columns(list(features))
        return self._typed(features, keep_other_columns)

    def resolve_features(self, n: int = 5) -> Any:
        """This dataset with ``features`` (and ``column_names``) known.

        Returns ``self`` when the features are known already; otherwise a dataset over the same
        pipeline whose features are inferred from its first ``n`` examples, read from a fresh copy
        of the pipeline (this dataset's iteration and state are untouched). This is what HF
        ``datasets`` does before ``interleave_datasets`` / ``concatenate_datasets``. If those
        examples cannot be read or typed in this process, ``self`` is returned unchanged.
        """
        if self._features is not None:
            return self
        features = infer_features(self._node.clone(), n)
        if features is None:
            return self
        return self._derive(self._node.clone(), features=features)
