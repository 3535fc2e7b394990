"""Shadow comparison: replay real questions (from a file, or from the query log) against the active version and a
candidate, each pinned to its own version and embedded with its own model, and report how much of what they return
agrees, by character spans (chunk ids differ across chunkers), with the latency of each. No labels are needed: it
says how different the candidate is, and shows the questions that changed most, for a person to read."""

from __future__ import annotations

import json
import statistics
import time
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from toolkit.errors import InputError, StateError
from toolkit.progress import Progress


@dataclass(frozen=True)
class Question:
    tenant: str
    text: str


@dataclass
class Compared:
    """One question replayed on both versions: the character overlap of their top-k (0 to 1) and of their first
    results, and each one's first result as doc_id:start-end."""

    tenant: str
    question: str
    overlap: float
    top1_overlap: float
    active_top: str | None
    candidate_top: str | None


@dataclass
class ShadowReport:
    active: int
    candidate: int
    k: int
    questions: int
    overlap_at_k: float  # mean over questions
    top1_changed: float  # share of questions whose first result changed (shares under half its characters)
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # version → p50/p95 of embed and search
    changed_most: list[Compared] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def _characters(spans: Iterable[tuple[str, int, int]]) -> dict[str, list[tuple[int, int]]]:
    """Spans merged per document: disjoint, sorted (start, end) pairs."""
    by_doc: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for doc_id, start, end in sorted(spans):
        if end <= start:
            continue
        merged = by_doc[doc_id]
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return by_doc


def _size(merged: dict[str, list[tuple[int, int]]]) -> int:
    return sum(end - start for spans in merged.values() for start, end in spans)


def span_overlap(a: Sequence[tuple[str, int, int]], b: Sequence[tuple[str, int, int]]) -> float:
    """Characters both returned / characters either returned (1.0 when both returned nothing)."""
    left, right = _characters(a), _characters(b)
    both = 0
    for doc_id, spans in left.items():
        for s1, e1 in spans:
            for s2, e2 in right.get(doc_id, ()):
                both += max(0, min(e1, e2) - max(s1, s2))
    either = _size(left) + _size(right) - both
    return 1.0 if either == 0 else both / either


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(share * 100) - 1]


def questions_from_file(path: str | Path, tenant: str | None) -> list[Question]:
    """Questions from JSONL (``{"query": ...}`` per line, labels ignored; ``"tenant"`` optional) or plain text (one
    question a line); each needs a tenant: its own, or ``tenant``."""
    from toolkit.text.sources import read_text_file
    from toolkit.validation import QUERY_FILE_BYTES

    lines = read_text_file(path, "question file", QUERY_FILE_BYTES).splitlines()
    found = []
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        record: dict = {"query": line}
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise InputError(f"{path} line {number}: not valid JSON ({error.msg}).") from None
            except RecursionError:
                raise InputError(
                    f"{path} line {number}: JSON nested too deeply to read; write one flat object."
                ) from None
            if not isinstance(record, dict):
                raise InputError(f'{path} line {number}: a JSON line must be an object like {{"query": "..."}}.')
        text, owner = record.get("query"), record.get("tenant", tenant)
        if not isinstance(text, str) or not text.strip():
            raise InputError(f'{path} line {number}: "query" must be the question text.')
        if not isinstance(owner, str) or not owner:
            raise InputError(f'{path} line {number}: no tenant; give --tenant or a "tenant" field.')
        found.append(Question(owner, text))
    if not found:
        raise InputError(f"{path} holds no questions.")
    return found


# The most logged questions a replay takes by default: each is embedded with both models (the deployer pays), and
# any reader can log questions, so the log is sampled down to this many.
MAX_LOGGED_QUESTIONS = 500


def printable(text: str) -> str:
    """``text`` safe to print to a terminal: control, format (bidirectional overrides) and separator characters are
    shown escaped (``\\x1b``, ``\\u202e``), since logged questions come from any reader."""
    return "".join(
        ch
        if unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn")
        else ch.encode("unicode_escape").decode("ascii")
        for ch in text
    )


def questions_from_log(
    conn: psycopg.Connection, since: timedelta, tenant: str | None = None, max_questions: int = MAX_LOGGED_QUESTIONS
) -> list[Question]:
    """The questions the query log holds from the last ``since`` (toolkit.logged_questions), each once per tenant,
    at most ``max_questions`` of them (a uniform random sample when there are more)."""
    from toolkit.store.query_log import logged_questions, prune_if_permitted

    if not isinstance(max_questions, int) or isinstance(max_questions, bool) or not 1 <= max_questions <= 100_000:
        raise InputError(f"--max-questions must be a whole number from 1 to 100,000, not {max_questions!r}.")
    start = datetime.now(UTC) - since
    rows = logged_questions(conn, start, tenant, max_questions)
    if not rows:
        raise InputError(
            f"The query log holds no questions from the last {since}. Turn it on (toolkit query-log --sample-rate "
            "0.1) and let traffic arrive, or replay a file with --queries."
        )
    # Housekeeping once the replay has its questions (a refused replay leaves the database as it was).
    prune_if_permitted(conn)
    return [Question(t, q) for t, q in dict.fromkeys(rows)]


def shadow(
    conn: psycopg.Connection,
    candidate: int,
    questions: Sequence[Question],
    *,
    k: int = 5,
    progress: Progress | None = None,
) -> ShadowReport:
    """Replays ``questions`` on the active version and on ``candidate`` (see the module docstring), comparing the top
    ``k`` (at most ``validation.SHADOW_K.maximum``) of each."""
    from toolkit.search import query_embedder, search
    from toolkit.serving import version_model
    from toolkit.store.versions import active_version
    from toolkit.validation import SHADOW_K

    k = SHADOW_K.check(k)

    active = active_version(conn)
    if active is None:
        raise StateError("No version is active: a shadow comparison needs one to compare the candidate with.")
    if active == candidate:
        raise InputError(f"Version {candidate} is the active version; name a candidate to compare with it.")
    sides = {v: (version_model(conn, v), query_embedder(conn, version_model(conn, v))) for v in (active, candidate)}
    timings: dict[int, dict[str, list[float]]] = {v: {"embed": [], "search": []} for v in sides}
    compared, failed = [], []
    progress = progress or Progress("shadow", unit="questions", quiet=True)
    progress.set_total(len(questions))
    for q in questions:
        try:
            spans = {}
            try:
                for version, (_, embedder) in sides.items():
                    began = time.perf_counter()
                    vector = embedder.embed_query(q.text)
                    embedded = time.perf_counter()
                    # What applications get by default (passages): the question's text goes with its vector.
                    hits = search(conn, vector, q.tenant, k, version=version, log=False, query_text=q.text)
                    timings[version]["embed"].append((embedded - began) * 1000)
                    timings[version]["search"].append((time.perf_counter() - embedded) * 1000)
                    spans[version] = [(h.doc_id, h.start, h.end) for h in hits]
            except InputError as error:
                failed.append(f"{q.tenant}: {q.text[:80]}: {error}")
                continue
            a, c = spans[active], spans[candidate]
            if not a and not c:  # nothing to compare: an empty (or unknown) tenant is not "the versions agree"
                failed.append(f"{q.tenant}: {q.text[:80]}: neither version holds a chunk of tenant {q.tenant}")
                continue
            compared.append(
                Compared(
                    q.tenant,
                    q.text,
                    span_overlap(a, c),
                    span_overlap(a[:1], c[:1]),
                    f"{a[0][0]}:{a[0][1]}-{a[0][2]}" if a else None,
                    f"{c[0][0]}:{c[0][1]}-{c[0][2]}" if c else None,
                )
            )
        finally:
            progress.advance(1, compared=len(compared))
    progress.finish()
    if not compared:
        raise InputError("No question could be replayed: " + "; ".join(failed[:3]).rstrip(".") + ".")
    latency = {
        str(v): {
            f"{stage}_{name}_ms": round(_percentile(values, share), 2)
            for stage, values in stages.items()
            for name, share in (("p50", 0.5), ("p95", 0.95))
        }
        for v, stages in timings.items()
    }
    return ShadowReport(
        active=active,
        candidate=candidate,
        k=k,
        questions=len(compared),
        overlap_at_k=round(statistics.fmean(c.overlap for c in compared), 4),
        top1_changed=round(sum(c.top1_overlap < 0.5 for c in compared) / len(compared), 4),
        latency_ms=latency,
        changed_most=sorted(compared, key=lambda c: (c.overlap, c.top1_overlap))[:10],
        failed=failed,
    )


def shadow_version(
    conn: psycopg.Connection,
    *,
    model_alias: str | None = None,
    chunker_spec: str | None = None,
    version: int | None = None,
    queries_path: str | Path | None = None,
    since: str | timedelta = "1d",
    tenant: str | None = None,
    k: int = 5,
    max_questions: int = MAX_LOGGED_QUESTIONS,
    progress: Progress | None = None,
) -> ShadowReport:
    """``shadow`` of the version named by its model (and chunker) or its number
    (``toolkit.store.versions.resolve_version``), on the questions of ``queries_path`` (``questions_from_file``) or,
    without it, of the query log of the last ``since`` (a timedelta or a duration such as 1d; ``questions_from_log``,
    at most ``max_questions``)."""
    from toolkit.store.versions import resolve_version
    from toolkit.validation import SHADOW_K, parse_duration

    k = SHADOW_K.check(k)  # before the questions are read or the log pruned
    candidate = resolve_version(conn, model_alias, chunker_spec, version, action="shadow")
    if queries_path:
        questions = questions_from_file(queries_path, tenant)
    else:
        lookback = since if isinstance(since, timedelta) else parse_duration(since)
        questions = questions_from_log(conn, lookback, tenant, max_questions)
    return shadow(conn, candidate, questions, k=k, progress=progress)
