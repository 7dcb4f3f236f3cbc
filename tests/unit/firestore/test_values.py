"""Value ordering, field paths and the sorted index: pure logic, no server."""

from __future__ import annotations

import bisect
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulators.firestore.database import SortedIndex
from emulators.firestore.errors import InvalidArgument
from emulators.firestore.values import (
    ArrayValue,
    MapValue,
    Value,
    check_writable_path,
    format_field_path,
    get_field,
    parse_field_path,
    sort_key,
    writable_path,
)


def _ts(seconds: int) -> Value:
    v = Value()
    v.timestamp_value.seconds = seconds
    return v


ORDERED = [
    Value(null_value=0),
    Value(boolean_value=False),
    Value(boolean_value=True),
    Value(double_value=math.nan),
    Value(double_value=-math.inf),
    Value(integer_value=-3),
    Value(double_value=0.5),
    Value(integer_value=1),
    Value(double_value=math.inf),
    _ts(0),
    _ts(10),
    Value(string_value=""),
    Value(string_value="a"),
    Value(string_value="é"),
    Value(string_value="\uffff"),
    Value(string_value="😀"),
    Value(bytes_value=b""),
    Value(bytes_value=b"\x01"),
    Value(reference_value="projects/p/databases/d/documents/a/b"),
    Value(reference_value="projects/p/databases/d/documents/a/b/c/d"),
    Value(reference_value="projects/p/databases/d/documents/aa/b"),
    Value(array_value=ArrayValue(values=[])),
    Value(array_value=ArrayValue(values=[Value(integer_value=1)])),
    Value(array_value=ArrayValue(values=[Value(integer_value=1), Value(integer_value=0)])),
    Value(array_value=ArrayValue(values=[Value(integer_value=2)])),
    Value(map_value=MapValue(fields={})),
    Value(map_value=MapValue(fields={"a": Value(integer_value=2)})),
    Value(map_value=MapValue(fields={"b": Value(integer_value=1)})),
]


def test_sort_keys_follow_firestores_cross_type_order() -> None:
    keys = [sort_key(v) for v in ORDERED]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)


def test_integer_and_double_of_equal_value_are_equal() -> None:
    assert sort_key(Value(integer_value=1)) == sort_key(Value(double_value=1.0))
    assert sort_key(Value(double_value=-0.0)) == sort_key(Value(integer_value=0))


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        ("a", ("a",)),
        ("a.b_c.d1", ("a", "b_c", "d1")),
        ("`a.b`.c", ("a.b", "c")),
        ("`with \\` tick`", ("with ` tick",)),
        ("`1st`", ("1st",)),
    ],
)
def test_field_paths_parse(text: str, segments: tuple[str, ...]) -> None:
    assert parse_field_path(text) == segments


@pytest.mark.parametrize("text", ["", "a..b", ".a", "a.", "1st", "a-b", "`open", "a.`b`c"])
def test_invalid_field_paths_are_invalid_argument(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_field_path(text)


@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4))
def test_formatting_a_field_path_parses_back_to_the_same_segments(segments: list[str]) -> None:
    assert parse_field_path(format_field_path(tuple(segments))) == tuple(segments)


def _checked(text: str) -> tuple[str, ...] | str:
    """What parse_field_path then check_writable_path make of `text`: its path or the error."""
    try:
        path = parse_field_path(text)
        check_writable_path(path)
    except InvalidArgument as exc:
        return exc.message
    return path


def _remembered(text: str) -> tuple[str, ...] | str:
    try:
        return writable_path(text)
    except InvalidArgument as exc:
        return exc.message


paths_texts = st.one_of(
    st.lists(
        st.sampled_from(["a", "b", "__x__", "`__y__`", "`a.b`", "", "1", "`"]), max_size=22
    ).map(".".join),
    st.text(max_size=12),
)


@given(st.lists(paths_texts, min_size=1, max_size=6))
def test_a_remembered_writable_path_is_what_parsing_and_checking_it_again_gives(
    texts: list[str],
) -> None:
    # Each text twice: the second answer may come from what the first remembered, and a path
    # that failed (bad syntax, a reserved name, nested too deeply) fails the same way again.
    for text in [*texts, *texts]:
        assert _remembered(text) == _checked(text)


def test_get_field_does_not_add_a_missing_top_level_field() -> None:
    fields = MapValue(fields={"a": Value(string_value="x")}).fields
    assert get_field(fields, ("b",)) is None
    assert get_field(fields, ("a",)) == Value(string_value="x")
    assert list(fields) == ["a"]


bounds = st.tuples(st.integers(-1, 7), st.booleans())


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    adds=st.sampled_from([0.5, 0.6, 0.8]),
    block=st.sampled_from([4, 8, 512]),
    low=bounds,
    high=bounds,
)
def test_a_sorted_index_in_blocks_answers_as_one_sorted_list(
    seed: int, adds: float, block: int, low: tuple[int, bool], high: tuple[int, bool]
) -> None:
    # Long runs of inserts and deletes (drawn from `seed`) into few keys, so that small blocks
    # split and merge often; positions, spans and names must be those of one sorted list kept
    # by insort and del.
    draw = random.Random(seed)
    model = sorted({((2, 1, draw.randint(0, 6)), draw.choice("ab")) for _ in range(14)})
    index = SortedIndex(model, block=block)
    for _ in range(300):
        entry = ((2, 1, draw.randint(0, 6)), draw.choice("abcd"))
        if draw.random() < adds:
            if entry not in model:
                bisect.insort(model, entry)
                index.add(*entry)
        else:
            if entry in model:
                model.remove(entry)
            index.remove(*entry)
        assert len(index) == len(model)
    assert index.entries == model
    (lo_n, lo_inclusive), (hi_n, hi_inclusive) = low, high
    lo, hi = index.span((2, 1, lo_n), lo_inclusive, (2, 1, hi_n), hi_inclusive)
    inside = [
        name
        for (_, _, n), name in model
        if (n >= lo_n if lo_inclusive else n > lo_n) and (n <= hi_n if hi_inclusive else n < hi_n)
    ]
    assert index.between((2, 1, lo_n), lo_inclusive, (2, 1, hi_n), hi_inclusive) == inside
    assert [name for _, name in model[lo:hi]] == inside
    for a in range(len(model) + 1):
        for b in (a, a + 1, len(model)):
            names = [name for _, name in model[a:b]]
            assert list(index.names(a, b)) == names
            assert list(index.names(a, b, reverse=True)) == names[::-1]
    for n in range(8):
        at_n = [name for (_, _, m), name in model if m == n]
        assert index.between((2, 1, n), True, (2, 1, n), True) == at_n
        assert index.count_between((2, 1, n), False, (3,), False) == sum(
            1 for (_, _, m), _ in model if m > n
        )
    for entry in model:  # each one is found where it is
        index.remove(*entry)
    assert len(index) == 0
    assert index.entries == []


def test_sorted_index_ranges_are_inclusive_or_exclusive_as_asked() -> None:
    index = SortedIndex([((2, 1, i), f"d{i}") for i in range(5)])
    index.add((2, 1, 2), "d2b")
    index.remove((2, 1, 4), "d4")
    assert index.between((2,), True, (2, 1, 2), True) == ["d0", "d1", "d2", "d2b"]
    assert index.between((2, 1, 2), False, (3,), False) == ["d3"]
    assert index.count_between((2, 1, 1), True, (2, 1, 3), False) == 3
