"""Unit tests of the Firestore emulator's pure logic (values, field paths, indexes)."""
