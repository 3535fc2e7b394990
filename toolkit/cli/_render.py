"""What each command prints from the result a library function returned: JSON for scripts, lines and tables for
people, and the messages on stderr. Commands parse, call one library function, and hand its result to one of these.
"""

from __future__ import annotations

import click

from toolkit.cli._output import emit, json_line, json_output, plural, print_table, say

# --- backfill, verify, cutover, rollback, retire ---------------------------------------------------------------


def say_backfill_stopping() -> None:
    say("\ntoolkit: stopping after the current batch (Ctrl-C again to abort it)…", err=True)


def say_backfill_aborted(model_alias: str, chunker_spec: str | None) -> None:
    # The second Ctrl-C: the batches in flight are abandoned; their transactions roll back with the connections.
    say(
        f"\ntoolkit: aborted; the batches in flight were rolled back. Continue with: toolkit backfill --model "
        f"{model_alias}" + (f" --chunker {chunker_spec}" if chunker_spec else "") + " --resume",
        err=True,
    )


STOP_REASONS = {"max-cost": "the next batch would pass --max-cost", "interrupted": "interrupted"}


def print_backfill(report, output_format: str, model_alias: str, chunker_spec: str | None) -> None:
    if not json_output(output_format, report):
        say(
            f"Version {report.version} ({report.model_alias}, {report.chunker_version}): {report.state}. "
            f"{plural(report.documents_chunked, 'document')} chunked, {plural(report.rows_written, 'row')} written "
            f"({report.rows_embedded} embedded), {report.tokens:,} tokens, estimated "
            f"${report.estimated_cost_usd:.4f}, {report.seconds:.1f} s."
        )
        if report.documents_without_chunks:
            say(
                f"{report.documents_without_chunks} document(s) made no chunk with {report.chunker_version} "
                "(nothing to search in them); they stay in the queue and are checked again by --resume.",
                err=True,
            )
        if report.index_seconds is not None:
            say(f"HNSW index built in {report.index_seconds:.1f} s after the load.")
            if report.ready_seconds is not None:
                say(f"Full-text postings built in {report.ready_seconds:.1f} s as the version became ready.")
        elif report.state == "building" and not report.stopped:
            say("Another backfill of this version holds its last documents and will build the index.")
    if report.stopped:
        say(
            f"Stopped: {STOP_REASONS[report.stopped]}. Continue with: toolkit backfill --model {model_alias} "
            f"--chunker {chunker_spec or report.chunker_version.rsplit('@', 1)[0]} --resume",
            err=True,
        )


def print_verify(report, output_format: str) -> None:
    if json_output(output_format, report):
        return
    emit(report.comparison(), "table")
    count = report.candidate.metrics.queries
    say(
        f"{plural(count, 'query', 'queries')}, tenant {report.tenant}; "
        f"candidate wins {len(report.wins)}, loses {len(report.losses)}."
    )
    for query in report.losses[:10]:
        say(f"  lost: {query}")
    for query in report.wins[:10]:
        say(f"  won:  {query}")
    verdict = "PASSED" if report.passed else "FAILED: " + "; ".join(report.reasons)
    say(f"Gate {verdict} (evaluation {report.evaluation_id}).")


def print_cutover(done, output_format: str) -> None:
    if json_output(output_format, done):
        return
    previous = done.standby
    say(f"Version {done.active} is active" + (f"; version {previous} is on standby." if previous else "."))


def print_rollback(done, output_format: str) -> None:
    if json_output(output_format, done):
        return
    if done.canary_ended is not None:
        say(
            f"Canary ended: version {done.canary_ended} serves nothing now; version {done.active} serves every request."
        )
    else:
        say(
            f"Rolled back: version {done.active} is active again; version {done.rolled_back} is ready (verify it to "
            "reuse it)."
        )


def print_retired(retired: list[int], dry_run: bool, output_format: str, *, kept: list[dict] = ()) -> None:
    shown = {"retired": [] if dry_run else retired, "would_retire": retired if dry_run else [], "kept": list(kept)}
    if json_output(output_format, shown):
        return
    verb = "Would retire" if dry_run else "Retired"
    say(f"{verb}: {', '.join(map(str, retired))}." if retired else "Nothing to retire.")
    for item in kept:
        say(
            f"Kept: version {item['version']} ({item['reason']}; toolkit retire --version {item['version']} --force "
            "--yes retires it now)."
        )
    if dry_run and retired:
        say("Nothing was dropped: run again with --yes to retire them.")


def print_started(database, tcp: str | None, standby_of: str | None) -> None:
    role = f" as a read-only hot standby of {standby_of}" if standby_of else ""
    say(f"The embedded PostgreSQL runs in {database.data_dir}{role}.")
    if tcp:
        say(f"It also listens on TCP (password authentication): {tcp}")
    say(database.url)


def print_backup(report, verb: str, output_format: str) -> None:
    if json_output(output_format, report):
        return
    size = f"{report.bytes / 1e6:.1f} MB" if report.bytes >= 100_000 else f"{report.bytes:,} bytes"
    where = "to" if verb == "Dumped" else "from"
    active = f", version {report.active_version} active" if report.active_version else ""
    say(
        f"{verb} the toolkit schema at revision {report.revision} ({plural(report.documents, 'document')}, "
        f"{plural(report.versions, 'version')}{active}) {where} {report.path} ({size}, {report.tool})."
    )
    if verb == "Dumped":
        say(
            "Roles are cluster-wide and not in the dump: on another cluster, restore `pg_dumpall --roles-only` first "
            "(toolkit db restore creates the toolkit roles themselves)."
        )


def print_rollback_window(window, protected, *, changed: bool, output_format: str) -> None:
    shown = {
        "rollback_window_seconds": round(window.total_seconds()),
        "protected_version": protected.version if protected else None,
        "protected_until": protected.protected_until.isoformat() if protected else None,
    }
    if json_output(output_format, shown):
        return
    say(f"The rollback window is {'now ' if changed else ''}{window}.")
    if protected:
        until = protected.protected_until.strftime("%Y-%m-%d %H:%M %Z")
        say(f"Version {protected.version} is the rollback target; retire keeps it until {until}.")


# --- canary, shadow, query-log -------------------------------------------------------------------------------


def print_canary(change, output_format: str) -> None:
    current = change.canary
    if json_output(output_format, current):
        return
    if current is not None:
        say(
            f"Version {current.candidate} ({current.model_alias}) serves {current.percent:g}% of request keys"
            + (f" and tenants {', '.join(current.tenants)}" if current.tenants else "")
            + (" (forced: no current passing verification)" if current.forced else "")
            + "; every other request is served by the active version."
        )
    if change.action == "ended":
        say(f"Canary of version {change.version} ended: every request is served by the active version.")
    elif current is None:
        say("No canary is running." if change.action == "shown" else f"Canary of version {change.version} ended.")


def print_shadow(report, output_format: str) -> None:
    if json_output(output_format, report):
        return
    say(
        f"{plural(report.questions, 'question')} on active version {report.active} and "
        f"candidate {report.candidate}: overlap@{report.k} {report.overlap_at_k:.3f}, first result changed for "
        f"{report.top1_changed:.1%}."
    )
    emit([{"version": v, **figures} for v, figures in report.latency_ms.items()], "table")
    say("Changed most:")
    for item in report.changed_most:
        say(
            f"  overlap {item.overlap:.2f}  [{item.tenant}] {item.question[:90]}\n"
            f"      active {item.active_top or '-'}  candidate {item.candidate_top or '-'}"
        )
    for failure in report.failed[:10]:
        say(f"  not replayed: {failure}", err=True)


def print_query_log(change, output_format: str) -> None:
    if json_output(output_format, change):
        return
    status = change.status
    state = "off" if status.sample_rate == 0 else f"on, logging {status.sample_rate:.0%} of questions"
    say(f"Query log {state}; kept {status.retention}; {status.questions:,} questions logged.")
    say(
        f"Bounds: at most {status.max_rows:,} questions kept and {status.max_per_minute:,} a minute per login "
        f"({status.skipped_over_rate:,} skipped over the rate, {status.pruned_over_cap:,} pruned over the cap)."
    )
    if change.pruned is not None:
        say(f"Pruned {change.pruned:,} questions older than the retention.")


# --- status, db status, migrate ------------------------------------------------------------------------------

STATUS_COLUMNS = [
    "version",
    "model_alias",
    "chunker_version",
    "state",
    "serving",
    "total_rows",
    "pending_documents",
    "documents",
    "tenants",
    "index_valid",
    "last_recall",
    "verification",
]


def print_overview(overview, output_format: str) -> None:
    if json_output(output_format, overview):
        return
    emit(overview.version_rows(), "table", STATUS_COLUMNS)
    counted = overview.documents
    if not overview.versions and counted is not None:
        if counted["documents"]:
            say(
                f"No version yet; {plural(counted['documents'], 'document')} in {plural(counted['tenants'], 'tenant')}"
                " await one: register a model (toolkit model add) and build one (toolkit backfill --model ALIAS)."
            )
        else:
            say("No documents yet: toolkit ingest PATH --tenant TENANT, then toolkit backfill --model ALIAS.")
    for lag in overview.lag or ():
        if not lag["caught_up"]:
            say(
                f"Version {lag['version']} ({lag['state']}) is behind: {plural(lag['documents_behind'], 'document')} "
                f"for its backfill ({lag['documents_not_chunked']:,} not chunked), "
                f"{plural(lag['rows_not_embedded'], 'chunk')} without an embedding, the oldest waiting since "
                f"{lag['oldest_pending_since']:%Y-%m-%d %H:%M} (toolkit.version_lag())."
            )
    canary, log = overview.canary, overview.query_log
    if canary is not None:
        say(
            f"Canary: version {canary.candidate} serves {canary.percent:g}% of request keys"
            + (f" and tenants {', '.join(canary.tenants)}" if canary.tenants else "")
            + f", since {canary.started_at:%Y-%m-%d %H:%M}."
        )
    say(
        "Query log: "
        + ("off." if log.sample_rate == 0 else f"logging {log.sample_rate:.0%} of questions")
        + (f", {log.questions:,} kept for {log.retention}." if log.sample_rate or log.questions else "")
    )


def print_server_status(info: dict, output_format: str) -> None:
    if json_output(output_format, info):
        return
    for key, value in info.items():
        say(f"{key:16} {value}")


def print_migration(result, before: str | None, after: str | None, head: str | None, downgrade: bool) -> None:
    """The notices of a migration on stderr, then one line: what changed between the revisions ``before`` and
    ``after`` (``head`` is the newest one, for an upgrade)."""
    if downgrade:
        message = (
            f"Downgraded from {before} to {after or 'base'}."
            if before != after
            else f"Already at {after or 'base'}; nothing was downgraded."
        )
    else:
        at_head = " (head)" if after == head else ""
        if not result.changed:
            message = f"Already at {after}{at_head}; nothing to do."
        elif before == after:
            message = f"Re-applied the functions, views, policies and grants of {after}{at_head}."
        else:
            message = f"Upgraded from {before or 'an empty database'} to {after}{at_head}."
    for notice in result.notices:
        say(f"toolkit: {notice}", err=True)
    say(message)


# --- ingest, search, chunk, eval, model ------------------------------------------------------------------------


def say_ingest_interrupted() -> None:
    # The batch being written was rolled back; the ones before it are committed, and a run of the same command
    # skips them (their content hashes are unchanged).
    say(
        "\ntoolkit: interrupted; the batches written so far are kept. Run the same command again to continue: "
        "unchanged documents are skipped.",
        err=True,
    )


def print_ingest(report, output_format: str) -> None:
    if json_output(output_format, report):
        return
    say(
        f"{plural(report.documents, 'document')} for tenant {report.tenant}: {report.new} new, "
        f"{report.changed} changed, {report.unchanged} unchanged, {report.deleted} deleted, "
        f"{len(report.failed)} failed."
    )
    for version, count in sorted(report.chunks_written.items()):
        say(f"  version {version}: {plural(count, 'chunk')} written")
    say(f"  embeddings: {report.embedded} computed, {report.reused} reused")
    if not report.versions:
        say("  no version exists yet: the documents are stored; run `toolkit backfill --model ALIAS`.")
    for failure in report.failed:
        say(f"  failed: {failure.source}: {failure.reason}", err=True)


def say_unlabelled() -> None:
    say(
        "toolkit: this login is a service role that cannot take toolkit_reader: access labels are not "
        "applied (every labelled chunk of the tenant is searched). Connect as a reader login to see what an "
        "application sees.",
        err=True,
    )


# score ranks; similarity is the cosine similarity to the question (what --min-score filters on).
HIT_COLUMNS = ["rank", "score", "similarity", "heading_path", "doc_id", "span", "text"]


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def print_hits(hits, output_format: str) -> None:
    if hits:
        say(f"toolkit: version {hits[0].version} ({hits[0].model_alias}) served this search", err=True)
    if json_output(output_format, hits):
        return
    rows = [
        {
            "rank": hit.rank,
            "score": hit.score,
            "similarity": hit.similarity,
            "heading_path": " > ".join(hit.heading_path),
            "doc_id": hit.doc_id,
            "span": f"{hit.start}-{hit.end}",
            "pages": ",".join(map(str, hit.pages)) if hit.pages else None,
            "text": _one_line(hit.text),
        }
        for hit in hits
    ]
    # The pages column only when a hit has pages (PDF sources), for citations.
    columns = HIT_COLUMNS if not any(hit.pages for hit in hits) else [*HIT_COLUMNS[:-1], "pages", HIT_COLUMNS[-1]]
    emit(rows, "table", columns)


CHUNK_COLUMNS = ["doc_id", "position", "start", "end", "token_count", "heading_path", "text"]


class ChunkOutput:
    """What ``toolkit chunk`` prints as the chunks come: a JSON line per chunk (jsonl), or a table of them or their
    statistics at the end; a line on stderr per file skipped."""

    def __init__(self, output_format: str):
        self.output_format = output_format
        self.stats = output_format == "stats"
        self.rows: list[dict] = []

    def record(self, record: dict) -> None:
        if self.output_format == "jsonl":
            json_line(record)
        elif self.output_format == "table":
            self.rows.append(record)

    def skipped(self, error) -> None:
        say(f"toolkit: skipped {error}", err=True)

    def finish(self, report) -> None:
        """The table or the statistics; then, if a file could not be read, the error (exit 1)."""
        if self.output_format == "table":
            for row in self.rows:
                row["heading_path"] = " > ".join(row["heading_path"])
                row["text"] = row["text"][:40].replace("\n", " ")
            print_table(self.rows, CHUNK_COLUMNS)
        elif self.stats:
            print_table([{"measure": k, "value": v} for k, v in report.stats.as_dict().items()])
        if report.failed:
            raise click.ClickException(
                f"{report.failed} file(s) could not be read (see the messages above); the rest were chunked."
            )


EVAL_COLUMNS = [
    "config",
    "retrieval",
    "chunks",
    "tok/chunk",
    "cut",
    "recall@k",
    "mrr",
    "ndcg@k",
    "span_r",
    "span_p",
    "iou",
    "p_omega",
    "tok/query",
    "usd/query",
    "frontier",
]


def _eval_row(result) -> dict:
    return {
        "config": result.spec,
        "retrieval": result.retrieval,
        "chunks": result.chunks if result.parents is None else f"{result.chunks} ({result.parents} parents)",
        "tok/chunk": f"{result.mean_chunk_tokens:.0f}",
        "cut": f"{result.cut_answers}/{result.answers}",
        "recall@k": f"{result.recall:.3f}",
        "mrr": f"{result.mrr:.3f}",
        "ndcg@k": f"{result.ndcg:.3f}",
        "span_r": f"{result.span_recall:.3f}",
        "span_p": f"{result.span_precision:.3f}",
        "iou": f"{result.span_iou:.3f}",
        "p_omega": "-" if result.precision_omega is None else f"{result.precision_omega:.3f}",
        "tok/query": f"{result.retrieved_tokens:,.0f}",
        "usd/query": f"{result.input_cost_per_query:.5f}",
        "frontier": "*" if result.pareto else "",
    }


def print_eval(report, output_format: str, *, stored: bool, plot: str | None) -> None:
    """``stored``: a database version was evaluated (every note is printed; for files the first one is the header's).
    ``plot``: where the frontier was written."""
    if json_output(output_format, report):
        return
    say(
        f"{plural(report.queries, 'query', 'queries')}, {plural(report.documents, 'document')}, k = {report.k}, "
        f"{report.model or 'bag-of-words scorer'}; {report.embedded_texts:,} texts embedded, "
        f"{report.cache_hits:,} from the cache"
    )
    emit([_eval_row(r) for r in report.configs], "table", EVAL_COLUMNS)
    say(
        "cut: answers no single chunk holds whole. frontier: no other configuration has more recall for fewer "
        "tokens; read it as a frontier, not a winner."
    )
    for note in report.notes if stored else report.notes[1:]:
        say(note)
    if plot:
        say(f"plot written to {plot}")


def print_registered(registered) -> None:
    say(
        f"Registered {registered.alias}: {registered.provider}:{registered.model_name}, "
        f"{registered.dimensions} dimensions, input limit {registered.max_input_tokens} tokens."
    )
