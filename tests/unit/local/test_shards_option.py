"""`python -m services.local --shards N`: the option's bounds, and kept data that was written
with another N is refused before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.jobs.shard import MAX_SHARDS
from services.local.__main__ import parse_args
from services.local.stack import StackError
from services.local.system import SHARDS_MARK, Options, check_kept_shards


def test_the_index_set_is_the_one_infra_deploys_for_that_n() -> None:
    assert Options().firestore_indexes == "services.jobs.schema"
    assert Options(shards=4).firestore_indexes == "services.jobs.schema?shards=4"
    assert parse_args(["--shards", "16"]).shards == 16
    assert parse_args([]).shards == 1


@pytest.mark.parametrize("value", ["0", "-1", str(MAX_SHARDS + 1), "four", "2.5"])
def test_a_shard_count_out_of_range_is_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--shards", value])
    assert exit_info.value.code == 2
    assert f"not a whole number from 1 to {MAX_SHARDS}" in capsys.readouterr().err


def test_fresh_data_records_its_n_and_the_same_n_runs_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    check_kept_shards(data, 4)
    assert (data / SHARDS_MARK).read_text() == "4\n"
    check_kept_shards(data, 4)


def test_data_written_with_another_n_is_refused_naming_the_way_out(tmp_path: Path) -> None:
    data = tmp_path / "data"
    check_kept_shards(data, 4)
    with pytest.raises(
        StackError, match=r"written with --shards 4; run with --shards 4, or --fresh"
    ):
        check_kept_shards(data, 1)
    assert (data / SHARDS_MARK).read_text() == "4\n"  # the refused run changed nothing


def test_data_kept_before_the_mark_existed_counts_as_unsharded(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "firestore.json").write_text("{}")
    with pytest.raises(StackError, match="--shards 1"):
        check_kept_shards(data, 8)
    check_kept_shards(data, 1)
    assert (data / SHARDS_MARK).read_text() == "1\n"
