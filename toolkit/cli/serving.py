"""Serving across a migration: `toolkit canary` (a share of traffic to a candidate), `toolkit shadow` (replay real
questions on both versions), `toolkit query-log` (the opt-in question log) and `toolkit tenant` (logins bound to
tenants)."""

from __future__ import annotations

import click

from toolkit import validation
from toolkit.cli import _render
from toolkit.cli._context import in_database
from toolkit.cli._output import FORMAT_OPTION, QUIET_OPTION, emit, say
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
def canary(output_format, **options) -> None:
    """Serve a verified candidate to PERCENT of request keys (a stable hash: one key always gets the same version
    while the share is unchanged, and raising it only moves keys to the candidate) and to whole --tenants.

    `toolkit.serving_model(request_key)` then names the candidate for those requests; ingest keeps writing to both
    versions. `--percent 0` with no tenants, or `--off`, ends it; `toolkit cutover` of the candidate promotes it;
    `toolkit rollback` ends it. Without options it shows the canary.
    """
    from toolkit.serving import change_canary

    named = options["version"] is not None or options["model_alias"] or options["chunker_spec"]
    if named and options["percent"] is None and options["tenants"] is None and not options["off"]:
        raise click.UsageError(
            "Say what to do with the version: --percent N and/or --tenants A,B start or change its canary, --off ends "
            "it; without a version, toolkit canary shows the canary."
        )
    _render.print_canary(in_database(change_canary, **options), output_format)


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
    "-k",
    "k",
    type=Number(validation.SHADOW_K),
    default=5,
    show_default=True,
    help="Results compared per question (1-20).",
)
@click.option(
    "--max-questions",
    type=click.IntRange(1, 100_000),
    default=500,
    show_default=True,
    help="With --from-log: replay at most this many (a random sample; each is embedded by both models).",
)
@QUIET_OPTION
@FORMAT_OPTION
def shadow(queries_path, from_log, quiet, output_format, **options) -> None:
    """Replay questions on the active version and the candidate, each embedded with its own model and searched
    in its own version, and report how much they agree: overlap@k of the returned text (by character spans, so
    versions with other chunkers compare), the share of questions whose first result changed, the questions that
    changed most, and p50/p95 latency per version. No labels needed.
    """
    from toolkit.progress import Progress
    from toolkit.shadow import shadow_version

    if bool(queries_path) == bool(from_log):
        raise click.UsageError("Give the questions one way: --queries FILE or --from-log.")
    progress = Progress("shadow", unit="questions", quiet=quiet)
    report = in_database(shadow_version, queries_path=queries_path, progress=progress, **options)
    _render.print_shadow(report, output_format)


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
@click.option(
    "--max-rows",
    type=click.IntRange(1, 1_000_000_000),
    help="Keep at most this many questions (the oldest beyond are pruned; default 1,000,000).",
)
@click.option(
    "--max-per-minute",
    type=click.IntRange(1, 1_000_000),
    help="Log at most this many questions a minute per login (the rest are skipped and counted; default 600).",
)
@FORMAT_OPTION
def query_log(output_format, max_rows, max_per_minute, **options) -> None:
    """The query log holds users' questions (personal data): it is off until turned on, tenant-scoped, and pruned
    after the retention period. `toolkit shadow --from-log` replays it; `toolkit search` and the library's
    `search()` log a share of the questions they serve. Changing it needs the owner role (the DBA).
    """
    from toolkit.serving import configure_query_log
    from toolkit.store.query_log import set_query_log_bounds

    if options["off"] and options["sample_rate"] is not None:
        raise click.UsageError("Give --off or --sample-rate, not both: --off is --sample-rate 0.")

    def configure(conn, **settings):
        if max_rows is not None or max_per_minute is not None:
            set_query_log_bounds(conn, max_rows, max_per_minute)
        return configure_query_log(conn, **settings)

    _render.print_query_log(in_database(configure, **options), output_format)


@click.group(short_help="Bind logins to tenants: a bound login sees only its tenants.")
def tenant() -> None:
    """Bind application logins to tenants (off by default; needs the owner role). A bound login sees only its
    tenants, whatever it sets toolkit.tenant to; an unbound login chooses its tenant as before."""


@tenant.command("grant")
@click.argument("login")
@click.argument("tenants", nargs=-1, required=True)
@click.option(
    "--allow-empty", is_flag=True, help="Bind tenants that have no documents yet (refused otherwise: a typo?)."
)
def tenant_grant(login, tenants, allow_empty) -> None:
    """Bind LOGIN to TENANTS (added to those it has). A tenant without documents is refused unless --allow-empty."""
    from toolkit.errors import InputError
    from toolkit.status import tenants_without_documents
    from toolkit.store.tenants import bind_tenants

    def grant(conn):
        # One transaction: SQL refuses a login that cannot be bound first (a group or toolkit role), then a tenant
        # without documents undoes the binding.
        with conn.transaction():
            bound = bind_tenants(conn, login, tenants)
            empty = [] if allow_empty else tenants_without_documents(conn, tenants)
            if empty:
                raise InputError(
                    f"No document has the tenant {', '.join(map(repr, empty))}: a typo would bind {login} to "
                    "nothing; nothing was bound. Check the name (toolkit status), or pass --allow-empty to bind it "
                    "before its documents arrive."
                )
            return bound

    bound = in_database(grant)
    say(f"{login} is bound to {', '.join(bound)}: it sees no other tenant.")


@tenant.command("revoke")
@click.argument("login")
@click.argument("tenants", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Remove every binding of LOGIN (it chooses its tenant again).")
def tenant_revoke(login, tenants, everything) -> None:
    """Remove LOGIN's bindings to TENANTS (or all of them with --all)."""
    from toolkit.store.tenants import unbind_tenants

    if not tenants and not everything:
        raise click.UsageError("Name the tenants to revoke, or pass --all.")
    kept = in_database(unbind_tenants, login, None if everything else tenants)
    say(f"{login} is bound to {', '.join(kept)}." if kept else f"{login} is not bound any more: it chooses its tenant.")


@tenant.command("list")
@FORMAT_OPTION
def tenant_list(output_format) -> None:
    """Every binding: login (its current name), tenant, whether it holds, who granted it and when, the name it was
    bound under."""
    from toolkit.store.tenants import tenant_bindings

    columns = ["login", "tenant", "status", "granted_by", "granted_at", "bound_as"]
    emit(in_database(tenant_bindings), output_format, columns)


@tenant.command("relink")
@FORMAT_OPTION
def tenant_relink(output_format) -> None:
    """Re-link bindings to logins by the name they were bound under (after restoring into another cluster, where role
    OIDs differ); until then such a login is refused, not unbound."""
    from toolkit.store.tenants import relink_tenant_bindings

    emit(in_database(relink_tenant_bindings), output_format, ["login", "tenants", "status"])


commands = [canary, shadow, query_log, tenant]
