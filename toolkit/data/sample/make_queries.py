"""Derive the sample corpus's labelled queries from its Markdown, deterministically (no language model).

    .venv/bin/python toolkit/data/sample/make_queries.py   # rewrites queries.jsonl

Three kinds, each answer an exact passage that occurs once in its document (docs/evaluation.md says more):
- heading:    the question is rewritten from a section heading by fixed templates ("Partial Indexes" →
              "What are partial indexes?", "Populating a Database" → "How do I populate a database?");
              the answer is the first sentence of the section's first paragraph.
- definition: a sentence of the form "A partial index is an index ..." → "What is a partial index?";
              the answer is the sentence.
- table-row:  a row of a captioned table ("Table 8.2. Numeric Types") → "According to the numeric types
              table, what is smallint?"; the answer is the row's Markdown line.
Then the hand-written questions of manual_queries.jsonl (kind "manual") are appended.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCS = HERE / "docs"

GERUNDS = {
    "Using": "use", "Creating": "create", "Controlling": "control", "Parsing": "parse", "Ranking": "rank",
    "Highlighting": "highlight", "Manipulating": "manipulate", "Gathering": "gather", "Testing": "test",
    "Examining": "examine", "Populating": "populate", "Combining": "combine", "Searching": "search",
    "Accessing": "access", "Modifying": "modify", "Constructing": "construct", "Defining": "define",
    "Designing": "design", "Enforcing": "enforce", "Calling": "call", "Declaring": "declare",
}  # fmt: skip
IMPERATIVES = {"Disable", "Use", "Remove", "Increase", "Run"}
# Headings the templates would garble.
OVERRIDES = {
    "Testing and Debugging Text Search": "How do I test and debug a text search configuration?",
    "Indexes and ORDER BY": "How can an index deliver rows in ORDER BY order?",
    "EXPLAIN Basics": "What are the basics of EXPLAIN?",
    "Using EXPLAIN": "How do I use EXPLAIN to see a query plan?",
}
# Headings that mean nothing alone: the question names the parent section instead.
GENERIC = {
    "Introduction": "Give me an introduction to {parent}.",
    "Caveats": "What caveats apply to {parent}?",
    "Limitations": "What are the limitations of {parent}?",
    "Examples": "Show examples of {parent}.",
    "Implementation Details": "What are the implementation details of {parent}?",
    "Special Values": "Which special values exist for {parent}?",
    "Ordering": "How does ordering work for {parent}?",
    "Type Safety": "How does type safety work for {parent}?",
    "Indexing": "How does indexing work for {parent}?",
    "Transforms": "What transforms exist for {parent}?",
    "Configurations": "What are configurations in {parent}?",
    "Dates": "How are dates written in {parent}?",
    "Times": "How are times written in {parent}?",
    "Time Stamps": "How are time stamps written in {parent}?",
}
# Sentence openings that are not a defined term ("This is ...", "If `x` is ...").
NOT_SUBJECTS = {
    "this", "it", "there", "that", "these", "those", "such", "each", "one", "which", "what", "here",
    "note", "both", "all", "another", "an example", "if", "since", "but", "just", "in", "below", "above",
    "typically", "they", "as", "when", "while", "for", "so", "thus", "also", "then", "however",
    "plan-reading", "the result", "the default", "the following", "the answer", "the reason",
    "the first", "the second", "the same", "the other", "the only", "the latter", "the former",
    "the output", "the difference", "the effect", "the rule", "the idea", "the problem", "the cost",
    "the key", "a similar", "the last", "the stopword", "the syntaxes",
}  # fmt: skip
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`“(])")
_ABBREVIATION = re.compile(r"(?:\be\.g|\bi\.e|\betc|\bvs|\bcf|\bapprox)\.$", re.IGNORECASE)
_WORD = r"(?:`[^`]+`|(?!(?:is|are)\b)[A-Za-z][\w-]*)"
_DEFINITION = re.compile(
    rf"^(?P<article>An? |The )?(?P<subject>(?:`[^`]+`|[A-Za-z][\w-]*)(?: {_WORD}){{0,3}}) "
    r"(?P<verb>is|are) (?:an? |the |used |useful |designed )"
)


@dataclass
class Block:
    kind: str  # heading, paragraph, table, code, quote, list
    text: str
    level: int = 0


def read_blocks(markdown: str) -> list[Block]:
    """Split Markdown (as build.py writes it) into blocks, keeping code fences whole."""
    blocks, lines, i = [], markdown.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(("```", "~~~")):
            fence, j = line[:3], i + 1
            while j < len(lines) and not lines[j].startswith(fence):
                j += 1
            blocks.append(Block("code", "\n".join(lines[i : j + 1])))
            i = j + 1
            continue
        if not line.strip():
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].strip() and not lines[j].startswith(("```", "~~~")):
            j += 1
        text = "\n".join(lines[i:j])
        heading = re.match(r"^(#+) (.*)$", text)
        if heading and "\n" not in text:
            blocks.append(Block("heading", heading.group(2), len(heading.group(1))))
        elif text.startswith("|"):
            blocks.append(Block("table", text))
        elif text.startswith(">"):
            blocks.append(Block("quote", text))
        elif text.startswith(("- ", "1. ", "  ")):
            blocks.append(Block("list", text))
        else:
            blocks.append(Block("paragraph", text))
        i = j
    return blocks


def sentences(paragraph: str) -> list[str]:
    parts, current = [], ""
    for piece in _SENTENCE_END.split(paragraph):
        current = f"{current} {piece}" if current else piece
        if not _ABBREVIATION.search(current):
            parts.append(current)
            current = ""
    if current:
        parts.append(current)
    return parts


def plain(title: str) -> str:
    """A heading without its section number or code marks: "11.2.5. GIN" → "GIN"."""
    title = re.sub(r"^(?:Chapter \d+\. )?(?:\d+(?:\.\d+)*\. )?", "", title)
    return title.replace("`", "")


def lower(phrase: str) -> str:
    """Lower-case title-cased words, keep acronyms and code (GIN, JSON, COPY, jsonb)."""
    return " ".join(w.lower() if re.fullmatch(r"[A-Z][a-z]+(?:-[A-Za-z]+)?", w) else w for w in phrase.split())


def heading_question(title: str, parent: str) -> str | None:
    title = plain(title)
    words = title.split()
    if title in OVERRIDES:
        return OVERRIDES[title]
    if title in GENERIC:
        return GENERIC[title].format(parent=lower(plain(parent)))
    if title.endswith("?"):
        return title
    if words[0] in GERUNDS:
        return f"How do I {GERUNDS[words[0]]} {lower(' '.join(words[1:]))}?"
    if words[0] in IMPERATIVES:
        return f"Why should I {lower(title)} when {lower(plain(parent))}?"
    plural = any(w.endswith("s") and not w.endswith(("ss", "us")) for w in words)
    verb = "are" if plural else "is"
    return f"What {verb} {lower(title)}?"


def usable(sentence: str) -> bool:
    return 40 <= len(sentence) <= 320 and not sentence.endswith(":") and "\n" not in sentence


def derive(doc_id: str, markdown: str) -> list[dict]:
    blocks = read_blocks(markdown)
    candidates: list[tuple[str, str, str]] = []  # (kind, question, answer)
    path: list[tuple[int, str]] = []
    caption = None
    for index, block in enumerate(blocks):
        if block.kind == "heading":
            path = [(lvl, t) for lvl, t in path if lvl < block.level] + [(block.level, block.text)]
            following = blocks[index + 1] if index + 1 < len(blocks) else None
            if block.level > 1 and following is not None and following.kind == "paragraph":
                first = sentences(following.text)[0]
                parent = path[-2][1] if len(path) > 1 else block.text
                question = heading_question(block.text, parent)
                if question and usable(first):
                    candidates.append(("heading", question, first))
            continue
        if block.kind == "paragraph":
            match = re.fullmatch(r"\*\*(?:Table [\d.]+\. )(.*)\*\*", block.text)
            caption = match.group(1) if match else caption
            for sentence in sentences(block.text):
                definition = _DEFINITION.match(sentence)
                if not definition or not usable(sentence):
                    continue
                article = (definition.group("article") or "").strip()
                subject = definition.group("subject")
                phrase = f"{article.lower()} {subject}".strip() if article else subject
                if any(f"{phrase.lower()} ".startswith(f"{word} ") for word in NOT_SUBJECTS):
                    continue
                if not re.match(r"[A-Z`]", sentence):
                    continue
                subject_text = lower(f"{article.lower()} {subject}".strip())
                candidates.append(("definition", f"What {definition.group('verb')} {subject_text}?", sentence))
            continue
        if block.kind == "table" and caption:
            rows = block.text.split("\n")[2:]
            chosen = sorted({round(i * (len(rows) - 1) / 3) for i in range(4)}) if len(rows) > 4 else range(len(rows))
            for i in chosen:
                row = rows[i]
                first_cell = row.strip("|").split(" | ")[0].strip().replace("`", "")
                words = re.findall(r"[A-Za-z]{3,}", row.split(" | ", 1)[-1])
                if 2 <= len(first_cell) <= 40 and len(row) >= 30 and len(words) >= 2:
                    question = f"According to the {lower(caption)} table, what is {first_cell}?"
                    candidates.append(("table-row", question, row))
        caption = None if block.kind == "table" else caption

    queries, seen = [], set()
    for kind, question, answer in candidates:
        # One query per answer and per question; a repeated passage cannot be a label.
        if answer in seen or question in seen or markdown.count(answer) != 1:
            continue
        seen.update((answer, question))
        queries.append({"query": question, "answers": [{"doc_id": doc_id, "text": answer}], "kind": kind})
    return queries


def build_queries(docs: Path = DOCS) -> list[dict]:
    """Every labelled query, in file order: derived ones document by document, then the manual ones."""
    queries = []
    texts = {path.name: path.read_text(encoding="utf-8") for path in sorted(docs.glob("*.md"))}
    for name, text in texts.items():
        queries.extend(derive(name, text))
    # Hand-written questions (kind "manual"), worded unlike their answers; they must be unique passages too.
    for line in (HERE / "manual_queries.jsonl").read_text(encoding="utf-8").splitlines():
        query = json.loads(line)
        answer = query["answers"][0]
        if texts[answer["doc_id"]].count(answer["text"]) != 1:
            raise SystemExit(f"manual_queries.jsonl: the answer to {query['query']!r} is not a unique passage.")
        queries.append(query)
    return queries


def main() -> None:
    queries = build_queries()
    with (HERE / "queries.jsonl").open("w", encoding="utf-8") as out:
        for query in queries:
            out.write(json.dumps(query, ensure_ascii=False) + "\n")
    kinds: dict[str, int] = {}
    for query in queries:
        kinds[query["kind"]] = kinds.get(query["kind"], 0) + 1
    print(f"{len(queries)} queries: {kinds}")


if __name__ == "__main__":
    main()
