"""``GET /v1/tenants`` and ``GET /v1/tenants/{tenant}``: limits, budget use, calls by state.

A caller bound to a tenant sees that tenant only (another's is a 403 ``wrong_tenant``);
an unbound viewer or admin sees every tenant.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from toolq.api.auth import Principal
from toolq.dispatch.client import Client
from toolq.dispatch.tenants import TenantDetail, TenantsReport, tenants_report
from toolq.errors import InvalidTenantError
from toolq.quotas import valid_tenant


def build_tenants_router(client: Client, auth: Any) -> APIRouter:
    """The tenants endpoints."""
    router = APIRouter(prefix="/v1", tags=["tenants"])
    Caller = Annotated[Principal, Depends(auth)]

    @router.get("/tenants")
    async def list_tenants(caller: Caller) -> TenantsReport:
        """Every tenant configured or with unfinished calls (a bound caller: its own)."""
        caller.require_viewer()
        return await run_in_threadpool(tenants_report, client, caller.tenant)

    @router.get("/tenants/{tenant}")
    async def get_tenant(tenant: str, caller: Caller) -> TenantDetail:
        """One tenant's limits, budget use and calls, with the tools' limits."""
        caller.require_viewer()
        try:
            valid_tenant(tenant)
        except ValueError as exc:
            raise InvalidTenantError(str(exc)) from None
        caller.tenant_for(tenant)
        report = await run_in_threadpool(tenants_report, client, tenant)
        return TenantDetail(**dict(report.tenants[0]), tools=report.tools)

    return router
