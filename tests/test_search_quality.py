"""Hybrid against vector-only search with a real model (multilingual-e5-small in-process), on a small
labelled set: identifier questions (error codes, SKUs) that differ from their neighbours by one code,
and paraphrased questions that share almost no words with their answer."""

from __future__ import annotations

import pytest

from toolkit import cutover, search
from toolkit.embedding import get_embedder
from toolkit.store import versions
from toolkit.store.models import Model, insert_model

# One chunk per document. Codes are permutations of the same digits, and each code is one line of a
# paragraph about uploads or mugs, as it would be in a real troubleshooting page or catalogue: only the
# code tells the documents apart, and it is a small part of each chunk's text.
UPLOAD_REASONS = [
    "the file is larger than the workspace quota",
    "this file type is not allowed",
    "the session token had expired",
    "the virus scan did not finish in time",
    "the folder is read-only",
    "the file name contains characters that are not allowed",
    "another upload of the same file is still running",
    "the workspace is archived",
    "the checksum did not match the file received",
    "the storage region is under maintenance",
    "the file is encrypted with a password",
    "the connection was closed before the end of the file",
]
ERROR_CODES = ["4021", "4012", "4102", "4120", "4201", "4210", "2041", "2014", "2104", "2140", "1024", "1042"]
UPLOAD_TAIL = (
    " Uploads are retried automatically three times; after that the upload dialog shows the code and the"
    " file stays on your computer. Workspace administrators see every rejected upload in the audit log."
)
MUG_VARIANTS = [
    ("88-1934-B", "blue, 350 ml"),
    ("88-1943-B", "blue, 450 ml"),
    ("88-1394-B", "light blue, 300 ml"),
    ("88-1934-R", "red, 350 ml"),
    ("88-1943-R", "red, 450 ml"),
    ("81-1934-B", "navy blue, 350 ml"),
    ("83-1934-B", "sky blue, 350 ml, with a lid"),
    ("88-9134-B", "blue, 250 ml espresso size"),
]
MUG_TAIL = (
    " It is made of glazed stoneware, ships in a recycled carton, and can be engraved with up to twenty"
    " characters at checkout."
)
GENERAL = {
    "refunds": "Customers may return an item within 30 days of delivery and receive a full refund "
    "to the original payment method.",
    "password": "To reset your password, follow the 'Forgot password' link on the sign-in page; "
    "the reset email arrives within five minutes.",
    "shipping": "Orders leave our warehouse within two business days; express delivery costs extra.",
    "two-factor": "Enable two-factor authentication under Settings, Security, with an authenticator app.",
    "export": "Administrators can download all workspace data as a ZIP archive from the admin console.",
    "support-hours": "The support team answers chat messages Monday to Friday, 9:00 to 17:00 CET.",
    "deletion": "Deleted files stay in the trash for 14 days before they are removed for good.",
}
DOCS = {
    **{
        f"err-{code}": f"Error ERR-{code}: the upload was rejected because {reason}.{UPLOAD_TAIL}"
        for code, reason in zip(ERROR_CODES, UPLOAD_REASONS, strict=True)
    },
    **{f"sku-{sku.lower()}": f"SKU {sku} is the ceramic mug in {variant}.{MUG_TAIL}" for sku, variant in MUG_VARIANTS},
    **GENERAL,
}

IDENTIFIER_QUERIES = [
    ("What does ERR-4021 mean?", "err-4021"),
    ("I got ERR-4102 when uploading", "err-4102"),
    ("ERR-4201", "err-4201"),
    ("why ERR-2014", "err-2014"),
    ("upload failed with ERR-1042", "err-1042"),
    ("Tell me about SKU 88-1934-B", "sku-88-1934-b"),
    ("Is 88-1934-R dishwasher safe?", "sku-88-1934-r"),
    ("SKU 81-1934-B", "sku-81-1934-b"),
    ("size of 88-1943-B", "sku-88-1943-b"),
    ("88-9134-B", "sku-88-9134-b"),
    ("what is error 2140", "err-2140"),
    ("83-1934-B price", "sku-83-1934-b"),
]

PARAPHRASE_QUERIES = [
    ("How long do I have to send something back and get my money?", "refunds"),
    ("I can't remember my login credentials, what now?", "password"),
    ("How quickly will my parcel be dispatched?", "shipping"),
    ("How do I turn on the extra login verification?", "two-factor"),
    ("Can I get a copy of everything we have stored?", "export"),
    ("When can I talk to a human helper?", "support-hours"),
    ("How long until things in the bin are gone forever?", "deletion"),
]


def load_corpus(conn, tenant: str = "acme") -> int:
    """Registers e5 as the model, stores DOCS as one version (one chunk per document) and activates it."""
    embedder = get_embedder("e5:multilingual-e5-small")
    insert_model(
        conn,
        Model(
            alias="e5",
            provider="e5",
            model_name="multilingual-e5-small",
            dimensions=384,
            max_input_tokens=512,
            query_prefix="query: ",
            document_prefix="passage: ",
        ),
    )
    v = versions.create_version(conn, "e5", "fixed:400:0", "fixed:400:0@1")
    vectors = embedder.embed_documents(list(DOCS.values()))
    with conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO toolkit.chunks_v{int(v)} (tenant, chunk_id, doc_id, position, start_offset, end_offset,"
            " text, content_hash, token_count, embedding) VALUES (%s, %s, %s, 0, 0, %s, %s, 'h', 1, %s)",
            [
                (tenant, doc_id, doc_id, len(text), text, vector)
                for (doc_id, text), vector in zip(DOCS.items(), vectors, strict=True)
            ],
        )
    versions.create_version_index(conn, v, maintenance_work_mem="64MB")
    versions.mark_version_ready(conn, v)
    cutover.activate_version(conn, v, force=True)
    return v


def first_rank(hits, answer: str) -> int | None:
    return next((h.rank for h in hits if h.doc_id == answer), None)


@pytest.fixture
def corpus(conn):
    load_corpus(conn)
    return conn


def ranks(conn, queries, **options) -> list[int | None]:
    return [first_rank(search.search(conn, q, "acme", 3, **options), answer) for q, answer in queries]


@pytest.mark.slow  # a real model
def test_hybrid_finds_identifiers_that_vector_only_misses(corpus):
    vector_only = ranks(corpus, IDENTIFIER_QUERIES, retrieval="vector")
    hybrid = ranks(corpus, IDENTIFIER_QUERIES, hybrid=True)
    assert hybrid == [1] * len(IDENTIFIER_QUERIES), hybrid
    # e5 reads digits well enough to rank most codes first; it still confuses permutations of the same
    # digits (measured: 10 of 12 first, the other two second).
    assert sum(r == 1 for r in vector_only) < len(IDENTIFIER_QUERIES), vector_only


@pytest.mark.slow  # a real model
def test_vector_only_keeps_winning_on_paraphrased_questions(corpus):
    vector_only = ranks(corpus, PARAPHRASE_QUERIES, retrieval="vector")
    hybrid = ranks(corpus, PARAPHRASE_QUERIES, hybrid=True)
    assert None not in vector_only and None not in hybrid, (vector_only, hybrid)
    # Words shared by chance ("extra", "get") pull unrelated chunks up in hybrid, never the other way.
    assert sum(r == 1 for r in vector_only) >= sum(r == 1 for r in hybrid), (vector_only, hybrid)
    assert sum(r == 1 for r in vector_only) >= len(PARAPHRASE_QUERIES) - 2, vector_only
    # Full text alone, which hybrid leans on for identifiers, ranks few of these answers first.
    with corpus.transaction():
        corpus.execute("SELECT toolkit.set_tenant('acme')")
        text_only = [
            [
                row[0]
                for row in corpus.execute(
                    "SELECT doc_id FROM toolkit.hybrid_search_chunks(%s, NULL, 3)", (q,)
                ).fetchall()
            ]
            for q, _ in PARAPHRASE_QUERIES
        ]
    first = sum(docs[:1] == [answer] for docs, (_, answer) in zip(text_only, PARAPHRASE_QUERIES, strict=True))
    assert first <= len(PARAPHRASE_QUERIES) // 2, text_only
