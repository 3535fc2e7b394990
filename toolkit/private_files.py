"""Files the toolkit writes that hold customer data or decide what runs (the embedding cache, the ONNX exports,
backups, the signing key): created private (directories 0700, files 0600, by the call that creates them, never
chmod afterwards), and read back only when no one but their owner could have written them, like ssh's StrictModes.

The signing key (``$XDG_CONFIG_HOME/toolkit/signing.key``, default ``~/.config/toolkit/signing.key``) is a random
secret of this OS user, kept apart from the caches it signs: whoever can write a cache directory (a shared volume, a
copy from another machine, a directory someone opened up) cannot forge what the toolkit reads from it without also
holding the key. The database is not the keeper: every role that searches would have to read the key there, and the
evaluation's cache works without a database.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import os
import secrets
import stat
import tempfile
from pathlib import Path

from toolkit.errors import InputError

KEY_FILE = "signing.key"
KEY_VARIABLE = "TOOLKIT_SIGNING_KEY_FILE"


def _trusted_owner(uid: int) -> bool:
    # root may write anything anyway (ssh trusts root-owned files too)
    return uid in (os.geteuid(), 0)


def refuse_unless_private(path: Path, what: str, hint: str) -> os.stat_result:
    """The stat of ``path`` (a directory or file), or InputError when another user owns it or its group or others
    may write it: what is read from there could have been planted."""
    try:
        found = path.stat()
    except OSError as error:
        raise InputError(f"Cannot read the {what} {str(path)!r} ({error.strerror}); {hint}") from None
    if not _trusted_owner(found.st_uid):
        raise InputError(
            f"The {what} {str(path)!r} belongs to another user (uid {found.st_uid}), who could have planted what "
            f"it holds; the toolkit reads only its own. {hint}"
        )
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise InputError(
            f"The {what} {str(path)!r} is writable by its group or by others (mode {stat.S_IMODE(found.st_mode):04o}),"
            f" who could have planted what it holds; run chmod go-w {str(path)!r} (0700 for a directory) or {hint}"
        )
    return found


def private_directory(path: Path, what: str, hint: str) -> Path:
    """``path`` created 0700 when missing (its missing parents too), then checked by `refuse_unless_private`."""
    missing = [parent for parent in [path, *path.parents] if not parent.exists()]
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile: checked below
            directory.mkdir(mode=0o700)
    refuse_unless_private(path, what, hint)
    return path


def create_private(path: Path) -> int:
    """A file descriptor of ``path`` opened for writing, created 0600 (truncated when it exists: then it must be
    this user's own)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)


def touch_private(path: Path) -> None:
    """``path`` exists and is 0600: created so, or an existing file of this user's narrowed to its owner."""
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600))
    found = path.stat()
    if found.st_mode & 0o077 and _trusted_owner(found.st_uid):
        os.chmod(path, 0o600)  # written by an earlier release with the default umask


def key_path() -> Path:
    configured = os.environ.get(KEY_VARIABLE, "").strip()
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "toolkit" / KEY_FILE


@functools.cache
def _key_at(path: Path) -> bytes:
    hint = (
        f"delete it and the toolkit makes a new one (the caches it signed are then recomputed), or set {KEY_VARIABLE}."
    )
    try:
        return _read_or_make_key(path, hint)
    except OSError as error:  # a home directory the process may not write (a container's, a service account's)
        raise InputError(
            f"Cannot read or create the toolkit's signing key {str(path)!r} ({error.strerror}); set {KEY_VARIABLE} "
            "to a file in a directory of your own (it is made there, mode 0600)."
        ) from None


def _read_or_make_key(path: Path, hint: str) -> bytes:
    private_directory(path.parent, "directory of the toolkit's signing key", hint)
    if not path.exists():
        # Written whole under a temporary name, then linked into place: a concurrent process either wins the
        # link or reads the winner's key, never a half-written one.
        handle, staged = tempfile.mkstemp(dir=path.parent, prefix=".signing.", suffix=".tmp")  # 0600
        try:
            os.write(handle, secrets.token_hex(32).encode() + b"\n")
            os.fsync(handle)
            os.close(handle)
            with contextlib.suppress(FileExistsError):
                os.link(staged, path)
        finally:
            os.unlink(staged)
    found = refuse_unless_private(path, "signing key", hint)
    if found.st_mode & 0o077:
        raise InputError(
            f"The toolkit's signing key {str(path)!r} is readable by its group or by others (mode "
            f"{stat.S_IMODE(found.st_mode):04o}); run chmod 600 {str(path)!r}, or {hint}"
        )
    key = path.read_bytes().strip()
    if len(key) < 32:
        raise InputError(f"The toolkit's signing key {str(path)!r} is too short to be one; {hint}")
    return key


def signing_key() -> bytes:
    """This user's secret for the MACs of cache entries and export manifests (made on first use)."""
    return _key_at(key_path())


class Signer:
    """HMAC-SHA256 with this user's signing key, read once: ``signer(*parts)`` for each entry (the parts are
    length-prefixed, so no two part lists give the same message)."""

    def __init__(self, key: bytes | None = None):
        self._key = key if key is not None else signing_key()

    def __call__(self, *parts: bytes | str) -> bytes:
        message = []
        for part in parts:
            data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
            message += (len(data).to_bytes(8, "big"), data)
        return hmac.digest(self._key, b"".join(message), "sha256")  # one call into OpenSSL per entry


def mac(*parts: bytes | str) -> bytes:
    """One HMAC-SHA256 of ``parts`` with this user's signing key (`Signer` for many)."""
    return Signer()(*parts)
