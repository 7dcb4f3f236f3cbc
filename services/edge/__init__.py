"""The Cloud Run edge every service stands on: the HTTP server and start-up, `Settings` from
the environment, OIDC verification, Google's error model, the Pub/Sub publisher and the Cloud
Scheduler request headers.

It imports the domain, telemetry and (for defaults) the store; the services import it.
"""
