"""`WrittenRecords`: the job records this process last wrote, with their update_time.

The next write of the same record (the scan's enqueue mark after its claim, the worker's
completion after its start) can then be conditioned on that update_time instead of reading the
record back in a transaction: Firestore applies a write with an `update_time` precondition only
if the document was last updated at exactly that time, and refuses it with FAILED_PRECONDITION
otherwise (https://cloud.google.com/firestore/docs/reference/rest/v1/Precondition). A refused
write changes nothing, and the caller falls back to the transaction that re-reads the record.
So an entry here is only ever a guess that saves a read: a stale or missing one costs the read
it would have cost anyway, never a lost or doubled change.

Bounded (oldest entries dropped first), since an entry whose second write never comes (a
failed publish, a released lease) is simply never taken out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

from services.jobs.record import Job

DEFAULT_CAPACITY = 50_000


class WrittenRecords:
    """A thread-safe, bounded map from a key (e.g. job ID and generation) to the written job."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        self._records: OrderedDict[Hashable, Job] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: Hashable, job: Job) -> None:
        """Remember `job` as written (it must carry its update_time to be of any use)."""
        if job.update_time is None:
            return
        with self._lock:
            self._records[key] = job
            self._records.move_to_end(key)
            while len(self._records) > self._capacity:
                self._records.popitem(last=False)

    def take(self, key: Hashable) -> Job | None:
        """The job remembered under `key`, removed; None when there is none."""
        with self._lock:
            return self._records.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)
