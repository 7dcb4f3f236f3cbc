"""Where the stack can live: the regions Cloud Scheduler runs jobs in and the locations a
Firestore database can have, checked at preview.

A region without Cloud Scheduler fails on the scheduler job, the last resource of the first
`up` (it waits for everything else), after every other resource was created; the preview
refuses it first, naming `gcp:region`. The lists are Google's, as read on the cited pages; a
location Google adds later is refused until it is added here (the message says so).
"""

from __future__ import annotations

SCHEDULER_LOCATIONS_URL = "https://cloud.google.com/scheduler/docs/locations"
FIRESTORE_LOCATIONS_URL = "https://cloud.google.com/firestore/native/docs/locations"

# Cloud Scheduler's regions (the locations page, 2026-12; the 2026 additions asia-south2,
# asia-southeast3, europe-west12 and northamerica-northeast2 are in its release notes,
# https://cloud.google.com/scheduler/docs/release-notes).
SCHEDULER_REGIONS: frozenset[str] = frozenset(
    {
        "northamerica-northeast1",
        "northamerica-northeast2",
        "southamerica-east1",
        "us-central1",
        "us-east1",
        "us-east4",
        "us-west1",
        "us-west2",
        "us-west3",
        "us-west4",
        "europe-central2",
        "europe-west1",
        "europe-west2",
        "europe-west3",
        "europe-west6",
        "europe-west12",
        "asia-east1",
        "asia-east2",
        "asia-northeast1",
        "asia-northeast2",
        "asia-northeast3",
        "asia-south1",
        "asia-south2",
        "asia-southeast1",
        "asia-southeast2",
        "asia-southeast3",
        "australia-southeast1",
    }
)

# Firestore's multi-region locations and regional locations (the locations page, 2026-12).
FIRESTORE_MULTI_REGIONS: frozenset[str] = frozenset({"nam5", "nam7", "eur3"})
FIRESTORE_REGIONS: frozenset[str] = frozenset(
    {
        "africa-south1",
        "asia-east1",
        "asia-east2",
        "asia-northeast1",
        "asia-northeast2",
        "asia-northeast3",
        "asia-south1",
        "asia-south2",
        "asia-southeast1",
        "asia-southeast2",
        "australia-southeast1",
        "australia-southeast2",
        "europe-central2",
        "europe-north1",
        "europe-southwest1",
        "europe-west1",
        "europe-west2",
        "europe-west3",
        "europe-west4",
        "europe-west6",
        "europe-west8",
        "europe-west9",
        "europe-west10",
        "europe-west12",
        "me-central1",
        "me-central2",
        "me-west1",
        "northamerica-northeast1",
        "northamerica-northeast2",
        "southamerica-east1",
        "southamerica-west1",
        "us-central1",
        "us-east1",
        "us-east4",
        "us-east5",
        "us-south1",
        "us-west1",
        "us-west2",
        "us-west3",
        "us-west4",
    }
)


def location_problems(region: str, database_location: str) -> list[str]:
    """Why the stack cannot be deployed in `region` with its database in `database_location`
    (empty: the region), naming the key."""
    problems = []
    if region and region not in SCHEDULER_REGIONS:
        problems.append(
            f"gcp:region={region!r} has no Cloud Scheduler ({SCHEDULER_LOCATIONS_URL}); the "
            "scan's trigger would fail last, after everything else was created. Choose a listed "
            "region (or, if Google lists it now, add it to infra/locations.py)"
        )
    location = database_location or region
    key = "databaseLocation" if database_location else "gcp:region"
    if location and location not in FIRESTORE_REGIONS | FIRESTORE_MULTI_REGIONS:
        problems.append(
            f"{key}={location!r} is not a Firestore location ({FIRESTORE_LOCATIONS_URL}): a "
            f"region or one of {', '.join(sorted(FIRESTORE_MULTI_REGIONS))} (or, if Google "
            "lists it now, add it to infra/locations.py)"
        )
    return problems
