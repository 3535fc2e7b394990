"""The model-migration lifecycle: `toolkit backfill`, `verify`, `cutover`, `rollback`, `retire`."""

from __future__ import annotations

import signal
import sys
import threading

import click

from toolkit import validation
from toolkit.cli._output import FORMAT_OPTION, emit, plural, to_json
from toolkit.cli._params import Duration, Number

VERSION_OPTIONS = [
    click.option("--model", "model_alias", metavar="ALIAS", help="The model alias of the version."),
    click.option(
        "--chunker", "chunker_spec", metavar="SPEC", help="Its chunker spec, if the model has several versions."
    ),
    click.option(
        "--version",
        "version",
        type=Number(validation.VERSION_NUMBER),
        help="The version number instead of --model/--chunker.",
    ),
]


def version_options(function):
    for option in reversed(VERSION_OPTIONS):
        function = option(function)
    return function


@click.command(short_help="Build (or resume) a version for a model and chunker.")
@click.option(
    "--model", "model_alias", required=True, metavar="ALIAS", help="Registered model alias (toolkit model add)."
)
@click.option(
    "--chunker", "chunker_spec", help="Chunker spec. Default: the one recommended for the model's input limit."
)
@click.option("--resume", is_flag=True, help="Continue a version that is already building.")
@click.option(
    "--batch-size",
    type=Number(validation.BATCH_ROWS),
    help="About this many rows per transaction (whole documents). Default: about 2 s of the model's work.",
)
@click.option(
    "--rate",
    "requests_per_minute",
    type=Number(validation.REQUESTS_PER_MINUTE),
    help="At most this many embedding requests in any minute (spaced evenly, no burst).",
)
@click.option(
    "--tpm",
    "tokens_per_minute",
    type=Number(validation.TOKENS_PER_MINUTE),
    help="At most this many tokens in any minute.",
)
@click.option(
    "--max-cost",
    type=Number(validation.COST_LIMIT),
    metavar="USD",
    help="Stop before the estimated spend would pass this.",
)
@click.option(
    "--workers",
    type=Number(validation.WORKERS),
    help="Connections writing at once (default 2: one embeds while another chunks or writes).",
)
@click.option("--storage", type=click.Choice(["vector", "halfvec"]), default="vector", show_default=True)
@click.option(
    "--dims",
    "dimensions",
    type=Number(validation.DIMENSIONS),
    help="Store fewer dimensions (models that support shortening only).",
)
@FORMAT_OPTION
def backfill(
    model_alias,
    chunker_spec,
    resume,
    batch_size,
    requests_per_minute,
    tokens_per_minute,
    max_cost,
    workers,
    storage,
    dimensions,
    output_format,
) -> None:
    """Chunk, embed and write every stored document into the version for (--model, --chunker).

    The database is the work queue: each document's rows are written whole, once, in the transaction that
    claimed it, so --resume continues after a crash, Ctrl-C or reboot. Ctrl-C stops cleanly after the batches in
    flight; a second Ctrl-C aborts them (they roll back). At the end the HNSW index is built and the version
    becomes ready.
    """
    from toolkit.backfill import backfill as run
    from toolkit.cli._context import open_database
    from toolkit.progress import Progress

    db, conn = open_database()
    conn.close()
    stop = threading.Event()

    def interrupt(signum, frame):
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        click.echo("\ntoolkit: stopping after the current batch (Ctrl-C again to abort it)…", err=True)

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        report = run(
            db.url,
            model_alias,
            chunker_spec,
            resume=resume,
            batch_size=batch_size,
            requests_per_minute=requests_per_minute,
            tokens_per_minute=tokens_per_minute,
            max_cost=max_cost,
            workers=workers,
            storage=storage,
            dimensions=dimensions,
            stop=stop,
            progress=Progress("backfill", unit="documents"),
        )
    except KeyboardInterrupt:
        # The second Ctrl-C: the batches in flight are abandoned; their transactions roll back with the connections.
        click.echo(
            f"\ntoolkit: aborted; the batches in flight were rolled back. Continue with: toolkit backfill --model "
            f"{model_alias}" + (f" --chunker {chunker_spec}" if chunker_spec else "") + " --resume",
            err=True,
        )
        sys.exit(130)
    finally:
        signal.signal(signal.SIGINT, previous)
    if output_format == "json":
        click.echo(to_json(report.as_dict()))
    else:
        click.echo(
            f"Version {report.version} ({report.model_alias}, {report.chunker_version}): {report.state}. "
            f"{plural(report.documents_chunked, 'document')} chunked, {plural(report.rows_written, 'row')} written "
            f"({report.rows_embedded} embedded), {report.tokens:,} tokens, estimated "
            f"${report.estimated_cost_usd:.4f}, {report.seconds:.1f} s."
        )
        if report.documents_without_chunks:
            click.echo(
                f"{report.documents_without_chunks} document(s) made no chunk with {report.chunker_version} "
                "(nothing to search in them); they stay in the queue and are checked again by --resume.",
                err=True,
            )
        if report.index_seconds is not None:
            click.echo(f"HNSW index built in {report.index_seconds:.1f} s after the load.")
        elif report.state == "building" and not report.stopped:
            click.echo("Another backfill of this version holds its last documents and will build the index.")
    if report.stopped:
        reason = {"max-cost": "the next batch would pass --max-cost", "interrupted": "interrupted"}[report.stopped]
        click.echo(
            f"Stopped: {reason}. Continue with: toolkit backfill --model {model_alias} "
            f"--chunker {chunker_spec or report.chunker_version.rsplit('@', 1)[0]} --resume",
            err=True,
        )
        sys.exit(3 if report.stopped == "max-cost" else 130)


@click.command(short_help="Score a version on labelled queries against the active one; gate it.")
@version_options
@click.option(
    "--queries",
    "queries_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help='Labelled queries (JSONL): {"query": …, "answers": [{"doc_id": …, "text": …}]}.',
)
@click.option(
    "-k",
    "k",
    type=Number(validation.RESULTS),
    default=5,
    show_default=True,
    help="Retrieve this many chunks per query.",
)
@click.option("--tenant", help="The tenant whose documents the queries are about (needed if several).")
@click.option(
    "--min-recall",
    type=Number(validation.RECALL),
    help="Fail below this recall@k (required when no other version is active).",
)
@click.option(
    "--min-queries",
    type=Number(validation.QUERY_SET_SIZE),
    default=50,
    show_default=True,
    help="Refuse a query set smaller than this (50-200 labelled questions is the usual advice).",
)
@click.option(
    "--max-drop",
    type=Number(validation.RECALL_DROP),
    default=0.0,
    show_default=True,
    help="Fail when recall@k is more than this below the active version's.",
)
@FORMAT_OPTION
def verify(
    model_alias, chunker_spec, version, queries_path, k, tenant, min_recall, min_queries, max_drop, output_format
) -> None:
    """Run the labelled queries against the candidate and the active version through the SQL applications use.

    Reports recall@k, MRR, nDCG@k and span recall/precision/IoU side by side, the queries the candidate wins
    and loses, and exits 1 when the gate fails. The search, the metrics and the gate are computed in SQL
    (toolkit.evaluate_version), which alone records the result. With no other version active, --min-recall is
    required; a query set smaller than --min-queries is refused.
    """
    from toolkit.cli._context import open_database
    from toolkit.cutover import resolve_version
    from toolkit.verify import verify as run

    _, conn = open_database()
    with conn:
        candidate = resolve_version(
            conn, model_alias, chunker_spec, version, states=("ready", "verified", "standby", "active")
        )
        report = run(
            conn,
            candidate,
            queries_path,
            k=k,
            tenant=tenant,
            min_recall=min_recall,
            max_drop=max_drop,
            min_queries=min_queries,
        )
    if output_format == "json":
        click.echo(to_json(report.as_dict()))
    else:
        rows = []
        for label, side in (("candidate", report.candidate), ("active", report.baseline)):
            if side is None:
                continue
            m = side.metrics
            rows.append(
                {
                    "": label,
                    "version": side.version,
                    "model": side.model_alias,
                    f"recall@{k}": m.recall,
                    "MRR": m.mrr,
                    f"nDCG@{k}": m.ndcg,
                    "span_recall": m.span_recall,
                    "span_precision": m.span_precision,
                    "span_IoU": m.span_iou,
                }
            )
        emit(rows, "table")
        count = report.candidate.metrics.queries
        click.echo(
            f"{plural(count, 'query', 'queries')}, tenant {report.tenant}; "
            f"candidate wins {len(report.wins)}, loses {len(report.losses)}."
        )
        for query in report.losses[:10]:
            click.echo(f"  lost: {query}")
        for query in report.wins[:10]:
            click.echo(f"  won:  {query}")
        verdict = "PASSED" if report.passed else "FAILED: " + "; ".join(report.reasons)
        click.echo(f"Gate {verdict} (evaluation {report.evaluation_id}).")
    if not report.passed:
        sys.exit(1)


@click.command(short_help="Make a verified version live (swap active_chunks).")
@version_options
@click.option("--force", is_flag=True, help="Skip the verification gate (recorded in the audit log).")
@click.option("--reason", help="Recorded in toolkit.cutovers.")
@FORMAT_OPTION
def cutover(model_alias, chunker_spec, version, force, reason, output_format) -> None:
    """Swap active_chunks to the version in one transaction; the previous active version becomes standby. A
    canary of this version ends: it is promoted.

    Requires a passing `toolkit verify` newer than the version's last change, unless --force.
    """
    from toolkit import cutover
    from toolkit.cli._context import open_database
    from toolkit.cutover import resolve_version
    from toolkit.store import versions

    _, conn = open_database()
    with conn:
        target = resolve_version(conn, model_alias, chunker_spec, version, states=("ready", "verified", "standby"))
        previous = versions.active_version(conn)
        cutover_id = cutover.activate_version(conn, target, force=force, reason=reason)
    if output_format == "json":
        click.echo(to_json({"cutover_id": cutover_id, "active": target, "standby": previous, "forced": force}))
        return
    click.echo(f"Version {target} is active" + (f"; version {previous} is on standby." if previous else "."))


@click.command(short_help="End the canary, or go back to the standby version, in one transaction.")
@click.option("--reason", help="Recorded in toolkit.cutovers.")
@FORMAT_OPTION
def rollback(reason, output_format) -> None:
    """During a canary: end it (every request back to the active version). Otherwise: swap active_chunks back to
    the version the active one replaced (which must still be on standby)."""
    from toolkit import cutover
    from toolkit.cli._context import open_database
    from toolkit.serving import canary_status
    from toolkit.store import versions

    _, conn = open_database()
    with conn:
        canary = canary_status(conn)
        current = versions.active_version(conn)
        cutover_id = cutover.rollback_version(conn, reason=reason)
        restored = versions.active_version(conn)
    if output_format == "json":
        ended = canary.candidate if canary else None
        click.echo(
            to_json({"cutover_id": cutover_id, "active": restored, "rolled_back": current, "canary_ended": ended})
        )
        return
    if canary is not None:
        click.echo(
            f"Canary ended: version {canary.candidate} serves nothing now; version {restored} serves every request."
        )
    else:
        click.echo(
            f"Rolled back: version {restored} is active again; version {current} is ready (verify it to reuse it)."
        )


@click.command(short_help="Drop standby and abandoned versions past the rollback window.")
@click.option(
    "--older-than", type=Duration(), default="7d", show_default=True, help="Rollback window: 7d, 12h, 30m, 0."
)
@click.option(
    "--version",
    "version",
    type=Number(validation.VERSION_NUMBER),
    help="Retire this one version now (never the active one).",
)
@click.option("--dry-run", is_flag=True, help="List what would be retired.")
@FORMAT_OPTION
def retire(older_than, version, dry_run, output_format) -> None:
    """Retire (drop the tables of) standby and abandoned versions whose state is older than --older-than.

    The active version is never retired.
    """
    from toolkit import cutover
    from toolkit.cli._context import open_database
    from toolkit.cutover import parse_duration, retire_old_versions
    from toolkit.store import versions

    _, conn = open_database()
    with conn:
        if version is not None:
            if dry_run and version == versions.active_version(conn):
                raise click.ClickException(f"Version {version} is active and cannot be retired.")
            if not dry_run:
                cutover.retire_version(conn, version, reason="toolkit retire --version")
            retired = [version]
        else:
            retired = retire_old_versions(conn, parse_duration(older_than), dry_run=dry_run)
    if output_format == "json":
        click.echo(to_json({"retired": [] if dry_run else retired, "would_retire": retired if dry_run else []}))
        return
    verb = "Would retire" if dry_run else "Retired"
    click.echo(f"{verb}: {', '.join(map(str, retired))}." if retired else "Nothing to retire.")


commands = [backfill, verify, cutover, rollback, retire]
