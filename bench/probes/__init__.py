"""Probes: each module measures one thing (a round trip, a cost, a latency, where time goes)."""
