"""The line scanner finds the same sections, blocks and protected ranges as markdown-it-py (the reference),
on real README files and on generated Markdown full of the constructs where the two could differ."""

from __future__ import annotations

import email.parser
import sysconfig
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from toolkit.chunking.markdown import parse_sections
from toolkit.chunking.markdown_scan import scan

LINES = [
    "# Title", "## Sub ##", "###### six", "####### seven", "#no space", "  # indented heading", "    # code",
    "Plain text line.", "More *text*, with | a pipe", "Setext title", "===", "---", "  ---  ", "- item",
    "* item", "1. item", "```", "```python", "~~~", "````", "``` not `closed", "    indented code", "\tcode",
    " \tmixed", "| a | b |", "|---|---|", "| :-- | --: |", "a | b", "--- | ---", "|-|", "| 1 | 2 | 3 |",
    "> quote", ">", "> ```", "> | x | y |", "> |---|---|", ">> nested", "   > indented quote", "lazy line",
    "", "", "   ", "\t", "<div>", "[ref]: /url", "***", "text\\| escaped | pipe", "naïve café", "x\x00y",
]  # fmt: skip
DOCUMENTS = st.lists(st.sampled_from(LINES), max_size=40).flatmap(
    lambda lines: st.sampled_from(["\n", "\r\n", "\r"]).map(lambda newline: newline.join(lines))
)


def both(text: str):
    return parse_sections(text), parse_sections(text, scanner=False)


@settings(max_examples=1500, deadline=None)
@given(DOCUMENTS, st.sampled_from(["", "\n", "  ", "\n\n"]))
@example("> ```\n>", "")  # a fence in a quote on the last line, without a line break after it
@example(">", "\n\n")  # markdown-it counts the empty lines after a quote into it
@example("| a | b |\n|---|---|\n> quote", "")  # a quote ends a table
def test_generated_markdown_gives_markdown_its_blocks(text, tail):
    scanned, reference = both(text + tail)
    assert scanned == reference


def test_readme_files_of_installed_packages_give_markdown_its_blocks():
    site = Path(sysconfig.get_paths()["purelib"])
    checked = quotes = 0
    for path in sorted(site.glob("*.dist-info/METADATA")):
        message = email.parser.Parser().parsestr(path.read_text(encoding="utf-8", errors="replace"))
        body = str(message.get_payload() or "")
        if "markdown" not in (message.get("Description-Content-Type") or "").lower() or not body.strip():
            continue
        scanned, reference = both(body)
        assert scanned == reference, path.parent.name
        checked += 1
        quotes += scan(body) is None  # without markdown-it at hand, a block quote is not scanned
    assert checked >= 40 and quotes >= 5


def test_a_block_quote_is_one_block_and_protects_the_code_inside():
    text = "# A\n\n> quoted\nlazy continuation\n> ```\n> code\n> ```\n\nafter\n"
    sections, protected = parse_sections(text)
    assert [(b.kind, text[b.start : b.end]) for b in sections[0].blocks] == [
        ("other", "> quoted\nlazy continuation\n> ```\n> code\n> ```\n"),
        ("paragraph", "after\n"),
    ]
    assert [text[a:b] for a, b in protected] == ["> ```\n> code\n> ```\n"]
    assert (sections, protected) == parse_sections(text, scanner=False)


def test_block_quotes_cost_linear_work():
    # Each quote is parsed by markdown-it on its own lines only; when quotes keep ending long before the lines
    # that had to be read (lazy lines), the scan gives up for one whole-text parse instead of going quadratic.
    from toolkit.chunking.markdown import _parser

    lines_parsed = []

    def parse(text):
        lines_parsed.append(text.count("\n"))
        return _parser().parse(text)

    blocks = scan("> a\n# h\n" * 2000, parse)
    assert blocks is not None and len(lines_parsed) == 2000 and sum(lines_parsed) == 2000
    lines_parsed.clear()
    assert scan("> ```\nlazy\n" * 2000, parse) is None and sum(lines_parsed) == 0
