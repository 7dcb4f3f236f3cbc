"""A local stand-in for Cloud Run's front end: the IAM invoker check, forwarded tokens with their
signature removed, the request timeout, the concurrency limit and the request size limits."""
