"""Benchmarks (not timed tests); each script prints its figures."""
