"""Writing a file atomically: a crash leaves either the previous file or the new one.

The data goes to a temporary file of its own in the same folder (``<path>.tmp.<host>.<pid>.<random>``,
created exclusively, so two writers never share one), is ``fsync``ed and renamed over the target,
and the folder is ``fsync``ed so the rename lasts. A write that fails removes its temporary file
(an ``OSError`` - a full disk, a missing folder, no permission, a path that is a folder - names
the file asked for, never the temporary one, and gains a note saying it was left as it was); a
process killed mid-write cannot, so the next write to the same path removes the temporary files of
writers on this host that are gone (see :data:`STALE_TMP_SECONDS`). State files
(``state_files.py``) and the Trainer callback write through here.
"""

from __future__ import annotations

import os
import secrets
import socket
import time

#: a temporary file older than this whose writer (same host, process id) is gone is removed by
#: the next save to the same path; the age guards writers whose process ids this process cannot see
STALE_TMP_SECONDS = 15 * 60


def _tmp_prefix(path: str) -> str:
    return f"{path}.tmp.{socket.gethostname().replace('.', '_')}."


def _remove_stale_tmp(path: str) -> None:
    """Remove the temporary files of earlier saves to ``path`` whose process was killed between
    opening and renaming them (``<path>.tmp.<host>.<pid>.<hex>``, this host, process gone, not
    written to for ``STALE_TMP_SECONDS``): without this, a job killed while saving again and again
    left a state-sized file each time."""
    prefix = _tmp_prefix(path)
    folder, stem = os.path.split(prefix)
    try:
        names = [n for n in os.listdir(folder or ".") if n.startswith(stem)]
    except OSError:
        return
    now = time.time()
    for name in names:
        pid = name[len(stem):].split(".")[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        full = os.path.join(folder, name)
        try:
            if now - os.stat(full).st_mtime > STALE_TMP_SECONDS:
                os.unlink(full)
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process
        return True
    return True


def _name_the_target(e: OSError, tmp: str, path: str) -> OSError:
    """The error to raise for ``e``, an error of writing ``tmp`` or renaming it, naming ``path``,
    the file the caller asked for: a full disk (ENOSPC) says no file at all, and a missing folder,
    a folder without write permission or a ``path`` that is a folder named our temporary file,
    which the caller never heard of."""
    if e.filename == tmp and e.errno is not None:
        named = type(e)(e.errno, e.strerror, path)
        named.__traceback__ = e.__traceback__
        e = named
    elif e.filename is not None:
        return e
    e.add_note(f"while writing {path!r} (left as it was)")
    return e


def write_chunks_atomic(path: str | os.PathLike, chunks: list) -> None:
    path = os.fspath(path)
    # a name of its own for every write (not just every process), created exclusively: two threads
    # saving to one path at once must not write into the same temporary file (the file renamed
    # into place could mix both states, and the later rename fails)
    tmp = f"{_tmp_prefix(path)}{os.getpid()}.{secrets.token_hex(4)}"
    try:
        f = open(tmp, "xb")
    except OSError as e:  # a missing folder, no permission to write in it...
        raise _name_the_target(e, tmp, path) from None
    try:
        with f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _remove_stale_tmp(path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            named = _name_the_target(e, tmp, path)
            if named is not e:
                try:
                    raise named from None
                finally:  # its traceback holds this frame: a reference cycle (with the chunks) otherwise
                    named = None  # noqa: F841
        raise
    try:  # make the rename itself durable
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, text: str | bytes) -> None:
    """Write ``text`` (or bytes) to ``path`` so that a crash leaves either the old file or the new
    one (a temporary file in the same folder, ``fsync``, rename); the temporary file is removed
    if writing fails."""
    write_chunks_atomic(path, [text.encode("utf-8") if isinstance(text, str) else text])
