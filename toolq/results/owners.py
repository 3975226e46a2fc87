"""Who owns a run: the principal and the tenant that created it.

The owner is written by the script that creates the run's first call (no extra round trip,
and of two racing creators exactly one wins) and never changes while the run lives. Only
the owner, or an admin, may dispatch into a run, cancel or undo its calls, or change its
rules; a refusal raises ``NotRunOwnerError``, is counted (``/metrics``) and is written to
the audit stream as ``refused:not_owner`` once per principal, target and minute. ``None``
is an owner like any other: a run created without a principal accepts only callers without
one (and admins).

A run belongs to one tenant: no call of another tenant joins it, not even an admin's, and
a caller bound to a tenant (an API token naming one) may neither read nor act on a run of
another tenant (``check_tenant``, ``check_call_tenant``). The default tenant is stored as
``null``, as runs were before tenants.
"""

from __future__ import annotations

import functools
import json
import threading
import time
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import redis

from toolq.errors import NotRunOwnerError, PayloadError
from toolq.forks import fresh_in_children
from toolq.keys import Keys
from toolq.models import AuditOutcome
from toolq.quotas import DEFAULT_TENANT
from toolq.results.cold import ColdStore
from toolq.results.connection import as_text
from toolq.results.runner import Scripts
from toolq.results.scripts import REFUSE
from toolq.settings import Settings
from toolq.signing import signer_for

REFUSAL_WINDOW = 60
"""Seconds in which one principal's refusals on one target are audited once."""
REFUSALS_AUDITED = 20
"""Refusals of one principal audited per window, whatever their targets."""
SYSTEM = ("system", "1")
"""The proof of an audit entry written where no signing key is held."""
UNARCHIVED_RUNS = 10_000
"""Runs a process remembers finding with no archived call (``RunOwners.unarchived``)."""


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
"""``RunOwner.encode``'s canonical JSON, its encoder built once for every owner."""


@functools.lru_cache(maxsize=1024)
def _encoded(principal: str | None, tenant: str | None) -> str:
    """``RunOwner.encode``'s JSON, kept for the next CREATE of the same owner.

    Every CREATE names its run's owner, and a process dispatches for few of them.
    """
    return _CANONICAL.encode({"principal": principal, "tenant": tenant})


MAX_RUN_ID_CHARS = 256
"""A run id names Redis keys, events and history rows: a new run's is at most this long."""


_JOINERS = frozenset("\u200c\u200d")
"""ZERO WIDTH NON-JOINER and JOINER: format characters that Persian, Urdu and Indic words and
emoji sequences are spelt with, so an id may hold them."""


def check_new_run_id(run_id: str) -> None:
    """Refuse the id of a run about to be created when longer than ``MAX_RUN_ID_CHARS``.

    A new run's id has no control or format characters either (a newline, NUL, U+202E).
    Runs that exist keep working whatever their id (made before the limits).
    """
    if len(run_id) > MAX_RUN_ID_CHARS:
        raise PayloadError(
            f"a run id is at most {MAX_RUN_ID_CHARS} characters; this one has {len(run_id)}",
            size=len(run_id),
            limit=MAX_RUN_ID_CHARS,
        )
    control = next(
        (c for c in run_id if unicodedata.category(c) in ("Cc", "Cf") and c not in _JOINERS),
        None,
    )
    if control is not None:
        # a newline in an id forges lines of logs and of `toolq tail`, NUL cuts it in C
        # tools, and a format character (U+202E, U+200B) shows approvers another run's id
        raise PayloadError(
            f"a run id has no control or format characters; this one has "
            f"{control!a} at {run_id.index(control)}"
        )


@dataclass(frozen=True)
class RunOwner:
    """The principal and tenant a run belongs to (``tenant`` ``None``: the default one)."""

    principal: str | None
    tenant: str | None = None

    @classmethod
    def of(cls, principal: str | None, tenant: str) -> RunOwner:
        """The owner of a run ``principal`` creates for ``tenant``."""
        return cls(principal, None if tenant == DEFAULT_TENANT else tenant)

    @property
    def tenant_name(self) -> str:
        """The run's tenant by name."""
        return self.tenant or DEFAULT_TENANT

    def encode(self) -> str:
        """Canonical JSON, compared byte for byte by the create script."""
        return _encoded(self.principal, self.tenant)

    @classmethod
    def decode(cls, raw: str | bytes) -> RunOwner:
        """The owner stored by ``encode``."""
        data = json.loads(raw)
        return cls(data.get("principal"), data.get("tenant"))

    def admits(self, principal: str | None, tenant: str | None = None) -> bool:
        """True when ``principal`` is this owner (of ``tenant``, when one is named)."""
        return self.principal == principal and (tenant is None or tenant == self.tenant_name)

    def admits_submitter(self, principal: str | None, tenant: str, admin: bool) -> bool:
        """True when the create script lets ``principal`` dispatch into the run for ``tenant``.

        The owner itself, or an admin of the run's tenant (``create.lua``).
        """
        return self.admits(principal, tenant) or (admin and tenant == self.tenant_name)


class RunOwners:
    """Reads run owners, claims unowned runs, and refuses (and audits) everyone else."""

    def __init__(self, client: redis.Redis, keys: Keys, settings: Settings) -> None:
        self.redis = client
        self.keys = keys
        self.settings = settings
        self.signer = signer_for(settings)
        self.scripts = Scripts(client)
        self.cold: ColdStore | None = None
        """The history store: the owner of a run that left Redis is its archived calls'."""
        self._unarchived: OrderedDict[str, float] = OrderedDict()
        """Runs the history store held no call of, by when it was asked (monotonic)."""
        self.after_fork()
        fresh_in_children(self)

    def after_fork(self) -> None:
        """A lock of its own: at start, and in a forked child.

        A thread of the parent may hold the parent's.
        """
        self._unarchived_lock = threading.Lock()

    def get(self, run_id: str) -> RunOwner | None:
        """The run's owner; ``None`` for a run with no recorded owner (unknown run)."""
        raw: Any = self.redis.get(self.keys.run_owner(run_id)) or self._archived(run_id)
        return RunOwner.decode(raw) if raw else None

    def restore(self, run_id: str) -> RunOwner | None:
        """The owner of a run whose key left Redis, read from its archived calls and put back.

        The scripts that create calls know the owner by its key alone: without it, the next
        dispatch into the run would make its submitter, whoever it is, the owner of the
        calls archived before. ``None``: the history store holds no call of the run.
        """
        raw = self._archived(run_id)
        if not raw:
            return None
        key = self.keys.run_owner(run_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(key, raw, nx=True, ex=self.settings.result_ttl)
        pipe.get(key)
        return RunOwner.decode(pipe.execute()[1])

    def _archived(self, run_id: str) -> str | None:
        """The owner recorded with the run's first archived call (``None``: none)."""
        if self.cold is None or self.unarchived(run_id):
            return None
        asked = time.monotonic()
        first = self.cold.run_call_ids(run_id, limit=1)
        if not first:
            with self._unarchived_lock:
                self._unarchived[run_id] = asked
                self._unarchived.move_to_end(run_id)
                if len(self._unarchived) > UNARCHIVED_RUNS:
                    self._unarchived.popitem(last=False)
            return None
        return next((r.get("owner") for r in self.cold.records(first).values()), None)

    def unarchived(self, run_id: str) -> bool:
        """True when this process found no archived call of the run a moment ago.

        No call of the run can have left Redis since: the keys of a call archived later (its
        record, its idempotency key, the run's owner) stay ``hot_seconds`` after its row is
        written, and a run's keys ``result_ttl`` after a dispatch into it. For half the
        shorter of the two, what Redis holds answers for the run (its owner, the claims of
        its calls) without asking the history store again.
        """
        if self.cold is None:
            return False
        settings = self.settings
        fresh_after = time.monotonic() - min(settings.hot_seconds, settings.result_ttl) / 2
        with self._unarchived_lock:
            asked = self._unarchived.get(run_id)
            if asked is not None and asked < fresh_after:
                del self._unarchived[run_id]
                asked = None
        return asked is not None

    def claim(self, run_id: str, principal: str | None, tenant: str | None = None) -> RunOwner:
        """Make ``principal`` (of ``tenant``) the owner of a run that has none; its owner.

        A run whose key left Redis with its archived calls has one: it is put back instead.
        """
        key = self.keys.run_owner(run_id)
        if self.cold is not None and not self.redis.exists(key):
            restored = self.restore(run_id)
            if restored is not None:
                return restored
        pipe = self.redis.pipeline(transaction=False)
        owner = RunOwner.of(principal, tenant or DEFAULT_TENANT)
        pipe.set(key, owner.encode(), nx=True, ex=self.settings.result_ttl)
        pipe.get(key)
        return RunOwner.decode(pipe.execute()[1])

    def check(
        self,
        run_id: str,
        principal: str | None,
        *,
        admin: bool = False,
        action: str,
        claim: bool = False,
        tenant: str | None = None,
    ) -> None:
        """Raise ``NotRunOwnerError`` unless ``principal`` owns the run (or ``admin``).

        ``claim`` makes ``principal`` the owner of a run that has none (rules set on a run
        not created yet must not wait there for someone else's calls). ``tenant``: the
        caller's tenant when it is bound to one (an admin's too); ``None``: any.
        """
        odd = len(run_id) > MAX_RUN_ID_CHARS or not run_id.isprintable()  # no GET otherwise
        if claim and odd and self.get(run_id) is None:
            check_new_run_id(run_id)  # rules on a run not created yet would create it
        owner = self.claim(run_id, principal, tenant) if claim and not admin else self.get(run_id)
        self._enforce(owner, run_id, principal, admin=admin, action=action, tenant=tenant)

    def check_tenant(
        self, run_id: str, tenant: str | None, *, principal: str | None, action: str
    ) -> None:
        """Raise ``NotRunOwnerError`` when a caller bound to ``tenant`` touches another's run.

        ``tenant`` ``None`` (an unbound caller) and unknown runs pass.
        """
        if tenant is None:
            return
        owner = self.get(run_id)
        if owner is not None and owner.tenant_name != tenant:
            self.refuse(run_id, principal)
            raise _foreign_tenant(run_id, principal, action)

    def check_call_tenant(
        self, call_id: str, tenant: str | None, *, principal: str | None, action: str
    ) -> None:
        """``check_tenant`` for the run of a call; unknown calls pass (left to the caller)."""
        if tenant is None:
            return
        found = self._call_owner(call_id)
        if found is None:
            return
        run, owner, _ = found
        if owner is not None and owner.tenant_name != tenant:
            self.refuse(run, principal, call_id=call_id)
            raise _foreign_tenant(run, principal, action)

    def check_call(
        self,
        call_id: str,
        principal: str | None,
        *,
        admin: bool = False,
        action: str,
        tenant: str | None = None,
    ) -> str | None:
        """Like ``check``, for the run of a call (whose record carries the run's owner).

        Returns the call's run id, ``None`` for an unknown call (left to the caller).
        """
        found = self._call_owner(call_id)
        if found is None:
            return None
        run, owner, tool = found
        self._enforce(
            owner,
            run,
            principal,
            admin=admin,
            action=action,
            call_id=call_id,
            tool=tool,
            tenant=tenant,
        )
        return run

    def _call_owner(self, call_id: str) -> tuple[str, RunOwner | None, str] | None:
        """A call's run, the run's owner (from the record, else the run) and its tool."""
        run_id, raw, tool = self.redis.hmget(self.keys.call(call_id), ["run_id", "owner", "name"])
        if run_id is None and self.cold is not None:
            record = self.cold.records([call_id]).get(call_id)
            if record is not None:
                run_id, raw, tool = record["run_id"], record.get("owner"), record.get("name")
        if run_id is None:
            return None
        run = as_text(run_id)
        return run, RunOwner.decode(raw) if raw else self.get(run), as_text(tool or "")

    def _enforce(
        self,
        owner: RunOwner | None,
        run_id: str,
        principal: str | None,
        *,
        admin: bool,
        action: str,
        call_id: str = "",
        tool: str = "",
        tenant: str | None = None,
    ) -> None:
        if owner is None:
            return
        if tenant is not None and owner.tenant_name != tenant:
            self.refuse(run_id, principal, call_id=call_id, tool=tool)
            raise _foreign_tenant(run_id, principal, action)
        if admin or owner.admits(principal):
            return
        self.refuse(run_id, principal, call_id=call_id, tool=tool)
        raise NotRunOwnerError(
            f"{principal!r} may not {action} run {run_id!r}: it belongs to another principal",
            run_id=run_id,
            by=principal,
        )

    def refuse(
        self, run_id: str, principal: str | None, *, call_id: str = "", tool: str = ""
    ) -> None:
        """Count a refusal; audit it as ``refused:not_owner`` if its window allows.

        At most one entry per principal, target (run, and call if any) and
        ``REFUSAL_WINDOW``, and ``REFUSALS_AUDITED`` per principal and window: the rest are
        counted for ``/metrics`` only, so refused requests cannot flood the audit stream.
        """
        entry = {
            "call_id": call_id,
            "run_id": run_id,
            "tool": tool,
            "by": principal or "",
            "outcome": AuditOutcome.refused(NotRunOwnerError.code),
            "digest": "",
            "ts": repr(time.time()),
        }
        # Signed where the approvers' key is held (API, CLI); a submitter's process has
        # none and marks the entry as a system one (a refusal grants nothing).
        proof = ("sig", self.signer.sign("audit", **entry)["sig"]) if self.signer else SYSTEM
        self.scripts.run(
            REFUSE(
                keys=self.keys,
                principal=principal or "",
                entry=entry,
                proof=proof,
                window=REFUSAL_WINDOW,
                per_window=REFUSALS_AUDITED,
                audit_maxlen=self.settings.audit_maxlen,
            )
        )


def _foreign_tenant(run_id: str, principal: str | None, action: str) -> NotRunOwnerError:
    return NotRunOwnerError(
        f"{principal!r} may not {action} run {run_id!r}: it belongs to another tenant",
        run_id=run_id,
        by=principal,
    )
