"""``toolq approvals``: list, show (with preview and diff), approve and deny parked calls."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import typer
from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table

from toolq.approvals.models import ApprovalRequest
from toolq.cli.audit import anchor_audit, verify_audit_
from toolq.cli.calls import open_client, resolved, warn_down
from toolq.cli.common import (
    APP_HELP,
    CALL_ID_ARGUMENT,
    JSON_OPTION,
    REDIS_OPTION,
    RISKS,
    TOKEN_OPTION,
    api_option,
    fail,
    get_from_api,
    list_from_api,
    one_of,
    post_to_api,
    print_json,
    require_signing,
    settings_for,
)
from toolq.cli.ids import MIN_PREFIX, is_full_id
from toolq.cli.render import visible
from toolq.dispatch.client import Client
from toolq.errors import ToolqError
from toolq.results.paging import DEFAULT_LIMIT, MAX_LIMIT
from toolq.workers.heartbeat import live_workers

approvals = typer.Typer(help="Calls awaiting approval.", no_args_is_help=True)
console = Console(soft_wrap=True)

_APP = typer.Option(
    None,
    "--app",
    envvar="TOOLQ_APP",
    help=APP_HELP + " Needed to approve (the tool's risk is signed) and to edit --args.",
)


def _left(deadline: float | None) -> str:
    if deadline is None:
        return "-"
    seconds = int(deadline - time.time())
    return "overdue" if seconds < 0 else f"{seconds // 60}m{seconds % 60:02d}s"


def show_request(request: ApprovalRequest) -> None:
    """Print a parked call: arguments, metadata, preview and diff.

    Every value from the record goes through ``_text`` (or ``visible``): a person
    confirms what this prints, so nothing in it may act on the terminal or as markup.
    """
    console.print(
        f"[bold]{_text(request.name)}[/bold]  call {_text(request.call_id)}  "
        + escape(f"[{request.status.value}]")
    )
    console.print(
        f"run {_text(request.run_id)}  risk {request.risk.value}  submitted by "
        f"{_text(request.submitter or '-')}  deadline in {_left(request.deadline)}"
    )
    console.print(f"digest {_text(request.digest)}")
    console.print(Syntax(visible(request.arguments_text, "\n"), "json"))
    if request.original_arguments_text is not None:
        console.print("original arguments:")
        console.print(Syntax(visible(request.original_arguments_text, "\n"), "json"))
    if request.approval_metadata:
        console.print(f"metadata: {_text(json.dumps(request.approval_metadata))}")
    if request.approvals:
        console.print(f"approved so far by: {_text(', '.join(request.approvals))}")
    if request.preview_error:
        console.print(f"[red]preview failed:[/red] {_text(request.preview_error)}")
    if request.diff:
        console.print(f"diff ({_text(str(request.diff.get('change_summary', '')))}):")
        console.print(Syntax(visible(str(request.diff.get("diff_output", "")), "\n\t"), "diff"))
    elif request.preview is not None:
        console.print("preview:")
        console.print(Syntax(json.dumps(request.preview, indent=2), "json"))


def _text(value: str) -> str:
    """A record's value inside rich markup: control characters visible, markup as text.

    Its own markup (``[/]`` raised in rich, ``[conceal]`` hid what follows) is printed as text.
    """
    return escape(visible(value))


@approvals.command("list")
def list_(
    run_id: str | None = typer.Option(None, help="Only this run."),
    risk: str | None = typer.Option(
        None, callback=one_of(*RISKS), help=f"Only this risk ({', '.join(RISKS)})."
    ),
    tool: str | None = typer.Option(None, help="Only this tool."),
    limit: int = typer.Option(
        DEFAULT_LIMIT, min=1, max=MAX_LIMIT, help=f"Calls per page (at most {MAX_LIMIT})."
    ),
    cursor: str | None = typer.Option(
        None, help="Go on after the previous page (the cursor it printed)."
    ),
    json_: bool = JSON_OPTION,
    app: str | None = _APP,
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """Pending calls, oldest parked first, a page at a time, with full call ids.

    When more calls follow, the cursor of the next page is printed last (to stderr with
    --json, whose output stays a JSON list).
    """
    with open_client(app, redis_url) as client:
        try:
            page = client.approvals.page(
                run_id=run_id, risk=risk, tool=tool, limit=limit, cursor=cursor
            )
        except ToolqError as exc:
            raise fail(str(exc)) from None
        pending = page.items
        if run_id is None:
            warn_down(client, "calls")
        more = f"next page: --cursor {page.next_cursor}" if page.next_cursor else None
        if json_:
            print_json([request.model_dump(mode="json") for request in pending])
            if more:
                typer.echo(more, err=True)
            return
        if not pending:
            typer.echo("no calls awaiting approval")
            return
        # Full ids, never folded or cut, whatever the terminal width or a pipe: people copy them.
        table = Table("call", "tool", "risk", "left", "run", "arguments", box=None)
        table.columns[0].no_wrap = True
        table.columns[0].min_width = max(len(r.call_id) for r in pending)
        for request in pending:
            table.add_row(
                _text(request.call_id),
                _text(request.name),
                request.risk.value,
                _left(request.deadline),
                _text(request.run_id),
                _text(json.dumps(request.arguments)[:60]),
            )
        Console(width=max(console.width, 200), soft_wrap=True).print(table)
        if more:
            shown = f"{len(pending)} of {page.total}" if page.total is not None else len(pending)
            typer.echo(f"showing {shown}; {more}")


@approvals.command()
def show(
    call_id: str = CALL_ID_ARGUMENT,
    json_: bool = JSON_OPTION,
    app: str | None = _APP,
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """One call with its arguments, preview and diff."""
    with open_client(app, redis_url) as client:
        try:
            request = client.approvals.get(resolved(client, call_id))
        except ToolqError as exc:
            raise fail(str(exc)) from None
        if json_:
            print_json(request.model_dump(mode="json"))
        else:
            show_request(request)


@approvals.command()
def approve(
    call_id: str | None = typer.Argument(
        None, help="Call id, or a unique prefix of one (the dashboard shows 8)."
    ),
    by: str = typer.Option("cli", help="Approver name (with --api: your token's name)."),
    args: str | None = typer.Option(
        None, "--args", metavar="JSON", help="Edited arguments as JSON (needs --app)."
    ),
    digest: str | None = typer.Option(
        None,
        help="Digest (of the tool and arguments) you reviewed, as `approvals show` printed it: "
        "a changed call is refused. Without it, on a terminal: the call is shown to confirm.",
    ),
    note: str | None = typer.Option(None, help="Kept with the decision and in the audit."),
    always: bool = typer.Option(False, help="Also approve this tool for the rest of the run."),
    run_id: str | None = typer.Option(
        None,
        "--run",
        help="Approve the pending calls of this run you reviewed (--reviewed, or confirm "
        "them on a terminal) instead of one CALL_ID.",
    ),
    reviewed: str | None = typer.Option(
        None,
        "--reviewed",
        metavar="FILE",
        help="With --run: the calls you reviewed, as `approvals list --run-id RUN --json` "
        "printed them ('-': stdin). Only those are approved, each as listed.",
    ),
    api: str | None = api_option("Approve"),
    token: str | None = TOKEN_OPTION,
    unsigned: bool = typer.Option(
        False,
        "--unsigned",
        help="Decide without a signature: only where no worker verifies approvals.",
    ),
    app: str | None = _APP,
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """Approve and enqueue a parked call (with --run: the run's you reviewed), here or via the API.

    The call is approved as you reviewed it: with --digest (what `approvals show` printed),
    or, on a terminal, shown here (with your --args under it) and confirmed; a call
    changed since is refused. Neither
    (a script without --digest) is refused. A decision is signed with
    TOOLQ_APPROVAL_SIGNING_KEY over the tool's risk from the registry (--app), or made by
    the API (--api, --token); without either it is refused, since workers that verify
    approvals would not run it.
    """
    _check_one_or_run(call_id, run_id, args=args, digest=digest, note=note, always=always)
    if reviewed is not None and run_id is None:
        raise fail("--reviewed lists the calls of a run: use it with --run", 2)
    arguments = _edited(args)
    if api is not None:
        if call_id is None:
            raise fail("--api approves one call (CALL_ID): --run decides here, signed", 2)
        call_id = _resolved_by_api(api, token, call_id)
        if digest is None:
            digest = _confirmed(call_id, lambda: _shown_by_api(api, token, call_id), arguments)
        _approve_through_api(api, token, call_id, arguments, note, digest, always)
        return
    settings = settings_for(app, redis_url)
    if args is not None and not settings.app:
        # Edited arguments must be validated against the tool's schema before they are
        # signed and queued; without the registry there is no schema to check them with.
        raise fail(
            "--args needs the tool registry to validate the edit: pass --app or set TOOLQ_APP", 2
        )
    require_signing(settings, unsigned=unsigned, decision="approval", verb="approve")
    with open_client(app, redis_url) as client:
        if run_id is not None:
            if unsigned:
                _refuse_if_verified(client)
            approve_run(client, run_id, by, _shown(client, run_id, reviewed), unsigned=unsigned)
            return
        assert call_id is not None
        full = resolved(client, call_id)
        try:
            if unsigned:
                _refuse_if_verified(client)
            else:
                _require_known_tool(client, full)
            if digest is None:
                digest = _confirmed(full, lambda: client.approvals.get(full), arguments)
            result = client.approvals.approve(
                full, by=by, arguments=arguments, note=note, digest=digest, always=always
            )
        except (ToolqError, ValueError) as exc:
            raise fail(str(exc)) from None
        typer.echo(f"approved {full}: {result.status.value}")


def _confirmed(
    call_id: str, read: Callable[[], ApprovalRequest], edit: dict[str, Any] | None = None
) -> str:
    """The digest of the call ``read`` returns, once shown here and confirmed on a terminal.

    ``edit``: the arguments of ``--args``, shown under the call's as what will run instead.
    Without a terminal, a usage error: a script approving what is parked this instant
    approves what nobody saw (a Redis writer may have rewritten it since it was reviewed).
    """
    if not typer.get_text_stream("stdin").isatty():
        raise fail(
            f"approve call {call_id} as you reviewed it: pass --digest (what `toolq approvals "
            f"show {call_id}` printed), or run it on a terminal to review and confirm it",
            2,
        )
    try:
        request = read()
    except ToolqError as exc:
        raise fail(str(exc)) from None
    show_request(request)
    what = f"call {visible(request.call_id)} ({visible(request.name)})"
    if edit is not None:
        console.print("[bold]your --args, which run instead of the arguments above:[/bold]")
        console.print(Syntax(visible(json.dumps(edit, indent=2), "\n"), "json"))
        question = f"Approve {what} with your arguments?"
    else:
        question = f"Approve {what} as shown?"
    if not typer.confirm(question):
        raise typer.Exit(1)
    return request.digest


def _check_one_or_run(call_id: str | None, run_id: str | None, **single: object) -> None:
    """A usage error unless exactly one of CALL_ID and --run is given (--run: no edits)."""
    if (call_id is None) == (run_id is None):
        raise fail("name one call (CALL_ID) or a run (--run RUN_ID)", 2)
    given = [f"--{name}" for name, value in single.items() if value]
    if run_id is not None and given:
        raise fail(f"{', '.join(given)} apply to one call: not with --run", 2)


def _shown(client: Client, run_id: str, reviewed: str | None) -> list[ApprovalRequest]:
    """The calls of ``run_id`` the person reviewed, each as they saw it (its digest).

    From ``--reviewed`` (the JSON list ``approvals list --run-id RUN --json`` printed), or,
    on a terminal, the run's pending calls printed here and confirmed. Neither: a usage
    error (a script approving what it lists this instant approves what nobody saw).
    """
    if reviewed is not None:
        try:
            text = (
                typer.get_text_stream("stdin").read()
                if reviewed == "-"
                else Path(reviewed).read_text(encoding="utf-8")
            )
            listed = [ApprovalRequest.model_validate(item) for item in json.loads(text)]
        except (OSError, ValueError, TypeError, RecursionError) as exc:
            raise fail(
                f"--reviewed {reviewed}: not the JSON list `approvals list --json` prints ({exc})",
                2,
            ) from None
        foreign = sorted({r.run_id for r in listed} - {run_id})
        if foreign:
            raise fail(f"--reviewed lists calls of run(s) {', '.join(foreign)}, not {run_id}", 2)
        twice = sorted(c for c, n in Counter(r.call_id for r in listed).items() if n > 1)
        if twice:  # as what was it reviewed? not for this command to guess
            raise fail(f"--reviewed lists call(s) {', '.join(twice)} more than once", 2)
        return listed
    if not typer.get_text_stream("stdin").isatty():
        raise fail(
            f"--run approves the calls you reviewed: pass --reviewed FILE (what `toolq "
            f"approvals list --run-id {run_id} --json` printed), or run it on a terminal to "
            "confirm them",
            2,
        )
    try:
        pending = client.approvals.pending(run_id=run_id)
    except ToolqError as exc:
        raise fail(str(exc)) from None
    for request in pending:
        show_request(request)
        console.print()
    if pending and not typer.confirm(f"Approve these {len(pending)} call(s) of run {run_id}?"):
        raise typer.Exit(1)
    return pending


def approve_run(
    client: Client,
    run_id: str,
    by: str,
    shown: list[ApprovalRequest],
    *,
    unsigned: bool = False,
) -> None:
    """Approve the ``shown`` calls of a run (``approve_run``): a line each, then a summary.

    Each is bound to its digest as shown (a call changed since, its tool or its arguments,
    is refused; one parked since is not listed) and decided as a single ``approve``
    decides it (policy, signature, quorum; a signed one only for a tool the registry
    knows); exit 1 when any is refused, or when the run is unknown.
    """
    try:
        if not shown and not client.results(run_id):
            raise fail(f"unknown run {run_id!r}: it has no calls")
        unknown = {
            r.call_id: ToolqError(f"tool {r.name!r} is not in the registry {client.settings.app}")
            for r in shown
            if not unsigned and client.registry.get(r.name) is None
        }
        digests = {r.call_id: r.digest for r in shown if r.call_id not in unknown}
        outcomes = client.approvals.approve_run(run_id, by, digests) if digests else {}
    except ToolqError as exc:
        raise fail(str(exc)) from None
    outcomes.update(unknown)
    refused = 0
    for request in shown:
        outcome = outcomes[request.call_id]
        if isinstance(outcome, ToolqError):
            refused += 1
            typer.echo(visible(f"refused  {request.call_id}  {request.name}: {outcome}"))
        else:
            typer.echo(
                visible(f"approved {request.call_id}  {request.name}: {outcome.status.value}")
            )
    typer.echo(f"run {run_id}: {len(shown) - refused} approved, {refused} refused")
    if refused:
        raise typer.Exit(1)


def _edited(args: str | None) -> dict[str, Any] | None:
    """``--args`` parsed: a JSON object, or None."""
    if args is None:
        return None
    try:
        edited = json.loads(args)
    except ValueError as exc:
        raise fail(f"--args is not JSON: {exc}", 2) from None
    if not isinstance(edited, dict):
        raise fail("--args must be a JSON object", 2)
    return edited


def _require_known_tool(client: Client, call_id: str) -> None:
    """Refuse a call whose tool the registry does not know: its risk would be a guess."""
    request = client.approvals.get(call_id)
    if client.registry.get(request.name) is None:
        raise fail(
            f"tool {request.name!r} of call {call_id} is not in the registry "
            f"{client.settings.app}: its risk is unknown here, so a signed approval would be "
            "refused by workers; pass the workers' --app"
        )


def _refuse_if_verified(client: Client) -> None:
    """Refuse ``--unsigned`` when a live worker verifies approvals: it would not run it."""
    verifying = [
        str(w.get("hostname"))
        for _, one in client.reachable()[0]
        for w in live_workers(one.settings, one.redis)
        if w.get("verifies_approvals")
    ]
    if verifying:
        raise fail(
            f"worker {verifying[0]} verifies approvals and would refuse an unsigned one: set "
            "TOOLQ_APPROVAL_SIGNING_KEY, or approve through the API with --api URL --token TOKEN"
        )


def _resolved_by_api(api: str, token: str | None, given: str) -> str:
    """The parked call ``given`` names through the API: a full id, or a unique prefix of one.

    A prefix is looked up among the parked calls the API lists to the token's holder: the
    only ones it could approve, and only when the listing is whole (one page, every cell).
    """
    if is_full_id(given) or len(given) < MIN_PREFIX:
        return given  # the API says whether it is a parked call
    listed, whole = list_from_api(api, token, f"/v1/approvals?limit={MAX_LIMIT}")
    found = sorted(
        {
            str(item["call_id"])
            for item in listed
            if isinstance(item, dict) and str(item.get("call_id", "")).startswith(given)
        }
    )
    if not whole:
        # a call past the page, or in a cell that is down, may start with it too: the one
        # found could be another run's call of the same tool and arguments (same digest)
        raise fail(
            f"the API lists more parked calls than one page, or a cell is down: a prefix "
            f"({given!r}) could name another call; pass the whole call id"
        )
    if len(found) == 1:
        return found[0]
    if not found:
        raise fail(
            f"no call parked for you starts with {given!r} (through the API, a prefix is "
            "looked up among the parked calls it lists): pass the whole call id"
        )
    raise fail(f"call id prefix {given!r} matches {len(found)} parked calls; type more of it")


def _shown_by_api(api: str, token: str | None, call_id: str) -> ApprovalRequest:
    """``GET /v1/approvals/{id}``: the call as the API shows it to the token's holder."""
    answer = get_from_api(api, token, f"/v1/approvals/{quote(call_id, safe='')}")
    return ApprovalRequest.model_validate(answer)


def _approve_through_api(
    api: str,
    token: str | None,
    call_id: str,
    arguments: dict[str, Any] | None,
    note: str | None,
    digest: str | None,
    always: bool,
) -> None:
    """``POST /v1/approvals/{id}/approve`` as the token's holder; the API signs and checks."""
    body = {"always": always, "arguments": arguments, "note": note, "digest": digest}
    answer = post_to_api(api, token, f"/v1/approvals/{quote(call_id, safe='')}/approve", body)
    typer.echo(f"approved {answer.get('call_id', call_id)}: {answer.get('status', '?')}")


@approvals.command()
def deny(
    call_id: str = CALL_ID_ARGUMENT,
    reason: str = typer.Option(..., help="Told to the model."),
    by: str = typer.Option("cli", help="Approver name."),
    always: bool = typer.Option(False, help="Also deny this tool for the rest of the run."),
    app: str | None = _APP,
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """Deny a parked call with a reason."""
    with open_client(app, redis_url) as client:
        full = resolved(client, call_id)
        try:
            client.approvals.deny(full, by=by, reason=reason, always=always)
        except ToolqError as exc:
            raise fail(str(exc)) from None
        typer.echo(f"denied {full}")


approvals.command("verify-audit")(verify_audit_)
approvals.command("anchor-audit")(anchor_audit)
