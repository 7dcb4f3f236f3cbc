"""`python -m emulators.oidc`: run the local OIDC issuer until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import contextlib
import signal

from emulators.oidc.server import start
from emulators.stop_signal import StopSignal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulators.oidc", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args(argv)
    stop = StopSignal.on(signal.SIGTERM)
    try:
        server = start(args.host, args.port)
    except OSError as exc:
        parser.exit(2, f"oidc: cannot listen on {args.host}:{args.port}: {exc.strerror}\n")
    with server:
        print(f"export JOBS_OIDC_CERTS_URL={server.certs_url}", flush=True)
        print(f"# tokens: POST {server.token_url} with JSON audience, email", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
