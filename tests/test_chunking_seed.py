"""The "Try It Yourself" table of seed 000 reproduced with our chunkers (unit=chars) and the seed's scorer.

The expected numbers are copied from the table printed in ../shared/seeds/000_09804a28a69ebf58.txt; the
retrieval and cut-sentence rules below are the seed's own code, applied to our chunks' texts.
"""

from __future__ import annotations

import re

import pytest

from toolkit.chunking import get_chunker
from toolkit.evaluation.bag_of_words import bow_cosine

TEXT = (
    "Orders can be returned within 30 days of delivery for a full refund. "
    "Items must be unused and in original packaging. "
    "Refunds are issued to the original payment method within 5 business days after the warehouse receives "
    "the parcel. "
    "Gift cards are non-refundable. "
    "Standard shipping takes 3 to 5 business days inside the country. "
    "Express shipping delivers within 24 hours but is unavailable on weekends. "
    "International orders ship through a partner carrier and customs fees are paid by the buyer. "
    "To reset your password, open Settings, choose Security and press Reset password. "
    "A reset link is emailed to you and stays valid for 15 minutes. "
    "If you enable two-factor authentication, you must keep your recovery codes in a safe place. "
    "Support is available by chat from 9 am to 6 pm on weekdays. "
    "Premium subscribers get a dedicated phone line that is open 24 hours a day."
)

QUERIES = [
    ("how long do I have to return an order", "Orders can be returned within 30 days of delivery for a full refund."),
    (
        "when do refunds reach my payment method",
        "Refunds are issued to the original payment method within 5 business days after the warehouse receives "
        "the parcel.",
    ),
    ("is express shipping available on weekends",
     "Express shipping delivers within 24 hours but is unavailable on weekends."),
    (
        "who pays customs for international orders",
        "International orders ship through a partner carrier and customs fees are paid by the buyer.",
    ),
    ("how long is the password reset link valid", "A reset link is emailed to you and stays valid for 15 minutes."),
    ("what hours is chat support open", "Support is available by chat from 9 am to 6 pm on weekdays."),
    ("is there a phone line for premium users",
     "Premium subscribers get a dedicated phone line that is open 24 hours a day."),
]  # fmt: skip


def split_sentences(text):  # the seed's splitter, used only to score (as the seed does)
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


def evaluate(chunks, k):  # the seed's hit@k: the WHOLE answer sentence inside a retrieved chunk
    hits = 0
    for q, gold in QUERIES:
        ranked = sorted(chunks, key=lambda c: bow_cosine(q, c), reverse=True)[:k]
        hits += any(gold in c for c in ranked)
    return hits


def cut_sentences(chunks):
    return sum(not any(s in c for c in chunks) for s in split_sentences(TEXT))


# strategy spec, then the seed's printed row: chunks, avg len, cut sents, hit@1, hit@2
SEED_TABLE = [
    ("fixed:200:0:unit=chars", 5, 173, 3, 3, 4),
    ("fixed:200:40:unit=chars", 6, 177, 3, 4, 5),
    ("fixed:400:0:unit=chars", 3, 288, 1, 5, 6),
    ("sentence:200:0:unit=chars", 6, 143, 0, 6, 7),
    ("sentence:200:1:unit=chars", 9, 155, 0, 7, 7),
    ("sentence:400:0:unit=chars", 3, 287, 0, 6, 7),
]


def test_seed_text_is_the_seeds():
    assert len(TEXT) == 864 and len(split_sentences(TEXT)) == 12


@pytest.mark.parametrize(("spec", "n", "avg", "cut", "hit1", "hit2"), SEED_TABLE)
def test_try_it_yourself_table(spec, n, avg, cut, hit1, hit2):
    chunks = get_chunker(spec).chunk(TEXT, "policy")
    texts = [c.text for c in chunks]
    assert all(TEXT[c.start : c.end] == c.text for c in chunks)
    row = (
        len(texts),
        round(sum(map(len, texts)) / len(texts)),
        cut_sentences(texts),
        evaluate(texts, 1),
        evaluate(texts, 2),
    )
    assert row == (n, avg, cut, hit1, hit2)


def test_fixed_boundaries_and_sentence_chunks_as_printed():
    fixed = [c.text for c in get_chunker("fixed:200:0:unit=chars").chunk(TEXT)]
    assert [c[-28:] for c in fixed[:3]] == [
        "n 5 business days after the ",
        " is unavailable on weekends.",
        ". A reset link is emailed to",
    ]
    sentence = [c.text for c in get_chunker("sentence:200:1:unit=chars").chunk(TEXT)]
    assert [(c[:60], len(c)) for c in sentence[:3]] == [
        ("Orders can be returned within 30 days of delivery for a full", 116),
        ("Items must be unused and in original packaging. Refunds are ", 192),
        ("Gift cards are non-refundable. Standard shipping takes 3 to ", 169),
    ]


def test_small_to_big_as_printed():
    # Seed: parents = sentence_chunks(TEXT, 400, 0), children = the parents' sentences;
    # "small-to-big: hit@1 7/7, avg context returned 348 chars".
    chunks = get_chunker("sentence:1:0:unit=chars:parent=sentence,400,0,unit=chars").chunk(TEXT, "policy")
    parents = {c.chunk_id: c for c in chunks if c.is_parent}
    children = [c for c in chunks if not c.is_parent]
    assert len(parents) == 3 and len(children) == 12
    returned = []
    for query, _ in QUERIES:
        best = max(children, key=lambda c: bow_cosine(query, c.text))
        returned.append(parents[best.parent_id].text)
    assert sum(gold in text for (_, gold), text in zip(QUERIES, returned, strict=True)) == 7
    assert round(sum(map(len, returned)) / len(QUERIES)) == 348
