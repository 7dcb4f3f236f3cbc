"""The Firestore adapter: `FirestoreJobStore` (job_store.py) and every other collection
(control, idempotency, scan_runs, rejected, partition leases), on the official client.

One module per role of the store (`scheduling`, `administration`, `claims`, `reclaims`,
`leases`, `shared_keys`), each a class that `FirestoreJobStore` inherits, on the plumbing they
share (`documents`, `transactions`, `gateway`, `encoding`, `decoding`, `queries`,
`key_holds`). It imports the domain, telemetry and the Firestore client; it never speaks HTTP.
Import from the module that defines a name; this package module imports nothing.
"""
