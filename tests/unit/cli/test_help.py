"""Every jobsctl flag explains itself, and the help texts render as written."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from services.cli.app import build_parser, main


def _parsers(
    parser: argparse.ArgumentParser, path: str = "jobsctl"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def test_every_flag_and_argument_of_every_command_has_help_text() -> None:
    missing = [
        f"{path} {'/'.join(action.option_strings) or action.dest}"
        for path, parser in _parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
        and not (action.help or "").strip()
    ]
    assert missing == []


def test_no_help_text_shows_a_doubled_percent_sign(capsys: pytest.CaptureFixture[str]) -> None:
    for path, _ in _parsers(build_parser()):
        argv = path.split()[1:]
        with pytest.raises(SystemExit):
            build_parser().parse_args([*argv, "--help"])
        text = capsys.readouterr().out
        assert "%%" not in text, path
    assert main(["plan", "--help"]) == 0
    assert "--reserve % kept" in capsys.readouterr().out.replace("\n", " ").replace("  ", " ")


def test_a_usage_error_is_one_json_line_on_stderr_with_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["list", "--limit", "x", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert '"exit_code": 2' in captured.err and captured.err.count("\n") == 1
