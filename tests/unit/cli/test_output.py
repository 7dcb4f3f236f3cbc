"""Tables, JSON and progress bars: the same data, readable by people and by scripts."""

from __future__ import annotations

import datetime
import enum
import io
import json
from dataclasses import dataclass

from services.cli.output import Progress, Report, fields, table, to_json, write

WHEN = datetime.datetime(2026, 11, 30, 4, 12, 5, 900_000, tzinfo=datetime.UTC)


class Colour(enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class Point:
    at: datetime.datetime
    colour: Colour


def test_table_aligns_columns_and_marks_empty_cells() -> None:
    text = table(["id", "state", "due"], [["a", "deferred", WHEN], ["long-id", None, 12345]])
    assert text.splitlines() == [
        "id       state     due",
        "a        deferred  2026-11-30 04:12:05Z",
        "long-id  -         12,345",
    ]


def test_fields_align_keys() -> None:
    assert fields([("id", "j1"), ("paused", True)]).splitlines() == ["id:      j1", "paused:  yes"]


def test_json_renders_timestamps_enums_and_dataclasses() -> None:
    assert to_json({"p": Point(WHEN, Colour.RED), "n": [float("inf")]}) == {
        "p": {"at": "2026-11-30T04:12:05.900000Z", "colour": "red"},
        "n": [None],
    }


def test_write_emits_json_or_text_for_the_same_report() -> None:
    report = Report(data={"due": 3}, text="3 due")
    as_json, as_text = io.StringIO(), io.StringIO()
    write(report, as_json, as_json=True)
    write(report, as_text, as_json=False)
    assert json.loads(as_json.getvalue()) == {"due": 3}
    assert as_text.getvalue() == "3 due\n"


def test_progress_off_a_terminal_prints_a_line_per_ten_percent() -> None:
    stream = io.StringIO()
    progress = Progress(stream, "reclaim", total=100)
    for _ in range(100):
        progress.advance()
    progress.finish()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 10  # 10 %, 20 %, ... 100 %; the final line is not repeated
    assert lines[-1] == "reclaim: [" + "#" * 30 + "] 100/100 (100%)"


def test_progress_without_a_total_counts_items() -> None:
    stream = io.StringIO()
    progress = Progress(stream, "list")
    progress.advance(2500)
    progress.advance(10)
    progress.finish()
    assert stream.getvalue().splitlines() == ["list: 2,500", "list: 2,510"]
