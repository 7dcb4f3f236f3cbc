"""A local Google Cloud Pub/Sub: the real gRPC Publisher and Subscriber, with OIDC-signed push.

`start()` in `server.py` runs it in-process; `python -m emulators.pubsub` runs it standalone.
"""
