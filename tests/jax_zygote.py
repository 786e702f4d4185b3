"""A process that has imported JAX and nothing else, and forks fresh Python processes on request.

Started by :mod:`fresh_process` (one per start environment, shared by the pytest processes of a run); never run by
hand. Importing JAX costs ~1.5 s of CPU on the 2-core machine, and the suite starts well over a hundred JAX
processes: each child forked here starts with ``import jax`` done. What the child has then is what any process
that ran ``import jax`` has: no backend (its first ``jax.devices()`` or compile creates one, reading ``XLA_FLAGS``
then), no program compiled, no xlakit imported, no thread started by Python. :mod:`fresh_process` sends only
requests whose environment agrees with this process's on every variable read at start or at ``import jax``.

Two ways to start it: ``jax_zygote.py FD`` serves the one ``SOCK_SEQPACKET`` socket whose fd it is given and exits
when it closes; ``jax_zygote.py --listen PATH --owner PID`` listens on the Unix socket ``PATH`` (it appears there
only once the zygote accepts connections) for any number of pytest processes, and exits when the process ``PID``
(the pytest run) has ended, or when no connection has been open for :data:`IDLE_EXIT_S` seconds.

Protocol, per connection, one JSON object per message:
* request ``{"id": N, "argv": [...], "env": {...}, "cwd": "..."}`` with three file descriptors: the child's
  stdin, stdout and stderr;
* answers ``{"id": N, "pid": P}`` when forked, and ``{"id": N, "returncode": R}`` when it ended (negative: the
  signal that ended it, as :mod:`subprocess` reports), on the connection that asked. Children run side by side;
  each is watched through a pidfd, so the answer comes as soon as it ends.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import tempfile
import types

import jax  # noqa: F401  the import every child skips

_MAX_MESSAGE = 1 << 22

#: A listening zygote with no connection open for this long exits (a pytest process may connect again later).
IDLE_EXIT_S = 30.0


def _exec_child(request: dict, fds: list[int]) -> None:
    """In the forked child: become ``python argv...`` and run it as ``__main__``; Python's own shutdown ends it
    (atexit handlers, exit status, a traceback for an uncaught exception)."""
    for target, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # gettempdir() reads this child's TMPDIR (the zygote's may differ)
    argv = request["argv"]
    main = types.ModuleType("__main__")
    if argv[0] == "-c":
        sys.argv, filename, source, sys.path[0] = ["-c", *argv[2:]], "<string>", argv[1], ""
    else:
        sys.argv, filename = list(argv), os.path.abspath(argv[0])
        with open(filename, encoding="utf-8") as f:
            source = f.read()
        sys.path[0] = os.path.dirname(filename)
        main.__file__ = filename
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    exec(compile(source, filename, "exec"), main.__dict__)


def serve(sock: socket.socket | None = None, listener: socket.socket | None = None,
          owner: int | None = None) -> bool:
    """Answer requests on ``sock`` (until it closes) or on every connection ``listener`` accepts (until ``owner``
    has ended or none has been open for :data:`IDLE_EXIT_S`). Returns True in a forked child once its script ran
    (the caller then lets Python exit), False in the zygote."""
    selector = selectors.DefaultSelector()
    connections: set[socket.socket] = set()
    if sock is not None:
        selector.register(sock, selectors.EVENT_READ, "connection")
        connections.add(sock)
    if listener is not None:
        selector.register(listener, selectors.EVENT_READ, "listener")
    if owner is not None:
        try:
            selector.register(os.pidfd_open(owner), selectors.EVENT_READ, "owner")
        except ProcessLookupError:
            return False
    while True:
        events = selector.select(IDLE_EXIT_S if listener is not None and not connections else None)
        if not events:
            return False  # idle: nobody connected for IDLE_EXIT_S
        for key, _ in events:
            if key.data == "owner":
                return False  # the pytest run ended
            if key.data == "listener":
                conn, _ = listener.accept()
                selector.register(conn, selectors.EVENT_READ, "connection")
                connections.add(conn)
                continue
            if key.data != "connection":  # a child's pidfd: it ended
                pidfd, (conn, ident, pid) = key.fd, key.data
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                if conn in connections:
                    _send(conn, {"id": ident, "returncode": os.waitstatus_to_exitcode(status)})
                continue
            conn = key.fileobj
            try:
                message, fds, _, _ = socket.recv_fds(conn, _MAX_MESSAGE, 3)
            except OSError:
                message, fds = b"", []
            if not message:  # that pytest process went away (its children go on; their answers are dropped)
                selector.unregister(conn)
                connections.discard(conn)
                conn.close()
                if listener is None:
                    return False
                continue
            request = json.loads(message)
            pid = os.fork()
            if pid == 0:
                for watched in list(selector.get_map().values()):  # sockets, pidfds: none is the child's
                    if isinstance(watched.fileobj, socket.socket):
                        watched.fileobj.close()  # through the object, which would otherwise close the fd again
                    else:
                        os.close(watched.fd)
                selector.close()
                _exec_child(request, fds)
                return True
            for fd in fds:
                os.close(fd)
            selector.register(os.pidfd_open(pid), selectors.EVENT_READ, (conn, request["id"], pid))
            _send(conn, {"id": request["id"], "pid": pid})


def _send(conn: socket.socket, answer: dict) -> None:
    try:
        conn.send(json.dumps(answer).encode())
    except OSError:
        pass  # that pytest process went away; its connection is closed when its end is read


def _listen(path: str) -> socket.socket:
    """A listening socket at ``path``, bound under a temporary name and renamed: a client that finds ``path``
    can connect."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    temporary = f"{path}.{os.getpid()}"
    listener.bind(temporary)
    listener.listen(16)
    os.rename(temporary, path)
    return listener


if __name__ == "__main__":
    if sys.argv[1] == "--listen":
        path, owner = sys.argv[2], int(sys.argv[4])
        listener = _listen(path)
        if not serve(listener=listener, owner=owner):  # the zygote's end (a forked child returns True)
            try:  # unlinked before the listener closes: until then no other zygote can have bound this path
                os.unlink(path)
            except OSError:
                pass
    else:
        serve(socket.socket(fileno=int(sys.argv[1])))
