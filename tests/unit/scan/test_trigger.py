from __future__ import annotations

import pytest

from services.scan.trigger import MAX_BODY_BYTES, Trigger, TriggerError, parse_trigger


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", Trigger()),
        (b"  \n", Trigger()),
        (b"{}", Trigger()),
        (b'{"dry_run": true}', Trigger(dry_run=True)),
        (b'{"dry_run": false}', Trigger(dry_run=False)),
    ],
)
def test_empty_or_known_options_are_accepted(body: bytes, expected: Trigger) -> None:
    assert parse_trigger(body) == expected


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[]", "JSON object"),
        (b'"dry_run"', "JSON object"),
        (b"null", "JSON object"),
        (b'{"dry_run": "yes"}', "'dry_run' must be a JSON boolean"),
        (b'{"dry_run": 1}', "'dry_run' must be a JSON boolean"),
        (b'{"limit": 5}', "unknown key 'limit'"),
        (b" " * (MAX_BODY_BYTES + 1), "larger than"),
    ],
)
def test_anything_else_is_refused_with_the_reason(body: bytes, reason: str) -> None:
    with pytest.raises(TriggerError, match=reason):
        parse_trigger(body)
