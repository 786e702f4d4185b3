"""The HMAC secret that authenticates cache entries.

Source, first match wins:

1. env ``XLAKIT_CACHE_SECRET`` (non-empty): its UTF-8 bytes, a secret shared
   by a fleet of machines that share one cache;
2. the file ``<config_dir>/secret``, where config_dir is the argument, else
   env ``XLAKIT_CONFIG_DIR``, else ``platformdirs.user_config_dir("xlakit")``.
   It is created on first use (folder 0700, file 0600) holding 32 random
   bytes as 64 hex characters; the returned secret is those 64 ASCII bytes.

Refused, each with a :class:`SecretUnavailable` naming the setting: a secret shorter than
``MIN_SECRET_BYTES`` (16) bytes, an ``XLAKIT_CACHE_SECRET`` that is not UTF-8, a secret file that is a
symlink or not a regular file, a config folder that others can write (world- or group-writable) or that
another user owns, and (checked by the store, which knows its root) a secret file inside the cache folder
or a cache folder inside the config folder.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import time
from pathlib import Path
from typing import Any

import platformdirs

__all__ = [
    "ENV_CONFIG_DIR",
    "ENV_SECRET",
    "MIN_SECRET_BYTES",
    "SecretUnavailable",
    "check_secret",
    "check_secret_outside",
    "load_secret",
    "secret_location",
    "secret_path",
]

MIN_SECRET_BYTES = 16

ENV_SECRET = "XLAKIT_CACHE_SECRET"
ENV_CONFIG_DIR = "XLAKIT_CONFIG_DIR"

# A racing creator holds the file empty between O_EXCL and its write.
_EMPTY_RETRY_S = 1.0


class SecretUnavailable(OSError):
    """No secret in the environment and the secret file can't be read or created."""


def _hint() -> str:
    return f"set {ENV_SECRET} to a shared secret, or {ENV_CONFIG_DIR} to a writable folder"


def secret_path(config_dir: str | os.PathLike | None = None) -> Path:
    """Path of the secret file (whether or not it exists or the env overrides it).

    Raises:
      SecretUnavailable: ``XLAKIT_CONFIG_DIR`` is set but empty or blank (a blank name was a folder ' ' in each
        working directory, so each had its own key; an empty one was silently the default)."""
    configured = os.environ.get(ENV_CONFIG_DIR)
    if config_dir is None and configured is not None and not configured.strip():
        raise SecretUnavailable(f"{ENV_CONFIG_DIR} is set but empty ({configured!r}); set it to a folder or unset it "
                                "for the default config folder")
    base = config_dir or (os.path.expanduser(configured) if configured else platformdirs.user_config_dir("xlakit"))
    return Path(base) / "secret"


def secret_location(config_dir: str | os.PathLike | None = None) -> str:
    """Where :func:`load_secret` gets the secret: ``"env:XLAKIT_CACHE_SECRET"`` or the file path."""
    if os.environ.get(ENV_SECRET):
        return f"env:{ENV_SECRET}"
    return str(secret_path(config_dir))


def _setting(config_dir) -> str:
    if config_dir is not None:
        return f"the config_dir argument ({config_dir})"
    if os.environ.get(ENV_CONFIG_DIR):
        return ENV_CONFIG_DIR
    return "the default config folder"


def _check_folder(folder: Path, config_dir) -> None:
    """Refuse a config folder others can write or another user owns (they could replace the secret)."""
    try:
        st = os.stat(folder)
    except FileNotFoundError:
        return
    except OSError as e:
        raise SecretUnavailable(f"cannot inspect config folder {folder}: {e}; {_hint()}") from e
    if st.st_mode & 0o022:
        raise SecretUnavailable(
            f"config folder {folder} (from {_setting(config_dir)}) is writable by others "
            f"(mode {oct(stat.S_IMODE(st.st_mode))}), so anyone could replace the cache secret; "
            f"chmod 700 it, or set {ENV_CONFIG_DIR} to a private folder")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise SecretUnavailable(
            f"config folder {folder} (from {_setting(config_dir)}) is owned by another user (uid {st.st_uid}); "
            f"set {ENV_CONFIG_DIR} to a folder of your own")


def _read(path: Path, config_dir=None) -> bytes:
    """Read an existing secret file, tightening loose permissions.

    Raises FileNotFoundError if absent, SecretUnavailable for other problems (a link, not a regular file,
    too short).
    """
    deadline = time.monotonic() + _EMPTY_RETRY_S
    try:
        while True:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise SecretUnavailable(f"secret file {path} (from {_setting(config_dir)}) is not a regular file; "
                                            f"remove it to regenerate, or {_hint()}")
                value = f.read(4096).strip()
                if value and stat.S_IMODE(st.st_mode) & 0o077:
                    try:
                        os.fchmod(f.fileno(), 0o600)  # the file itself, never a link's target
                    except OSError:
                        pass  # not our file to fix; still usable
            if value or time.monotonic() > deadline:
                break
            time.sleep(0.02)
    except FileNotFoundError:
        raise
    except SecretUnavailable:
        raise
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SecretUnavailable(f"secret file {path} (from {_setting(config_dir)}) is a symlink; refused "
                                    f"(it must be a private file); remove the link to regenerate, or {_hint()}") from e
        raise SecretUnavailable(f"cannot read secret file {path}: {e}; {_hint()}") from e
    if not value:
        raise SecretUnavailable(f"secret file {path} is empty; delete it to regenerate, or {_hint()}")
    if len(value) < MIN_SECRET_BYTES:
        raise SecretUnavailable(f"secret file {path} (from {_setting(config_dir)}) holds {len(value)} bytes, fewer "
                                f"than {MIN_SECRET_BYTES}; delete it to regenerate a strong one, or {_hint()}")
    return value


def check_secret_outside(cache_root: str | os.PathLike, config_dir: str | os.PathLike | None = None) -> None:
    """Refuse a secret file inside the cache folder, or a cache folder inside the config folder.

    Anyone who can read the cache could then re-sign entries. Paths are compared resolved. Nothing to
    check when the secret comes from ``XLAKIT_CACHE_SECRET``. Raises SecretUnavailable naming both paths,
    or naming the secret file when it is a symlink (reported first, wherever the link points).
    """
    if os.environ.get(ENV_SECRET):
        return
    named = secret_path(config_dir)
    try:
        if stat.S_ISLNK(os.lstat(named).st_mode):  # say the first thing wrong: a link is refused wherever it points
            raise SecretUnavailable(f"secret file {named} (from {_setting(config_dir)}) is a symlink; refused "
                                    f"(it must be a private file); remove the link to regenerate, or {_hint()}")
    except OSError as e:
        if isinstance(e, SecretUnavailable):
            raise
    cache = Path(os.path.realpath(cache_root))
    secret_file = Path(os.path.realpath(named))
    config = secret_file.parent
    if secret_file.is_relative_to(cache) or cache.is_relative_to(config):
        raise SecretUnavailable(
            f"the cache secret {secret_file} (config folder from {_setting(config_dir)}) and the cache folder "
            f"{cache} overlap: anyone who can read the cache could sign entries. Set {ENV_CONFIG_DIR} to a "
            f"folder outside the cache (or the cache outside {config}), or set {ENV_SECRET}")


def _make_private_dir(path: Path) -> None:
    if path.is_dir():
        return
    os.makedirs(path, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)  # never chmod a link's target
    try:
        os.fchmod(fd, 0o700)  # makedirs' mode is filtered by the umask
    finally:
        os.close(fd)


def check_secret(secret: Any, name: str = "secret") -> bytes | None:
    """An explicit ``secret=`` argument: None (the variable or the secret file decides), or bytes of at least
    :data:`MIN_SECRET_BYTES` — the rule the variable and the file follow (``b""`` signed every entry with an empty
    key). Raises TypeError (not bytes: a str is refused, encode it) or ValueError (too short), naming ``name``."""
    if secret is None:
        return None
    if not isinstance(secret, (bytes, bytearray)):
        raise TypeError(f"{name} must be bytes (e.g. bytes.fromhex(...) or 'text'.encode()), got "
                        f"{type(secret).__name__}")
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"{name} is {len(secret)} bytes long, fewer than {MIN_SECRET_BYTES}: an HMAC key that "
                         f"short is guessable; use at least {MIN_SECRET_BYTES} random bytes (e.g. os.urandom(32))")
    return bytes(secret)


def load_secret(config_dir: str | os.PathLike | None = None) -> bytes:
    """Return the cache secret (bytes), creating the secret file if needed.

    Raises SecretUnavailable (an OSError) if the file can't be read or created.
    """
    env = os.environ.get(ENV_SECRET)
    if env:
        try:
            from_env = env.encode("utf-8").strip()  # stripped like the secret file, so both follow one rule
        except UnicodeEncodeError:
            raise SecretUnavailable(f"{ENV_SECRET} is not valid UTF-8 text; set it to a printable secret of at "
                                    f"least {MIN_SECRET_BYTES} characters (e.g. 64 hex digits)") from None
        if len(from_env) < MIN_SECRET_BYTES:
            raise SecretUnavailable(f"{ENV_SECRET} is {len(from_env)} bytes long, fewer than {MIN_SECRET_BYTES} "
                                    "(surrounding whitespace is not counted); set it to a longer secret "
                                    "(e.g. 64 hex digits)")
        return from_env
    path = secret_path(config_dir)
    _check_folder(path.parent, config_dir)
    try:
        return _read(path, config_dir)
    except FileNotFoundError:
        pass
    value = secrets.token_hex(32)
    try:
        _make_private_dir(path.parent)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return _read(path, config_dir)  # another process won the race
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
