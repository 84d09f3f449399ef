"""Reading a source file for an apply, and writing the result back atomically.

`read_source` refuses what is not source text (NUL bytes, invalid UTF-8) with the pipeline's
bad-input errors and remembers what it read. `write_atomic` writes the new text to a temporary
file in the same folder and renames it over the original (`os.replace`, atomic on POSIX), keeping
the file's permission bits, so a reader sees the old file or the new one, never a partial one. It
refuses when the file on disk is no longer what was read (an editor saved it while the model was
writing): the user's newer edit wins, the apply is reported as not written.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass

from engine.apply.errors import ApplyError, BinaryFileError, InvalidUtf8Error


class FileChangedError(ApplyError):
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


def write_atomic(source: Source, text: str) -> None:
    """Replace `source.path` with `text` (UTF-8) atomically, keeping its mode; refuses with
    FileChangedError if the file is no longer the one `source` read."""
    target = os.path.realpath(source.path)  # through a symlink, replace the file, not the link
    try:
        st = os.stat(target)
        with open(target, "rb") as f:
            current = f.read()
    except OSError as exc:
        raise FileChangedError(f"{source.path} changed on disk while the apply ran ({exc.strerror}); not written") from None
    if st.st_mtime_ns != source.mtime_ns or current != source.data:
        raise FileChangedError(f"{source.path} changed on disk while the apply ran; not written (run the apply again)")
    folder, name = os.path.split(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".editapply", dir=folder or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, source.mode)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
