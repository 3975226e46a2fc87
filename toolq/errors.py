"""Every error toolq raises derives from :class:`ToolqError`.

::

    ToolqError
    ├── ConfigurationError          bad settings, --app that does not load
    ├── RegistryError
    │   ├── DuplicateToolError      a name registered twice
    │   └── CategoryNotFoundError
    ├── ToolNotFoundError           unknown tool name (also a LookupError)
    ├── InvalidArgumentsError       arguments that do not match the schema (also a ValueError)
    ├── PayloadError                a payload toolq cannot read, or one over a limit
    │   └── InvalidTenantError      a tenant name that is not one
    ├── ToolDeniedError             gated: behavior, disabled category, unavailable tool
    │   └── BudgetExceededError     the call would take its tenant over its budget
    ├── CostError                   a tool's cost function raised or returned no number
    ├── ToolExecutionError          the handler failed
    │   ├── ToolTimeoutError        the handler ran past its time limit
    │   ├── InvalidOutputError      the output does not match the output schema
    │   ├── ToolFailureError        the handler returned ``ToolOutput.fail``
    │   ├── WorkerLostError         the worker died while running a non-idempotent call
    │   ├── OutcomeUnknownError     that call is parked for a person: did it take effect?
    │   ├── UpstreamError           an upstream MCP server answered the call with an error
    │   ├── UpstreamUnavailableError the upstream MCP server cannot be started or reached
    │   ├── UpstreamLostError       the upstream MCP server went away while running the call
    │   └── UpstreamChangedError    the upstream MCP server now describes a pinned tool otherwise
    ├── CallCancelledError          the call was cancelled
    ├── CallNotFoundError           unknown call id
    ├── RunNotFoundError            unknown run id (or one whose keys expired)
    ├── NoHistoryError              a history read, but no history store (TOOLQ_HISTORY_URL)
    ├── NotRetryableError           a retry of a call that is not final, or that succeeded
    ├── CallIdConflictError         a provider call id reused for another tool or other arguments
    ├── ApprovalError
    │   ├── ApprovalDeniedError     a human said no
    │   ├── ApprovalExpiredError    nobody decided before the deadline
    │   ├── NotAwaitingApprovalError a decision on a call that is not pending (lost race)
    │   ├── DigestMismatchError     approving something other than what was shown
    │   ├── NotAuthorizedError      self-approval, or a principal without the right
    │   │   ├── NotRunOwnerError    acting on a run another principal (or tenant) owns
    │   │   └── WrongTenantError    a tenant-bound token naming another tenant
    │   ├── ApprovalPredicateError  a tool's ``requires_approval`` predicate raised
    │   └── ApprovalUnverifiedError a worker found no valid signed approval for a gated call
    ├── UndoError                   nothing to undo, undone twice, undo handler failed
    │   └── UndoAwaitingApprovalsError  a quorum undo: more approvers must ask for it
    ├── WaitTimeoutError            ``wait`` ran out of time (also a TimeoutError)
    ├── SecretsError                secret arguments that cannot be sealed or opened
    │   └── SecretsKeyMissingError  secret arguments but no ``TOOLQ_SECRETS_KEY``
    ├── OverloadedError             a configured capacity is reached; retry later
    ├── RedisUnavailableError       Redis does not answer (the API's 503 ``redis_unavailable``)
    │   └── CellUnavailableError    the cell (TOOLQ_SHARDS) of a run or call does not answer
    ├── StoreUnavailableError       Redis refuses writes: full, read-only, disk, too few replicas
    ├── RedisAuthError              Redis refuses toolq's credentials (wrong or missing password)
    ├── RedisPermissionError        Redis's ACL refuses a command to toolq's user
    ├── ReplicationError            fewer replicas than ``TOOLQ_MIN_REPLICAS_ACK`` confirmed a write
    ├── InternalError               toolq itself failed while running a call (a bug)
    └── AmbiguousIdError            a call id prefix that matches more than one call

Each error has a stable ``code`` for APIs and survives pickling. The codes are also the
``error_type`` values toolq stores on failed calls (a handler's own exception is stored under
its class name): Python code names them as ``SomeError.code``, never as a string literal.
"""

from __future__ import annotations

from typing import Any


class ToolqError(Exception):
    """Base of every toolq error."""

    code = "toolq_error"

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.details))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form with the stable code."""
        return {"code": self.code, "message": self.message, **self.details}


def _rebuild(cls: type[ToolqError], message: str, details: dict[str, Any]) -> ToolqError:
    return cls(message, **details)


class ConfigurationError(ToolqError):
    """Settings or an ``--app`` reference that cannot be used."""

    code = "configuration_error"


class RegistryError(ToolqError):
    """A registry operation that cannot be done."""

    code = "registry_error"


class DuplicateToolError(RegistryError):
    """A tool name registered twice."""

    code = "duplicate_tool"


class CategoryNotFoundError(RegistryError, LookupError):
    """A category that was never set up."""

    code = "category_not_found"


class ToolNotFoundError(ToolqError, LookupError):
    """No tool of that name is registered."""

    code = "tool_not_found"


class InvalidArgumentsError(ToolqError, ValueError):
    """Arguments that do not match the tool's schema; the message names the fields."""

    code = "invalid_arguments"


class PayloadError(ToolqError, ValueError):
    """A payload toolq cannot read, or one over a configured limit."""

    code = "invalid_payload"


class ToolDeniedError(ToolqError):
    """A call refused before running: behavior not allowed, category disabled, unavailable."""

    code = "tool_denied"


class InvalidTenantError(PayloadError):
    """A tenant name that is not one (``toolq.quotas.valid_tenant``)."""

    code = "invalid_tenant"


class BudgetExceededError(ToolDeniedError):
    """The call's cost would take its tenant past its budget for the period: not run."""

    code = "budget_exceeded"


class CostError(ToolqError):
    """A tool's ``cost`` function raised, or returned something that is not a number >= 0."""

    code = "invalid_cost"


class ToolExecutionError(ToolqError):
    """The tool's handler failed."""

    code = "execution_failed"


class ToolTimeoutError(ToolExecutionError, TimeoutError):
    """The handler ran past its time limit."""

    code = "timeout"


class InvalidOutputError(ToolExecutionError):
    """The handler's output does not match the tool's output schema."""

    code = "invalid_output"


class ToolFailureError(ToolExecutionError):
    """The handler returned ``ToolOutput.fail(...)``: a failure it reported itself."""

    code = "tool_failure"


class WorkerLostError(ToolExecutionError):
    """The worker died while running a call that is not safe to run twice."""

    code = "worker_lost"


class OutcomeUnknownError(ToolExecutionError):
    """The worker died mid-call and the tool is not idempotent: a person resolves the call.

    The ``error_type`` of a call in state ``unknown`` until it is resolved.
    """

    code = "outcome_unknown"


class UpstreamError(ToolExecutionError):
    """An upstream MCP server answered the call with an error (``isError``, or JSON-RPC)."""

    code = "upstream_error"


class UpstreamUnavailableError(ToolExecutionError):
    """The upstream MCP server was not reached: not started, unreachable, or no credentials.

    No credentials: the server has tenant credentials, none for the call's tenant. In every
    case the call never reached the server.
    """

    code = "upstream_unavailable"


class UpstreamLostError(ToolExecutionError):
    """The upstream MCP server went away while running the call (its outcome is unknown)."""

    code = "upstream_lost"


class UpstreamChangedError(ToolExecutionError):
    """The upstream server describes a tool of a pinned manifest otherwise now: not run."""

    code = "upstream_changed"


class CallCancelledError(ToolqError):
    """The call was cancelled."""

    code = "cancelled"


class CallNotFoundError(ToolqError, LookupError):
    """No call has that id."""

    code = "call_not_found"


class RunNotFoundError(ToolqError, LookupError):
    """Unknown run id (or one whose keys expired)."""

    code = "run_not_found"


class NoHistoryError(ToolqError, LookupError):
    """A history read (search, export) where no history store is configured."""

    code = "no_history"


class NotRetryableError(ToolqError):
    """A retry of a call that is not final yet, that succeeded, or that was retried already."""

    code = "not_retryable"


class CallIdConflictError(ToolqError):
    """A provider call id already names a call of another tool or with other arguments.

    A call id names one call: the second use is refused, and nothing is decided or run.
    """

    code = "call_id_conflict"


class ApprovalError(ToolqError):
    """Base of approval errors."""

    code = "approval_error"


class ApprovalDeniedError(ApprovalError):
    """A human denied the call."""

    code = "approval_denied"


class ApprovalExpiredError(ApprovalError):
    """Nobody decided before the deadline."""

    code = "approval_expired"


class NotAwaitingApprovalError(ApprovalError):
    """The call is not awaiting approval (already decided, expired, or never parked)."""

    code = "not_awaiting_approval"


class DigestMismatchError(ApprovalError):
    """The decision names arguments other than the ones parked."""

    code = "digest_mismatch"


class NotAuthorizedError(ApprovalError):
    """The principal may not make this decision."""

    code = "not_authorized"


class ApprovalUnverifiedError(ApprovalError):
    """A gated call without a valid signed approval for exactly what would run."""

    code = "approval_unverified"


class UndoError(ToolqError):
    """Nothing to undo, undone already, or the undo handler failed."""

    code = "undo_failed"


class UndoAwaitingApprovalsError(UndoError):
    """A DANGEROUS tool's undo approved by fewer approvers than its quorum: not requested yet."""

    code = "undo_awaiting_approvals"


class WaitTimeoutError(ToolqError, TimeoutError):
    """Waiting for calls ran out of time; the calls go on."""

    code = "wait_timeout"


class NotRunOwnerError(NotAuthorizedError):
    """Acting on a run another principal owns, or on another tenant's run at all."""

    code = "not_owner"


class WrongTenantError(NotAuthorizedError):
    """A request names a tenant other than the one its token is bound to."""

    code = "wrong_tenant"


class ApprovalPredicateError(ApprovalError):
    """A tool's ``requires_approval`` predicate raised, or returned something not bool-able."""

    code = "approval_predicate_error"


class SecretsError(ToolqError):
    """Secret arguments that cannot be encrypted or decrypted (wrong key, tampered value)."""

    code = "secrets_error"


class SecretsKeyMissingError(SecretsError):
    """A call carries secret arguments but this process has no ``TOOLQ_SECRETS_KEY``."""

    code = "secrets_key_missing"


class OverloadedError(ToolqError):
    """A configured capacity (e.g. ``max_event_streams``) is reached; retry later."""

    code = "overloaded"


class RedisUnavailableError(ToolqError):
    """Redis does not answer; nothing was read or written."""

    code = "redis_unavailable"


class CellUnavailableError(RedisUnavailableError):
    """The cell (one Redis of ``TOOLQ_SHARDS``) that holds a run or call does not answer.

    ``details``: ``cell`` (its index in the list) and ``where`` (its address, no password).
    Other cells' runs are unaffected.
    """

    code = "cell_unavailable"


class StoreUnavailableError(ToolqError):
    """Redis answers but refuses writes; nothing was written, and retrying later is safe.

    ``details``: ``reason``, one of ``full`` (``maxmemory`` reached with ``noeviction``),
    ``read_only`` (a replica), ``disk`` (``MISCONF``: snapshots failing) and ``no_replicas``
    (``min-replicas-to-write`` not met). Workers wait while Redis refuses writes, and go on
    by themselves once it accepts them again.
    """

    code = "store_unavailable"


class RedisAuthError(ToolqError):
    """Redis refuses toolq's credentials: a wrong or missing password, or an unknown user."""

    code = "redis_auth_failed"


class RedisPermissionError(ToolqError):
    """Redis's ACL refuses a command to toolq's user (``NOPERM``): see the documented users."""

    code = "redis_permission_denied"


class ReplicationError(ToolqError):
    """A write reached fewer replicas than ``TOOLQ_MIN_REPLICAS_ACK`` in time: not acknowledged.

    The master may hold it; retrying with the same ids is safe (idempotency keys and
    compare-and-set): a dispatch returns the same calls, a decision finds the call decided.
    Also raised by a read that found a final state the replicas do not hold yet (a failover
    could take it back): it is not reported; reading again shortly is safe.
    """

    code = "not_replicated"


class InternalError(ToolqError):
    """toolq itself failed while running a call; the call fails with this code (a bug)."""

    code = "internal_error"


class AmbiguousIdError(ToolqError):
    """A call id prefix (``toolq approvals show 3f2a9c1b``) that matches more than one call."""

    code = "ambiguous_id"
