"""`lsp_server.framing.Framer` alone (no pygls, no process): whole messages out of any chunking,
one error per framing fault, resynchronization at the next Content-Length line, bounded buffers."""

from __future__ import annotations

import json
import random

import pytest

from lsp_server.framing import MAX_HEADER_LINE, Framer, FramingError

LIMIT = 1000


def frame(body: bytes | dict) -> bytes:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    return b"Content-Length: %d\r\n\r\n" % len(data) + data


def feed(data: bytes, chunk: int | None = None, framer: Framer | None = None) -> list:
    framer = framer or Framer(LIMIT)
    step = chunk or len(data) or 1
    return [item for i in range(0, len(data), step) for item in framer.feed(data[i : i + step])]


MESSAGES = [{"jsonrpc": "2.0", "id": i, "method": "m", "params": {"text": "é\r\n" * i}} for i in range(3)]
STREAM = b"".join(frame(m) for m in MESSAGES)


@pytest.mark.parametrize("chunk", [None, 1, 7, 64])
def test_messages_come_out_whole_however_the_bytes_are_cut(chunk):
    assert [json.loads(b) for b in feed(STREAM, chunk)] == MESSAGES


def test_other_headers_bare_newlines_and_any_case_are_read():
    body = b'{"a": 1}'
    data = b"content-length: 8\nContent-Type: application/vscode-jsonrpc; charset=utf-8\n\n" + body
    assert feed(data) == [body]


GARBAGE = {
    "text before a message": b"hello there\r\n",
    "a header without Content-Length": b"Content-Type: x\r\n\r\n{}",
    "a Content-Length that is not a number": b"Content-Length: ten\r\n\r\n{}",
    "a message over the limit": b"Content-Length: 1000000000000\r\n\r\n" + b"x" * 5000,
    "a header line with no end": b"X" * (MAX_HEADER_LINE + 10),
    "random bytes": random.Random(31).randbytes(5000).replace(b"\n", b""),
}


@pytest.mark.parametrize("name", GARBAGE)
@pytest.mark.parametrize("chunk", [None, 3])
def test_a_fault_is_reported_once_and_the_next_message_is_read(name, chunk):
    items = feed(GARBAGE[name] + STREAM, chunk)
    errors = [i for i in items if isinstance(i, FramingError)]
    assert len(errors) == 1, errors
    assert [json.loads(b) for b in items if not isinstance(b, FramingError)] == MESSAGES


def test_a_content_length_shorter_than_the_body_loses_that_message_only():
    """The short body comes out (the JSON layer refuses it); the rest of it is junk before the
    next header, reported once; the next message is read."""
    body = json.dumps(MESSAGES[0]).encode()
    items = feed(b"Content-Length: 10\r\n\r\n" + body + STREAM)
    assert items[0] == body[:10] and isinstance(items[1], FramingError)
    assert [json.loads(b) for b in items[2:]] == MESSAGES


def test_the_buffer_stays_bounded_while_skipping():
    """A message over the limit is never buffered: 50 MB after its header keep the framer small."""
    framer = Framer(LIMIT)
    assert isinstance(framer.feed(b"Content-Length: 50000000\r\n\r\n")[0], FramingError)
    for _ in range(50):
        assert framer.feed(b"y" * 1_000_000) == []
        assert len(framer._buf) <= 64
    assert [json.loads(b) for b in framer.feed(STREAM)] == MESSAGES


def test_a_json_body_can_not_fake_a_header():
    """A body may hold the words of a header (inside a JSON string, where a line break is always
    escaped): skipping a message over the limit passes them by and finds the real next header."""
    text = "Content-Length: 5\r\n\r\n{}" + "x" * LIMIT
    items = feed(frame({"jsonrpc": "2.0", "method": "m", "params": {"text": text}}) + STREAM, 5)
    assert isinstance(items[0], FramingError) and "limit" in items[0].message
    assert [json.loads(b) for b in items[1:]] == MESSAGES
