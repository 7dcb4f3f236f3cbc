"""`python -m emulators.cloudrun`: a local Cloud Run front end before one service.

    python -m emulators.cloudrun --service NAME --port 8100 --certs-url URL \\
        --invoker EMAIL [--audience URL] [--timeout S] [--concurrency N] \\
        [--invoker-iam-disabled] -- COMMAND...    # runs COMMAND as the container
    python -m emulators.cloudrun ... --upstream http://127.0.0.1:PORT   # a service already up

The container gets PORT, K_SERVICE, K_REVISION and K_CONFIGURATION, and must listen on PORT
(on 127.0.0.1). Once it does, the front end listens and prints one `# cloud run ready` line.
It stops, and stops the container, on Ctrl-C or SIGTERM, and exits 1 when the container exits.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time

from emulators.cloudrun.container import Container, StartupFailed
from emulators.cloudrun.contract import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT_S,
    MAX_CONCURRENCY,
    MAX_TIMEOUT_S,
    STARTUP_TIMEOUT_S,
    pending_wait_s,
)
from emulators.cloudrun.invoker import InvokerCheck, InvokerPolicy, UrlCerts, invoker_set
from emulators.cloudrun.proxy import FrontEnd, ServiceConfig, start
from emulators.port_number import port_number

READY_LINE = "# cloud run ready"
EXIT_CONTAINER_DIED = 1
EXIT_USAGE = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m emulators.cloudrun",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--service", required=True, help="the Cloud Run service name")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=port_number, default=0, help="0 = any free port")
    parser.add_argument("--certs-url", help="the issuer's certs (JOBS_OIDC_CERTS_URL)")
    parser.add_argument(
        "--invoker", action="append", default=[], help="an email with run.invoker (repeatable)"
    )
    parser.add_argument(
        "--audience", action="append", default=[], help="a custom audience (repeatable)"
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS")
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument(
        "--invoker-iam-disabled",
        action="store_true",
        help="no invoker check, tokens forwarded as sent (Cloud Run's invoker_iam_disabled)",
    )
    parser.add_argument("--startup-timeout", type=float, default=STARTUP_TIMEOUT_S)
    parser.add_argument("--upstream", help="proxy to this running service instead of a command")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the container's command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if bool(command) == bool(args.upstream):
        parser.error("give either a command after -- or --upstream, not both")
    if not 0 < args.timeout <= MAX_TIMEOUT_S:
        parser.error(f"--timeout must be above 0 and at most {MAX_TIMEOUT_S:g} s")
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        parser.error(f"--concurrency must be from 1 to {MAX_CONCURRENCY}")
    if not args.invoker_iam_disabled and not (args.certs_url and args.invoker):
        parser.error(
            "the invoker check needs --certs-url and --invoker (or --invoker-iam-disabled)"
        )
    args.command = command
    return args


def serve(
    args: argparse.Namespace, container: Container | None, startup_s: float = 0.0
) -> FrontEnd:
    """The front end before `container` (or `--upstream`); `startup_s`, how long the container
    took to listen, sets how long a request may wait for a free slot (contract.pending_wait_s)."""
    upstream = container.url if container is not None else args.upstream

    def config(url: str) -> ServiceConfig:
        check = None
        if not args.invoker_iam_disabled:
            policy = InvokerPolicy(url, invoker_set(args.invoker), tuple(args.audience))
            check = InvokerCheck(policy, UrlCerts(args.certs_url))
        return ServiceConfig(
            args.service,
            check,
            args.timeout,
            args.concurrency,
            max_pending_s=pending_wait_s(startup_s),
        )

    return start(config, upstream, args.host, args.port)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    container: Container | None = None
    front: FrontEnd | None = None
    try:
        started = time.monotonic()
        if args.command:
            container = Container.run(
                args.command, args.service, startup_timeout_s=args.startup_timeout
            )
        front = serve(args, container, time.monotonic() - started if container else 0.0)
        target = f"pid {container.process.pid} on port {container.port}" if container else ""
        print(
            f"{READY_LINE}: {args.service} at {front.url} → {target or args.upstream}", flush=True
        )
        if container is None:
            threading.Event().wait()
        code = container.process.wait() if container else 0
        print(f"error: the container of {args.service} exited with {code}", file=sys.stderr)
        return EXIT_CONTAINER_DIED
    except StartupFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONTAINER_DIED
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 0
    finally:
        if front is not None:
            front.stop()
        if container is not None:
            container.stop()


if __name__ == "__main__":
    sys.exit(main())
