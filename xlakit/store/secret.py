"""The HMAC secret that authenticates cache entries.

Source, first match wins:

1. env ``XLAKIT_CACHE_SECRET`` (non-empty): its UTF-8 bytes, a secret shared
   by a fleet of machines that share one cache;
2. the file ``<config_dir>/secret``, where config_dir is the argument, else
   env ``XLAKIT_CONFIG_DIR``, else ``platformdirs.user_config_dir("xlakit")``.
   It is created on first use (folder 0700, file 0600) holding 32 random
   bytes as 64 hex characters; the returned secret is those 64 ASCII bytes.
"""

from __future__ import annotations

import os
import secrets
import stat
import time
from pathlib import Path

import platformdirs

__all__ = ["ENV_SECRET", "ENV_CONFIG_DIR", "SecretUnavailable", "load_secret", "secret_location", "secret_path"]

ENV_SECRET = "XLAKIT_CACHE_SECRET"
ENV_CONFIG_DIR = "XLAKIT_CONFIG_DIR"

# A racing creator holds the file empty between O_EXCL and its write.
_EMPTY_RETRY_S = 1.0


class SecretUnavailable(OSError):
    """No secret in the environment and the secret file can't be read or created."""


def _hint() -> str:
    return f"set {ENV_SECRET} to a shared secret, or {ENV_CONFIG_DIR} to a writable folder"


def secret_path(config_dir: str | os.PathLike | None = None) -> Path:
    """Path of the secret file (whether or not it exists or the env overrides it)."""
    base = config_dir or os.environ.get(ENV_CONFIG_DIR) or platformdirs.user_config_dir("xlakit")
    return Path(base) / "secret"


def secret_location(config_dir: str | os.PathLike | None = None) -> str:
    """Where :func:`load_secret` gets the secret: ``"env:XLAKIT_CACHE_SECRET"`` or the file path."""
    if os.environ.get(ENV_SECRET):
        return f"env:{ENV_SECRET}"
    return str(secret_path(config_dir))


def _read(path: Path) -> bytes:
    """Read an existing secret file, tightening loose permissions.

    Raises FileNotFoundError if absent, SecretUnavailable for other problems.
    """
    deadline = time.monotonic() + _EMPTY_RETRY_S
    try:
        while True:
            with open(path, "rb") as f:
                mode = os.fstat(f.fileno()).st_mode
                value = f.read().strip()
            if value or time.monotonic() > deadline:
                break
            time.sleep(0.02)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise SecretUnavailable(f"cannot read secret file {path}: {e}; {_hint()}") from e
    if not value:
        raise SecretUnavailable(f"secret file {path} is empty; delete it to regenerate, or {_hint()}")
    if stat.S_IMODE(mode) & 0o077:
        try:
            os.chmod(path, 0o600)
        except OSError:
            pass  # not our file to fix; still usable
    return value


def _make_private_dir(path: Path) -> None:
    if path.is_dir():
        return
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)  # makedirs' mode is filtered by the umask


def load_secret(config_dir: str | os.PathLike | None = None) -> bytes:
    """Return the cache secret (bytes), creating the secret file if needed.

    Raises SecretUnavailable (an OSError) if the file can't be read or created.
    """
    env = os.environ.get(ENV_SECRET)
    if env:
        return env.encode("utf-8")
    path = secret_path(config_dir)
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    value = secrets.token_hex(32)
    try:
        _make_private_dir(path.parent)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return _read(path)  # another process won the race
    except OSError as e:
        raise SecretUnavailable(f"cannot create secret file {path}: {e}; {_hint()}") from e
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(value)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        try:
            os.unlink(path)  # an empty file would block every later load
        except OSError:
            pass
        raise SecretUnavailable(f"cannot write secret file {path}: {e}; {_hint()}") from e
    return value.encode("ascii")
