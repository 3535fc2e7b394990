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
    """A query vector from another model, or with other dimensions, than the active version's (SQLSTATE TK001)."""
