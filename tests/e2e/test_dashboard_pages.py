"""The dashboard's call pages, workers panel, charts, search and pagination.

The JSON endpoints over real HTTP (uvicorn, real Redis, real ``toolq worker`` processes),
the page in Chromium as ``test_dashboard`` drives it.
"""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import pytest

from tests.e2e import test_dashboard as base
from tests.e2e.test_dashboard import SLOW, card, dispatch, expect, h, screenshot, sign_in, state_of
from toolq.api.charts import charts, percentile
from toolq.models import FINAL_STATUSES
from toolq.webhooks.payload import Notice

pytestmark = pytest.mark.e2e

api = base.api  # the same uvicorn server and Chromium page as test_dashboard
page = base.page

LONG_RUN = "run-" + "x" * 52 + "-end"  # 60 characters, no place to break
DATE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$")
FINAL_STATES = {status.value for status in FINAL_STATUSES}


def overview(api: str, **params: Any) -> dict[str, Any]:
    got = httpx.get(f"{api}/v1/overview", params=params, headers=h("agent-t"))
    assert got.status_code == 200, got.text
    return got.json()


def wait_final(api: str, ids: list[str]) -> None:
    deadline = time.monotonic() + 30
    while True:
        states = {c["call_id"]: c["status"] for c in overview(api, limit=1000)["calls"]}
        if all(states.get(i) in FINAL_STATES for i in ids):
            return
        assert time.monotonic() < deadline, states
        time.sleep(0.1)


def test_percentile_nearest_rank():
    assert percentile([5.0], 99) == 5.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_search_pagination_workers_and_charts_over_http(api, workers, client):
    proc = workers.start(pool="threads", concurrency=2)
    echoes = dispatch(api, "pages", *[(f"e{i}", "echo", {"text": str(i)}) for i in range(5)])
    [boom] = dispatch(api, LONG_RUN, ("b", "boom", {}))
    wait_final(api, [*echoes, boom])

    # pages: newest first, disjoint, together the whole list; has_more says when to stop
    everything = [c["call_id"] for c in overview(api, limit=1000)["calls"]]
    assert len(everything) == 6
    first = overview(api, limit=4)
    second = overview(api, limit=4, offset=4)
    assert first["has_more"] is True and second["has_more"] is False
    assert [c["call_id"] for c in first["calls"] + second["calls"]] == everything
    assert second["offset"] == 4
    assert overview(api, offset=4, limit=4, tool="echo")["calls"][0]["name"] == "echo"

    # search: any part of call id, run id, tool, state or error, any case
    assert [c["call_id"] for c in overview(api, q="KABOOM")["calls"]] == [boom]
    assert [c["call_id"] for c in overview(api, q="xxxxx-end")["calls"]] == [boom]
    assert [c["call_id"] for c in overview(api, q=echoes[2][:12])["calls"]] == [echoes[2]]
    assert overview(api, q="no such thing")["calls"] == []
    row = overview(api, q="kaboom")["calls"][0]
    assert row["run_id"] == LONG_RUN and "kaboom" in row["error"]

    # workers: the heartbeat carries pool, concurrency, uptime, processed and current calls
    [slow] = dispatch(api, "busy", ("s", "slow", {"seconds": 3}))
    deadline = time.monotonic() + 20
    while True:
        [w] = overview(api)["worker_list"]
        if slow in w["current"]:
            break
        assert time.monotonic() < deadline, w
        time.sleep(0.1)
    assert w["pool"] == "threads" and w["concurrency"] == 2 and isinstance(w["pid"], int)
    assert w["queues"] == ["toolq.dangerous", "toolq.moderate", "toolq.safe"]
    assert w["uptime_s"] >= 0 and w["processed"] >= 6
    while True:
        [w] = overview(api)["worker_list"]
        if w["current"] == [] and w["processed"] >= 7:
            break
        assert time.monotonic() < deadline + 10, w
        time.sleep(0.1)
    assert proc.poll() is None

    # charts: every finished call of the hour in its minute, durations per tool
    got = httpx.get(f"{api}/v1/charts", headers=h("agent-t"))
    assert got.status_code == 200, got.text
    data = got.json()
    assert data["bucket_seconds"] == 60 and data["start"] <= time.time() < data["start"] + 3600
    assert len(data["rates"]["succeeded"]) == 60
    assert round(sum(data["rates"]["succeeded"]) * 60) == 6  # five echoes and the slow one
    assert round(sum(data["rates"]["failed"]) * 60) == 1
    assert set(data["durations"]) == {"echo", "slow", "boom"}
    p50 = [v for v in data["durations"]["slow"]["p50"] if v is not None]
    p99 = [v for v in data["durations"]["slow"]["p99"] if v is not None]
    assert len(p50) == 1 and p50[0] >= 3000 and p99[0] >= p50[0]
    # bounded to the hour: an hour later the same calls are gone from every series
    later = charts(client, now=time.time() + 3660)
    assert later["rates"] == {} and later["durations"] == {}
    assert httpx.get(f"{api}/v1/charts").status_code == 401

    # what a call page may offer
    actions = httpx.get(f"{api}/v1/calls/{echoes[0]}/actions", headers=h("agent-t"))
    assert actions.json() == {"cancel": False, "undo": False, "undo_state": None}
    [parked] = dispatch(api, "busy", ("w", "wipe", {"target": "t"}))
    actions = httpx.get(f"{api}/v1/calls/{parked}/actions", headers=h("agent-t"))
    assert actions.json()["cancel"] is True
    missing = httpx.get(f"{api}/v1/calls/nope/actions", headers=h("agent-t"))
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "call_not_found"
    assert httpx.get(f"{api}/v1/calls/{parked}/actions").status_code == 401
    assert httpx.get(
        f"{api}/v1/overview", params={"offset": -1}, headers=h("agent-t")
    ).status_code in (
        400,
        422,
    )


def test_call_page_from_webhook_link_masks_secrets_and_cancels(api, inproc, page):
    inproc.start()
    [login] = dispatch(api, "run-login", ("l", "login", {"user": "ada", "password": "hunter2-pw"}))
    link = Notice(
        delivery_id="d",
        type="call.awaiting_approval",
        call_id=login,
        run_id="run-login",
        tool="login",
        risk="dangerous",
        ts=time.time(),
        data={},
    ).link(api)
    assert link == f"{api}/#/calls/{login}"
    page.goto(link)  # signed out: the page opens once signed in
    sign_in(page)
    panel = page.locator("#call-panel")
    expect(panel).to_be_visible()
    expect(page.locator("#call-title")).to_have_text(login)
    args = page.get_by_test_id("call-arguments")
    expect(args).to_contain_text("ada")
    assert "hunter2-pw" not in page.content()
    expect(
        panel.locator("dd").filter(has_text=re.compile(r"^\d{4}-\d{2}-\d{2} "))
    ).not_to_have_count(0)
    expect(page.locator("#call-timeline li[data-type='call.awaiting_approval']")).to_have_count(1)
    expect(page.locator("#call-undo")).to_be_hidden()

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#call-cancel")
    expect(page.locator("#call-state .badge[data-state]")).to_have_text("cancelled", timeout=SLOW)
    expect(page.locator("#call-timeline li[data-type='call.cancelled']")).to_have_count(1)
    expect(page.locator("#call-cancel")).to_be_hidden()
    result = httpx.get(f"{api}/v1/calls/{login}", headers=h("agent-t")).json()
    assert result["status"] == "cancelled"

    # from the table: the call link opens the page; Close clears the route
    page.click("#call-close")
    expect(panel).to_be_hidden()
    assert "#/calls/" not in page.url
    page.locator(f'#calls tr[data-call-id="{login}"] [data-testid=call-link]').click()
    expect(page.locator("#call-title")).to_have_text(login)
    assert page.url.endswith(f"#/calls/{login}")
    # signed in, a link followed later opens its page too (hashchange)
    page.click("#call-close")
    page.goto(link)
    expect(panel).to_be_visible()
    expect(page.locator("#call-state .badge[data-state]")).to_have_text("cancelled")


def test_long_run_ids_full_errors_and_narrow_layout(api, inproc, page):
    inproc.start()
    sign_in(page)
    extra = {f"unexpected_field_number_{i}": i for i in range(8)}
    [boom, bad, parked] = dispatch(
        api,
        LONG_RUN,
        ("b", "boom", {}),
        ("x", "add", {"a": 1, "b": 2, **extra}),  # fails validation: a ~500-character error
        ("w", "wipe", {"target": "t" * 80}),  # parked: its row has a Cancel button
    )
    expect(state_of(page, bad)).to_have_text("failed", timeout=SLOW)
    expect(state_of(page, boom)).to_have_text("failed", timeout=SLOW)
    expect(page.locator(f'#calls tr[data-call-id="{parked}"] button.cancel')).to_be_visible()
    row = page.locator(f'#calls tr[data-call-id="{boom}"]')
    expect(row.locator("td.when")).to_have_text(DATE)

    def fits() -> dict[str, Any]:
        return page.evaluate(
            """() => {
            const panel = document.getElementById('calls-panel');
            const clipped = [...document.querySelectorAll('#calls td.error')]
              .filter(td => td.scrollWidth > td.clientWidth + 1).length;
            const cells = [...document.querySelectorAll('#calls td')]
              .map(td => td.getBoundingClientRect());
            return {page: document.documentElement.scrollWidth, viewport: window.innerWidth,
                    table: document.getElementById('calls').scrollWidth, panel: panel.clientWidth,
                    clipped, outside: cells.filter(r => r.right > window.innerWidth + 1).length};
        }"""
        )

    for width in (1440, 420):
        page.set_viewport_size({"width": width, "height": 900})
        got = fits()
        assert got["page"] <= got["viewport"], got
        assert got["table"] <= got["panel"], got
        assert got["clipped"] == 0 and got["outside"] == 0, got
        error = page.locator(f'#calls tr[data-call-id="{boom}"] td.error')
        expect(error).to_contain_text("kaboom")
        run_link = row.locator("button.run-id")
        expect(run_link).to_have_text(LONG_RUN)
        run_link.scroll_into_view_if_needed()
        expect(run_link).to_be_in_viewport(ratio=0.95)
    screenshot(page, "dashboard-narrow.png")

    # the call page holds the whole error, however long
    page.set_viewport_size({"width": 1440, "height": 1000})
    cut = page.locator(f'#calls tr[data-call-id="{bad}"] td.error')
    expect(cut).to_contain_text("unexpected_field_number_0")
    cut.locator("a.more").click()
    full = httpx.get(f"{api}/v1/calls/{bad}", headers=h("agent-t")).json()["error"]
    assert len(full) > 400 and full.endswith(
        "unexpected_field_number_7: Extra inputs are not permitted"
    )
    expect(page.get_by_test_id("call-error-text")).to_have_text(full)


def test_workers_charts_search_pages_state_filter_and_undo(api, workers, page, tmp_path):
    workers.start(pool="threads", concurrency=3)
    sign_in(page)
    target = tmp_path / "undo.txt"
    target.write_text("before\n")
    [wipe, edit] = dispatch(
        api,
        "run-gated",
        ("w", "wipe", {"target": "prod"}),
        ("e", "edit_file", {"path": str(target), "content": "after\n"}),
    )
    many = dispatch(api, "run-many", *[(f"m{i}", "echo", {"text": str(i)}) for i in range(55)])
    [boom] = dispatch(api, "run-boom", ("b", "boom", {}))
    wait_final(api, [*many, boom])
    expect(card(page, wipe)).to_be_visible()

    # workers panel
    worker = page.get_by_test_id("worker-row")
    expect(worker).to_have_count(1)
    expect(worker.get_by_test_id("worker-pool")).to_have_text("threads")
    expect(worker.locator("td").nth(3)).to_have_text("3")
    expect(worker.get_by_test_id("worker-processed")).to_have_text(
        re.compile(r"^(5[6-9]|[6-9]\d)$"), timeout=SLOW
    )

    # charts drawn from /v1/charts as SVG (no library, no CDN)
    expect(page.locator('#chart-rates path[data-series="succeeded"]')).to_have_count(
        1, timeout=SLOW
    )
    expect(page.locator('#chart-durations path[data-series="echo p50"]')).to_have_count(1)
    expect(page.locator('#chart-durations path[data-series="echo p99"]')).to_have_count(1)
    expect(page.locator("#legend-durations")).to_contain_text("echo")

    # pagination: 50 a page, older calls on the next
    rows = page.get_by_test_id("call-row")
    expect(rows).to_have_count(50)
    expect(page.locator("#page-prev")).to_be_disabled()
    page.click("#page-next")
    expect(rows).to_have_count(8)  # 58 calls in all
    expect(page.locator("#page-info")).to_have_text("51\N{EN DASH}58")
    expect(page.locator("#page-next")).to_be_disabled()
    page.click("#page-prev")
    expect(rows).to_have_count(50)

    # search narrows calls and approvals alike
    page.fill("#filters input[name=q]", "kaboom")
    expect(rows).to_have_count(1)
    expect(state_of(page, boom)).to_have_text("failed")
    expect(page.get_by_test_id("approval-row")).to_have_count(0)
    page.fill("#filters input[name=q]", "run-gated")
    expect(rows).to_have_count(2)
    expect(page.get_by_test_id("approval-row")).to_have_count(2)
    page.click("#filters button[type=reset]")

    # the state filter applies to approvals too
    page.select_option("#filters select[name=state]", "succeeded")
    expect(page.get_by_test_id("approval-row")).to_have_count(0)
    expect(page.locator("#approvals-empty")).to_be_visible()
    page.select_option("#filters select[name=state]", "awaiting_approval")
    expect(page.get_by_test_id("approval-row")).to_have_count(2)
    expect(rows).to_have_count(2)
    page.select_option("#filters select[name=state]", "")

    # cancel from the table (the gated calls are the oldest: on page 2 unless searched for)
    page.fill("#filters input[name=q]", "run-gated")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f'#calls tr[data-call-id="{wipe}"] button.cancel').click()
    expect(state_of(page, wipe)).to_have_text("cancelled", timeout=SLOW)
    expect(page.locator(f'#calls tr[data-call-id="{wipe}"] button.cancel')).to_have_count(0)

    # approve the edit, then undo it from its call page
    card(page, edit).locator("button.approve").click()
    expect(state_of(page, edit)).to_have_text("succeeded", timeout=SLOW)
    assert target.read_text() == "after\n"
    page.locator(f'#calls tr[data-call-id="{edit}"] [data-testid=call-link]').click()
    expect(page.get_by_test_id("call-output")).to_contain_text("written")
    expect(page.locator("#call-panel [data-testid=diff] .add")).to_have_text(["+after"])
    undo = page.locator("#call-undo")
    expect(undo).to_be_visible()
    asked: list[str] = []  # the confirmation shows the undo data the handler will get

    def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    undo.click()
    expect(page.locator("#call-timeline li[data-type='call.undone']")).to_have_count(
        1, timeout=SLOW
    )
    expect(undo).to_be_hidden()
    assert target.read_text() == "before\n"
    assert '"before": "before\\n"' in asked[0] and str(target) in asked[0], asked
    screenshot(page, "dashboard-call.png")


def test_prefork_heartbeat_counts_calls_run_in_child_processes(api, workers, settings):
    from toolq.cli.check import live_workers

    workers.start("safe", pool="prefork", concurrency=1)
    [slow] = dispatch(api, "fork", ("s", "slow", {"seconds": 2}))
    deadline = time.monotonic() + 20
    while not any(slow in w.get("current", []) for w in live_workers(settings)):
        assert time.monotonic() < deadline, live_workers(settings)
        time.sleep(0.1)
    [beat] = live_workers(settings)
    assert beat["pool"] == "prefork" and beat["processed"] == 0
    while True:
        [beat] = live_workers(settings)
        if beat["current"] == [] and beat["processed"] == 1:
            break
        assert time.monotonic() < deadline + 10, beat
        time.sleep(0.1)


def test_call_page_renders_hostile_values_as_text(api, inproc, page):
    inproc.start("safe")
    sign_in(page)
    hostile = "<img src=x onerror=window.pwned=1><b>bold</b>"
    [echo] = dispatch(api, "run-<img src=y>", ("e", "echo", {"text": hostile}))
    page.goto(f"{api}/#/calls/{echo}")
    expect(page.get_by_test_id("call-output")).to_contain_text(hostile, timeout=SLOW)
    expect(page.get_by_test_id("call-arguments")).to_contain_text(hostile)
    expect(page.locator("#call-meta")).to_contain_text("run-<img src=y>")
    # a crafted link puts markup in the route: shown as text, answered 404, nothing runs
    page.goto(f"{api}/#/calls/" + hostile.replace(" ", "%20"))
    expect(page.locator("#call-error")).to_contain_text("not_found")
    expect(page.locator("#call-title")).to_have_text(hostile)
    assert page.locator("#app img, #app b").count() == 0
    assert page.evaluate("window.pwned") is None


@pytest.mark.parametrize("name", ["charts.js", "call.js"])
def test_scripts_are_served_under_the_dashboard_csp(api, name):
    script = httpx.get(f"{api}/{name}")
    assert script.status_code == 200
    assert script.headers["content-type"].startswith("text/javascript")
    page = httpx.get(f"{api}/")
    assert script.headers["content-security-policy"] == page.headers["content-security-policy"]
    assert "innerHTML" not in script.text
    assert f'<script src="{name}"></script>' in page.text
