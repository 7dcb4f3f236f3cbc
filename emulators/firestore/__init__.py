"""A built-in Firestore emulator speaking google.firestore.v1.Firestore over gRPC.

Start it with ``python -m emulators.firestore`` or in-process with
:func:`emulators.firestore.server.start`.
"""
