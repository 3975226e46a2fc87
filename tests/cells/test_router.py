"""The routers answer for every public method of what they stand for, with its parameters.

A method a router does not define runs the single-Redis body on an object with no Redis of
its own (it fails there), so a method added to ``Client`` or ``ApprovalStore`` without a
route is caught here.
"""

from __future__ import annotations

import inspect

import pytest

from toolq.approvals.store import ApprovalStore
from toolq.cells import ApprovalRouter
from toolq.dispatch.client import Client
from toolq.dispatch.router import CellRouter

MADE_OF_OTHERS = {
    Client: {"dispatch", "dispatch_stream", "call"},
    ApprovalStore: set(),
}
"""Methods written over the object's other public methods, so they route through those."""


def public_methods(cls: type) -> dict[str, object]:
    return {
        name: member
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_")
    }


def parameters(member: object) -> list[tuple[str, object, object, object]]:
    assert callable(member)
    return [
        (p.name, p.kind, p.default, p.annotation)
        for p in inspect.signature(member).parameters.values()
    ]


@pytest.mark.parametrize(
    ("routed", "router"), [(Client, CellRouter), (ApprovalStore, ApprovalRouter)], ids=str
)
def test_the_router_defines_every_public_method_with_the_same_parameters(
    routed: type, router: type
) -> None:
    ours = public_methods(router)
    for name, member in public_methods(routed).items():
        if name in MADE_OF_OTHERS[routed]:
            assert name not in ours, f"{router.__name__}.{name} need not be routed"
            continue
        assert name in ours, f"{router.__name__} does not route {name}"
        assert parameters(ours[name]) == parameters(member), f"{router.__name__}.{name}"
        assert inspect.getdoc(ours[name]), f"{router.__name__}.{name} has no docstring"


def test_a_method_made_of_others_uses_only_routed_ones() -> None:
    # ``dispatch`` hands its Submission to ``submit``; ``call`` and ``dispatch_stream`` use
    # ``dispatch``: each reaches the router through a method it routes.
    assert "self.submit(" in inspect.getsource(Client.dispatch)
    for name in ("call", "dispatch_stream"):
        assert "self.dispatch(" in inspect.getsource(getattr(Client, name))
