"""``toolq verify-audit`` (and ``toolq approvals verify-audit``): audit chain and signatures."""

from __future__ import annotations

import redis
import typer

from toolq.approvals.audit import AuditReport, anchor_head, verify_audit
from toolq.cli.common import REDIS_OPTION, fail, print_json, require_redis, settings_for
from toolq.dispatch.client import Client
from toolq.registry.registry import ToolRegistry
from toolq.results.audit_chain import ChainReport
from toolq.results.audit_log import AuditLog
from toolq.signing import signer_for, verifier_for

SHOWN = 20
"""Problems (and bad entries) printed per stream; ``--json`` lists them all."""


def verify_audit_(
    json_: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    chain_only: bool = typer.Option(
        False, "--chain-only", help="Check the hash chain only (no verify keys needed)."
    ),
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """Check the audit stream's hash chain and every entry's signature.

    With a history store (TOOLQ_HISTORY_URL) the archived entries are checked first, then
    the stream's newer ones: the chain runs from seq 1 (or the checkpoint retention left)
    to the head. Reports entries deleted, altered, reordered or forged (by seq and stream id) and
    signatures that do not verify (needs TOOLQ_APPROVAL_VERIFY_KEYS unless --chain-only);
    entries written by workers and the sweeper (which hold no signing key) are counted apart.
    Exits 1 on any problem.
    """
    settings = settings_for(redis_url=redis_url)
    verifier = None if chain_only else verifier_for(settings)
    if verifier is None and not chain_only:
        raise fail("TOOLQ_APPROVAL_VERIFY_KEYS is not set: nothing to verify the audit with", 2)
    require_redis(settings)
    report: AuditReport | None = None
    with Client(ToolRegistry(), settings) as client:
        for cell, one in client.each_cell():
            source = f"cell {cell}" if cell is not None else "redis"
            try:
                history = one.history
                archived = history.archived_audit() if history is not None else None
                found = verify_audit(one.redis, one.settings, verifier, source, archived)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                raise fail(f"cell {cell} does not answer: {exc}") from None
            report = found if report is None else report.merged(found)
    assert report is not None
    if json_:
        print_json(report.model_dump())
    else:
        _print(report)
    if not report.ok:
        raise typer.Exit(1)


def anchor_audit(
    by: str = typer.Option("cli", "--by", help="Who anchors (named in the entry)."),
    redis_url: str | None = REDIS_OPTION,
) -> None:
    """Sign the audit chain's head (needs TOOLQ_APPROVAL_SIGNING_KEY); run it periodically.

    Appends an anchor entry naming the head's seq and hash, in each cell's stream: a chain
    a Redis writer recomputes no longer matches it, and verify-audit says so.
    """
    settings = settings_for(redis_url=redis_url)
    signer = signer_for(settings)
    if signer is None:
        raise fail("TOOLQ_APPROVAL_SIGNING_KEY is not set: nothing to sign the anchor with", 2)
    require_redis(settings)
    with Client(ToolRegistry(), settings) as client:
        for cell, one in client.each_cell():
            try:
                log = AuditLog(one.redis, one.keys, one.settings.audit_maxlen)
                head = anchor_head(log, signer, by)
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                raise fail(f"cell {cell} does not answer: {exc}") from None
            where = f"cell {cell}" if cell is not None else "audit"
            typer.echo(
                f"{where}: anchored seq {head.seq}" if head else f"{where}: empty, no anchor"
            )


def _print(report: AuditReport) -> None:
    if report.signatures_checked:
        typer.echo(
            f"{report.valid} valid, {report.invalid} invalid, {report.unsigned} unsigned, "
            f"{report.unsigned_system} unsigned system entries (of {report.total})"
        )
        for entry_id in report.bad_ids[:SHOWN]:
            typer.echo(f"  bad entry {entry_id}", err=True)
    for chain in report.chains:
        typer.echo(_chain_line(chain))
        for problem in chain.problems[:SHOWN]:
            where = f"seq {problem.seq}" if problem.seq is not None else "no seq"
            if problem.last_seq is not None and problem.last_seq != problem.seq:
                where = f"seq {problem.seq}..{problem.last_seq}"
            at = f" at {problem.stream_id}" if problem.stream_id else ""
            typer.echo(f"  {problem.kind}: {where}{at}: {problem.detail}", err=True)


def _chain_line(chain: ChainReport) -> str:
    start = (
        f"from checkpoint seq {chain.start_seq} (prev {chain.start_prev[:12]})"
        if chain.from_checkpoint
        else "from seq 1"
    )
    head = "head matches" if chain.head_checked and chain.ok else "head not checked"
    if chain.head_checked and not chain.ok:
        head = "head checked"
    verdict = "intact" if chain.ok else f"BROKEN ({len(chain.problems)} problems)"
    legacy = f", {chain.unchained} entries older than the chain" if chain.unchained else ""
    anchored = (
        f", signed anchor at seq {chain.anchored_seq} ({chain.unanchored} entries after it)"
        if chain.anchored_seq
        else ", no signed anchor checked"
    )
    return (
        f"chain {chain.source}: {verdict}: {chain.entries} entries {start} to seq "
        f"{chain.last_seq}, {head}{anchored}{legacy}"
    )
