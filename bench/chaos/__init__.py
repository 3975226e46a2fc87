"""Chaos harness: toolq under kill -9, SIGTERM, Redis restarts, pub/sub kills and racing approvers.

``harness`` runs the load and the faults and writes a history; ``checker`` reads the history
and the Redis dump and checks the invariants (nothing lost, no double execution, no
overlap, no phantom).
"""
