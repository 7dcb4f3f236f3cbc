"""``python -m emulators.firestore --host 127.0.0.1 --port 8080 [--admin-port 8081]``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from emulators.firestore import indexes
from emulators.firestore.server import PortInUse, start
from emulators.port_number import MAX_PORT, port_number
from emulators.stop_signal import StopSignal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m emulators.firestore",
        description="Built-in Firestore emulator (gRPC google.firestore.v1.Firestore).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=port_number, default=8080)
    parser.add_argument("--admin-port", type=port_number, default=None, help="default: port + 1")
    parser.add_argument("--transaction-timeout", type=float, default=270.0)
    parser.add_argument("--transaction-idle-timeout", type=float, default=60.0)
    parser.add_argument(
        "--read-abort-rate",
        type=float,
        default=0.0,
        help="share of reads in read-write transactions that answer ABORTED (0-1)",
    )
    parser.add_argument(
        "--indexes",
        metavar="SPEC",
        help="strict mode: indexes from a firestore.indexes.json, a module, module?key=value"
        " (services.jobs.schema?shards=4) or module:NAME",
    )
    args = parser.parse_args(argv)
    if not 0.0 <= args.read_abort_rate <= 1.0:
        parser.error("--read-abort-rate must be between 0 and 1")
    if args.admin_port is None and args.port == MAX_PORT:
        parser.error(f"--port {MAX_PORT} has no port + 1 for the admin server: pass --admin-port")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    admin_port = (
        args.admin_port if args.admin_port is not None else (args.port + 1 if args.port else 0)
    )
    try:
        declared = indexes.load(args.indexes) if args.indexes else None
    except indexes.IndexDefinitionError as exc:
        parser.error(f"--indexes: {exc}")
    try:
        emulator = start(
            args.host,
            args.port,
            admin_port,
            transaction_timeout_s=args.transaction_timeout,
            transaction_idle_timeout_s=args.transaction_idle_timeout,
            indexes=declared,
            read_abort_rate=args.read_abort_rate,
        )
    except PortInUse as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stop = StopSignal.on(signal.SIGINT, signal.SIGTERM)
    print(
        f"Firestore emulator listening on {emulator.address}; admin on {emulator.admin_url}\n"
        f"export FIRESTORE_EMULATOR_HOST={emulator.address}",
        flush=True,
    )
    stop.wait()
    emulator.stop()
    print("Firestore emulator stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
