"""The schedule API: an authenticated, idempotent HTTP entry point to the jobs store for
producers in any language (`POST /v1/jobs`, `GET /v1/jobs/{id}`, `:cancel`, `:reschedule`)."""
