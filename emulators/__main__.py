"""`python -m emulators`: run every local emulator until Ctrl-C or SIGTERM.

Prints the environment a shell needs (`export ...` lines) once everything listens, then a
`# emulators ready` line. In another shell: `eval "$(grep ^export FILE)"` after
`python -m emulators --env-file FILE`, or copy the lines.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from emulators.launcher import (
    DEFAULT_HOST,
    DEFAULT_PROJECT,
    DEFAULT_START_TIMEOUT_S,
    PROJECT_INDEXES,
    READY_LINE,
    LaunchError,
    Ports,
    Stack,
    start_builtin,
    start_official,
)
from emulators.port_number import port_number
from emulators.pubsub.limits import DEFAULT_PUSH_CONCURRENCY

EXIT_LAUNCH_FAILED = 2
EXIT_INTERRUPTED = 130


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m emulators",
        description="Run the Firestore, Pub/Sub, OIDC, Cloud Storage and Monitoring emulators "
        "together.",
    )
    defaults = Ports()
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help="listen address (default: %(default)s)"
    )
    parser.add_argument("--project", default=DEFAULT_PROJECT, help="project id to export")
    for name, port in defaults.named():
        flag = "--" + name.replace(" ", "-") + "-port"
        parser.add_argument(
            flag, type=port_number, default=port, help=f"0 = any free port ({port})"
        )
    parser.add_argument(
        "--official",
        action="store_true",
        help="run Google's Firestore and Pub/Sub emulators through gcloud instead",
    )
    parser.add_argument(
        "--start-timeout", type=float, default=DEFAULT_START_TIMEOUT_S, help=argparse.SUPPRESS
    )
    parser.add_argument("--env-file", type=Path, help="also write the export lines to this file")
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="load Firestore, Pub/Sub and Cloud Storage state from DIR at start and keep every "
        "write they acknowledge on disk there (a crash loses none); without it everything "
        "starts empty and is lost",
    )
    parser.add_argument(
        "--firestore-indexes",
        default=PROJECT_INDEXES,
        metavar="SPEC",
        help="indexes Firestore enforces, as production does: a firestore.indexes.json, a module"
        " (its index_definitions(), else INDEXES and INDEX_EXEMPTIONS), module?shards=4 (the"
        " set of that configuration) or module:NAME (default: %(default)s); 'off' serves"
        " every query",
    )
    parser.add_argument(
        "--pubsub-push-concurrency",
        type=_at_least_one,
        default=DEFAULT_PUSH_CONCURRENCY,
        metavar="N",
        help="push requests in flight per subscription (default: %(default)s); to model Cloud "
        "Run, its instances x per-instance concurrency",
    )
    parser.add_argument("--log-level", default="WARNING", help="emulator log level on stderr")
    return parser.parse_args(argv)


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a whole number of at least 1: {text!r}")
    return value


class _EnvFileError(LaunchError):
    """The env file could not be written."""


def ports_from(args: argparse.Namespace) -> Ports:
    values = {name: getattr(args, f"{name}_port") for name in Ports.__dataclass_fields__}
    return Ports(**values)


def launch(args: argparse.Namespace) -> Stack:
    ports = ports_from(args)
    if args.official:
        if args.data_dir is not None:
            raise LaunchError("--data-dir needs the built-in emulators; drop --official")
        return start_official(args.host, ports, args.project, start_timeout_s=args.start_timeout)
    index_spec = None if args.firestore_indexes == "off" else args.firestore_indexes
    return start_builtin(
        args.host,
        ports,
        args.project,
        firestore_indexes=index_spec,
        data_dir=args.data_dir,
        push_concurrency=args.pubsub_push_concurrency,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    # SIGTERM behaves like Ctrl-C from here on, so a stop during startup still cleans up.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        stack = launch(args)
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_LAUNCH_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    code = 0
    try:
        lines = stack.export_lines()
        if args.env_file:
            try:
                args.env_file.write_text("\n".join(lines) + "\n")
            except OSError as exc:  # a missing directory or no permission
                raise _EnvFileError(f"--env-file {args.env_file}: {exc.strerror or exc}") from exc
        print("\n".join([*lines, READY_LINE]), flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    except _EnvFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = EXIT_LAUNCH_FAILED
    finally:
        stack.stop()
    print("# emulators stopped", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
