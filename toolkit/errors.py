"""The library's exceptions: each message says what was wrong and what to do about it."""


class ToolkitError(Exception):
    """Base class. ``str(error)`` is a complete sentence for the user, fix included."""


class InputError(ToolkitError):
    """Bad input from the user: an unreadable file, a malformed spec, an unknown alias."""


class DatabaseError(ToolkitError):
    """The database cannot be reached, is too old, or refused an operation."""


class StateError(ToolkitError):
    """An operation is not allowed in the current state (illegal version transition, failed gate)."""


class EmbeddingError(ToolkitError):
    """An embedding provider failed or answered something that cannot be stored."""


class ModelMismatchError(InputError):
    """A query vector from another model, or with other dimensions, than the version searched (SQLSTATE TK001)."""


class VersionUnavailableError(StateError):
    """The version a query was embedded for can no longer be searched (retired, unknown or still building), or the
    vector does not fit it (SQLSTATE TK002). Retry: read ``toolkit.serving_model()`` again, embed the question with
    that model and search again."""


class LockTimeoutError(StateError):
    """A lock the toolkit needed was held by another session for longer than the lock timeout (SQLSTATE 55P03);
    the message names who held it. Nothing was changed: retry when that session has finished."""
