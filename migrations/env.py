"""Alembic environment: each revision applies its incremental SQL files; the idempotent files are
re-applied whenever the database ends at head. The whole upgrade is one transaction.

Next to live traffic: one migration runs at a time (the second waits for the first and says so), and before any
DDL the migration takes every lock it may need, in the order readers take them, holding readers up at most
``--max-stall`` at a time and never deadlocking with one; after ``--lock-timeout`` it fails naming the sessions that
held it out, or, with ``--terminate-blockers-after``, ends them (toolkit.db.migration_locks). An upgrade with nothing
to do takes no lock.
"""

from __future__ import annotations

import logging
import os
from logging.config import fileConfig

from alembic import context
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool

from toolkit.db.migration_locks import LOCK_TIMEOUT, MAX_STALL, TERMINATE_AFTER, LockPolicy, lock_for_migration
from toolkit.db.preflight import preflight
from toolkit.db.sql_files import (
    apply_idempotent,
    idempotent_files,
    installed_fingerprint,
    record_held_revision,
    sql_fingerprint,
    sqlalchemy_url,
)
from toolkit.errors import InputError

# alembic's version table: public.toolkit_alembic_version (one row, the revision). It is outside schema toolkit so
# that `downgrade base`, which drops the schema, can still record the result; that downgrade then drops it too.
VERSION_TABLE = "toolkit_alembic_version"

config = context.config
# alembic's own command line: log what it does (alembic.ini configures the loggers). toolkit migrate passes no
# file and prints its own summary.
if config.config_file_name and not config.attributes.get("connection"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)
log = logging.getLogger("alembic.runtime.migration")


def _url() -> str:
    url = config.attributes.get("database_url") or os.environ.get("TOOLKIT_DATABASE_URL")
    if not url:
        raise SystemExit(
            "TOOLKIT_DATABASE_URL is not set. Set it to the database to migrate "
            "(or run `toolkit migrate`, which also works with the embedded server)."
        )
    return sqlalchemy_url(url)


def _direction() -> str:
    """``upgrade``, ``downgrade``, or the name of another alembic command (current, history, stamp…): set by
    toolkit.db.migrate, or read from alembic's own command line."""
    if config.attributes.get("direction"):
        return config.attributes["direction"]
    command = getattr(getattr(config, "cmd_opts", None), "cmd", None)
    return getattr(command[0], "__name__", "") if command else "upgrade"


def _say(message: str) -> None:
    """Reports to the operator: toolkit migrate prints config.attributes['notices'], alembic logs them."""
    config.attributes.setdefault("notices", []).append(message)
    log.warning(message)


def _lock_policy() -> LockPolicy | None:
    """How the migration gets its locks: toolkit migrate's options, or alembic's ``-x max_stall=1 -x
    lock_timeout=60 -x terminate_blockers_after=30`` (seconds; the same rules)."""
    if config.attributes.get("lock_policy") is not None:
        return config.attributes["lock_policy"]
    given = context.get_x_argument(as_dictionary=True)
    rules = {"max_stall": MAX_STALL, "lock_timeout": LOCK_TIMEOUT, "terminate_blockers_after": TERMINATE_AFTER}
    try:
        values = {name: rule.parse(given[name]) for name, rule in rules.items() if name in given}
        if not values:
            return None
        defaults = LockPolicy()
        return LockPolicy(
            max_stall=values.get("max_stall", defaults.max_stall),
            timeout=values.get("lock_timeout", defaults.timeout),
            terminate_after=values.get("terminate_blockers_after"),
        )
    except InputError as error:
        raise SystemExit(str(error)) from None


def _steps(script, direction: str, current: str | None, heads: set[str]) -> int | None:
    """The steps toolkit migrate's progress counts: revisions run (and, up to head, the idempotent files); None
    when the target is relative (+1, -1) and alembic alone resolves it."""
    target = config.attributes.get("target_revision")
    try:
        if direction == "upgrade":
            revisions = len(list(script.iterate_revisions(target, current or "base")))
            at_head = script.get_revision(target).revision in heads
            return revisions + (len(idempotent_files()) if at_head else 0)
        return len(list(script.iterate_revisions(current, target))) if current else 0
    except Exception:  # only the progress line's total depends on it
        return None


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    engine = None
    if connection is None:
        engine = create_engine(_url(), poolclass=pool.NullPool)
        connection = engine.connect()
    driver = connection.connection.driver_connection

    def on_notice(diagnostic) -> None:
        # Warnings raised by the SQL (e.g. secrets removed from the registry) are meant for the operator.
        if diagnostic.severity_nonlocalized == "WARNING":
            hint = f" {diagnostic.message_hint}" if diagnostic.message_hint else ""
            _say(f"{diagnostic.message_primary}.{hint}")

    driver.add_notice_handler(on_notice)
    direction = _direction()
    # toolkit migrate's progress line (per revision and per re-applied SQL file); alembic's own commands log instead.
    progress = config.attributes.get("progress")

    def on_version_apply(**kwargs) -> None:
        if progress is not None:
            progress.advance(1, step=f"revision {kwargs['step'].up_revision_id}")

    def on_file(path) -> None:
        if progress is not None:
            progress.advance(1, step=path.name)

    try:
        context.configure(
            connection=connection,
            version_table=VERSION_TABLE,
            transaction_per_migration=False,
            on_version_apply=on_version_apply,
        )
        if direction not in ("upgrade", "downgrade"):
            # alembic current, history, stamp…: alembic's own callback does the work.
            with context.begin_transaction():
                context.run_migrations()
            return
        policy = _lock_policy()  # a bad -x value is refused even when there is nothing to do
        script = ScriptDirectory.from_config(config)
        heads = set(script.get_heads())
        with context.begin_transaction():
            current = set(context.get_context().get_current_heads())
            up_to_date = current == heads and installed_fingerprint(driver) == sql_fingerprint()
            if direction == "upgrade" and up_to_date and not config.attributes.get("reapply"):
                config.attributes["nothing_to_do"] = True
                log.info("Already at %s (head) with this installation's SQL; nothing to do.", ", ".join(heads))
                return
            if direction == "upgrade":
                # What a role that is not a superuser lacks is named before anything changes.
                preflight(driver, current=next(iter(current), None))
            lock_for_migration(driver, say=_say, policy=policy)
            if progress is not None:
                progress.set_total(_steps(script, direction, next(iter(current), None), heads))
            context.run_migrations()
            after = set(context.get_context().get_current_heads())
            if after == heads:
                apply_idempotent(driver, on_file=on_file)
                # Commands check the schema revision as whatever role they run as.
                driver.execute(
                    f"GRANT SELECT ON public.{VERSION_TABLE} TO toolkit_reader, toolkit_writer, toolkit_deployer,"
                    " toolkit_owner"
                )
                log.info("At %s (head); SQL fingerprint %s.", ", ".join(heads), sql_fingerprint())
            elif after:
                # Below head: commands refuse the schema (naming its revision) until it is upgraded again.
                record_held_revision(driver, next(iter(after)), downgraded=direction == "downgrade")
                log.info("At %s, below head (%s).", ", ".join(after), ", ".join(heads))
            else:
                # base: the toolkit schema is gone; so goes alembic's version table.
                driver.execute(f"DROP TABLE IF EXISTS public.{VERSION_TABLE}")
                log.info("At base: schema toolkit and public.%s removed.", VERSION_TABLE)
    finally:
        driver.remove_notice_handler(on_notice)
        if engine is not None:
            connection.close()
            engine.dispose()


if context.is_offline_mode():
    raise SystemExit(
        "Offline (--sql) mode is not supported: the SQL to review is in sql/incremental and sql/idempotent."
    )
run_migrations_online()
