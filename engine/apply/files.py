"""Reading a source file for an apply, and writing the result back the way careful editors do.

`read_source` refuses what is not source text (NUL bytes, invalid UTF-8) with the pipeline's
bad-input errors and remembers what it read. It opens without blocking and refuses anything but a
regular file (a FIFO would otherwise wait for a writer forever), and every path the OS refuses (a
name too long, a file used as a folder, a symlink loop) is a one-line `ApplyError`.
`read_stream` reads a snippet, which may also come from a pipe (`<(cat s.snip)`, a named pipe,
stdin): at most `max_bytes` + 1 bytes are read, so /dev/zero is refused, not buffered.
`write_source` writes the new text back:

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
* Concurrent writers cannot lose an update. The writer takes an advisory lock (`flock`) on the
  file as it is now (and takes it again if a rename replaced the file while it waited), then
  compares the bytes and mtime it read with the file on disk right before the rename (or the
  in-place write), holding the lock through the rename. Two `--write` runs that read the same
  file: the first renames; the second, let in after it, finds other bytes and refuses
  (`FileChangedError`). An editor that takes no lock can still save between the compare and the
  rename (microseconds); nothing short of a lock every writer honours closes that.

Every failure is a `WriteError` with a one-line reason, the target as it was, and no temporary
file left behind. Not kept across a rename: extended attributes and ACLs.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from engine.apply.errors import ApplyError, BinaryFileError, InvalidUtf8Error

WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
LOCK_WAIT_S = 30.0  # another writer holds the lock for milliseconds; longer is a stuck process
LOCK_POLL_S = 0.01
TEMP_NAME_CHARS = 100  # of the target's name in the temporary file's (a name may be 255 bytes long)


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


def read_source(path: str, what: str | None = None, max_bytes: int | None = None) -> Source:
    """Read a text file to edit; raises ApplyError with a one-line reason for anything unusable
    (`InputTooLargeError` for a file over `max_bytes`, before it is read)."""
    what = what or path
    with _open_input(path, what) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ApplyError(f"{what} is not a regular file ({_kind(st.st_mode)}); only files can be edited")
        if max_bytes is not None and st.st_size > max_bytes:
            raise _too_large(what, st.st_size, max_bytes)
        data = _read_all(f, what)
    return Source(path, decode_source(data, what), data, st.st_mtime_ns, stat.S_IMODE(st.st_mode))


def read_stream(path: str, what: str, max_bytes: int) -> str:
    """A snippet's text from a regular file, a pipe or a character device (what a shell hands
    over for `<(cmd)` or `/dev/stdin`), at most `max_bytes` (`InputTooLargeError` past it)."""
    with _open_input(path, what) as f:
        st = os.fstat(f.fileno())
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
            raise ApplyError(f"{what} is not a file or a pipe ({_kind(st.st_mode)})")
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
            os.set_blocking(f.fileno(), True)  # a pipe: wait for its writer, as `cat` does
        return decode_source(read_bounded(f, what, max_bytes), what)


def read_bounded(f, what: str, max_bytes: int) -> bytes:
    """Up to `max_bytes` from the binary stream `f`; InputTooLargeError if there is more."""
    data = _read_all(f, what, max_bytes + 1)
    if len(data) > max_bytes:
        raise _too_large(what, len(data), max_bytes, at_least=True)
    return data


@contextmanager
def _open_input(path: str, what: str):
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer (forever).
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ApplyError(f"{what}: no such file") from None
    except IsADirectoryError:
        raise ApplyError(f"{what} is a directory, not a file") from None
    except PermissionError:
        raise ApplyError(f"{what}: permission denied") from None
    except OSError as exc:  # ENAMETOOLONG, ENOTDIR, ELOOP, ENXIO (a socket), EIO ...
        raise ApplyError(f"{what}: {_path_reason(exc)}") from None
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise ApplyError(f"{what} is a directory, not a file")
    with os.fdopen(fd, "rb", buffering=0) as f:
        yield f


def _read_all(f, what: str, limit: int | None = None) -> bytes:
    chunks, size = [], 0
    try:
        while limit is None or size < limit:
            chunk = f.read(1 << 20 if limit is None else min(1 << 20, limit - size))
            if chunk is None:  # a non-blocking regular file never says "later"; be safe
                continue
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except IsADirectoryError:
        raise ApplyError(f"{what} is a directory, not a file") from None
    except OSError as exc:
        raise ApplyError(f"cannot read {what}: {_path_reason(exc)}") from None
    return b"".join(chunks)


def _too_large(what: str, size: int, limit: int, at_least: bool = False) -> ApplyError:
    from engine.apply.errors import InputTooLargeError
    from engine.apply.limits import ENV

    return InputTooLargeError(what, None, f"{'at least ' if at_least else ''}{size:,} bytes", f"{limit:,} bytes",
                              ENV["max_bytes"])


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def _path_reason(exc: OSError) -> str:
    if exc.errno == errno.ENAMETOOLONG:
        return "the file name is too long"
    if exc.errno == errno.ENOTDIR:
        return "a part of the path is a file, not a directory"
    if exc.errno == errno.ELOOP:
        return "too many levels of symbolic links (a symlink loop?)"
    return exc.strerror or str(exc)


def check_writable(path: str) -> None:
    """Raise WriteError when `path` (through symlinks) is read-only for this user."""
    try:
        target = os.path.realpath(path, strict=True)
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {_path_reason(exc)}") from None
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
    data = text.encode("utf-8")
    with _locked(source.path, target):
        st = _unchanged(source, target)
        if st.st_nlink > 1 or not _can_own(st):
            _write_in_place(source.path, target, st, source.data, data)
            return "in place"
        _replace(source.path, target, st, data, lambda: _unchanged(source, target))
        return "replaced"


@contextmanager
def _locked(path: str, target: str):
    """Hold an exclusive advisory lock on the file now at `target` (flock: released when the fd
    closes, so a killed writer never leaves it held). A lock taken on a file that a rename
    replaced meanwhile guards nothing: it is dropped and taken on the new one."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        fd = _open_for_lock(path, target)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise WriteError(f"{path} is locked by another writer (another `editapply apply --write`?) "
                                         f"for over {LOCK_WAIT_S:.0f} s; not written") from None
                    time.sleep(LOCK_POLL_S)
            held, now = os.fstat(fd), _stat_or_none(target)
            if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                yield
                return
        finally:
            os.close(fd)  # releases the lock
        if now is None:
            raise FileChangedError(f"{path} was removed while the apply ran; not written")


def _open_for_lock(path: str, target: str) -> int:
    for flags in (os.O_RDONLY, os.O_WRONLY):  # flock takes any fd; a write-only file has no read bit
        try:
            return os.open(target, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except PermissionError:
            continue
        except FileNotFoundError:
            raise FileChangedError(f"{path} was removed while the apply ran; not written") from None
        except OSError as exc:
            raise WriteError(f"cannot write {path}: {_reason(exc)}; not written") from None
    raise WriteError(f"cannot write {path}: permission denied; not written")


def _stat_or_none(target: str) -> os.stat_result | None:
    try:
        return os.stat(target)
    except FileNotFoundError:
        return None


def _unchanged(source: Source, target: str) -> os.stat_result:
    """The target's stat, if it still holds the bytes (and mtime) `source` read; else
    FileChangedError."""
    try:
        with os.fdopen(os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC), "rb") as f:
            st = os.fstat(f.fileno())
            current = f.read() if stat.S_ISREG(st.st_mode) else None
    except OSError as exc:
        raise FileChangedError(f"{source.path} changed on disk while the apply ran ({exc.strerror}); not written") from None
    if st.st_mtime_ns != source.mtime_ns or current != source.data:
        raise FileChangedError(f"{source.path} changed on disk while the apply ran (another writer, or an editor "
                               "saved it); not written: run the apply again on the new text")
    return st


def _can_own(st: os.stat_result) -> bool:
    """Whether a file this process creates can be given `st`'s owner and group."""
    if os.geteuid() == 0:
        return True
    return st.st_uid == os.geteuid() and (st.st_gid == os.getegid() or st.st_gid in os.getgroups())


def _replace(path: str, target: str, st: os.stat_result, data: bytes, check=lambda: None) -> None:
    """Write `data` to a temporary file beside `target` and rename it over the target; `check()`
    runs right before the rename (it raises to stop it)."""
    folder, name = os.path.split(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name[:TEMP_NAME_CHARS]}.", suffix=".editapply", dir=folder)
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
        check()
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
