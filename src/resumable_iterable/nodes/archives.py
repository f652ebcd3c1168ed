"""Data files inside zip archives, read as HF's streaming ``load_dataset`` reads them.

HF's ``json``, ``csv`` and ``text`` builders read a zip data file (a ``.zip``, or a file whose first
bytes are a zip's when its extension is none HF knows) as a folder: every file in it, whatever its
extension, hidden ones left out (a name or a folder starting with ``.`` or ``__``, as ``__MACOSX/``),
in the order of a walk of that folder (a folder's files sorted by name, then its sub-folders,
sorted). The archive is one shard, its members read one after another; an empty archive has no
rows. Tar archives (``.tar``, ``.tgz``, ``.tar.gz``...) are refused, as HF's streaming mode refuses
them, and so are zips given to the Parquet and Arrow readers (HF reads them as a Parquet / Arrow
file, which fails).

Data files may also name members of a zip or tar archive with HF's fsspec URLs,
``zip://<glob>::<archive>`` / ``tar://<glob>::<archive>`` (``load_dataset`` matches the glob on
:func:`zip_member_names` / :func:`tar_members`): each member is then a data file of its own (a
shard), read as the file it is, as HF resolves such a URL.

A member is named as HF names it, ``zip://<member>::<archive>`` (:func:`member_path`; a tar
archive's, given by such a URL, ``tar://<member>::<archive>``);
``file_formats.open_binary`` / ``open_text`` open such a name, decompressing a ``.gz``, ``.bz2``,
``.xz`` or ``.zst`` member as they decompress files. :class:`ArchiveReading` is the part of
``FileSource`` that reads archives: the offset of an archive's shard counts the rows of its
members in order (a resume counts the rows of the members before it again), and the state's
``files`` digest holds the members' names, so a state is refused over an archive rebuilt with other
members or in another order.
"""

from __future__ import annotations

import os
import zipfile
from typing import Any, Iterator

#: what reading a damaged member raises (a CRC mismatch, a truncated archive...)
DAMAGED = zipfile.BadZipFile
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")
TAR_SUFFIXES = (".tar", ".tgz", ".tar.gz", ".tar.bz2", ".tar.xz")
#: extensions HF opens as they are, never as an archive (its ``BASE_KNOWN_EXTENSIONS``), and
#: those of files compressed on their own
_PLAIN = frozenset("txt csv json jsonl tsv conll conllu orig parquet pkl pickle rel xml arrow "
                   "gz bz2 xz zst zstd lz4 ndjson pq feather ipc".split())


def hidden(name: str) -> bool:
    """A file or folder name HF leaves out of a folder or an archive (``.x``, ``__x``)."""
    return name.startswith((".", "__"))


def archive_kind(path: str, sniff: bool = True) -> str | None:
    """``"zip"`` or ``"tar"`` when HF's streaming readers take ``path`` for an archive, else ``None``:
    by its extension, or (``sniff``) by its first bytes when its extension is none HF knows."""
    if split_member(path) is not None:  # a member named by HF's URL: read as the file it is
        return None
    name = os.path.basename(path).lower()
    if name.endswith(TAR_SUFFIXES):
        return "tar"
    ext = name.rsplit(".", 1)[-1] if "." in name else name
    for ch in "?-_":  # HF's ``_get_path_extension``: "train.txt-00000-of-00002" is a txt file
        ext = ext.split(ch)[0]
    if ext == "zip":
        return "zip"
    if ext in _PLAIN or not sniff:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:  # left to the reader, which names the file
        return None
    return "zip" if head in ZIP_MAGIC else None


def zip_members(archive: str) -> list[str]:
    """The members of a zip archive HF reads, in its order (see the module's doc). A name stored
    twice is read once (its last copy, as ``zipfile`` opens it)."""
    try:
        with zipfile.ZipFile(archive) as z:
            names = [i.filename for i in z.infolist() if not i.is_dir()]
    except zipfile.BadZipFile as e:
        raise ValueError(f"data file {archive!r} is not a valid zip archive: {e}") from None
    tree: dict = {}  # folder -> {"": [(file name, member)], sub-folder: {...}}
    for name in dict.fromkeys(names):
        parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
        if not parts:
            continue
        node = tree
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):  # a file and a folder of one name: the folder wins
                break
        else:
            node.setdefault("", []).append((parts[-1], name))
    out: list[str] = []
    _walk(tree, out)
    return out


def _walk(node: dict, out: list) -> None:
    """The members under ``node`` into ``out``: a folder's files, then its sub-folders' (a module
    function: a nested one calling itself was a reference cycle holding the names, left to the
    cyclic garbage collector at each listing)."""
    out.extend(m for f, m in sorted(node.get("", [])) if not hidden(f))
    for d in sorted(k for k in node if k and not hidden(k)):
        _walk(node[d], out)


def member_names(archive: str) -> frozenset[str]:
    """The names of the files in a zip archive, hidden ones included (a metadata file may name them)."""
    with zipfile.ZipFile(archive) as z:
        return frozenset(i.filename for i in z.infolist() if not i.is_dir())


def member_path(archive: str, member: str, kind: str = "zip") -> str:
    """HF's name of an archive member: ``zip://<member>::<archive>`` (``tar://`` for a tar archive)."""
    return f"{kind}://{member}::{archive}"


def split_member(path: str) -> tuple[str, str] | None:
    """``(archive, member)`` of a :func:`member_path` name; ``None`` for a plain file."""
    if not path.startswith(("zip://", "tar://")) or "::" not in path:
        return None
    member, _, archive = path[len("zip://"):].rpartition("::")  # a member's name may hold "::"
    return archive, member


def digest_name(path: str) -> str:
    """A file's name for the state's digest of file names: an archive member (:func:`member_path`) as
    a file in a folder named after its archive, so that a moved archive still matches."""
    member = split_member(path)
    return path if member is None else os.path.join(member[0], *member[1].split("/"))


def tar_members(archive: str) -> list[str]:
    """The names of the regular files of a tar archive (compressed or not), in the archive's order."""
    import tarfile

    try:
        with tarfile.open(archive, "r:*") as t:
            return list(dict.fromkeys(m.name for m in t.getmembers() if m.isfile()))
    except tarfile.TarError as e:
        raise ValueError(f"{archive!r} is not a valid tar archive: {e}") from None


def zip_member_names(archive: str) -> list[str]:
    """The names of the files of a zip archive, in the archive's order."""
    try:
        with zipfile.ZipFile(archive) as z:
            return list(dict.fromkeys(i.filename for i in z.infolist() if not i.is_dir()))
    except zipfile.BadZipFile as e:
        raise ValueError(f"{archive!r} is not a valid zip archive: {e}") from None


def open_member(path: str) -> Any:
    """A member of a zip or tar archive (:func:`member_path`), opened for reading bytes. A tar
    member is read whole into memory (a tar archive has no index to seek a member by)."""
    archive, member = split_member(path)
    if path.startswith("tar://"):
        return _open_tar_member(archive, member)
    try:
        z = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as e:
        raise OSError(f"{archive!r} is no longer a valid zip archive: {e}") from None
    with z:  # the member, once open, keeps the archive's file open until it is closed
        try:
            return z.open(member)
        except KeyError:
            raise FileNotFoundError(f"{member!r} is no longer in the archive {archive!r}: it changed since the "
                                    "dataset was built") from None
        except (RuntimeError, NotImplementedError) as e:  # encrypted, or an unknown compression method
            raise OSError(f"cannot read {member!r} in the archive {archive!r}: {e}") from None


def _open_tar_member(archive: str, member: str) -> Any:
    import io
    import tarfile

    try:
        with tarfile.open(archive, "r:*") as t:
            try:
                f = t.extractfile(member)
            except KeyError:
                f = None
            if f is None:
                raise FileNotFoundError(f"{member!r} is no longer in the archive {archive!r}: it changed since "
                                        "the dataset was built") from None
            return io.BytesIO(f.read())
    except (tarfile.TarError, EOFError) as e:
        raise OSError(f"{archive!r} is no longer a valid tar archive: {e}") from None


def archive_members(paths: list[str], format: str) -> list[list[str] | None] | None:
    """For each data file, the names of the members it holds when it is a zip archive (in the
    archive: :func:`member_path` makes a path of them), else ``None``; ``None`` when no file is an archive. Tar archives, and zips given as
    Parquet or Arrow files, are refused naming them."""
    out: list[list[str] | None] = []
    for p in paths:
        if split_member(p) is not None and format not in ("json", "csv", "text"):
            raise ValueError(f"data file {p!r} is in an archive: {format} files are not read inside archives here; "
                             "extract it first")
        kind = archive_kind(p, sniff=format in ("json", "csv", "text"))
        if kind == "tar":
            raise ValueError(f"data file {p!r} is a tar archive: tar archives are not read in streaming mode (HF's "
                             "streaming load_dataset refuses them too); extract it first, make it a zip, or name "
                             f"its files with HF's URL data_files='tar://*::{p}' (each file a shard)")
        if kind == "zip" and format not in ("json", "csv", "text"):
            raise ValueError(f"data file {p!r} is a zip archive: {format} files are not read inside archives (HF "
                             "reads only JSON, CSV and text files in them); extract it first")
        out.append(None if kind is None else zip_members(p))
    return out if any(m is not None for m in out) else None


def members_digest_names(members: list[list[str] | None]) -> list:
    """What the state's ``files`` digest adds for archives: each archive's member names, by shard."""
    return [[i, ms] for i, ms in enumerate(members) if ms is not None]


class ArchiveReading:
    """The part of ``FileSource`` reading zip archives: ``members`` (from :func:`archive_members`)
    and the rows of an archive's shard, member after member. Uses the source's ``_table``,
    ``_text_file_batches``, ``_aligned``, ``_check_offset``, ``_lengths`` and ``batch_rows``."""

    members: list[list[str] | None] | None = None

    def is_archive(self, shard_id: int) -> bool:
        return self.members is not None and self.members[shard_id] is not None

    def schema_file(self) -> str | None:
        """The file whose columns every file follows (HF's first table): the first data file, or
        the first member of the first archive holding some; ``None``: no file to read."""
        for i, p in enumerate(self.paths):
            if not self.is_archive(i):
                return p
            if self.members[i]:
                return member_path(p, self.members[i][0])
        return None

    def member_batches(self, shard_id: int, offset: int) -> Iterator:
        """The record batches of an archive's shard from row ``offset`` on, each member's with the
        first file's columns; the members before the offset are read to count their rows."""
        seen = 0
        # JSON members of unknown features (the first is a document): HF's reader carries the Json paths
        # each member's first chunk shows on to the members after it, in the same archive
        carried = [] if self.format == "json" and self._first_schema() is None else None
        for name in self.members[shard_id]:
            path = member_path(self.paths[shard_id], name)
            start = max(0, offset - seen)
            try:
                if self.format == "text":
                    counted = yield from self._text_file_batches(shard_id, start, path)
                else:
                    table = self._aligned(shard_id, self._table(shard_id, path, carried), path)
                    counted = table.num_rows  # the rows yielded (none without columns)
                    if start < counted:
                        yield from table.slice(start).to_batches(max_chunksize=self.batch_rows)
            except DAMAGED as e:
                raise self._open_error(shard_id, OSError(f"the archive is damaged ({e})"), path) from None
            seen += counted
        self._lengths[shard_id] = seen
        self._check_offset(shard_id, offset, seen)

    def archive_rows(self, shard_id: int, rows: list[int]) -> list[dict]:
        """The rows at positions ``rows`` of an archive's shard (read from the first of them on)."""
        import pyarrow as pa

        if not rows:
            return []
        start = min(rows)
        wanted = sorted(set(rows))
        found: dict[int, dict] = {}
        k, pos = 0, start
        for batch in self.member_batches(shard_id, start):
            end = pos + batch.num_rows
            local = []
            while k < len(wanted) and wanted[k] < end:
                local.append(wanted[k] - pos)
                k += 1
            if local:
                taken = batch.take(pa.array(local, type=pa.int64()))
                found.update(zip([pos + i for i in local], self.rows_of(taken)))
            pos = end
            if k == len(wanted):
                break
        if k < len(wanted):
            raise IndexError(f"a row is past the end of the shard ({pos} rows)")
        return [found[r] for r in rows]
