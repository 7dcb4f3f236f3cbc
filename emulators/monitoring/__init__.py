"""A local Cloud Monitoring read API for one metric: `MetricService.ListTimeSeries` of Pub/Sub's
`subscription/oldest_unacked_message_age`, sampled from the local Pub/Sub emulator.

Only what the scan's backlog-aware stale-enqueued rescue reads (services/scan/queue_age.py),
and no more lenient than Google's: a sample every 60 s, each visible 120 s after it is taken
(the metric's documented worst case). Every other method, metric or filter is refused with the
status Google's API gives (UNIMPLEMENTED for what it would serve and this emulator does not).
`start()` in `server.py` runs it in-process; `python -m emulators.monitoring` standalone.
"""
