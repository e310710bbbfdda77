"""Benchmarks: measured as ratios against a baseline in the same run, never part of CI's verdict."""
