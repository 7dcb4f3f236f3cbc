"""`python -m services.local` (`make run`): the whole system locally, until Ctrl-C.

Starts the emulators, the scan and the worker (functions-framework, one process each, each
behind the local Cloud Run front end that checks invokers as Cloud Run's IAM does), the
Pub/Sub topology the way infra/ builds it, the local Cloud Scheduler (emulators/scheduler)
that calls the scan with OIDC tokens on the default stack's schedule (* * * * *, Etc/UTC) plus
one forced run at start, and a demo; prints a line per scan attempt. Ctrl-C or SIGTERM stops
every child process. Exit codes: 0 stopped cleanly (or demo done with --exit-when-done);
1 a process died, the demo timed out, or this process's own exit hung for 10 s after every child
stopped (every thread's stack is printed); 2 bad usage, a port in use, another stack running with
the same --log-dir, kept data written with another --shards, or gcloud missing.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path

from emulators.launcher import DEFAULT_PROJECT
from emulators.port_number import port_number
from services.jobs.http_targets import (
    ENV_VARIABLE,
    HttpTarget,
    TargetsError,
    parse_targets,
    target_flag,
)
from services.jobs.shard import MAX_SHARDS
from services.local.stack import ChildDied, StackError
from services.local.system import ROOT, DemoTimeout, LocalSystem, Options, Ports

EXIT_WATCHDOG_S = 10.0  # how long the interpreter may take to exit once every child stopped


def parse_args(argv: list[str] | None, environ: Mapping[str, str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m services.local",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = Ports()
    for f in fields(Ports):
        flag = f"--{f.name.replace('_', '-')}-port"
        parser.add_argument(
            flag,
            type=port_number,
            default=getattr(defaults, f.name),
            help=f"default {getattr(defaults, f.name)}; 0 picks a free port",
        )
    parser.add_argument(
        "--free-ports",
        action="store_true",
        help="pick a free port for everything (overrides the port flags)",
    )
    parser.add_argument(
        "--test-cadence-s",
        type=float,
        metavar="SECONDS",
        help="TEST SETTING: trigger the scan every SECONDS instead of on the stack's cron "
        "schedule (Cloud Scheduler cannot fire more than once a minute; nothing measured with "
        "it is a production figure). Default: the stack's schedule",
    )
    parser.add_argument(
        "--project",
        default=DEFAULT_PROJECT,
        help=f"Google Cloud project ID (default {DEFAULT_PROJECT})",
    )
    parser.add_argument(
        "--official",
        action="store_true",
        help="Google's Firestore and Pub/Sub emulators via gcloud",
    )
    parser.add_argument(
        "--exit-when-done",
        action="store_true",
        help="stop everything and exit 0 once the demo's due jobs completed",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="exit 1 if the demo is not done by then (a number above 0)",
    )
    parser.add_argument(
        "--shards",
        type=_shard_count,
        default=1,
        metavar="N",
        help=f"shards of the due index (JOBS_SHARDS for every service and the env file, and "
        f"the emulator's index set of that N; 1 to {MAX_SHARDS}, default 1)",
    )
    parser.add_argument("--no-demo", action="store_true", help="seed nothing")
    parser.add_argument(
        "--direct",
        action="store_true",
        help="no local Cloud Run front end: callers reach the services' ports directly",
    )
    parser.add_argument(
        "--image",
        metavar="IMAGE",
        help="run the scan, worker and api from this container image with podman, behind the "
        "front ends (the emulators stay on this host; docs/image.md)",
    )
    parser.add_argument(
        "--invoker-iam-disabled",
        action="store_true",
        help="front ends without the invoker check (Cloud Run's invoker_iam_disabled); the "
        "services then verify full signatures",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start the emulators empty and keep nothing (default: keep their data in "
        "LOG_DIR/data between runs)",
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=ROOT / ".local",
        help="child process logs (appended), the env file and the lock that allows one "
        "stack per directory (default .local/)",
    )
    parser.add_argument(
        "--http-target",
        action="append",
        default=[],
        metavar="NAME=URL",
        help=f"an HTTP target the HTTP action's jobs may name (repeatable; audience: the URL's "
        f"origin). Added to {ENV_VARIABLE} from this environment (a flag replaces a target "
        "of the same name there); the worker, the api and the env file get the result, and "
        "the worker's ID tokens come from the local OIDC issuer",
    )
    parser.add_argument(
        "--log-level", default="WARNING", help="this process's log level (default WARNING)"
    )
    args = parser.parse_args(argv)
    try:
        http_targets = http_targets_of(args.http_target, os.environ if environ is None else environ)
    except TargetsError as exc:
        parser.error(str(exc))
    if args.test_cadence_s is not None and not 0 < args.test_cadence_s < math.inf:
        parser.error("--test-cadence-s must be a number of seconds above 0")  # also nan
    if args.timeout is not None and not 0 < args.timeout < math.inf:
        parser.error("--timeout must be a number of seconds above 0")
    if args.image is not None and (args.direct or not args.image.strip()):
        parser.error("--image needs an image name and the front ends (not with --direct)")
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    ports = (
        Ports.all_free()
        if args.free_ports
        else Ports(**{f.name: getattr(args, f"{f.name}_port") for f in fields(Ports)})
    )
    return Options(
        ports=ports,
        project=args.project,
        test_cadence_s=args.test_cadence_s,
        official=args.official,
        exit_when_done=args.exit_when_done,
        timeout_s=args.timeout,
        log_dir=args.log_dir,
        demo=not args.no_demo,
        cloud_run=not args.direct,
        invoker_iam=not args.invoker_iam_disabled,
        fresh=args.fresh,
        shards=args.shards,
        image=args.image,
        http_targets=http_targets,
    )


def http_targets_of(flags: list[str], environ: Mapping[str, str]) -> dict[str, HttpTarget]:
    """JOBS_HTTP_TARGETS of this process's environment, then each `--http-target NAME=URL`
    (replacing a target of the same name); TargetsError names the key or the flag."""
    targets = parse_targets(environ.get(ENV_VARIABLE))
    for flag in flags:
        targets.update(target_flag(flag))
    return targets


def _shard_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"not a whole number from 1 to {MAX_SHARDS}: {text!r}")
    return value


def main(argv: list[str] | None = None, *, exit_watchdog: bool = False) -> int:
    """Run the stack; `exit_watchdog` (the program, not a caller in-process) arms
    `arm_exit_watchdog` once every child stopped, before this frame's clients are released:
    that release is where a half-done gRPC call once hung the exit."""
    options = parse_args(argv)
    system = LocalSystem(options, sys.stdout)
    # SIGINT and SIGTERM both stop the stack like Ctrl-C, never inside a client call.
    system.interrupts.install()
    try:
        return system.run()
    except KeyboardInterrupt:
        return 0
    except (ChildDied, DemoTimeout) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    except StackError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    finally:
        if exit_watchdog:
            arm_exit_watchdog()


def arm_exit_watchdog(seconds: float = EXIT_WATCHDOG_S) -> None:
    """Every child is stopped by now. If this interpreter's own shutdown has still not finished
    `seconds` later (a client library's thread or atexit handler waiting on something), print
    every thread's stack to stderr and exit 1, rather than leave the shell hanging with no clue
    (https://docs.python.org/3/library/faulthandler.html#faulthandler.dump_traceback_later)."""
    sys.stdout.flush()
    faulthandler.dump_traceback_later(seconds, exit=True)


if __name__ == "__main__":
    sys.exit(main(exit_watchdog=True))
