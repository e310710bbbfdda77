"""Small helpers that tests of several parts share (the test world itself is tests/world)."""
