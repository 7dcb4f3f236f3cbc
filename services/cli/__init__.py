"""`jobsctl`, the operator CLI: schedule, inspect and steer deferred jobs, plan a catch-up."""
