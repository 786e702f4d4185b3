"""``run`` and ``Popen``: :mod:`subprocess`'s, for ``python script.py ...`` / ``python -c code ...``, forked from
a process that has already imported JAX (``tests/jax_zygote.py``) when that is the same as starting one.

Why: ``import jax`` is ~1.5 s of CPU on the 2-core machine (and more while the suite's workers share it), and
the suite starts well over a hundred fresh JAX processes (cold and warm caches, crashes, concurrent writers):
a large part of ``make test``'s CPU went to importing JAX again.

When a forked child is the same as a fresh process: the zygote imported ``jax`` and nothing else, created no
backend, compiled nothing and imported no xlakit; the child gets the request's argv, environment, working folder
and standard streams, and runs the script as ``__main__``. What cannot be the same is what was read while the
zygote started and imported JAX: Python's own settings (``PYTHON*``), JAX's configuration (``JAX_*``, read at
import), thread and allocator settings of NumPy and the C runtime. So a zygote serves only the requests whose
environment equals its own on every variable but :data:`READ_LATER` (variables only xlakit, pytest or the script
read, after start; the child forgets the temp folder the zygote's ``tempfile`` may have chosen); ``XLA_FLAGS``
(read when the backend is created) is compared too. A request with another start environment gets a zygote of
its own. The pytest processes of one run (the xdist workers) share the zygotes: ``tests/conftest.py`` names a
folder for their sockets (:data:`SHARED_DIR_VARIABLE`), where the first process to need a start environment starts
its zygote and the others connect to it (under a file lock). Each pytest process stays connected to at most
:data:`MAX_ZYGOTES`, the least recently used one closed first; a zygote ends with the run or after a while without
connections. Anything else (options to ``python``, ``-m``, ``preexec_fn``, ``input``) and code that checks which
modules an import brings in (``zygote=False``) start a process the usual way, as does
everything when ``XLAKIT_TEST_NO_ZYGOTE=1``.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import itertools
import json
import locale
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Environment variables a forked child may have with another value than its zygote: none of them is read by
#: Python's start, ``import jax`` or NumPy; xlakit, pytest and the scripts read them later.
READ_LATER = ("XLAKIT_", "PYTEST_", "AWS_", "S3_", "TMPDIR")

#: Where the run's shared zygotes listen (a folder, set by tests/conftest.py for the whole run), and the pid of
#: the run's main pytest process (the zygotes end with it). Without them each pytest process starts its own.
SHARED_DIR_VARIABLE, OWNER_VARIABLE = "XLAKIT_TEST_ZYGOTE_DIR", "XLAKIT_TEST_ZYGOTE_OWNER"

#: Zygotes one pytest process keeps a connection to (each zygote ~150 MB).
MAX_ZYGOTES = 3

#: How many processes were forked, and how many started the usual way (and why), in this pytest process.
counts: dict[str, int] = {}
_ids = itertools.count(1)


def _count(what: str) -> None:
    counts[what] = counts.get(what, 0) + 1


class _Unreachable(Exception):
    pass


class _Zygote:
    """A connection to one ``tests/jax_zygote.py`` process, and the thread that reads its answers: a zygote of
    this process's own, or the run's shared one for this start environment (:func:`_connect_shared`)."""

    def __init__(self, env: dict[str, str], key: tuple):
        self.proc: subprocess.Popen | None = None
        self.sock = _connect_shared(env, key)
        if self.sock is None:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self.proc = subprocess.Popen([sys.executable, str(HERE / "jax_zygote.py"), str(theirs.fileno())],
                                         pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL)
            theirs.close()
            self.sock = ours
        self.connected = True
        self.children: dict[int, ForkedProcess] = {}
        self.lock = threading.Lock()
        threading.Thread(target=self._read_answers, daemon=True).start()

    def _read_answers(self) -> None:
        while True:
            try:
                message = self.sock.recv(4096)
            except OSError:
                message = b""
            if not message:  # the zygote is gone: nothing it forked will be reported any more
                self.connected = False
                with self.lock:
                    waiting, self.children = list(self.children.values()), {}
                for child in waiting:
                    child._lost()
                return
            answer = json.loads(message)
            with self.lock:
                found = self.children.get(answer["id"])
                if "returncode" in answer:
                    self.children.pop(answer["id"], None)
            if found is not None:
                found._answer(answer)

    def start(self, child: ForkedProcess, request: dict, fds: list[int]) -> None:
        with self.lock:
            self.children[request["id"]] = child
        try:
            socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
        except OSError as exc:
            with self.lock:
                self.children.pop(request["id"], None)
            raise _Unreachable from exc

    def alive(self) -> bool:
        return self.connected and (self.proc is None or self.proc.poll() is None)

    def close(self) -> None:
        # shutdown first: the answer thread's blocking recv holds the socket open past a bare close(), and the
        # zygote, seeing no end of its requests, would never exit
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if self.proc is None:
            return  # a shared zygote serves the run's other pytest processes and ends with the run
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _connect_shared(env: dict[str, str], key: tuple) -> socket.socket | None:
    """A connection to the run's zygote for ``key`` (started here, detached, when none listens yet), or None when
    this pytest process is not part of a run that shares zygotes."""
    folder, owner = os.environ.get(SHARED_DIR_VARIABLE), os.environ.get(OWNER_VARIABLE)
    if not folder or not owner or not os.path.isdir(folder):
        return None
    path = os.path.join(folder, hashlib.sha256(repr((sys.executable, key)).encode()).hexdigest()[:20])
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process starts the zygote; the others wait, then connect
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(path)
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            pass
        try:
            os.unlink(path)  # a zygote that was killed left its socket file
        except FileNotFoundError:
            pass
        # Detached from this process's streams, which it would hold open for the whole run (a caller reading this
        # process's output to its end would wait for the zygote); what it prints goes to a log beside its socket.
        with open(path + ".log", "ab") as log:
            proc = subprocess.Popen([sys.executable, str(HERE / "jax_zygote.py"), "--listen", path, "--owner",
                                     owner], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=log, start_new_session=True)
        _count("zygotes started")
        deadline = time.monotonic() + 120
        while not os.path.exists(path):
            if proc.poll() is not None or time.monotonic() > deadline:
                sock.close()
                return None
            time.sleep(0.02)
        sock.connect(path)
        return sock


_zygotes: dict[tuple, _Zygote] = {}  # in order of last use
_zygotes_lock = threading.Lock()


def _zygote_for(env: dict[str, str]) -> _Zygote:
    key = tuple(sorted((k, v) for k, v in env.items() if not k.startswith(READ_LATER)))
    with _zygotes_lock:
        z = _zygotes.pop(key, None)
        if z is not None and not z.alive():
            z.close()
            z = None
        if z is None:
            idle = [k for k, other in _zygotes.items() if not other.children]  # least recently used first
            for k in idle[:max(0, len(_zygotes) + 1 - MAX_ZYGOTES)]:
                _zygotes.pop(k).close()
            z = _Zygote(env, key)
            if z.proc is not None:
                _count("zygotes started")
        _zygotes[key] = z
        return z


class ForkedProcess:
    """The part of :class:`subprocess.Popen` the tests use (``pid``, ``returncode``, ``stdout``/``stderr`` pipes,
    ``poll``, ``wait``, ``communicate``, ``send_signal``, ``kill``, ``terminate``) for a child of a zygote."""

    def __init__(self, args: list[str], zygote: _Zygote, request: dict, stdin, stdout, stderr, text: bool):
        self.args, self.pid = args, -1
        self.returncode: int | None = None
        self._text = text
        self._started, self._ended = threading.Event(), threading.Event()
        self._lost_zygote = False
        child_fds, close_after, ours = _stream_fds(stdin, stdout, stderr)
        try:
            zygote.start(self, request, child_fds)
        except _Unreachable:
            for fd in ours.values():
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in close_after:
                _close_quietly(fd)
        self.stdin = None
        self.stdout = _reader(ours["stdout"], text)
        self.stderr = _reader(ours["stderr"], text)
        if not self._started.wait(60) or self._lost_zygote:
            raise RuntimeError(f"the zygote did not fork {args[:2]}")

    # -- answers from the zygote's reader thread
    def _answer(self, answer: dict) -> None:
        if "pid" in answer:
            self.pid = answer["pid"]
            self._started.set()
        else:
            self.returncode = answer["returncode"]
            self._ended.set()

    def _lost(self) -> None:
        self._lost_zygote = True
        if self.returncode is None:
            self.returncode = -signal.SIGKILL
        self._started.set()
        self._ended.set()

    # -- Popen's interface
    def poll(self) -> int | None:
        return self.returncode if self._ended.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if not self._ended.is_set():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def communicate(self, input=None, timeout: float | None = None):
        """Read stdout and stderr to their end and wait for the child; :class:`subprocess.TimeoutExpired` after
        ``timeout`` seconds (the child keeps running, and a later call goes on reading, as Popen's does)."""
        if input is not None:
            raise ValueError("a forked child's stdin is /dev/null")
        if not hasattr(self, "_drains"):
            self._chunks: dict[str, list] = {"stdout": [], "stderr": []}
            self._drains = [threading.Thread(target=_drain, args=(stream, self._chunks[name]), daemon=True)
                            for name, stream in (("stdout", self.stdout), ("stderr", self.stderr)) if stream]
            for t in self._drains:
                t.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._drains:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._drains) or not self._ended.wait(
                None if deadline is None else max(0.0, deadline - time.monotonic())):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return tuple(None if stream is None else _joined(self._chunks[name], self._text)
                     for name, stream in (("stdout", self.stdout), ("stderr", self.stderr)))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        for stream in (self.stdout, self.stderr):
            if stream:
                stream.close()
        self.wait()


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _stream_fds(stdin, stdout, stderr) -> tuple[list[int], list[int], dict[str, int | None]]:
    """The child's three fds, the fds to close here once it has them, and our read ends of its pipes."""
    close_after: list[int] = []
    ours: dict[str, int | None] = {"stdout": None, "stderr": None}

    def target(spec, name: str, inherit: int) -> int:
        if spec is None:
            return inherit
        if spec == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            close_after.append(fd)
            return fd
        if spec == subprocess.PIPE:
            r, w = os.pipe()
            ours[name] = r
            close_after.append(w)
            return w
        return spec if isinstance(spec, int) else spec.fileno()

    fd_in = target(stdin if stdin is not None else subprocess.DEVNULL, "stdin", 0)
    fd_out = target(stdout, "stdout", 1)
    fd_err = fd_out if stderr == subprocess.STDOUT else target(stderr, "stderr", 2)
    return [fd_in, fd_out, fd_err], close_after, ours


def _reader(fd: int | None, text: bool):
    if fd is None:
        return None
    raw = os.fdopen(fd, "rb")
    # what Popen(text=True) gives: the locale's encoding, universal newlines
    return io.TextIOWrapper(raw, encoding=locale.getpreferredencoding(False)) if text else raw


def _drain(stream, into: list) -> None:
    while chunk := stream.read(1 << 16):
        into.append(chunk)


def _joined(chunks: list, text: bool):
    return ("" if text else b"").join(chunks)


def _forkable(cmd, env: dict[str, str], zygote: bool, kwargs: dict) -> str | None:
    """Why ``cmd`` must start the usual way, or None when a zygote can fork it."""
    if not zygote or os.environ.get("XLAKIT_TEST_NO_ZYGOTE"):
        return "a new interpreter asked for"
    if kwargs or not isinstance(cmd, list) or len(cmd) < 2 or cmd[0] != sys.executable or \
            (cmd[1].startswith("-") and cmd[1] != "-c"):
        return "another command or option"
    return None


def Popen(cmd: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None, stdin=None,
          stdout=None, stderr=None, text: bool = False, zygote: bool = True, **kwargs):
    """:class:`subprocess.Popen`, or a :class:`ForkedProcess` forked from a zygote when that is the same (module
    docstring). ``zygote=False``: always a new interpreter."""
    env = dict(os.environ if env is None else env)
    why = _forkable(cmd, env, zygote, kwargs) or (None if stdin in (None, subprocess.DEVNULL) else "stdin")
    if why is None:
        forker = _zygote_for(env)
        request = {"id": next(_ids), "argv": cmd[1:], "env": env, "cwd": str(cwd or os.getcwd())}
        try:
            child = ForkedProcess(cmd, forker, request, stdin, stdout, stderr, text)
        except _Unreachable:
            why = "the zygote did not answer"
        else:
            _count("forked")
            return child
    _count(f"usual: {why}")
    return subprocess.Popen(cmd, env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr, text=text, **kwargs)


def run(cmd: list[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
        timeout: float | None = None, capture_output: bool = False, text: bool = False, check: bool = False,
        zygote: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """:func:`subprocess.run` with the same arguments and result, through :func:`Popen`: raises
    :class:`subprocess.TimeoutExpired` (the child killed) and :class:`subprocess.CalledProcessError` (``check``)
    as it does."""
    env = dict(os.environ if env is None else env)
    if _forkable(cmd, env, zygote, kwargs) is not None:
        _count(f"usual: {_forkable(cmd, env, zygote, kwargs)}")
        return subprocess.run(cmd, env=env, cwd=cwd, timeout=timeout, capture_output=capture_output, text=text,
                              check=check, **kwargs)
    pipe = subprocess.PIPE if capture_output else None
    with Popen(cmd, env=env, cwd=cwd, stdout=pipe, stderr=pipe, text=text) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            exc.stdout, exc.stderr = proc.communicate()
            raise
        returncode = proc.wait()
    if check and returncode:
        raise subprocess.CalledProcessError(returncode, cmd, stdout, stderr)
    return subprocess.CompletedProcess(cmd, returncode, stdout, stderr)
