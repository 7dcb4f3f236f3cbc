"""What one streamed gRPC message costs in Python's grpcio, server and client, against the same
bytes sent in one message: the floor under the scan's claim query.

Firestore's RunQuery answers one document per streamed response
(https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#runqueryresponse),
so a claim page of 500 records is 500 messages, where the raw side of `scanraw` sends its 500
writes in one Commit. A bare server (`grpc.server` on a thread pool, and `grpc.aio.server`)
in its own process streams opaque 1,500-byte payloads, about a job document's size, to a plain
grpcio channel in this one; no protobuf parsing on either side. It prints, per message, the
client's CPU and the server process's CPU (its idle start-up subtracted), and the same for
one unary answer carrying a whole page's bytes.
Run: `.venv/bin/python -m tests.benchmarks grpcstream`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from concurrent import futures
from typing import Any

from tests.benchmarks import rig

PAYLOAD = b"x" * 1_500
PAGE = 500
CALLS = 40
SERVICE = "bench.Stream"


def main() -> None:
    for kind in ("sync", "aio"):
        streamed, unary = _measure(kind)
        print(f"{kind} server: {streamed}")
        print(f"{kind} server, a page as one message: {unary}")


def _measure(kind: str) -> tuple[str, str]:
    import grpc

    from emulators.launcher import free_port

    port = free_port("127.0.0.1")
    command = [sys.executable, "-m", "tests.benchmarks.bench_grpcstream", kind, str(port)]
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        process = rig.LauncherProcess({}, {}, server.pid)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stream = channel.unary_stream(f"/{SERVICE}/Page")
        whole = channel.unary_unary(f"/{SERVICE}/Whole")
        assert sum(1 for _ in stream(b"")) == PAGE and len(whole(b"")) == PAGE * len(PAYLOAD)
        results = []
        calls = (lambda: sum(1 for _ in stream(b"")), lambda: len(whole(b"")))
        for count in calls:
            remote, local, started = process.cpu_s(), time.process_time(), time.perf_counter()
            for _ in range(CALLS):
                count()
            wall = time.perf_counter() - started
            local_us = 1e6 * (time.process_time() - local) / (CALLS * PAGE)
            remote_us = 1e6 * (process.cpu_s() - remote) / (CALLS * PAGE)
            results.append(
                f"{CALLS * PAGE:,} records in {wall:.2f} s = {CALLS * PAGE / wall:,.0f}/s; CPU "
                f"per record: client {local_us:.1f} us, server {remote_us:.1f} us"
            )
        channel.close()
        return results[0], results[1]
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=30)


def _handlers() -> Any:
    import grpc

    def page(request: bytes, context: Any) -> Any:
        for _ in range(PAGE):
            yield PAYLOAD

    async def page_async(request: bytes, context: Any) -> Any:
        for _ in range(PAGE):
            yield PAYLOAD

    def whole(request: bytes, context: Any) -> bytes:
        return PAYLOAD * PAGE

    return grpc, page, page_async, whole


def _serve(kind: str, port: int) -> None:
    grpc, page, page_async, whole = _handlers()
    methods = {
        "Page": grpc.unary_stream_rpc_method_handler(page if kind == "sync" else page_async),
        "Whole": grpc.unary_unary_rpc_method_handler(whole),
    }
    handler = grpc.method_handlers_generic_handler(SERVICE, methods)
    if kind == "sync":
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=10))
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        print("ready", flush=True)
        sys.stdin.read()  # until the benchmark closes our stdin
        server.stop(None)
        return

    async def serve() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await server.stop(None)

    asyncio.run(serve())


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
    os._exit(0)
