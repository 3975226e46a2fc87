"""``AsyncClient`` and its batch and approvals take exactly the parameters of their twins."""

from __future__ import annotations

import inspect

import pytest

from toolq import AsyncBatch, AsyncClient, Batch, Client
from toolq.approvals.store import ApprovalStore
from toolq.dispatch import AsyncApprovals

PAIRS = [(Client, AsyncClient), (Batch, AsyncBatch), (ApprovalStore, AsyncApprovals)]

SYNC_ONLY = {ApprovalStore: {"expire_due"}}
"""Public methods with no async twin: the sweeper's, not a client's."""


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_")
    }


def parameters(signature: inspect.Signature) -> list[tuple[str, object, object, object]]:
    return [(p.name, p.kind, p.default, p.annotation) for p in signature.parameters.values()]


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=lambda c: c.__name__)
def test_every_public_method_has_an_async_twin_with_the_same_parameters(
    sync: type, aio: type
) -> None:
    ours = public_methods(aio)
    wanted = {
        name: sig
        for name, sig in public_methods(sync).items()
        if name not in SYNC_ONLY.get(sync, set())
    }
    assert set(wanted) <= set(ours), f"{aio.__name__} lacks {sorted(set(wanted) - set(ours))}"
    for name, signature in wanted.items():
        assert parameters(ours[name]) == parameters(signature), f"{aio.__name__}.{name}"


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=lambda c: c.__name__)
def test_async_methods_are_awaitable_or_async_iterators_and_documented(
    sync: type, aio: type
) -> None:
    for name, member in vars(aio).items():
        if name.startswith("_") or not callable(member):
            continue
        doc = inspect.getdoc(member) or ""
        assert doc and not doc.lower().startswith("see "), f"{aio.__name__}.{name}: {doc!r}"
        if name == "events":
            assert "AsyncIterator" in str(inspect.signature(member).return_annotation)
        else:
            assert inspect.iscoroutinefunction(member), f"{aio.__name__}.{name} is not async"


def test_constructors_match() -> None:
    assert parameters(inspect.signature(AsyncClient.__init__)) == parameters(
        inspect.signature(Client.__init__)
    )


def test_a_drifted_signature_is_caught() -> None:
    class Drifted(AsyncClient):
        async def cancel(self, call_id: str, **kwargs: object) -> None:  # type: ignore[override]
            """Cancel."""

    assert parameters(inspect.signature(Drifted.cancel)) != parameters(
        inspect.signature(Client.cancel)
    )
