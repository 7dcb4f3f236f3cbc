"""The worker service: the Pub/Sub push endpoint that runs each job's side effect once."""
