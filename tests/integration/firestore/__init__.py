"""Integration tests of the built-in Firestore emulator with the real client."""
