"""Labelled queries: read their JSONL format (docs/cli.md, toolkit verify) and resolve answers to spans.

An answer gives its exact `text`, its `start`/`end` character offsets, or both (then they must agree).
Text alone must occur exactly once in its document; `start` alone picks one occurrence of a repeated text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import InputError
from toolkit.evaluation.metrics import Span

# The bundled sample corpus (PostgreSQL manual chapters as Markdown) and its labelled queries.
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "data" / "sample"
SAMPLE_DOCS = SAMPLE_DIR / "docs"
SAMPLE_QUERIES = SAMPLE_DIR / "queries.jsonl"

EXAMPLE = '{"query": "How long is a link valid?", "answers": [{"doc_id": "faq.md", "text": "15 minutes"}]}'


@dataclass(frozen=True)
class LabelledQuery:
    """One question and the spans that answer it; `line` is its 1-based line in the file."""

    query: str
    answers: tuple[Span, ...]
    line: int


def occurrences(document: str, text: str) -> list[int]:
    """Every start offset of `text` in `document`, overlapping occurrences included."""
    found, start = [], document.find(text)
    while start != -1:
        found.append(start)
        start = document.find(text, start + 1)
    return found


def resolve_answer(answer: Mapping, documents: Mapping[str, str], where: str) -> Span:
    """Turn one answer object into a span of its document; `where` names the line for error messages."""
    if not isinstance(answer, Mapping):
        raise InputError(f"{where}: each answer must be an object such as {{'doc_id': ..., 'text': ...}}.")
    doc_id = answer.get("doc_id")
    if not isinstance(doc_id, str) or not doc_id:
        raise InputError(f'{where}: an answer has no "doc_id"; give the document\'s id (its path in the corpus).')
    if doc_id not in documents:
        known = ", ".join(sorted(documents)[:5]) + (", ..." if len(documents) > 5 else "")
        raise InputError(
            f"{where}: document {doc_id!r} is not in the corpus (known: {known or 'none'}); "
            "use the document's path relative to the corpus folder."
        )
    document = documents[doc_id]
    text, start, end = answer.get("text"), answer.get("start"), answer.get("end")
    for name, value in (("start", start), ("end", end)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise InputError(f'{where}: "{name}" must be a character offset (an integer ≥ 0), not {value!r}.')
    if text is not None and (not isinstance(text, str) or not text):
        raise InputError(f'{where}: "text" must be the non-empty answer text copied from {doc_id!r}.')

    if text is None:
        if start is None or end is None:
            raise InputError(f'{where}: an answer needs "text", or both "start" and "end" offsets.')
        if not start < end <= len(document):
            raise InputError(
                f"{where}: offsets {start}–{end} are not a span of {doc_id!r} ({len(document)} characters); "
                "need start < end ≤ the document's length."
            )
        return Span(doc_id, start, end)

    if start is not None:
        if document[start : start + len(text)] != text:
            found = occurrences(document, text)
            hint = f"it occurs at {_offsets(found)}" if found else "it does not occur in the document at all"
            raise InputError(f'{where}: the answer text is not at offset {start} of {doc_id!r} ({hint}); fix "start".')
        if end is not None and end != start + len(text):
            raise InputError(
                f'{where}: "end" ({end}) does not match "start" + the text\'s length ({start + len(text)}); '
                "fix it or drop it."
            )
        return Span(doc_id, start, start + len(text))

    found = occurrences(document, text)
    if not found:
        raise InputError(
            f"{where}: the answer text {_preview(text)} is not in {doc_id!r}; copy it exactly from the text "
            '(whitespace and punctuation included) or give "start"/"end" offsets.'
        )
    if len(found) > 1:
        raise InputError(
            f"{where}: the answer text {_preview(text)} occurs {len(found)} times in {doc_id!r} "
            f'(at {_offsets(found)}); add "start" to say which one, or quote a longer, unique passage.'
        )
    if end is not None and end != found[0] + len(text):
        raise InputError(f'{where}: "end" ({end}) does not match where the text ends ({found[0] + len(text)}).')
    return Span(doc_id, found[0], found[0] + len(text))


def _preview(text: str, width: int = 60) -> str:
    return repr(text if len(text) <= width else text[: width - 1] + "…")


def _offsets(found: list[int]) -> str:
    return "offsets " + ", ".join(map(str, found[:5])) + (", ..." if len(found) > 5 else "")


def parse_queries(lines: Iterable[str], documents: Mapping[str, str], source: str = "queries") -> list[LabelledQuery]:
    """Parse JSONL lines (blank ones skipped); resolve their answers against `documents` (doc id → text)."""
    queries = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(
                f"{where}: not valid JSON ({error.msg}); each line must be one object like {EXAMPLE}"
            ) from None
        except RecursionError:
            raise InputError(f"{where}: JSON nested too deeply to read; each line must be one flat object.") from None
        if not isinstance(record, dict):
            raise InputError(f"{where}: each line must be one JSON object like {EXAMPLE}")
        query = record.get("query")
        if not isinstance(query, str) or not query.strip():
            raise InputError(f'{where}: "query" must be the question text.')
        answers = record.get("answers")
        if not isinstance(answers, list) or not answers:
            raise InputError(f'{where}: "answers" must be a non-empty list of {{"doc_id", "text"}} objects.')
        spans = tuple(resolve_answer(answer, documents, where) for answer in answers)
        queries.append(LabelledQuery(query=query, answers=spans, line=number))
    if not queries:
        raise InputError(f"{source} holds no queries; write one JSON object a line, like {EXAMPLE}")
    return queries


def read_sample_documents() -> dict[str, str]:
    """The sample corpus as doc id (file name, i.e. the path relative to SAMPLE_DOCS) → text."""
    return {path.name: path.read_text(encoding="utf-8") for path in sorted(SAMPLE_DOCS.glob("*.md"))}


def load_queries(path: str | Path, documents: Mapping[str, str]) -> list[LabelledQuery]:
    """Read a labelled-query JSONL file; `documents` maps each doc id to the raw text the offsets refer to."""
    from toolkit.text.sources import read_text_file
    from toolkit.validation import QUERY_FILE_BYTES

    text = read_text_file(path, "query file", QUERY_FILE_BYTES)  # a regular file (not a pipe), at most 64 MB
    return parse_queries(text.splitlines(), documents, source=str(path))
