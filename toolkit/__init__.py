"""toolkit: a chunk-and-embedding store for retrieval-augmented generation in PostgreSQL + pgvector."""

__version__ = "0.1.0"
