"""A local Cloud Scheduler: one HTTP job run by Cloud Scheduler's documented rules.

`CloudScheduler(job, tokens).start()` fires `job` (an `HttpJob`) on its unix-cron schedule in
its time zone, never with two executions outstanding, with the attempt deadline, retries and
X-CloudScheduler-* headers Google documents; `run_now()` is `gcloud scheduler jobs run`.
Time comes from an injectable clock (`WallClock`; `ManualClock` for tests). services/local
runs the scan's trigger with it.
"""
