"""Every Redis key, channel and queue name toolq uses; nothing else builds them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from toolq.models import RiskLevel

_COMPACT = json.JSONEncoder(separators=(",", ":"))
"""Encodes the parts of a hashed key (compact JSON); built once, not per key."""

KOMBU_UNACKED = "unacked"
"""kombu's Redis transport: taken, unacknowledged messages (``toolq.broker.unacked``)."""
KOMBU_UNACKED_INDEX = "unacked_index"
"""kombu's Redis transport: when each unacknowledged message was taken."""


@dataclass(frozen=True)
class Keys:
    """Key builder for one prefix (``Settings.key_prefix``)."""

    prefix: str = "toolq"

    def call(self, call_id: str) -> str:
        """Hash holding a call's record: status, envelope, result."""
        return f"{self.prefix}:call:{call_id}"

    def run_stream(self, run_id: str) -> str:
        """Redis Stream of a run's events."""
        return f"{self.prefix}:run:{run_id}:events"

    def wait_wake(self, reader_id: str) -> str:
        """Stream (TTL) a client's waits add to, to wake its shared reader for a new run."""
        return f"{self.prefix}:waits:{reader_id}:wake"

    @property
    def metrics_events(self) -> str:
        """Hash of counters: events emitted, by ``<tool>|<risk>|<event type>`` (``lib/emit.lua``).

        ``/metrics`` reads it whole (``toolq_call_events_total``): its size follows the
        tools and event types, never the number of calls.
        """
        return f"{self.prefix}:metrics:events"

    @property
    def metrics_durations(self) -> str:
        """Hash of counters of finished calls' execution times (``finish.lua``).

        Per tool: ``<tool>|le|<bound>`` (calls in that bucket only, ``+Inf`` past the last;
        ``/metrics`` adds them up, all of them for the count) and ``<tool>|sum_us``
        (microseconds). A ``<tool>|count`` written by an earlier version is not read.
        """
        return f"{self.prefix}:metrics:durations"

    def wait_inbox(self, reader_id: str) -> str:
        """Stream (TTL) the final events of the calls a client waits on are copied to.

        A call's record names it (field ``notify``); ``lib/emit.lua`` appends each final
        event there too, so the client's shared reader reads one stream, not one per run.
        """
        return f"{self.prefix}:waits:{reader_id}:inbox"

    def run_calls(self, run_id: str) -> str:
        """List of a run's call ids in dispatch order."""
        return f"{self.prefix}:run:{run_id}:calls"

    def run_settings(self, run_id: str) -> str:
        """JSON of a run's approval mode, tool lists and sticky decisions."""
        return f"{self.prefix}:run:{run_id}:settings"

    def asked(self, call_id: str) -> str:
        """How many times a LangGraph tool interrupted its graph for a parked call.

        Its replays interrupt as often again before reading toolq's state
        (``toolq.integrations.langchain``).
        """
        return f"{self.prefix}:asked:{call_id}"

    def retrying(self, call_id: str) -> str:
        """String naming who is dispatching the retry of a call (``retry_call``), briefly.

        Not under ``call:``: a scan of call ids by prefix (``call_match``) finds records only.
        """
        return f"{self.prefix}:retrying:{call_id}"

    def idempotency(self, principal: str | None, run_id: str, key: str) -> str:
        """String mapping (submitter, run, provider call id or client key) to a call id.

        The parts are hashed as a JSON array, so no two distinct triples share a key
        whatever separators the ids contain.
        """
        encoded = _COMPACT.encode([principal, run_id, key])
        return f"{self.prefix}:idem:{hashlib.sha256(encoded.encode()).hexdigest()}"

    def run_owner(self, run_id: str) -> str:
        """String: JSON of the principal (and tenant) that created a run (``RunOwner``)."""
        return f"{self.prefix}:run:{run_id}:owner"

    def tenant_spent(self, tenant: str, period: str) -> str:
        """String (float, ``INCRBYFLOAT``): what ``tenant`` was charged in budget ``period``.

        ``period`` names the calendar period (``Budget``'s ``per`` and its start, UTC, as
        ``toolq.dispatch.budgets.period_of`` writes it); the key expires after it ends.
        """
        return f"{self.prefix}:tenant:{tenant}:spent:{period}"

    def lease(self, call_id: str) -> str:
        """Execution lease of a running call (``SET NX PX``)."""
        return f"{self.prefix}:lease:{call_id}"

    def cancel(self, call_id: str) -> str:
        """Durable cancel flag of a call."""
        return f"{self.prefix}:cancel:{call_id}"

    def undo(self, call_id: str) -> str:
        """Undo data of a finished call."""
        return f"{self.prefix}:undo:{call_id}"

    @property
    def running(self) -> str:
        """Sorted set of running calls scored by lease expiry (ms)."""
        return f"{self.prefix}:running"

    @property
    def pending_approvals(self) -> str:
        """Sorted set of parked calls scored by approval deadline."""
        return f"{self.prefix}:approvals:pending"

    @property
    def parked(self) -> str:
        """Sorted set of parked calls scored by when they were parked (s): approval listings."""
        return f"{self.prefix}:approvals:parked"

    @property
    def unknown(self) -> str:
        """Sorted set of calls of unknown outcome (lost mid-call), scored by when lost (s)."""
        return f"{self.prefix}:calls:unknown"

    def tenant_parked(self, tenant: str) -> str:
        """Sorted set of one tenant's parked calls scored by when they were parked (s)."""
        return f"{self.prefix}:tenant:{tenant}:approvals:parked"

    @property
    def runs(self) -> str:
        """Sorted set of runs scored by their last dispatch (s).

        A run last dispatched more than the result TTL ago is dropped by the next dispatch
        (``create.lua``): its keys expired with it. With a history store a run leaves as soon
        as all its calls are final and archived (``cool.lua``); listings then read it from
        the history store (``toolq.results.runs``).
        """
        return f"{self.prefix}:runs"

    def tenant_runs(self, tenant: str) -> str:
        """Sorted set of one tenant's runs scored by their last dispatch (s)."""
        return f"{self.prefix}:tenant:{tenant}:runs"

    @property
    def unsent(self) -> str:
        """Sorted set of queued calls not yet confirmed published, scored by time queued."""
        return f"{self.prefix}:unsent"

    def resent(self, delivery_tag: str) -> str:
        """Marker that a stranded message was sent again (so each is re-sent once)."""
        return f"{self.prefix}:resent:{delivery_tag}"

    @property
    def sweeper_lock(self) -> str:
        """Short lock so one worker at a time sweeps."""
        return f"{self.prefix}:sweeper:lock"

    @property
    def audit_stream(self) -> str:
        """Stream of every approval decision, refusal and expiry."""
        return f"{self.prefix}:audit"

    @property
    def audit_chain(self) -> str:
        """Hash of the audit chain's state: ``seq``, ``hash``, ``first_seq``, ``first_prev``."""
        return f"{self.prefix}:audit:chain"

    @property
    def refusals(self) -> str:
        """Hash of counters of requests the run-owner checks refused: ``refused``, ``audited``."""
        return f"{self.prefix}:refusals"

    def refusal_mark(self, principal: str, run_id: str, call_id: str) -> str:
        """String (TTL) set while a principal's refusal on a run (or call) is audited."""
        encoded = _COMPACT.encode([principal, run_id, call_id])
        return f"{self.prefix}:refusals:mark:{hashlib.sha256(encoded.encode()).hexdigest()}"

    def refusal_budget(self, principal: str) -> str:
        """String (TTL) counting a principal's audited refusals in the current window."""
        digest = hashlib.sha256(json.dumps([principal]).encode()).hexdigest()
        return f"{self.prefix}:refusals:budget:{digest}"

    @property
    def replication_mark(self) -> str:
        """String written before each ``WAIT``, so the wait also covers writes found made.

        ``WAIT`` counts replicas up to the connection's last write; a retried dispatch
        that finds its calls already created writes nothing else.
        """
        return f"{self.prefix}:replication:mark"

    @property
    def recent_calls(self) -> str:
        """Sorted set of recently created calls scored by creation time."""
        return f"{self.prefix}:calls:recent"

    def worker(self, hostname: str) -> str:
        """Heartbeat of one worker: its queues, with a TTL."""
        return f"{self.prefix}:worker:{hostname}"

    @property
    def worker_pattern(self) -> str:
        """Pattern matching every worker heartbeat key."""
        return f"{self.prefix}:worker:*"

    @property
    def workers_seen(self) -> str:
        """Hash hostname -> JSON of its last heartbeat's time, TTL and queues.

        A warm shutdown removes the worker's field, so one left without a heartbeat is lost.
        """
        return f"{self.prefix}:workers:seen"

    @property
    def health_probe(self) -> str:
        """String written (with a short TTL) by ``/healthz`` and ``toolq check``."""
        return f"{self.prefix}:health:probe"

    def queue_for(self, risk: RiskLevel | str) -> str:
        """Celery queue of a risk level: ``toolq.safe``, ``toolq.moderate``, ``toolq.dangerous``."""
        return f"{self.prefix}.{RiskLevel.parse(risk).value}"

    def event_ticket(self, digest: str) -> str:
        """String (JSON, with a TTL) behind an event-stream ticket, keyed by its SHA-256."""
        return f"{self.prefix}:ticket:{digest}"

    def decision_token_spent(self, nonce: str) -> str:
        """String ``1`` (with a TTL past the token's expiry): that decision token was used."""
        return f"{self.prefix}:decision-token:{nonce}"

    @property
    def queued(self) -> str:
        """Sorted set of queued calls whose message was pushed, scored by push time (s)."""
        return f"{self.prefix}:queued"

    def queue_pushes(self, queue: str) -> str:
        """Counter of call messages pushed onto ``queue``: each push's sequence number."""
        return f"{self.prefix}:pushes:{queue}"

    def lost_suspect(self, call_id: str) -> str:
        """When a queued call's message was first found in no queue and no unacked entry."""
        return f"{self.prefix}:lost:{call_id}"

    def undo_lease(self, call_id: str) -> str:
        """Lease of a worker running a call's undo handler (``SET NX PX``)."""
        return f"{self.prefix}:undo-lease:{call_id}"

    @property
    def undoing(self) -> str:
        """Sorted set of calls being undone scored by undo-lease expiry (ms)."""
        return f"{self.prefix}:undoing"

    @property
    def undo_queued(self) -> str:
        """Sorted set of requested undos whose message was pushed, scored by push time (s)."""
        return f"{self.prefix}:undo-queued"

    def lost_undo_suspect(self, call_id: str) -> str:
        """When a requested undo's message was first found in no queue and no unacked entry."""
        return f"{self.prefix}:lost-undo:{call_id}"

    @property
    def webhook_events(self) -> str:
        """Set of event types the webhook outbox takes (TTL, refreshed by workers with webhooks).

        Passed to every script that emits an event (``lib/emit.lua``).
        """
        return f"{self.prefix}:webhooks:events"

    @property
    def webhook_outbox(self) -> str:
        """Stream of events waiting to be fanned out to webhooks (group ``WEBHOOK_GROUP``).

        Passed to every script that emits an event (``lib/emit.lua``).
        """
        return f"{self.prefix}:webhooks:outbox"

    @property
    def history_archive(self) -> str:
        """Stream of finished calls waiting for the history store (group ``HISTORY_GROUP``).

        Passed to every script that emits an event (``lib/emit.lua``), which appends a call
        here with the event that makes it final, once the archivers created the stream.
        """
        return f"{self.prefix}:history:archive"

    @property
    def history_lock(self) -> str:
        """Short lock so one archiver at a time prunes the history store."""
        return f"{self.prefix}:history:prune-lock"

    def webhook_delivery(self, delivery_id: str) -> str:
        """Hash of one pending delivery: endpoint id, event, attempts, last error."""
        return f"{self.prefix}:webhooks:delivery:{delivery_id}"

    @property
    def webhook_due(self) -> str:
        """Sorted set of pending deliveries scored by their next attempt's time (s)."""
        return f"{self.prefix}:webhooks:due"

    @property
    def webhook_dead(self) -> str:
        """List (capped) of deliveries given up after their last attempt, newest first."""
        return f"{self.prefix}:webhooks:dead"

    def slack_messages(self, call_id: str) -> str:
        """Hash of the Slack messages showing a call: channel id → message ``ts``.

        A digest message's ``ts`` is prefixed ``digest:``; field ``posting`` is set while the
        call's message is being posted.
        """
        return f"{self.prefix}:slack:call:{call_id}"

    def slack_digest(self, digest_id: str) -> str:
        """Set of parked call ids waiting for the next digest message of one run and channel."""
        return f"{self.prefix}:slack:digest:{digest_id}"

    def slack_digest_message(self, channel: str, ts: str) -> str:
        """Set of the call ids one posted digest message shows."""
        return f"{self.prefix}:slack:digest-message:{channel}:{ts}"

    def mcp_task_shown(self, call_id: str) -> str:
        """String ``1``: the MCP client of a call's task answered its approval-page request."""
        return f"{self.prefix}:mcp-task-shown:{call_id}"

    @property
    def call_prefix(self) -> str:
        """What precedes a call id in its record's key (``call``).

        The admission script (``admit.lua``) names the records of the calls it finds in a
        backlog with it.
        """
        return self.call("")

    @property
    def run_stream_parts(self) -> tuple[str, str]:
        """What goes before and after a run id in ``run_stream``, for ``admit.lua``."""
        before, _, after = self.run_stream("\0").partition("\0")
        return before, after

    def lane(self, risk: RiskLevel | str) -> str:
        """Sorted set of one risk's backlogs (``backlog`` keys) that hold calls.

        Scored by their tenant's virtual time: admission serves the lowest first.
        """
        return f"{self.prefix}:lane:{RiskLevel.parse(risk).value}"

    def backlog(self, risk: RiskLevel | str, tenant: str) -> str:
        """List of a tenant's calls of one risk waiting for admission, oldest first."""
        return f"{self.prefix}:backlog:{RiskLevel.parse(risk).value}:{tenant}"

    def slots(self, scope: str, name: str) -> str:
        """Sorted set of the calls holding a concurrency slot of a tool or tenant (``scope``).

        Scored by when the hold lapses (ms): admission + ``admission_hold``, then lease end.
        """
        return f"{self.prefix}:slots:{scope}:{name}"

    def starts(self, scope: str, name: str) -> str:
        """Sorted set of the calls counted by a tool's or tenant's rate limit.

        Scored by their start (ms); an admitted call not started yet by admission +
        ``admission_hold``.
        """
        return f"{self.prefix}:starts:{scope}:{name}"

    def call_match(self, call_id_prefix: str) -> str:
        """``SCAN`` pattern matching the call hashes whose id starts with ``call_id_prefix``."""
        return f"{_glob_escaped(self.prefix)}:call:{_glob_escaped(call_id_prefix)}*"

    @property
    def namespace_matches(self) -> tuple[str, ...]:
        """``SCAN`` patterns of every key of this prefix.

        toolq's own keys, its Celery queues and kombu's binding tables of those queues
        (named after them).
        """
        prefix = _glob_escaped(self.prefix)
        return (
            f"{prefix}:*",
            f"{prefix}.*",
            f"_kombu.binding.{prefix}.*",
            f"_kombu.binding_permanent.{prefix}.*",
        )


def _glob_escaped(text: str) -> str:
    """``text`` with the ``SCAN MATCH`` glob characters escaped."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


HISTORY_GROUP = "toolq-history"
"""Consumer group of the history archive stream."""
WEBHOOK_GROUP = "toolq-webhooks"
"""Consumer group of the webhook outbox stream."""
