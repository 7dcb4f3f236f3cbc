"""Page tokens for the List* RPCs: an opaque token that is the offset of the next page."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from emulators.pubsub.exceptions import InvalidArgument

T = TypeVar("T")

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


def page(items: Sequence[T], page_size: int, page_token: str) -> tuple[Sequence[T], str]:
    """One page of `items` and the token of the next page ("" when it was the last)."""
    if page_size < 0:
        raise InvalidArgument("page_size must not be negative.")
    size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    start = 0
    if page_token:
        if not page_token.startswith("o") or not page_token[1:].isdigit():
            raise InvalidArgument(f"Invalid page token: {page_token}")
        start = int(page_token[1:])
    end = start + size
    return items[start:end], (f"o{end}" if end < len(items) else "")
