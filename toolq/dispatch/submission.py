"""``Submission``: who dispatches, into which run, for which tenant, in one frozen value.

``Client.dispatch`` and ``AsyncClient.dispatch`` keep their keyword arguments and build a
``Submission`` once; from there it travels whole (``Client.submit``, the cell router,
``Dispatcher.dispatch``), so a new per-dispatch setting is one field here, not one more
keyword argument on every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolq.models import ProviderFormat
from toolq.quotas import DEFAULT_TENANT


@dataclass(frozen=True)
class Submission:
    """One dispatch's settings: the same for every call of its payload."""

    run_id: str | None = None
    """The run the calls join (``None``: a new run)."""
    principal: str | None = None
    """Who dispatches: the owner of a run it creates."""
    tenant: str = DEFAULT_TENANT
    """The customer the calls are run for (its budget, share and limits)."""
    behavior: str | None = None
    """The agent behaviour the calls run under (``Tool.allowed_behaviors``)."""
    idempotency_key: str | None = None
    """The client's key: each call is claimed under it and its position."""
    format: ProviderFormat | str | None = None
    """The payload's provider format (``None``: detected)."""
    admin: bool = False
    """May dispatch into a run another principal of the same tenant owns."""
    notify: str | None = None
    """An inbox stream (``Keys.wait_inbox``) the calls that turn final later copy their
    final events to."""
