"""LSP's base protocol framing, read defensively: bytes in, whole message bodies or framing errors out.

A message is header lines (`Name: value\\r\\n`), an empty line, then `Content-Length` bytes of
JSON. pygls' reader trusts all of it: a header without Content-Length or a length shorter than
the body leaves it waiting for a header that never parses (the server answers nothing more), and
`Content-Length: 1000000000000` makes it allocate that much. `Framer` instead:

* bounds everything it holds: a header line (`MAX_HEADER_LINE`), a header block
  (`MAX_HEADER_BYTES`), a body (`max_body`, refused from its Content-Length, before any of it
  is buffered);
* reports each framing fault once, as a `FramingError` (the transport answers it with a JSON-RPC
  error whose id is null), then resynchronizes: it drops bytes until the next
  `Content-Length: N` line and reads headers from there. That line can only be a real header: a
  JSON body cannot hold it (a raw line break cannot occur inside a JSON string, and outside one
  `Content-Length` is not a token), so a body cut short or a message too large to keep is
  skipped without losing the messages after it;
* accepts `\\n` as well as `\\r\\n` line ends and header names in any case, and ignores other
  headers (`Content-Type`).

No pygls and no I/O here: `feed(bytes)` returns what the bytes completed.

    >>> f = Framer(max_body=100)
    >>> f.feed(b'Content-Length: 2\\r\\n\\r\\n{}garbage\\r\\nContent-Length: 2\\r\\n\\r\\n[]')
    [b'{}', FramingError(message="not an LSP header line: b'garbage'"), b'[]']
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_HEADER_LINE = 1024  # bytes: real headers are some 30
MAX_HEADER_BYTES = 8 * 1024
_LENGTH_LINE = re.compile(rb"content-length:[ \t]*\d+[ \t]*\r?\n", re.IGNORECASE)
_HEADER = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*(.*?)[ \t]*")
_KEEP = 64  # bytes kept while resynchronizing: a Content-Length line cut between two reads


@dataclass(frozen=True)
class FramingError:
    """A fault in the framing (the message it belongs to, if any, is lost)."""

    message: str


class Framer:
    def __init__(self, max_body: int):
        self.max_body = max_body
        self._buf = bytearray()
        self._length: int | None = None  # of the body being read; None: reading headers
        self._headers: dict[bytes, bytes] = {}
        self._header_bytes = 0
        self._resyncing = False

    def feed(self, data: bytes) -> list[bytes | FramingError]:
        """Take the next bytes of the stream; the bodies and errors they complete, in order."""
        self._buf += data
        out: list[bytes | FramingError] = []
        while True:
            if self._resyncing and not self._resync():
                return out
            if self._length is None:
                item = self._header()
                if item is None:
                    return out
                if isinstance(item, FramingError):
                    out.append(item)
                continue
            if len(self._buf) < self._length:
                return out
            out.append(bytes(self._buf[: self._length]))
            del self._buf[: self._length]
            self._length = None

    def _header(self) -> FramingError | bool | None:
        """Read one header line: True when a line was taken (the body's length may now be known),
        a FramingError (and resync), or None when more bytes are needed."""
        end = self._buf.find(b"\n")
        if end < 0:
            if len(self._buf) > MAX_HEADER_LINE:
                return self._fault(f"a header line longer than {MAX_HEADER_LINE} bytes")
            return None
        line = bytes(self._buf[:end]).removesuffix(b"\r")
        self._header_bytes += end + 1
        if end > MAX_HEADER_LINE or self._header_bytes > MAX_HEADER_BYTES:
            return self._fault(f"a header block longer than {MAX_HEADER_BYTES} bytes")
        if line:
            match = _HEADER.fullmatch(line)
            if match is None:
                # Not dropped: the line may hold the next message's Content-Length after the junk.
                return self._fault(f"not an LSP header line: {_show(line)}")
            self._headers[match.group(1).lower()] = match.group(2)
            del self._buf[: end + 1]
            return True
        # The empty line: the headers are complete.
        del self._buf[: end + 1]
        headers, self._headers, self._header_bytes = self._headers, {}, 0
        length = headers.get(b"content-length")
        if length is None:
            return self._fault("a message without a Content-Length header")
        if not length.isdigit():
            return self._fault(f"Content-Length is not a number of bytes: {_show(length)}")
        if int(length) > self.max_body:
            return self._fault(f"a message of {int(length):,} bytes; the limit is {self.max_body:,}")
        self._length = int(length)
        return True

    def _fault(self, message: str) -> FramingError:
        self._headers, self._header_bytes = {}, 0
        self._resyncing = True
        return FramingError(message)

    def _resync(self) -> bool:
        """Drop bytes up to the next Content-Length line; False when more bytes are needed. (The
        line found parses as a header, and the header count starts again: it always progresses.)"""
        match = _LENGTH_LINE.search(self._buf)
        if match is None:
            if len(self._buf) > _KEEP:
                del self._buf[: len(self._buf) - _KEEP]
            return False
        del self._buf[: match.start()]
        self._resyncing = False
        return True


def _show(data: bytes, limit: int = 60) -> str:
    return repr(data[:limit]) + ("..." if len(data) > limit else "")
