"""Redis-backed state: CallStore (records + scripts), EventLog, EventHub, RunOwners, UndoStore."""
