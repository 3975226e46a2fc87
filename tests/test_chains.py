"""ToolChain: paths, validation, and chains whose steps run on an in-process worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from toolq import CallStatus, Client, EventType
from toolq.chains import (
    ChainResult,
    ChainStep,
    ContextPathError,
    ToolChain,
    ValidationResult,
    parse_path,
    resolve_path,
)

APP = "tests.chains_app:registry"
ADA_IN_LYON = "Ada, Lyon (45.76, 4.84)"


@pytest.fixture
def chain_client(settings) -> Iterator[Client]:
    from tests.chains_app import registry

    with Client(registry, settings) as c:
        yield c


def label_chain(client: Client) -> ToolChain:
    """lookup_user (merged) → geocode the work address → a label from both."""
    return (
        ToolChain(client)
        .add_step(ChainStep("lookup_user"))
        .add_step(ChainStep("geocode", {"city": "context.user.addresses.1.city"}, output_key="geo"))
        .add_step(
            ChainStep(
                "make_label",
                {
                    "name": "user.name",
                    "city": "user.addresses.-1.city",
                    "lat": "geo.lat",
                    "lon": "context.geo.lon",
                },
                output_key="label",
            )
        )
    )


def run_in_thread(chain: ToolChain, **kwargs: object) -> tuple[threading.Thread, list[ChainResult]]:
    out: list[ChainResult] = []
    thread = threading.Thread(target=lambda: out.append(chain.execute(**kwargs)))  # type: ignore[arg-type]
    thread.start()
    return thread, out


def wait_pending(client: Client, run_id: str, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while not (pending := client.approvals.pending(run_id=run_id)):
        assert time.monotonic() < deadline, "the chain never parked a call"
        time.sleep(0.05)
    return pending


# -- paths ------------------------------------------------------------------------------------


def test_paths_reach_any_depth_through_dicts_and_lists():
    context = {"user": {"addresses": [{"city": "Paris"}, {"city": "Lyon"}]}, "context": 1}
    assert resolve_path(context, "user.addresses.0.city") == "Paris"
    assert resolve_path(context, "context.user.addresses.1.city") == "Lyon"
    assert resolve_path(context, "user.addresses.-1.city") == "Lyon"
    assert resolve_path(context, "context") is context
    assert resolve_path(context, "context.context") == 1
    assert resolve_path({"m": {"0": "zero"}}, "m.0") == "zero"  # dict keys stay strings
    assert parse_path("context.a.b") == ("a", "b") == parse_path("a.b")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("user.email", "context path 'user.email': user has no key 'email' (keys: 'addresses')"),
        ("user.addresses.5.city", "user.addresses has no index 5 (length 2)"),
        ("user.addresses.first", "user.addresses is a list, and 'first' is not an index"),
        ("user.addresses.0.city.x", "user.addresses.0.city is str, not an object or a list"),
        ("nobody", "context has no key 'nobody' (keys: 'user')"),
        ("user..city", "has an empty segment"),
        ("user.", "has an empty segment"),
        ("", "empty context path"),
        ("user.home city", "a bad segment 'home city'"),
    ],
)
def test_paths_that_lead_nowhere_say_where(path, message):
    context = {"user": {"addresses": [{"city": "Paris"}, {"city": "Lyon"}]}}
    with pytest.raises(ContextPathError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_path(context, path)


# -- building and validating ------------------------------------------------------------------


def test_building_a_chain(chain_client):
    chain = label_chain(chain_client)
    assert len(chain) == 3
    assert repr(chain) == "ToolChain(steps=['lookup_user', 'geocode', 'make_label'])"
    steps = chain.steps
    steps.clear()
    assert len(chain) == 3  # a copy
    assert chain.steps[1].to_dict() == {
        "tool_name": "geocode",
        "input_mapping": {"city": "context.user.addresses.1.city"},
        "output_key": "geo",
    }
    assert chain.validate() == ValidationResult(valid=True, errors=[])
    chain.clear()
    assert len(chain) == 0
    assert chain.validate().errors == ["the chain has no steps"]


def test_validate_catches_unknown_tools_bad_mappings_and_keys(chain_client, r):
    chain = (
        ToolChain(chain_client)
        .add_step(ChainStep("lookup_user", {"user_id": "id"}))
        .add_step(ChainStep("teleport", {"to": "user.city"}))
        .add_step(ChainStep("geocode", {"city": "user..city"}))
        .add_step(ChainStep("make_label", {"name": "user.name", "colour": "x"}, output_key="a.b"))
    )
    result = chain.validate()
    assert not result.valid
    assert result.errors == [
        "step 1 ('teleport'): no such tool in the registry",
        "step 2 ('geocode'): argument 'city': context path 'user..city' has an empty segment",
        "step 3 ('make_label'): maps argument 'colour', which the tool does not take "
        "(it takes: name, city, lat, lon)",
        "step 3 ('make_label'): required argument 'city' is not mapped",
        "step 3 ('make_label'): required argument 'lat' is not mapped",
        "step 3 ('make_label'): required argument 'lon' is not mapped",
        "step 3 ('make_label'): output_key 'a.b' could not be addressed by a path",
    ]
    merged = result.merge(ValidationResult(valid=True, errors=[]))
    assert merged.to_dict() == {"valid": False, "errors": result.errors}

    executed = chain.execute({"id": "u1"}, run_id="never-ran")
    assert not executed.success and executed.errors == result.errors
    assert executed.step_results == []
    assert chain_client.results("never-ran") == []  # nothing was dispatched


# -- running on workers -----------------------------------------------------------------------


@pytest.mark.e2e
def test_three_steps_with_nested_and_list_mappings(chain_client, inproc):
    inproc.start(app=APP)
    result = label_chain(chain_client).execute({"user_id": "u1"}, run_id="labels", timeout=60)
    assert result.success, result.errors
    assert result.run_id == "labels"
    assert result.context["label"] == ADA_IN_LYON
    assert result.context["geo"] == {"lat": 45.76, "lon": 4.84}
    assert result.context["user_id"] == "u1"
    assert result.context["user"]["name"] == "Ada"  # the dict output was merged
    assert [s.name for s in result.step_results] == ["lookup_user", "geocode", "make_label"]
    assert all(s.status is CallStatus.SUCCEEDED for s in result.step_results)
    assert [s.run_id for s in result.step_results] == ["labels"] * 3
    assert result.duration_ms > 0
    succeeded = [e for e in chain_client.events("labels") if e.type is EventType.SUCCEEDED]
    assert len(succeeded) == 3  # every step was a real call on a worker
    assert result.to_dict()["step_results"][2]["output"] == ADA_IN_LYON


@pytest.mark.e2e
def test_a_missing_path_is_a_clear_step_error(chain_client, inproc):
    inproc.start(app=APP)
    chain = (
        ToolChain(chain_client)
        .add_step(ChainStep("lookup_user"))
        .add_step(ChainStep("geocode", {"city": "user.addresses.5.city"}))
    )
    result = chain.execute({"user_id": "u1"}, timeout=60)
    assert not result.success
    assert result.errors == [
        "step 1 ('geocode') failed: context path 'user.addresses.5.city': "
        "user.addresses has no index 5 (length 2)"
    ]
    never_sent = result.step_results[1]
    assert never_sent.call_id == "" and never_sent.error_type == "context_path"
    assert len(chain_client.results(result.run_id)) == 1


@pytest.mark.e2e
def test_stop_on_failure_true_and_false(chain_client, inproc):
    inproc.start(app=APP)
    chain = (
        ToolChain(chain_client)
        .add_step(ChainStep("explode", {"message": "why"}))
        .add_step(ChainStep("count", {"items": "context.xs"}))
    )
    stopped = chain.execute({"why": "kaput", "xs": [1, 2, 3]}, timeout=60)
    assert not stopped.success
    assert [s.name for s in stopped.step_results] == ["explode"]
    assert stopped.errors == ["step 0 ('explode') failed: RuntimeError: kaput"]
    assert "count" not in stopped.context

    going_on = chain.execute({"why": "kaput", "xs": [1, 2, 3]}, stop_on_failure=False, timeout=60)
    assert not going_on.success
    assert [s.status for s in going_on.step_results] == [CallStatus.FAILED, CallStatus.SUCCEEDED]
    assert going_on.context["count"] == 3
    assert going_on.errors == stopped.errors


@pytest.mark.e2e
def test_chain_waits_for_approval_and_continues(chain_client, inproc, r):
    inproc.start(app=APP)
    chain = label_chain(chain_client).add_step(ChainStep("ship", {"label": "label"}))
    thread, out = run_in_thread(chain, initial_input={"user_id": "u1"}, run_id="parcel", timeout=60)
    [request] = wait_pending(chain_client, "parcel")
    assert request.name == "ship" and request.arguments == {"label": ADA_IN_LYON}
    time.sleep(0.3)
    assert thread.is_alive() and r.llen("test:shipped") == 0  # parked, nothing ran
    chain_client.approvals.approve(request.call_id, by="alice")
    thread.join(30)
    [result] = out
    assert result.success, result.errors
    assert result.context["shipped"] == ADA_IN_LYON
    assert [x.decode() for x in r.lrange("test:shipped", 0, -1)] == [ADA_IN_LYON]
    types = [e.type for e in chain_client.events("parcel") if e.call_id == request.call_id]
    assert EventType.AWAITING_APPROVAL in types and EventType.APPROVED in types


@pytest.mark.e2e
def test_a_denied_step_fails_the_chain_with_the_reason(chain_client, inproc, r):
    inproc.start(app=APP)
    chain = (
        ToolChain(chain_client)
        .add_step(ChainStep("ship", {"label": "label"}))
        .add_step(ChainStep("count", {"items": "label"}))
    )
    thread, out = run_in_thread(chain, initial_input={"label": "x"}, run_id="denied", timeout=60)
    [request] = wait_pending(chain_client, "denied")
    chain_client.approvals.deny(request.call_id, by="alice", reason="no parcels on Sunday")
    thread.join(30)
    [result] = out
    assert not result.success
    assert [s.status for s in result.step_results] == [CallStatus.DENIED]
    assert len(result.errors) == 1
    assert result.errors[0].startswith("step 0 ('ship') denied: ")
    assert "no parcels on Sunday" in result.errors[0]
    assert r.llen("test:shipped") == 0


@pytest.mark.e2e
def test_timeout_cancels_a_step_still_waiting_for_approval(chain_client, inproc, r):
    inproc.start(app=APP)
    chain = ToolChain(chain_client).add_step(ChainStep("ship", {"label": "label"}))
    result = chain.execute({"label": "x"}, run_id="impatient", timeout=1)
    assert not result.success
    [step] = result.step_results
    assert step.status is CallStatus.CANCELLED and step.error_type == "timeout"
    assert result.errors == [
        "step 0 ('ship') cancelled: no result within the chain's 1s timeout "
        "(the call was awaiting_approval) and has been cancelled"
    ]
    assert chain_client.approvals.pending(run_id="impatient") == []


@pytest.mark.e2e
def test_same_chain_id_resumes_instead_of_running_twice(chain_client, inproc):
    inproc.start(app=APP)
    chain = label_chain(chain_client)
    first = chain.execute({"user_id": "u1"}, run_id="resume", chain_id="c1", timeout=60)
    again = chain.execute({"user_id": "u1"}, run_id="resume", chain_id="c1", timeout=60)
    assert first.success and again.success
    assert [s.call_id for s in again.step_results] == [s.call_id for s in first.step_results]
    assert len(chain_client.results("resume")) == 3
    other = chain.execute({"user_id": "u1"}, run_id="resume", timeout=60)
    assert len(chain_client.results("resume")) == 6 and other.context == first.context
