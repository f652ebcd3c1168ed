"""Iterating a dataset and its state, as the user calls them: ``__iter__``, ``iter(batch_size)``,
``ds["column"]``, ``state_dict`` / ``load_state_dict``, ``save_state`` / ``load_state``, ``epoch`` /
``set_epoch``. A mixin of :class:`~resumable_iterable.dataset.IterableDataset` that hands each of
them to the dataset's :class:`~resumable_iterable.loader.session.IterationSession`
(``loader/session.py``: the tree being iterated in this process, a loaded state, the DataLoader
worker, the epoch), and presents the examples in the dataset's format (``nodes/format_plan.py``).
The facade above it only builds and chains; nothing here builds a pipeline."""

from __future__ import annotations

import os
from typing import Any, Iterator

from . import state as _state
from .features import row_features
from .loader.session import IterationSession
from .nodes.base import Node
from .nodes.batch import BatchNode, rewinding
from .nodes.checks import as_epoch, as_int


class IterationMethods:
    """The iteration and state of :class:`~resumable_iterable.dataset.IterableDataset`, delegated to its session."""

    @property
    def __class__(self) -> type:
        # ``type(self)``. ``isinstance(ds, C)`` reads it when ``C`` is an ABC such as
        # ``torch.utils.data.IterableDataset``: a dataset built before torch was imported becomes a
        # torch dataset there, and gets what DataLoader workers share with the main process (the
        # epoch slot that ``set_epoch`` uses to reach persistent workers; the record of which
        # workers took their part of a loaded state) before ``DataLoader`` starts them.
        # (A comment, not a docstring: this is no part of the API reference.)
        session = self.__dict__.get("_session")
        if session is not None:
            session.prepare_for_workers()
        return type(self)

    @property
    def session(self) -> IterationSession:
        """This dataset's iteration in this process (``loader/session.py``): what ``__iter__``,
        ``state_dict`` and ``load_state_dict`` use, and what a DataLoader integration prepares."""
        return self._session

    def __iter__(self) -> Iterator[Any]:
        return self._session.iterating(self._present(self._session.pass_node()))

    def state_dict(self) -> dict:
        """A copy of the state: resume with :meth:`load_state_dict`. Plain dicts and lists, which
        ``json.dumps`` takes unless buffered examples hold values JSON cannot (numpy arrays, also
        lists of numbers read as arrays under ``with_format("numpy" | "torch")``; bytes, images):
        :meth:`save_state` / :func:`resumable_iterable.dumps_state` store those losslessly, and
        also the values ``json.dumps`` would change silently (tuples, non-string dict keys).

        Take it between examples: asked for while the dataset is producing one (from its own
        ``map`` function or generator, a signal handler that interrupted it, another thread) it
        raises ``RuntimeError``, since its nodes are then part-way through a step.

        Besides the node tree, the state records how this process's part was split from the whole
        dataset (``"split"``: ranks and DataLoader worker), which elastic resume uses. During an
        epoch resumed elastically (``resumable_iterable.StatefulDataLoader`` with another worker
        count, or :func:`resumable_iterable.redistribute_states`) the state is an *elastic plan*
        (see ``loader/plan.py``), which loads the same way.
        """
        return self._session.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        """Continue the next iteration right after the last example yielded when ``state_dict`` was taken.

        Accepts what :meth:`state_dict` returns (a plain state or an elastic plan). Raises
        ``ValueError`` (or ``TypeError``) before anything is changed if the state belongs to
        another pipeline or another rank / DataLoader worker, has an unknown version or is malformed.
        """
        self._session.load_state_dict(state_dict)

    def save_state(self, path: str | os.PathLike) -> None:
        """Write ``state_dict()`` to a state file, atomically: JSON with a checksum, or a binary state
        file (JSON + raw checksummed data) when buffered examples hold large arrays or bytes."""
        _state.save_state(self.state_dict(), path)

    def load_state(self, path: str | os.PathLike) -> None:
        """Load a state file written by :meth:`save_state`."""
        self.load_state_dict(_state.load_state(path))

    def iter(self, batch_size: int, drop_last_batch: bool = False) -> Iterator[Any]:
        """Iterate in batches of ``batch_size`` examples, in this dataset's format (HF ``iter``).

        Resumable like ``__iter__``: ``state_dict()`` taken between batches continues right after
        the last yielded batch, whether the next pass uses ``iter`` with the same ``batch_size`` or
        plain iteration. Arrow-backed datasets with a tensor or table format build the batches
        column-wise from Arrow slices, without a Python dict per example.
        """
        batch_size = as_int(batch_size, "batch_size", lo=1)
        node = self._session.pass_node()
        return self._session.iterating(rewinding(self._present(node, (batch_size, bool(drop_last_batch))), node))

    def _present(self, node: Node, batch: tuple | None = None) -> Iterator[Any]:
        from .nodes.format_plan import present

        # a pipeline ending in batch() may be wrapped when it is split by rank or resumed elastically:
        # its items are still batches
        rows = row_features(self._features) if isinstance(self._node, BatchNode) else self._features
        return iter(present(node, self._format, batch, template=self._node, features=rows,
                            resumed=self._session.resumes))

    def __getitem__(self, column: str) -> IterableColumn:
        """``ds["text"]`` iterates the values of one column (``ds["meta"]["source"]`` for nested ones)."""
        if not isinstance(column, str):
            raise TypeError(f"an IterableDataset is indexed by column name, got {column!r}")
        if self._column_names is not None and column not in self._column_names:
            raise KeyError(f"column {column!r} not in the dataset (columns: {self._column_names})")
        return IterableColumn(self, column)

    @property
    def epoch(self) -> int:
        return self._session.epoch

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch: it seeds the shard order and the shuffle buffer of the next fresh pass.

        Any integer type in [0, 2**63 - 1] (epochs seed the random generators and reach DataLoader
        workers as an ``int64``)."""
        self._session.set_epoch(as_epoch(epoch), by_user=True)


class IterableColumn:
    """The values of one column of an :class:`IterableDataset` (``ds["text"]``), as HF's
    ``IterableColumn``; index it again for a nested column (``ds["meta"]["source"]``)."""

    def __init__(self, source: Any, column_name: str):
        self.source = source
        self.column_name = column_name

    def __iter__(self) -> Iterator[Any]:
        name = self.column_name
        for example in self.source:
            yield example[name]

    def __getitem__(self, column_name: str) -> IterableColumn:
        return IterableColumn(self, column_name)
