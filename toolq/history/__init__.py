"""The history store: finished calls, their events and decisions, and the audit, in SQL.

Redis holds what is in flight and finished calls for a short hot window
(``Settings.hot_seconds``); the archiver (``toolq.history.archiver``) moves every finished
call to the ``HistoryStore`` exactly once before its keys expire, and readers find a call in
either place (``toolq.results.cold``).
"""

from toolq.history.store import HistoryStore

__all__ = ["HistoryStore"]
