"""A transient fault on every terminal write: a gRPC proxy before the Firestore emulator.

The worker's FIRESTORE_EMULATOR_HOST points here; every call is forwarded byte for byte. A
`Commit` that ends a lease (a write to `jobs/<id>` whose update mask carries
`ended_lease_token`, which `complete`, `fail`, `release`, `retry_later` and `cancel_running`
all set: services/jobs/fences.ended_by) is a terminal write, and the first attempt of each one
(per lease token) suffers a fault, alternating between:

- UNAVAILABLE, not forwarded: the request never reached the backend;
- DEADLINE_EXCEEDED after forwarding: the commit applied, its answer was lost.

The emulator's own fault injection is per method (the next N `Commit`s of anyone, or a delay
past the caller's timeout), so it cannot pick out terminal writes of a worker in another
process among the heartbeats, starts and the scan's claims; this proxy can, and it also records
every terminal write the worker got an OK for (what must survive a crash). Armed with
`crash_after_next`, the next terminal write is forwarded, and once the emulator has answered OK
the callback runs (the drill's SIGKILL of the emulators) and the worker gets UNAVAILABLE: a
write the emulator acknowledged an instant before it died, whose answer never came back.

With `write_faults` (issue 33: "ABORTED and UNAVAILABLE on every write"), every kind of write
through the proxy suffers faults too, not only terminal writes: a transaction's commit, a
conditional write (a precondition on update_time), a create (precondition: must not exist), a
plain write, and a BatchWrite (the scan's enqueue marks). The first distinct request of each
kind, and every `WRITE_FAULT_EVERY`-th after it, is refused once, before it reaches the
backend, alternately with ABORTED (what Firestore answers under contention, also outside a
transaction: https://cloud.google.com/firestore/docs/understand-error-codes) and UNAVAILABLE;
the same request sent again is forwarded, so a caller that retries gets through.

Not a benchmark itself (no `bench_` prefix).
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from services.jobs import schema

_SERVICE = "/google.firestore.v1.Firestore/"
# google.firestore.v1.Firestore's server-streaming methods; the rest the worker uses are unary
# (https://cloud.google.com/firestore/docs/reference/rpc/google.firestore.v1#firestore).
_SERVER_STREAMING = frozenset({"BatchGetDocuments", "RunQuery", "RunAggregationQuery"})
_MARK = "ended_lease_token"
_WRITES = frozenset({"Commit", "BatchWrite"})
WRITE_FAULT_EVERY = 3
_DROPPED_METADATA = ("user-agent", "grpc-", ":")


@dataclass(frozen=True)
class TerminalWrite:
    """One terminal write the proxy saw: the job, the state it writes, the lease's token."""

    job_id: str
    state: str
    token: str


@dataclass
class FaultLog:
    """What the proxy did, for the report."""

    injected: Counter[str] = field(default_factory=Counter)  # fault kind -> count
    by_state: Counter[str] = field(default_factory=Counter)  # terminal state -> faults
    passed: int = 0  # terminal writes forwarded and answered OK
    # Every terminal write the worker got an OK for, in order.
    acknowledged: list[TerminalWrite] = field(default_factory=list)
    # The terminal write the emulator acknowledged just before the crash (answer lost).
    crashed_on: TerminalWrite | None = None
    # With write_faults: (kind of write, status) -> faults injected.
    write_faults: Counter[tuple[str, str]] = field(default_factory=Counter)


class TerminalFaults(grpc.GenericRpcHandler):
    """The proxy: `start()` listens on 127.0.0.1 and returns host:port."""

    UNAVAILABLE = "UNAVAILABLE (not applied)"
    DEADLINE = "DEADLINE_EXCEEDED (applied, answer lost)"

    def __init__(self, upstream: str, *, write_faults: bool = False) -> None:
        self._upstream = grpc.insecure_channel(upstream)
        self.write_faults = write_faults
        self._seen_writes: Counter[str] = Counter()  # kind of write -> distinct requests
        self._write_faulted: set[bytes] = set()  # digests of requests already refused once
        self._server: Any = None
        self._lock = threading.Lock()
        self._faulted: set[str] = set()  # lease tokens whose terminal write already failed once
        self._next_kind = 0
        self.log = FaultLog()
        self.enabled = True
        self._crash: Callable[[], None] | None = None
        self._open = threading.Event()
        self._open.set()
        from google.cloud.firestore_v1.types import firestore as types

        self._commit_request = types.CommitRequest.pb()
        self._batch_write_request = types.BatchWriteRequest.pb()

    def start(self) -> str:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
        self._server.add_generic_rpc_handlers((self,))
        port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return f"127.0.0.1:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=1).wait()
        self._upstream.close()

    def hold(self) -> None:
        """Calls wait before they are forwarded (a network stall) until `resume()`."""
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    def crash_after_next(self, crash: Callable[[], None] | None) -> None:
        """Run `crash` once, right after the emulator acknowledged the next terminal write
        (None: disarm)."""
        with self._lock:
            self._crash = crash

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        method = str(details.method)
        if not method.startswith(_SERVICE):
            return None
        name = method.removeprefix(_SERVICE)
        if name in _SERVER_STREAMING:
            return grpc.unary_stream_rpc_method_handler(
                lambda request, context: self._stream(method, request, context)
            )
        return grpc.unary_unary_rpc_method_handler(
            lambda request, context: self._unary(method, name, request, context)
        )

    # -- forwarding -----------------------------------------------------------------------

    def _call_options(self, context: grpc.ServicerContext) -> dict[str, Any]:
        metadata = [
            (key, value)
            for key, value in context.invocation_metadata()
            if not key.startswith(_DROPPED_METADATA)
        ]
        remaining = context.time_remaining()
        timeout = remaining if remaining is not None and remaining < 3600 else None
        return {"metadata": metadata, "timeout": timeout}

    def _unary(self, method: str, name: str, request: bytes, context: grpc.ServicerContext) -> Any:
        write = self._terminal_write(request) if name == "Commit" else None
        fault = self._fault_for(write) if write is not None else None
        if fault == self.UNAVAILABLE:
            context.abort(grpc.StatusCode.UNAVAILABLE, "injected: terminal write not applied")
        if fault is None and self.write_faults and name in _WRITES:
            code = self._write_fault(name, request)
            if code is not None:
                context.abort(code, f"injected: {code.name} before the write reached the backend")
        self._open.wait(timeout=600)
        try:
            response = self._upstream.unary_unary(method)(request, **self._call_options(context))
        except grpc.RpcError as exc:
            context.abort(exc.code(), exc.details() or "")
        if fault == self.DEADLINE:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "injected: applied, answer lost")
        if write is not None:
            with self._lock:
                crash, self._crash = self._crash, None
            if crash is not None:
                self.log.crashed_on = write
                crash()
                context.abort(grpc.StatusCode.UNAVAILABLE, "the emulator died after the commit")
        if write is not None:
            with self._lock:
                self.log.passed += 1
                self.log.acknowledged.append(write)
        return response

    def _stream(self, method: str, request: bytes, context: grpc.ServicerContext) -> Any:
        self._open.wait(timeout=600)
        try:
            yield from self._upstream.unary_stream(method)(request, **self._call_options(context))
        except grpc.RpcError as exc:
            context.abort(exc.code(), exc.details() or "")

    # -- the faults -----------------------------------------------------------------------

    def _terminal_write(self, request: bytes) -> TerminalWrite | None:
        try:
            commit = self._commit_request.FromString(request)
        except Exception:  # not ours to judge: forwarded as it came
            return None
        for write in commit.writes:
            if not write.HasField("update") or _MARK not in write.update_mask.field_paths:
                continue
            document = write.update.name
            if f"/documents/{schema.JOBS}/" not in document:
                continue
            fields = write.update.fields
            token = fields[_MARK].string_value if _MARK in fields else ""
            state = fields["state"].string_value if "state" in fields else "?"
            if token:
                return TerminalWrite(document.rsplit("/", 1)[1], state, token)
        return None

    def _fault_for(self, write: TerminalWrite) -> str | None:
        """The fault of this attempt: one on the first attempt of each lease's terminal write."""
        with self._lock:
            if not self.enabled or write.token in self._faulted:
                return None
            self._faulted.add(write.token)
            kind = (self.UNAVAILABLE, self.DEADLINE)[self._next_kind % 2]
            self._next_kind += 1
            self.log.injected[kind] += 1
            self.log.by_state[write.state] += 1
            return kind

    def _write_fault(self, name: str, request: bytes) -> grpc.StatusCode | None:
        """The fault of this write (with `write_faults`): None, ABORTED or UNAVAILABLE."""
        kind = self._kind_of_write(name, request)
        digest = hashlib.sha256(request).digest()
        with self._lock:
            if not self.enabled or digest in self._write_faulted:
                return None
            self._seen_writes[kind] += 1
            seen = self._seen_writes[kind]
            if seen % WRITE_FAULT_EVERY != 1:  # the first of each kind, then every third
                return None
            self._write_faulted.add(digest)
            codes = (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE)
            code = codes[(seen // WRITE_FAULT_EVERY) % 2]
            self.log.write_faults[(kind, code.name)] += 1
            return code

    def _kind_of_write(self, name: str, request: bytes) -> str:
        if name == "BatchWrite":
            return "batch write"
        try:
            commit = self._commit_request.FromString(request)
        except Exception:  # not ours to judge
            return "write"
        if commit.transaction:
            return "transaction commit"
        for write in commit.writes:
            if write.HasField("current_document"):
                if write.current_document.HasField("update_time"):
                    return "conditional write"
                if write.current_document.HasField("exists") and not write.current_document.exists:
                    return "create"
        return "write"
