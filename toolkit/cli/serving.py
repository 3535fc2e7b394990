"""Serving across a migration: `toolkit canary` (a share of traffic to a candidate), `toolkit shadow` (replay real
questions on both versions), `toolkit query-log` (the opt-in question log) and `toolkit tenant` (logins bound to
tenants)."""

from __future__ import annotations

import click

from toolkit import validation
from toolkit.cli._output import FORMAT_OPTION, emit, to_json
from toolkit.cli._params import Duration, Number
from toolkit.cli.lifecycle import version_options


@click.command(short_help="Send a share of requests (or whole tenants) to a verified candidate.")
@version_options
@click.option(
    "--percent",
    type=Number(validation.CANARY_PERCENT),
    help="Share of request keys served by the candidate, 0 to 100 (to 0.01).",
)
@click.option("--tenants", metavar="A,B", help="Whole tenants served by the candidate (comma-separated).")
@click.option("--off", is_flag=True, help="End the canary: every request back to the active version.")
@click.option("--force", is_flag=True, help="Allow a candidate without a current passing verification (audited).")
@click.option("--reason", help="Recorded in toolkit.cutovers.")
@FORMAT_OPTION
def canary(model_alias, chunker_spec, version, percent, tenants, off, force, reason, output_format) -> None:
    """Serve a verified candidate to PERCENT of request keys (a stable hash: one key always gets the same version
    while the share is unchanged, and raising it only moves keys to the candidate) and to whole --tenants.

    `toolkit.serving_model(request_key)` then names the candidate for those requests; ingest keeps writing to both
    versions. `--percent 0` with no tenants, or `--off`, ends it; `toolkit cutover` of the candidate promotes it;
    `toolkit rollback` ends it. Without options it shows the canary.
    """
    from toolkit.cli._context import open_database
    from toolkit.cutover import resolve_version
    from toolkit.serving import canary_status, end_canary, set_canary

    _, conn = open_database()
    with conn:
        if off:
            candidate = end_canary(conn, reason=reason)
            current = None
            message = f"Canary of version {candidate} ended: every request is served by the active version."
        elif percent is None and tenants is None:
            current = canary_status(conn)
            message = "No canary is running." if current is None else None
        else:
            target = resolve_version(conn, model_alias, chunker_spec, version, states=("ready", "verified"))
            chosen = [t for t in (tenants or "").split(",") if t.strip()]
            current = set_canary(conn, target, percent or 0, chosen, force=force, reason=reason)
            message = None if current else f"Canary of version {target} ended."
    if output_format == "json":
        click.echo(to_json(current.as_dict() if current else None))
        return
    if current is not None:
        click.echo(
            f"Version {current.candidate} ({current.model_alias}) serves {current.percent:g}% of request keys"
            + (f" and tenants {', '.join(current.tenants)}" if current.tenants else "")
            + (" (forced: no current passing verification)" if current.forced else "")
            + "; every other request is served by the active version."
        )
    if message:
        click.echo(message)


@click.command(short_help="Replay real questions on the active version and a candidate; compare them.")
@version_options
@click.option(
    "--queries", "queries_path", type=click.Path(exists=True, dir_okay=False), help="Questions (JSONL or text)."
)
@click.option("--from-log", is_flag=True, help="Replay the questions of the query log (toolkit query-log).")
@click.option(
    "--since",
    type=Duration(validation.LOOKBACK_DAYS),
    default="1d",
    show_default=True,
    help="With --from-log: questions logged this recently.",
)
@click.option("--tenant", help="The tenant of the questions (for a file without tenants; filters the log).")
@click.option(
    "-k", "k", type=Number(validation.RESULTS), default=5, show_default=True, help="Results compared per question."
)
@FORMAT_OPTION
def shadow(model_alias, chunker_spec, version, queries_path, from_log, since, tenant, k, output_format) -> None:
    """Replay questions on the active version and the candidate, each embedded with its own model and searched
    in its own version, and report how much they agree: overlap@k of the returned text (by character spans, so
    versions with other chunkers compare), the share of questions whose first result changed, the questions that
    changed most, and p50/p95 latency per version. No labels needed.
    """
    from toolkit.cli._context import open_database
    from toolkit.cutover import parse_duration, resolve_version
    from toolkit.shadow import questions_from_file, questions_from_log
    from toolkit.shadow import shadow as run

    if bool(queries_path) == bool(from_log):
        raise click.UsageError("Give the questions one way: --queries FILE or --from-log.")
    _, conn = open_database()
    with conn:
        candidate = resolve_version(conn, model_alias, chunker_spec, version, states=("ready", "verified", "standby"))
        questions = (
            questions_from_file(queries_path, tenant)
            if queries_path
            else questions_from_log(conn, parse_duration(since), tenant)
        )
        report = run(conn, candidate, questions, k=k)
    if output_format == "json":
        click.echo(to_json(report.as_dict()))
        return
    click.echo(
        f"{report.questions} question{'s' if report.questions != 1 else ''} on active version {report.active} and "
        f"candidate {report.candidate}: overlap@{k} {report.overlap_at_k:.3f}, first result changed for "
        f"{report.top1_changed:.1%}."
    )
    emit([{"version": v, **figures} for v, figures in report.latency_ms.items()], "table")
    click.echo("Changed most:")
    for item in report.changed_most:
        click.echo(
            f"  overlap {item.overlap:.2f}  [{item.tenant}] {item.question[:90]}\n"
            f"      active {item.active_top or '-'}  candidate {item.candidate_top or '-'}"
        )
    for failure in report.failed[:10]:
        click.echo(f"  not replayed: {failure}", err=True)


@click.command("query-log", short_help="Turn the opt-in question log on or off, and see it.")
@click.option(
    "--sample-rate",
    type=Number(validation.SAMPLE_RATE),
    help="Share of searched questions to log, 0 to 1 (0 turns it off).",
)
@click.option(
    "--retention",
    type=Duration(validation.LOG_RETENTION_DAYS),
    metavar="DURATION",
    help="Keep logged questions this long: 30d, 12h.",
)
@click.option("--off", is_flag=True, help="Stop logging (the same as --sample-rate 0).")
@click.option("--prune", is_flag=True, help="Delete the questions older than the retention now.")
@FORMAT_OPTION
def query_log(sample_rate, retention, off, prune, output_format) -> None:
    """The query log holds users' questions (personal data): it is off until turned on, tenant-scoped, and pruned
    after the retention period. `toolkit shadow --from-log` replays it; `toolkit search` and the library's
    `search()` log a share of the questions they serve. Changing it needs the owner role (the DBA).
    """
    from toolkit.cli._context import open_database
    from toolkit.cutover import parse_duration
    from toolkit.store.query_log import prune_query_log, query_log_status, set_query_log

    _, conn = open_database()
    with conn:
        pruned = None
        if off or sample_rate is not None or retention is not None:
            rate = 0.0 if off else (sample_rate if sample_rate is not None else query_log_status(conn).sample_rate)
            set_query_log(conn, rate, parse_duration(retention) if retention else None)
        if prune:
            pruned = prune_query_log(conn)
        status = query_log_status(conn)
    if output_format == "json":
        click.echo(to_json({**status.as_dict(), "pruned": pruned}))
        return
    state = "off" if status.sample_rate == 0 else f"on, logging {status.sample_rate:.0%} of questions"
    click.echo(f"Query log {state}; kept {status.retention}; {status.questions:,} questions logged.")
    if pruned is not None:
        click.echo(f"Pruned {pruned:,} questions older than the retention.")


@click.group(short_help="Bind logins to tenants: a bound login sees only its tenants.")
def tenant() -> None:
    """Bind application logins to tenants (off by default; needs the owner role). A bound login sees only its
    tenants, whatever it sets toolkit.tenant to; an unbound login chooses its tenant as before."""


@tenant.command("grant")
@click.argument("login")
@click.argument("tenants", nargs=-1, required=True)
def tenant_grant(login, tenants) -> None:
    """Bind LOGIN to TENANTS (added to those it has)."""
    from toolkit.cli._context import open_database
    from toolkit.store.tenants import bind_tenants

    _, conn = open_database()
    with conn:
        bound = bind_tenants(conn, login, tenants)
    click.echo(f"{login} is bound to {', '.join(bound)}: it sees no other tenant.")


@tenant.command("revoke")
@click.argument("login")
@click.argument("tenants", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Remove every binding of LOGIN (it chooses its tenant again).")
def tenant_revoke(login, tenants, everything) -> None:
    """Remove LOGIN's bindings to TENANTS (or all of them with --all)."""
    from toolkit.cli._context import open_database
    from toolkit.store.tenants import unbind_tenants

    if not tenants and not everything:
        raise click.UsageError("Name the tenants to revoke, or pass --all.")
    _, conn = open_database()
    with conn:
        kept = unbind_tenants(conn, login, None if everything else tenants)
    click.echo(
        f"{login} is bound to {', '.join(kept)}." if kept else f"{login} is not bound any more: it chooses its tenant."
    )


@tenant.command("list")
@FORMAT_OPTION
def tenant_list(output_format) -> None:
    """Every binding: login, tenant, who granted it and when."""
    from toolkit.cli._context import open_database
    from toolkit.store.tenants import tenant_bindings

    _, conn = open_database()
    with conn:
        emit(tenant_bindings(conn), output_format, ["login", "tenant", "granted_by", "granted_at"])


commands = [canary, shadow, query_log, tenant]
