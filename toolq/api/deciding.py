"""Who may decide a call: the checks every deciding route makes before the store decides.

The HTTP API, the Slack interactions and the approval page decide through these and then
``ApprovalStore.approve``/``deny``, which sign, audit, count the quorum and refuse a
submitter's own call.
"""

from __future__ import annotations

from toolq.api.auth import Principal
from toolq.approvals.authority import decided_risk
from toolq.approvals.models import ApprovalRequest
from toolq.dispatch.client import Client


def may_decide(client: Client, call_id: str, caller: Principal) -> ApprovalRequest:
    """The call, once ``caller`` may decide it: its tenant, the approver role of its risk.

    The risk is the tool's in this process's registry: the record's is data any Redis
    writer can lower.
    """
    owners = client.cell_for_call(call_id).owners
    owners.check_call_tenant(
        call_id, caller.tenant, principal=caller.name, action="decide calls of"
    )
    request = client.approvals.get(call_id)
    caller.require_approver(decided_risk(client.registry, request.name))
    return request
