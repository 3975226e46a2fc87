"""The systems the benchmarks compare: each one's app, its workers and its client (a ``Side``)."""
