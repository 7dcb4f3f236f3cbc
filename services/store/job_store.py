"""FirestoreJobStore: every read and change of job records, composed of the store's roles.

The store is its roles, each a class on the one shared `documents.Documents`, inherited here
so that `store.claim_due(...)` is `Claims.claim_due` itself: no method is written twice.
Each role's method documents its contract (docs/state-machine.md, "Where things are"):
`scheduling.Scheduling` (the application's creates), `administration.Administration` (the
operator's reads and changes, the control document), `claims.Claims`, `reclaims.Reclaims`
(the scan), `leases.Leases` and `shared_keys.SharedKeys` (the worker), `forecasts.Forecasts`
and `selections.Selections` (the calendar's counts, an operator's filter: read only). Roles
never import each other (tests/unit/test_layers.py), and no two define the same name
(tests/unit/store/test_job_store_roles.py).

Every change of a job asks `transitions.Transitions` for the new record (which asks
`state.apply_transition`: the only place the rules live) and writes only the fields that
changed, but not every change is a transaction. `schedule` creates (a write refused when the
document exists). Most transitions run in a Firestore transaction that re-reads the document
(`transactions.py`). The worker's `start` and `complete` first try one write conditioned on
the update_time of their own read or last write (a compare-and-set; a transaction decides
when it cannot), and `mark_enqueued_many` marks the claims this store wrote itself in one
batch of writes each conditioned on its claim's update_time (each applied or refused on its
own). `record_housekeeping` is one unconditional merge of its map. Each role's docstring says
which. The query shapes live in `queries.py` (as `QuerySpec` values a test proves are served
by a declared index).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import timedelta

from google.api_core import retry as api_retry
from google.cloud import firestore

from services.jobs.catalogue import Catalogue
from services.jobs.clock import Clock
from services.jobs.state import DEFAULT_HISTORY_LIMIT
from services.jobs.transitions import DEFAULT_TERMINAL_RETENTION
from services.store.administration import Administration
from services.store.bounds import DEFAULT_CALL_TIMEOUT_S
from services.store.claims import Claims
from services.store.documents import Documents
from services.store.forecasts import Forecasts
from services.store.leases import Leases
from services.store.queries import QuerySpec
from services.store.reclaims import Reclaims
from services.store.scheduling import Scheduling
from services.store.selections import Selections
from services.store.shared_keys import SharedKeys

# The roles the store is made of, in the order their methods are looked up (no name is in two).
ROLES = (Scheduling, Administration, Claims, Reclaims, Leases, SharedKeys, Forecasts, Selections)


class FirestoreJobStore(
    Scheduling, Administration, Claims, Reclaims, Leases, SharedKeys, Forecasts, Selections
):
    """The jobs collection and its companions (idempotency, control) in Firestore."""

    def __init__(
        self,
        client: firestore.Client,
        clock: Clock,
        *,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        terminal_retention: timedelta = DEFAULT_TERMINAL_RETENTION,
        known_actions: Catalogue | Collection[str] | None = None,
        query_observer: Callable[[QuerySpec], None] | None = None,
        timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        retry: api_retry.Retry | None = None,
        shards: int = 1,
        database: str | None = None,
        max_clock_skew: timedelta | None = None,
    ) -> None:
        """`client` is the high-level client of the database the store keeps its records in;
        `database` names that database when it is not the default one (the store sends its
        RPCs through its own GAPIC client, and the high-level client keeps the name private).
        `max_clock_skew`: how far `clock` may be from Firestore's time before `get_control`
        (a scan run's first read) and `start` refuse with ClockSkewed; None: not checked (a
        test's simulated clock)."""
        docs = Documents(
            client,
            clock,
            history_limit=history_limit,
            terminal_retention=terminal_retention,
            query_observer=query_observer,
            timeout_s=timeout_s,
            retry=retry,
            shards=shards,
            database=database,
            max_clock_skew=max_clock_skew,
        )
        # Each role keeps its own state beside the one `Documents` they all share.
        Scheduling.__init__(self, docs, known_actions)
        Administration.__init__(self, docs)
        Claims.__init__(self, docs)
        Reclaims.__init__(self, docs)
        Leases.__init__(self, docs)
        SharedKeys.__init__(self, docs)
        Forecasts.__init__(self, docs)
        Selections.__init__(self, docs)

    @property
    def clock(self) -> Clock:
        return self._docs.clock

    @property
    def shards(self) -> int:
        """JOBS_SHARDS as this store queries with it."""
        return self._docs.shards
