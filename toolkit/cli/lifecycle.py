"""The model-migration lifecycle: `toolkit backfill`, `verify`, `cutover`, `rollback`, `retire`."""

from __future__ import annotations

import sys

import click

from toolkit import validation
from toolkit.cli import _render
from toolkit.cli._context import database_url, in_database
from toolkit.cli._output import FORMAT_OPTION, QUIET_OPTION
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
@QUIET_OPTION
@FORMAT_OPTION
def backfill(model_alias, chunker_spec, quiet, output_format, **options) -> None:
    """Chunk, embed and write every stored document into the version for (--model, --chunker).

    The database is the work queue: each document's rows are written whole, once, in the transaction that
    claimed it, so --resume continues after a crash, Ctrl-C or reboot. Ctrl-C stops cleanly after the batches in
    flight; a second Ctrl-C aborts them (they roll back). At the end the HNSW index is built and the version
    becomes ready.
    """
    from toolkit.backfill import backfill_interruptible
    from toolkit.progress import Progress

    url = database_url()
    try:
        report = backfill_interruptible(
            url,
            model_alias,
            chunker_spec,
            on_stop=_render.say_backfill_stopping,
            progress=Progress("backfill", unit="chunks", quiet=quiet),
            **options,
        )
    except KeyboardInterrupt:
        _render.say_backfill_aborted(model_alias, chunker_spec)
        sys.exit(130)
    _render.print_backfill(report, output_format, model_alias, chunker_spec)
    if report.exit_code:
        sys.exit(report.exit_code)


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
@QUIET_OPTION
@FORMAT_OPTION
def verify(quiet, output_format, **options) -> None:
    """Run the labelled queries against the candidate and the active version through the SQL applications use.

    Reports recall@k, MRR, nDCG@k and span recall/precision/IoU side by side, the queries the candidate wins
    and loses, and exits 1 when the gate fails. The search, the metrics and the gate are computed in SQL
    (toolkit.evaluate_version), which alone records the result. With no other version active, --min-recall is
    required; a query set smaller than --min-queries is refused.
    """
    from toolkit.progress import Progress
    from toolkit.verify import verify_version

    report = in_database(verify_version, progress=Progress("verify", unit="questions", quiet=quiet), **options)
    _render.print_verify(report, output_format)
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
    from toolkit.cutover import cut_over

    done = in_database(cut_over, model_alias, chunker_spec, version, force=force, reason=reason)
    _render.print_cutover(done, output_format)


@click.command(short_help="End the canary, or go back to the standby version, in one transaction.")
@click.option("--reason", help="Recorded in toolkit.cutovers.")
@FORMAT_OPTION
def rollback(reason, output_format) -> None:
    """During a canary: end it (every request back to the active version). Otherwise: swap active_chunks back to
    the version the active one replaced (which must still be on standby)."""
    from toolkit.cutover import roll_back

    _render.print_rollback(in_database(roll_back, reason=reason), output_format)


@click.command(short_help="Drop standby and abandoned versions past the rollback window (dry run unless --yes).")
@click.option(
    "--older-than",
    type=Duration(),
    help="Drop standby and abandoned building versions older than this: 7d, 12h, 30m. Default: the rollback "
    "window (toolkit rollback-window).",
)
@click.option(
    "--version",
    "version",
    type=Number(validation.VERSION_NUMBER),
    help="Retire this one version (never the active one; a ready or verified one only this way).",
)
@click.option("--yes", is_flag=True, help="Drop the tables: without it, retire only says what it would drop.")
@click.option(
    "--force",
    is_flag=True,
    help="With --version: retire the rollback target inside the rollback window; retire even while a standby "
    "server has not replayed the last cutover.",
)
@click.option("--dry-run", is_flag=True, help="Only say what would be retired (the default without --yes).")
@FORMAT_OPTION
def retire(older_than, version, yes, force, dry_run, output_format) -> None:
    """Retire (drop the tables of) standby and abandoned building versions whose state is older than --older-than
    (default: the rollback window), or one version by --version. Without --yes it only says what it would drop.

    The active version and a canary candidate are never retired; the rollback target inside the rollback window
    only with --version N --force; ready and verified versions (awaiting verification) only by --version. Before
    dropping, retire waits (up to 10 s) for standby servers to replay the last cutover, and refuses (unless
    --force) while one has not.
    """
    from toolkit.cutover import retire_versions

    if yes and dry_run:
        raise click.UsageError("--yes drops the tables and --dry-run only lists them: give one of them.")

    def warn(message: str) -> None:
        click.echo(f"toolkit: {message}", err=True)

    done = in_database(retire_versions, older_than=older_than, version=version, force=force, act=yes, warn=warn)
    _render.print_retired(done.versions, not done.acted, output_format, kept=done.kept)


commands = [backfill, verify, cutover, rollback, retire]
