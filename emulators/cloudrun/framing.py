"""HTTP/1.1 request framing as the front end reads it: where a request's body ends (RFC 9112).

A proxy that guesses where a body ends lets two parties read one byte stream as different
requests (request smuggling), so every rule here refuses rather than repairs:

- `Transfer-Encoding` is accepted only as exactly `chunked` (RFC 9112 §6.1: chunked must be the
  final coding; a final coding other than chunked in a request is 400, §6.3 item 4). A coding
  before `chunked` (`gzip, chunked`) is one this front end does not implement: 400 (§6.1
  suggests 501; see `read_body`).
  `xchunked`, `chunked, identity` and an empty value are not `chunked`: 400.
- `Transfer-Encoding` together with `Content-Length` is 400: such a message "ought to be
  handled as an error" and is a smuggling attempt (§6.1, §6.3 item 3).
- `Content-Length` is `1*DIGIT` (RFC 9110 §8.6); the same value repeated (in one field as a
  list or over several fields) counts once, differing values are 400 (§6.3 item 5). A body
  that ends before its length is an incomplete message (§8): 400, never forwarded short.
- A chunk size is `1*HEXDIG` (§7.1): no sign, no `0x`, no whitespace before it; at most 16
  digits; chunk extensions (`;name=value`) are read and dropped; each line ends in CRLF and
  each chunk's data is followed by CRLF. The running total is held to the request limit, so a
  chunked body can no more exceed 32 MiB than a sized one (https://cloud.google.com/run/quotas).
- Trailer fields are read within the header budget and dropped (the body is forwarded with a
  Content-Length, and trailers are not merged into headers, §7.1.2).

No body framing at all (neither field) is a body of length 0 (§6.3 item 7).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from http import HTTPStatus
from typing import BinaryIO

_CHUNK_LINE_MAX = 1024
_MAX_CHUNK_DIGITS = 16
_CONTENT_LENGTH_DIGITS = 20
# chunk-size [ chunk-ext ] CRLF, with chunk-ext = *( BWS ";" BWS ext-name [ BWS "=" BWS value ] )
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,%d})((?:[ \t]*;[^\r\n]*)?)\r\n" % _MAX_CHUNK_DIGITS)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class Malformed(Exception):
    """The request's framing breaks RFC 9112; `status` is what the front end answers."""

    def __init__(self, reason: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(reason)
        self.status = status


class TooLarge(Exception):
    """The body is over the request limit."""


class Incomplete(Malformed):
    """The connection ended before the body did."""


def read_body(
    stream: BinaryIO,
    transfer_encodings: Sequence[str],
    content_lengths: Sequence[str],
    limit: int,
    trailer_budget: int,
) -> bytes:
    """The request body from `stream`, framed by the request's `Transfer-Encoding` and
    `Content-Length` field values (every occurrence, in order); raises Malformed or TooLarge."""
    if transfer_encodings:
        if content_lengths:
            raise Malformed("both Transfer-Encoding and Content-Length")
        codings = _list(transfer_encodings)
        if not codings or codings[-1].lower() != "chunked":
            raise Malformed(f"the final transfer coding is not chunked: {codings!r}"[:200])
        if len(codings) > 1:
            # RFC 9112 §6.1 suggests 501 for a coding not understood (SHOULD); the front end
            # answers 400, a client error that a retry cannot fix, so no refused framing is
            # ever a 5xx that a caller's retry policy would repeat.
            raise Malformed(f"transfer codings {codings[:-1]!r} not implemented"[:200])
        return _read_chunked(stream, limit, trailer_budget)
    if not content_lengths:
        return b""
    length = _content_length(content_lengths)
    if length > limit:
        raise TooLarge(f"body of {length} bytes over the {limit}-byte limit")
    return _read_exactly(stream, length)


def _list(values: Sequence[str]) -> list[str]:
    """The elements of a comma-separated list field over all its lines (RFC 9110 §5.6.1),
    each a token; an element that is not one makes the field malformed."""
    elements = [e.strip() for value in values for e in value.split(",")]
    elements = [e for e in elements if e]
    for element in elements:
        if not _TOKEN.fullmatch(element):
            raise Malformed(f"transfer coding {element[:40]!r} is not a token")
    return elements


def _content_length(values: Sequence[str]) -> int:
    lengths = {e.strip() for value in values for e in value.split(",")}
    if len(lengths) != 1:
        raise Malformed("differing Content-Length values")
    [raw] = lengths
    if not raw.isascii() or not raw.isdigit() or len(raw) > _CONTENT_LENGTH_DIGITS:
        raise Malformed("Content-Length is not a number")
    return int(raw)


def _read_exactly(stream: BinaryIO, length: int) -> bytes:
    data = stream.read(length)
    if len(data) != length:
        raise Incomplete(f"the body ended after {len(data)} of {length} bytes")
    return data


def _line(stream: BinaryIO, what: str) -> bytes:
    line = stream.readline(_CHUNK_LINE_MAX + 1)
    if not line:
        raise Incomplete(f"the connection ended before the {what}")
    if len(line) > _CHUNK_LINE_MAX or not line.endswith(b"\r\n"):
        raise Malformed(f"{what} too long or not ended by CRLF")
    return line


def _read_chunked(stream: BinaryIO, limit: int, trailer_budget: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        match = _CHUNK_LINE.fullmatch(_line(stream, "chunk size line"))
        if match is None:
            raise Malformed("chunk size is not hexadecimal digits")
        length = int(match.group(1), 16)
        if length == 0:
            _skip_trailers(stream, trailer_budget)
            return b"".join(chunks)
        size += length
        if size > limit:
            raise TooLarge(f"chunked body over the {limit}-byte limit")
        chunks.append(_read_exactly(stream, length))
        if _read_exactly(stream, 2) != b"\r\n":
            raise Malformed("chunk data not followed by CRLF")


def _skip_trailers(stream: BinaryIO, budget: int) -> None:
    while True:
        line = _line(stream, "trailer section")
        budget -= len(line)
        if budget < 0:
            raise TooLarge("trailer fields over the header limit")
        if line == b"\r\n":
            return
        if b":" not in line or line[:1] in (b" ", b"\t"):
            raise Malformed("a trailer line is not a field")
