"""The jobs domain: the job record, its state machine, the Firestore store, and the shared
settings, logging, auth and metrics the scan, the worker and the CLI stand on.

Import what you need from its module: `services.jobs.model` (Job, NewJob, derive_job_id…),
`services.jobs.state` (State, TRANSITIONS, apply_transition), `services.store`
(FirestoreJobStore), `services.jobs.clock`, `services.jobs.errors`, `services.jobs.control`,
`services.jobs.schema`. This package module itself imports nothing, so importing any one
of them stays cheap.
"""
