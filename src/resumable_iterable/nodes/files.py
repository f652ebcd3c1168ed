"""Source over data files, one file per shard: Parquet, Arrow IPC, JSON Lines, CSV, text.

Resuming seeks instead of re-reading where the format allows it:

* Parquet - the row groups before the saved offset are skipped using the file metadata;
  only the row group holding the offset is decoded.
* Arrow IPC (file or stream format) - memory-mapped, sliced at the offset without a copy.
* JSON Lines / CSV - parsed whole and sliced at the offset (no Python objects are built for the
  rows before the offset). CSV is read as HF's csv builder reads it (pandas' ``read_csv``: empty
  fields are nulls, dates stay strings; ``reader_kwargs`` are pandas' and HF's ``sep``,
  ``column_names``...), or with pyarrow's reader when pyarrow options (``read_options``,
  ``parse_options``, ``convert_options``) are given; JSON Lines with pyarrow's. A JSON file that is one
  document - a list of objects, or an object whose ``field`` (a reader option, as in HF) holds
  them - is read as HF's json builder reads it (pandas' ``read_json``).
* text - one ``{"text": ...}`` row per line (or paragraph, or file), as HF's ``text`` builder
  reads them (``reader_kwargs``: ``sample_by``, ``keep_linebreaks``, ``encoding``,
  ``encoding_errors``, ``chunksize``); read a chunk at a time, the lines before the offset
  counted, not converted. Only chosen explicitly (``load_dataset("text", ...)``, ``format="text"``):
  a ``.txt`` file in a dataset folder is not taken for data.

Text formats may be compressed (``.gz``, ``.bz2``, ``.xz``, ``.zst`` after the extension), as in HF.
JSON, CSV and text files may be inside zip archives, an archive a shard whose members are read one
after another (``archives.py``), as HF's streaming readers read them.
A malformed JSON Lines file names its first bad line. Parquet, Arrow and JSON Lines files follow
the first file's columns (``_aligned``), as HF casts every file to the first one's features (JSON:
``schema_from``, the first file of the first split, for the files of every split). How
each format is opened and parsed is ``file_formats.py`` (JSON files: ``json_files.py``); this module
is the source node: its parameters, shards, state and the names it digests, naming a shard's file.
Its mixins: reading a shard from an offset (and given rows of it) is ``file_reading.py``, the
columns every file follows ``file_columns.py``, the members of zip archives ``archives.py``,
reading Parquet and Arrow files at random positions, for the global shuffle, ``file_access.py``.

``reshard()`` (:meth:`FileSource.resharded`) makes each row group of Parquet files a shard of its
own, as HF's ``IterableDataset.reshard``: more DataLoader workers and ranks than files then all
read. A shard is then ``pieces[shard_id] = (file, row group, rows)``, and ``files`` also digests
the row groups' sizes (a file rewritten with other row groups holds other rows under a position).

A file that vanished, or that now has fewer rows than the state says were read, raises a
``ValueError`` naming the file instead of silently skipping data. The state also holds a digest
of the files' names in shard order (``files``, see :func:`names_digest`): a state loads only into
a source over the same names in the same order, since positions count files by their place (a
list given in another order, as ``glob.glob`` may give it on another machine, would re-read some
files and skip others). ``identity``, when given, is digested with the names: what else tells these
files' rows apart from those of files of the same names (HF ``save_to_disk`` folders all name their
files ``data-00000-of-0000N.arrow``; their ``_fingerprint`` is the identity).

The state's ``sizes``, ``[n, digest]``, digests the sizes of the files of the ``n`` shards before
``shard_pos`` (read to their end: rows added to or removed from one of them since would be skipped
or read twice), hashed one after another as each is finished (:meth:`FileSource.shards_read`, also
called by the column-wise batch path); Parquet files by the rows their metadata counts (written
again with other row groups, they hold the same rows), others by their size in bytes. ``n`` counts
back from ``shard_pos``, so a state that starts elsewhere (a carved elastic segment, a state without
``sizes``: of an earlier release, or removed to resume anyway) records from where it starts.
"""

from __future__ import annotations

import os
from typing import Any

from .file_formats import FORMATS, csv_options, parquet_options, text_options
from .json_files import json_options
from ..state import fingerprint as digest
from .file_access import RandomFileAccess
from .file_columns import FirstFileColumns
from .file_reading import ShardReading
from .archives import ArchiveReading, archive_members, digest_name, members_digest_names, split_member
from .checks import check_names
from .base import Node
from .source import SourceNode


def names_digest(paths: list[str]) -> str:
    """A short hash of the files' names in this order, each relative to the folder they all share,
    so that the same files moved to another folder or machine still match."""
    full = [os.path.abspath(p) for p in paths]
    try:
        root = os.path.commonpath([os.path.dirname(p) for p in full])
    except ValueError:  # paths on different drives share no folder
        return digest(full)
    # ``full`` is normalized: a path that starts with ``root`` and a separator is named by what
    # follows them, as ``os.path.relpath`` names it (which cost seconds for 100 000s of names)
    prefix = root if root.endswith(os.sep) else root + os.sep
    cut = len(prefix)
    if all(len(p) > cut and p.startswith(prefix) for p in full):
        return digest([p[cut:].replace(os.sep, "/") for p in full])
    return digest([os.path.relpath(p, root).replace(os.sep, "/") for p in full])


class FileSource(FirstFileColumns, ShardReading, ArchiveReading, RandomFileAccess, SourceNode):
    kind = "files"
    added_fields = frozenset(("files", "sizes"))  # absent from states of earlier releases
    json_text_columns: tuple = ()  # (also for sources pickled by earlier releases; see ``__init__``)
    json_given_columns: tuple | None = None

    def formats_as_arrow_rows(self) -> bool:  # capability (see ``Node``): HF keeps this kind on its Arrow path
        return True
    batch_rows = 1024

    def __init__(self, paths: list[str], format: str, shard_ids: list[int] | None = None,
                 reader_kwargs: dict | None = None, features: Any = None, schema_from: str | None = None,
                 identity: str | None = None):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        paths = [os.fspath(p) for p in paths]
        if not paths:
            raise ValueError("no data files given")
        if format not in FORMATS:
            raise ValueError(f"unknown file format {format!r}; expected one of {FORMATS}")
        self.paths = paths
        self.format = format
        self.reader_kwargs = dict(reader_kwargs or {})
        if format == "text":
            self.reader_kwargs = text_options(self.reader_kwargs)
        elif format == "json":
            self.reader_kwargs = json_options(self.reader_kwargs)
        elif format == "csv":
            csv_options(self.reader_kwargs)
        #: Parquet: the columns to read (``None``: all) and the rows to keep (a pyarrow expression)
        self.columns, self.filters, self._filter_columns = parquet_options(format, self.reader_kwargs)
        self._lengths: dict[int, int] = {}
        self._first: dict = {}  # "schema": the first file's (``_first_schema``), shared by the clones
        #: per data file, the members of a zip archive (``None``: a plain file); ``None``: no archive
        self.members = archive_members(paths, format)
        self.names_digest = names_digest([digest_name(p) for p in paths])  # before the fresh state, which holds it
        if self.members is not None:  # and the members of each archive, in their order
            self.names_digest = digest([self.names_digest, members_digest_names(self.members)])
        if identity is not None:  # what names the files' rows beyond their names (HF save_to_disk's fingerprint)
            self.names_digest = digest([self.names_digest, identity])
        #: JSON: where the features given hold HF's ``Json`` (``None``: found in the first file, as HF)
        self.json_paths: list | None = None
        #: JSON: the columns the features given type ``Value("string")``, whose objects are read as
        #: their JSON text, as HF's json builder converts them (``FirstFileColumns.json_features``)
        self.json_text_columns: tuple = ()
        #: JSON: the columns of the features given (``None``: none given), which every file follows
        self.json_given_columns: tuple | None = None
        #: another file whose columns these files follow (a zip: its first member), instead of the
        #: first of ``paths``: HF's json builder takes every split's from the first split's first file
        self.schema_from = None if schema_from is None else os.fspath(schema_from)
        #: ``None``: one file per shard; after ``resharded``: one Parquet row group per shard,
        #: ``(file, row group, rows)``
        self.pieces: list[tuple[int, int, int]] | None = None
        super().__init__(len(paths), shard_ids)
        self.set_features(features)  # media columns (Image, Audio...) are decoded as read, as HF does

    def params(self) -> dict:
        p = {**super().params(), "format": self.format}
        if self.pieces is not None:  # sorted before "shard_ids": a state of the files unsplit is refused naming it
            p["row_groups"] = "a shard each (reshard())"
        if self.columns is not None:
            p["columns"] = list(self.columns)
        if self.filters is not None:  # offsets count the rows kept
            p["filters"] = str(self.filters)
        if self.format == "text":  # what a row is: a state of lines does not fit paragraphs
            p.update(sample_by=self.reader_kwargs["sample_by"], keep_linebreaks=self.reader_kwargs["keep_linebreaks"])
        return p

    def _own_state(self) -> dict:
        return {**super()._own_state(), "files": self.names_digest, "sizes": [0, ""]}

    # ------------------------------------------------------------------ the sizes of the files read
    def _file_size(self, shard_id: int) -> int | list:
        """What tells a shard's file changed: the rows a Parquet file's metadata counts (a file written
        again with other row groups holds its rows at the same positions), the size in bytes of others."""
        try:
            if self.format == "parquet" and self.filters is None:
                return ["rows", self.shard_length(shard_id)]
            return os.stat(self.shard_file(shard_id)).st_size
        except (OSError, ValueError):  # gone or unreadable: nothing matches it
            return -1

    def _sizes_digest(self, order: list[int], first: int, stop: int, chain: str) -> str:
        for sid in order[first:stop]:
            chain = digest([chain, self._file_size(sid)])
        return chain

    def shards_read(self, order: list[int], first: int, stop: int) -> dict | None:
        # ``sizes`` = [n, chain]: the sizes of the files of the n shards before ``shard_pos``, hashed
        # one after another (a string, so copying a state stays cheap)
        sizes = self._state_dict.get("sizes")
        if not isinstance(sizes, list):  # (a source unpickled from an earlier release has none)
            return None
        return {"sizes": [sizes[0] + stop - first, self._sizes_digest(order, first, stop, sizes[1])]}

    def _check_sizes(self, state: dict, where: str) -> None:
        """Refuse a state whose files read to their end before it was saved changed size since: a
        row added to or removed from one of them would be skipped or read twice without a word."""
        sizes = state.get("sizes")
        if sizes is None:  # a state of an earlier release: unchecked
            return
        if (not isinstance(sizes, list) or len(sizes) != 2 or type(sizes[0]) is not int
                or not isinstance(sizes[1], str) or not 0 <= sizes[0] <= state["shard_pos"]):
            raise ValueError(f"{where}: 'sizes' must be [n, digest] with n in [0, shard_pos = {state['shard_pos']}], "
                             f"got {sizes!r}")
        n = sizes[0]
        if not n:
            return
        pos = state["shard_pos"]
        order = self.shard_order(state["shard_seed"], use_state=False)
        if self._sizes_digest(order, pos - n, pos, "") != sizes[1]:
            read = [self.shard_file(sid) for sid in order[pos - n:pos]]
            named = ("" if n == 1 else "one of ") + ", ".join(repr(f) for f in read[:3]) + (
                f", ... ({n} files)" if n > 3 else "")
            raise ValueError(f"{where}: a data file read to its end before the state was saved has another size "
                             f"now ({named}): rows were added to or removed from it (or it was replaced), "
                             "so resuming would skip or repeat rows of the new data without a word. Resume over "
                             "the files as they were, or start the pass again; to resume anyway, remove "
                             "'sizes' from this source's entry of the state")

    def _validate_own(self, state: dict, where: str) -> None:
        check_names(state, self.names_digest, where)  # before the offsets, which count its files
        super()._validate_own(state, where)
        self._check_sizes(state, where)

    def _load_own(self, state: dict) -> None:
        super()._load_own(state)
        if "sizes" not in state:  # unchecked: the shards read from here on are recorded
            self._state_dict["sizes"] = [0, ""]

    def resharded(self) -> Node:
        """A copy, from the start, with one shard per row group of its Parquet files (of the files
        it reads, in their order; empty row groups left out); other formats, or files whose row
        groups are no more shards than the files, are returned as they are (HF's ``reshard``)."""
        if self.format != "parquet" or self.pieces is not None:
            return self.clone()
        pieces = []
        for f in self.shard_ids:
            md = self._parquet(f).metadata
            pieces += [(f, g, md.row_group(g).num_rows) for g in range(md.num_row_groups) if md.row_group(g).num_rows]
        if len(pieces) <= len(self.shard_ids):
            return self.clone()
        new = self._with_shards(list(range(len(pieces))))
        new.total_shards, new.pieces, new._lengths = len(pieces), pieces, {}
        new.names_digest = digest([self.names_digest, [[f, g, n] for f, g, n in pieces]])
        new._state_dict = {}
        new._state_dict = new._fresh_state()
        return new

    # ------------------------------------------------------------------ naming a shard's file
    def shard_file(self, shard_id: int) -> str:
        """The data file shard ``shard_id`` reads (error notes name it)."""
        return self.paths[shard_id if self.pieces is None else self.pieces[shard_id][0]]

    def _where(self, shard_id: int, member: str | None = None) -> str:
        """The shard, for messages: its file (and row group, after ``resharded``; or archive member)."""
        if member is not None:
            return f"{split_member(member)[1]!r} in data file {self.paths[shard_id]!r} (shard {shard_id})"
        if self.pieces is None:
            return f"data file {self.paths[shard_id]!r} (shard {shard_id})"
        f, g, _ = self.pieces[shard_id]
        return f"data file {self.paths[f]!r} (row group {g}, shard {shard_id})"

    def _open_error(self, shard_id: int, e: Exception, member: str | None = None) -> ValueError:
        return ValueError(f"cannot read {self._where(shard_id, member)}: {e}")

    def shard_label(self, sid: int) -> str:
        if self.pieces is None:
            return f"{self.kind} source shard {sid} (file {self.paths[sid]!r})"
        return f"{self.kind} source shard {sid} (file {self.shard_file(sid)!r}, row group {self.pieces[sid][1]})"

    def position(self) -> dict | None:
        """Where the last example came from, with its file: an error note names the file."""
        pos = super().position()
        if pos is not None:
            pos["file"] = self.shard_file(pos["shard"])
        return pos

    def position_of(self, prov: list) -> dict:
        pos = super().position_of(prov)
        pos["file"] = self.shard_file(pos["shard"])
        return pos

    def position_back(self, back: int) -> dict | None:
        pos = super().position_back(back)
        if pos is not None:
            pos["file"] = self.shard_file(pos["shard"])
        return pos
