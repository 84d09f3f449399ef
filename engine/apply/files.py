"""Reading a source file for an apply, and writing the result back the way careful editors do.

`read_source` refuses what is not source text (NUL bytes, invalid UTF-8) with the pipeline's
bad-input errors and remembers what it read. `write_source` writes the new text back:

* It refuses a read-only target: a mode with no write bit at all (0444; root passes every
  permission check, so the bits themselves are the owner's intent), or a file this user may not
  write (`os.access`: permissions, `chattr +i`, a read-only mount). `--force` does not override
  that: it is about validation, not permissions. It refuses a file that changed on disk since it
  was read (an editor saved it while the model wrote): the user's newer edit wins.
* By default it writes a temporary file beside the target, gives it the target's owner, group
  and mode, fsyncs it and renames it over the target (`os.replace`): atomic, so a reader (or a
  crash) sees the old file or the new one, never a partial one.
* It writes in place, over the same inode, where a rename would lose something: the file has
  other hard links (a rename would leave them on the old text), or its owner or group cannot be
  given to a new file (not root, and not ours) -- as vim's `backupcopy=auto` does. Space is
  reserved first (`posix_fallocate`), so a full disk or a file-size limit fails before a byte
  changes, and an error while writing puts the original bytes back. The trade: a crash (power
  loss, kill -9) in the middle of an in-place write can leave a partial file, which a rename
  never does; hence in place only where the rename would break the link or the ownership.
* Through a symlink it writes the link's target; the link stays a link.

Every failure is a `WriteError` with a one-line reason, the target as it was, and no temporary
file left behind. Not kept across a rename: extended attributes and ACLs.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from contextlib import suppress
from dataclasses import dataclass

from engine.apply.errors import ApplyError, BinaryFileError, InvalidUtf8Error

WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


class WriteError(Exception):
    """The result was not written; the message is one line, and the file is as it was."""


class FileChangedError(WriteError):
    """The file changed on disk between reading it and writing the result."""


@dataclass(frozen=True)
class Source:
    path: str
    text: str
    data: bytes  # the bytes read
    mtime_ns: int
    mode: int


def decode_source(data: bytes, what: str) -> str:
    """`data` as text; raises BinaryFileError (NUL bytes) or InvalidUtf8Error."""
    if b"\0" in data:
        raise BinaryFileError(what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidUtf8Error(what, exc) from None


def read_source(path: str, what: str | None = None) -> Source:
    """Read a text file to edit; raises ApplyError with a one-line reason for anything unusable."""
    what = what or path
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ApplyError(f"{what} is not a regular file")
            data = f.read()
    except FileNotFoundError:
        raise ApplyError(f"{what}: no such file") from None
    except IsADirectoryError:
        raise ApplyError(f"{what} is a directory, not a file") from None
    except PermissionError:
        raise ApplyError(f"{what}: permission denied") from None
    return Source(path, decode_source(data, what), data, st.st_mtime_ns, stat.S_IMODE(st.st_mode))


def check_writable(path: str) -> None:
    """Raise WriteError when `path` (through symlinks) is read-only for this user."""
    target = os.path.realpath(path)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror}") from None
    if not mode & WRITE_BITS:
        raise WriteError(f"{path} is read-only (mode {mode:04o}); not written (make it writable to edit it; "
                         "--force does not override permissions)")
    if not os.access(target, os.W_OK):
        raise WriteError(f"{path} is not writable by this user (permissions, an immutable file or a read-only "
                         "file system); not written")


def write_source(source: Source, text: str) -> str:
    """Write `text` (UTF-8) over `source.path`; returns how ("replaced" or "in place").

    Raises WriteError (FileChangedError if the file is no longer the one `source` read)."""
    check_writable(source.path)
    target = os.path.realpath(source.path)  # through a symlink, write the file, not the link
    try:
        st = os.stat(target)
        with open(target, "rb") as f:
            current = f.read()
    except OSError as exc:
        raise FileChangedError(f"{source.path} changed on disk while the apply ran ({exc.strerror}); not written") from None
    if st.st_mtime_ns != source.mtime_ns or current != source.data:
        raise FileChangedError(f"{source.path} changed on disk while the apply ran; not written (run the apply again)")
    data = text.encode("utf-8")
    if st.st_nlink > 1 or not _can_own(st):
        _write_in_place(source.path, target, st, current, data)
        return "in place"
    _replace(source.path, target, st, data)
    return "replaced"


def _can_own(st: os.stat_result) -> bool:
    """Whether a file this process creates can be given `st`'s owner and group."""
    if os.geteuid() == 0:
        return True
    return st.st_uid == os.geteuid() and (st.st_gid == os.getegid() or st.st_gid in os.getgroups())


def _replace(path: str, target: str, st: os.stat_result, data: bytes) -> None:
    folder, name = os.path.split(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".editapply", dir=folder)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: cannot create a temporary file in {folder} ({exc.strerror}); "
                         "not written") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            made = os.fstat(f.fileno())
            if (made.st_uid, made.st_gid) != (st.st_uid, st.st_gid):
                os.fchown(f.fileno(), st.st_uid, st.st_gid)
            os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode))  # after fchown, which clears set-id bits
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {_reason(exc)}; not written") from None
    finally:
        if os.path.lexists(tmp):
            with suppress(OSError):
                os.unlink(tmp)
    _fsync_folder(folder)


def _write_in_place(path: str, target: str, st: os.stat_result, old: bytes, data: bytes) -> None:
    try:
        fd = os.open(target, os.O_WRONLY)  # no O_TRUNC: nothing changes before the first write
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {_reason(exc)}; not written") from None
    try:
        if len(data) > len(old):
            try:
                os.posix_fallocate(fd, 0, len(data))  # ENOSPC / EFBIG here, before any byte changes
            except OSError as exc:
                if os.fstat(fd).st_size != len(old):  # an emulated fallocate may have grown it
                    _restore(path, fd, st, old, exc)
                else:  # ext4 stamps the file even when it refuses
                    with suppress(OSError):
                        os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
                raise WriteError(f"cannot write {path} in place: {_reason(exc)}; not written") from None
        try:
            _pwrite_all(fd, data)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        except OSError as exc:
            _restore(path, fd, st, old, exc)
            raise WriteError(f"cannot write {path} in place: {_reason(exc)}; not written, the original bytes are back") from None
    finally:
        os.close(fd)


def _restore(path: str, fd: int, st: os.stat_result, old: bytes, cause: OSError) -> None:
    """Put `old` and its times back after a failed in-place write (within the old size: no new
    blocks needed)."""
    try:
        _pwrite_all(fd, old)
        os.ftruncate(fd, len(old))
        os.fsync(fd)
        os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
    except OSError as exc:
        raise WriteError(f"cannot write {path} in place: {_reason(cause)}, and putting the original bytes back failed "
                         f"too ({_reason(exc)}): check the file") from None


def _pwrite_all(fd: int, data: bytes) -> None:
    view, offset = memoryview(data), 0
    while offset < len(data):
        offset += os.pwrite(fd, view[offset:], offset)


def _fsync_folder(folder: str) -> None:
    """Make the rename itself durable; a file system that cannot fsync a folder is left as is."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    with suppress(OSError):
        os.fsync(fd)
    os.close(fd)


def _reason(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno, "")
    return f"{exc.strerror} ({name})" if name else str(exc)
