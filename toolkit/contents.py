"""What a version holds (``toolkit show``) and how two versions cut one document (``toolkit diff``), read from the
versions' own tables through ``toolkit.version_documents`` and ``toolkit.version_chunks`` as the caller (row-level
security applies)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import psycopg

from toolkit import validation
from toolkit.errors import InputError
from toolkit.serving import version_model
from toolkit.store.contents import VersionChunk, VersionDocument, select_version_chunks, select_version_documents

__all__ = [
    "DocumentDiff",
    "Side",
    "VersionChunk",
    "VersionDocument",
    "diff_document",
    "version_chunks",
    "version_documents",
]


def version_documents(conn: psycopg.Connection, version: int, tenant: str | None = None) -> list[VersionDocument]:
    """A version's documents (of ``tenant``, or of every tenant this login sees), by tenant and doc id."""
    validation.VERSION_NUMBER.check(version)
    return select_version_documents(conn, version, tenant)


def version_chunks(
    conn: psycopg.Connection, version: int, doc_id: str, tenant: str | None = None
) -> list[VersionChunk]:
    """One document's chunks in a version, in reading order, then its parent sections (small-to-big). A document
    that more than one tenant has needs ``tenant``; one the version does not hold is refused."""
    validation.VERSION_NUMBER.check(version)
    rows = select_version_chunks(conn, version, doc_id, tenant)
    tenants = sorted({c.tenant for c in rows})
    if not rows:
        where = f" of tenant {tenant!r}" if tenant else ""
        raise InputError(
            f"Version {version} holds no document {doc_id!r}{where}; toolkit show --version {version} lists them."
        )
    if len(tenants) > 1:
        raise InputError(f"Tenants {', '.join(tenants)} each have a document {doc_id!r}: pass --tenant.")
    return rows


@dataclass(frozen=True)
class Side:
    version: int
    model_alias: str
    chunker_version: str
    chunks: list[VersionChunk]

    @property
    def tokens(self) -> int:
        return sum(c.token_count for c in self.chunks)


@dataclass
class DocumentDiff:
    """How two versions cut one document: each side's chunks (parents left out), and the cut points (chunk starts)
    both share and each has alone."""

    doc_id: str
    tenant: str
    a: Side
    b: Side
    common_cuts: list[int] = field(default_factory=list)
    only_a: list[int] = field(default_factory=list)
    only_b: list[int] = field(default_factory=list)

    def rows(self) -> list[dict]:
        """One row per cut point, in offset order: the chunk of each side that starts there."""
        starts_a = {c.start: c for c in self.a.chunks}
        starts_b = {c.start: c for c in self.b.chunks}
        rows = []
        for offset in sorted(set(starts_a) | set(starts_b)):
            row = {"offset": offset}
            for name, starts in (("a", starts_a), ("b", starts_b)):
                chunk = starts.get(offset)
                row[name] = (
                    None
                    if chunk is None
                    else {
                        "position": chunk.position,
                        "start": chunk.start,
                        "end": chunk.end,
                        "tokens": chunk.token_count,
                        "heading_path": chunk.heading_path,
                    }
                )
            chosen = starts_a.get(offset) or starts_b[offset]
            row["text"] = chosen.text
            rows.append(row)
        return rows

    def as_dict(self) -> dict:
        def side(s: Side) -> dict:
            return {
                "version": s.version,
                "model_alias": s.model_alias,
                "chunker_version": s.chunker_version,
                "chunks": [asdict(c) for c in s.chunks],
                "tokens": s.tokens,
            }

        return {
            "doc_id": self.doc_id,
            "tenant": self.tenant,
            "a": side(self.a),
            "b": side(self.b),
            "common_cuts": self.common_cuts,
            "only_a": self.only_a,
            "only_b": self.only_b,
        }


def diff_document(
    conn: psycopg.Connection, version_a: int, version_b: int, doc_id: str, tenant: str | None = None
) -> DocumentDiff:
    """How ``version_a`` and ``version_b`` cut ``doc_id`` (their chunkers, and the same text)."""
    if version_a == version_b:
        raise InputError("Name two different versions to compare: --version A --version B.")
    sides = []
    for version in (version_a, version_b):
        chunks = [c for c in version_chunks(conn, version, doc_id, tenant) if not c.is_parent]
        model = version_model(conn, version)
        sides.append(Side(version, model.model_alias, model.chunker_version, chunks))
    a, b = sides
    if a.chunks[0].tenant != b.chunks[0].tenant:
        raise InputError(f"The two versions hold {doc_id!r} for different tenants: pass --tenant.")
    cuts_a, cuts_b = {c.start for c in a.chunks}, {c.start for c in b.chunks}
    return DocumentDiff(
        doc_id, a.chunks[0].tenant, a, b, sorted(cuts_a & cuts_b), sorted(cuts_a - cuts_b), sorted(cuts_b - cuts_a)
    )
