"""`python -m emulators.storage`: run the Cloud Storage emulator until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import contextlib
import signal

from emulators.stop_signal import StopSignal
from emulators.storage.server import ENV_VAR, start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulators.storage", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9023)
    parser.add_argument("--default-bucket", help="create this bucket at start")
    args = parser.parse_args(argv)
    stop = StopSignal.on(signal.SIGTERM)
    try:
        emulator = start(args.host, args.port, default_bucket=args.default_bucket)
    except OSError as exc:
        parser.exit(2, f"storage: cannot listen on {args.host}:{args.port}: {exc.strerror}\n")
    with emulator:
        print(f"export {ENV_VAR}={emulator.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
