"""`toolkit cache purge`: empty the embedding cache (TOOLKIT_EMBEDDING_CACHE), which an erase of the database does
not reach when run from a process without it (docs/deleting.md)."""

from __future__ import annotations

import click

from toolkit.cli._output import FORMAT_OPTION, json_output, plural, say


@click.group()
def cache() -> None:
    """The embedding cache of this user (TOOLKIT_EMBEDDING_CACHE, else ~/.cache/toolkit)."""


@cache.command()
@FORMAT_OPTION
def purge(output_format: str) -> None:
    """Delete every vector in the embedding cache (they are recomputed when needed).

    The cache is $TOOLKIT_EMBEDDING_CACHE when set, else the user's cache directory that `toolkit eval` uses. It
    holds document vectors keyed by a keyed hash of their text, never questions; run this after an erase made by a
    process that did not have the cache (docs/deleting.md).
    """
    from toolkit.embedding.cache import purge as purge_cache

    path, deleted = purge_cache()
    if json_output(output_format, {"path": str(path), "deleted": deleted}):
        return
    say(f"Deleted {plural(deleted, 'cached vector')} from {path}.")


commands = [cache]
