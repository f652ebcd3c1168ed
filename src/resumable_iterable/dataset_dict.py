"""``IterableDatasetDict``: a ``dict`` of split name -> :class:`~resumable_iterable.IterableDataset`,
what ``load_dataset(..., split=None)`` and the ``from_<format>({split: files})`` readers return, as
HF ``datasets.IterableDatasetDict`` (``load_dataset(..., streaming=True)``).

Its methods are HF's: ``map`` (also ``with_split=``), ``filter``, ``shuffle``, ``with_format``,
``remove_columns``, ``rename_column(s)``, ``select_columns``, ``cast``, ``cast_column``, the
``column_names`` / ``num_columns`` dicts and ``push_to_hub`` (every split in one commit). Each calls
the same method of every split with the same arguments and returns a new ``IterableDatasetDict`` of
the results: the dict only builds and chains, as the facade does.

A dict has no state of its own, as in HF: each split is a dataset with its own ``state_dict()`` /
``load_state_dict()`` (checkpoint the split you train on, ``ds["train"]``, or a dict of its
states). Asking the dict for one raises an ``AttributeError`` that says so.

The values are told apart from other objects (a HF dataset, say) by their iteration session
(``loader/session.py``), which every :class:`~resumable_iterable.IterableDataset` has: the file
readers build these dicts, so this module cannot import the dataset module built on them.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable

from . import export
from .loader.session import IterationSession

#: HF's rule for the split names of a pushed dataset (``datasets.splits``' ``_split_re``)
_SPLIT_NAME = re.compile(r"^\w+(\.\w+)*$")

#: what a dataset has and the dict has not: each split has its own
_PER_SPLIT = ("state_dict", "load_state_dict", "save_state", "load_state", "set_epoch", "epoch")


class _WithSplit(functools.partial):
    """``function`` called with the split's name after its other positional arguments (HF's
    ``map(with_split=True)``); a ``functools.partial`` so that an async function stays one for
    ``inspect.iscoroutinefunction``, and picklable for DataLoader workers.

    The split is the last of ``self.args``: a ``function`` that is itself a ``functools.partial`` is
    merged into this one by ``functools.partial`` (its function, then its arguments before the
    split, its keywords in ``self.keywords``), and is called as it would be - its arguments first,
    its keywords kept. (HF's ``bind`` drops them and puts its arguments after the example.)

    It answers to the function's ``__qualname__``, so that an error's note and ``inspect`` name
    the user's function (``map(tokenize)``), not this wrapper and its address."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _WithSplit:
        self = super().__new__(cls, *args, **kwargs)
        self.__qualname__ = getattr(self.func, "__qualname__", type(self.func).__name__)
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        *bound, split = self.args
        return self.func(*bound, *args, split, **{**self.keywords, **kwargs})


class IterableDatasetDict(dict):
    """A ``dict`` of split name -> :class:`~resumable_iterable.IterableDataset` with HF
    ``IterableDatasetDict``'s methods, each applied to every split (a new dict is returned)."""

    def _check_values_type(self) -> None:
        for name, dataset in self.items():
            if not isinstance(getattr(dataset, "session", None), IterationSession):
                raise TypeError(f"IterableDatasetDict: split {name!r} is a {type(dataset).__module__}."
                                f"{type(dataset).__qualname__}, not a resumable_iterable.IterableDataset")

    def _check_values_features(self) -> None:
        """Every split has the same features (read from a few examples where they are unknown), as HF
        checks before a push."""
        found = [(name, dataset.resolve_features().features) for name, dataset in self.items()]
        for (a, fa), (b, fb) in zip(found[:-1], found[1:]):
            if fa != fb:
                raise ValueError(f"the splits of an IterableDatasetDict should have the same features to be pushed "
                                 f"together; {a!r} and {b!r} differ: {fa} != {fb}")

    def __getattr__(self, name: str) -> Any:
        # only reached for a name the dict lacks: say where a dataset's own state is
        if name in _PER_SPLIT:
            first = next(iter(self), "train")
            raise AttributeError(f"'IterableDatasetDict' object has no attribute {name!r}: each split has its own "
                                 f"(ds[{first!r}].{name}), as in HF datasets")
        raise AttributeError(f"'IterableDatasetDict' object has no attribute {name!r}")

    def __repr__(self) -> str:
        body = "\n".join(f"{k}: {v}" for k, v in self.items())
        body = re.sub(r"^", " " * 4, body, flags=re.M)
        return f"IterableDatasetDict({{\n{body}\n}})"

    @property
    def num_columns(self) -> dict[str, int | None]:
        """The number of columns of each split (``None`` where unknown, e.g. after a ``map``)."""
        self._check_values_type()
        return {k: dataset.num_columns for k, dataset in self.items()}

    @property
    def column_names(self) -> dict[str, list[str] | None]:
        """The column names of each split (``None`` where unknown, e.g. after a ``map``)."""
        self._check_values_type()
        return {k: dataset.column_names for k, dataset in self.items()}

    def _each(self, method: str, **kwargs: Any) -> IterableDatasetDict:
        return IterableDatasetDict({k: getattr(dataset, method)(**kwargs) for k, dataset in self.items()})

    def with_format(self, type: str | None = None, **format_kwargs: Any) -> IterableDatasetDict:
        """Every split in format ``type`` (see :meth:`IterableDataset.with_format`)."""
        return self._each("with_format", type=type, **format_kwargs)

    def map(self, function: Callable | None = None, with_indices: bool = False, with_split: bool = False,
            input_columns: Any = None, batched: bool = False, batch_size: int | None = 1000,
            drop_last_batch: bool = False, remove_columns: Any = None, fn_kwargs: dict | None = None, *,
            features: Any = None) -> IterableDatasetDict:
        """``map`` on every split (see :meth:`IterableDataset.map`). ``with_split=True`` passes the
        split's name to ``function`` after its other positional arguments (the example or batch, the
        input columns, the indices), as HF. ``features`` (keyword only; not in HF's dict ``map``): the
        features of the mapped examples, as for one dataset."""
        out = {}
        for k, dataset in self.items():
            fn = _WithSplit(function, k) if with_split else function
            out[k] = dataset.map(function=fn, with_indices=with_indices, input_columns=input_columns, batched=batched,
                                 batch_size=batch_size, drop_last_batch=drop_last_batch,
                                 remove_columns=remove_columns, features=features, fn_kwargs=fn_kwargs)
        return IterableDatasetDict(out)

    def filter(self, function: Callable | None = None, with_indices: bool = False, input_columns: Any = None,
               batched: bool = False, batch_size: int | None = 1000, fn_kwargs: dict | None = None) -> IterableDatasetDict:
        """``filter`` on every split (see :meth:`IterableDataset.filter`)."""
        return self._each("filter", function=function, with_indices=with_indices, input_columns=input_columns,
                          batched=batched, batch_size=batch_size, fn_kwargs=fn_kwargs)

    def shuffle(self, seed: int | None = None, generator: Any = None, buffer_size: int | None = 1000,
                max_buffer_input_shards: int = 1, buffer_state: str = "examples",
                worker_positions: bool = True) -> IterableDatasetDict:
        """``shuffle`` on every split, each with the same ``seed`` (or seed drawn from a copy of
        ``generator``), as HF; see :meth:`IterableDataset.shuffle` for the options (and their defaults,
        ``max_buffer_input_shards=1`` where HF's is 10)."""
        return self._each("shuffle", seed=seed, generator=generator, buffer_size=buffer_size,
                          max_buffer_input_shards=max_buffer_input_shards, buffer_state=buffer_state,
                          worker_positions=worker_positions)

    def rename_column(self, original_column_name: str, new_column_name: str) -> IterableDatasetDict:
        return self._each("rename_column", original_column_name=original_column_name, new_column_name=new_column_name)

    def rename_columns(self, column_mapping: dict[str, str]) -> IterableDatasetDict:
        return self._each("rename_columns", column_mapping=column_mapping)

    def remove_columns(self, column_names: str | list[str]) -> IterableDatasetDict:
        return self._each("remove_columns", column_names=column_names)

    def select_columns(self, column_names: str | list[str]) -> IterableDatasetDict:
        return self._each("select_columns", column_names=column_names)

    def cast_column(self, column: str, feature: Any) -> IterableDatasetDict:
        return self._each("cast_column", column=column, feature=feature)

    def cast(self, features: Any) -> IterableDatasetDict:
        return self._each("cast", features=features)

    def push_to_hub(self, repo_id: str, config_name: str = "default", set_default: bool | None = None,
                    data_dir: str | None = None, commit_message: str | None = None,
                    commit_description: str | None = None, private: bool | None = None, token: str | None = None,
                    revision: str | None = None, create_pr: bool | None = False, max_shard_size: Any = None,
                    num_shards: dict[str, int] | None = None, embed_external_files: bool = True,
                    num_proc: int | None = None) -> Any:
        """Upload every split to the Hub as Parquet files with one dataset card, in one commit, as HF
        (``export.py``). HF's checks come first, before anything is read: not both ``max_shard_size``
        and ``num_shards``, ``num_shards`` a dict ``{split: n}``, splits of the same features, no
        ``config_name="data"``, split names of word characters and dots. Without ``max_shard_size``,
        a split not in ``num_shards`` gets as many files as it has shards."""
        if max_shard_size is not None and num_shards is not None:
            raise ValueError("Failed to push_to_hub: please specify either max_shard_size or num_shards, but not both.")
        if num_shards is not None and not isinstance(num_shards, dict):
            raise ValueError("Please provide one `num_shards` per dataset in the dataset dictionary, "
                             "e.g. {'train': 128, 'test': 4}")
        self._check_values_type()
        self._check_values_features()
        if config_name == "data":
            raise ValueError("`config_name` cannot be 'data'. Please, choose another name for configuration.")
        for split in self:
            if not _SPLIT_NAME.match(split):
                raise ValueError(f"Split name should match '{_SPLIT_NAME.pattern}' but got '{split}'.")
        return export.push_splits_to_hub(dict(self), repo_id, config_name=config_name, set_default=set_default,
                                         data_dir=data_dir, commit_message=commit_message,
                                         commit_description=commit_description, private=private, token=token,
                                         revision=revision, create_pr=create_pr, max_shard_size=max_shard_size,
                                         num_shards=num_shards, embed_external_files=embed_external_files,
                                         num_proc=num_proc)
