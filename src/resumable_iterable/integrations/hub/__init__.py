"""``load_dataset``: data files of a local folder or a Hugging Face Hub dataset repo, one shard per file.

Supported formats: Parquet, Arrow IPC, JSON Lines, CSV (see :mod:`resumable_iterable.nodes.file_formats`).
One part of the story per module:

* ``repo.py`` - where the files are: a local folder, or a Hub repo (``"user/repo"``,
  ``hf://datasets/user/repo[@revision]/path``) pinned to one commit, read from the cache when
  offline;
* ``patterns.py`` - the ``data_files`` globs;
* ``card.py`` - the ``configs`` of the dataset card;
* ``splits.py`` - which files make which split (the Hugging Face ``datasets`` conventions);
* ``load.py`` - ``load_dataset`` itself: the files of each split as a pipeline;
* ``disk.py`` - ``load_from_disk``: a folder written by HF's ``save_to_disk``.
"""

from .disk import load_from_disk
from .load import load_dataset
from .patterns import match_files
from .repo import is_hub_repo_id, missing_path_message, parse_hf_path
from .splits import SPLIT_KEYWORDS, infer_splits, resolve_splits

__all__ = ["SPLIT_KEYWORDS", "infer_splits", "is_hub_repo_id", "load_dataset", "load_from_disk", "match_files", "missing_path_message",
           "parse_hf_path", "resolve_splits"]
