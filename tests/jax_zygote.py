"""A process that has imported JAX and nothing else, and forks fresh Python processes on request.

Started by :mod:`fresh_process` (one per pytest worker and start environment); never run by hand. Importing JAX
costs ~1.5 s of CPU on the 2-core machine, and the suite starts well over a hundred JAX processes: each child
forked here starts with ``import jax`` done. What the child has then is what any process that ran ``import jax``
has: no backend (its first ``jax.devices()`` or compile creates one, reading ``XLA_FLAGS`` then), no program
compiled, no xlakit imported, no thread started by Python. :mod:`fresh_process` sends only requests whose
environment agrees with this process's on every variable read at start or at ``import jax``.

Protocol, over a ``SOCK_SEQPACKET`` socket (its fd in argv[1]), one JSON object per message:
* request ``{"id": N, "argv": [...], "env": {...}, "cwd": "..."}`` with three file descriptors: the child's
  stdin, stdout and stderr;
* answers ``{"id": N, "pid": P}`` when forked, and ``{"id": N, "returncode": R}`` when it ended (negative: the
  signal that ended it, as :mod:`subprocess` reports). Children run side by side; each is watched through a
  pidfd, so the answer comes as soon as it ends.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import types

import jax  # noqa: F401  the import every child skips

_MAX_MESSAGE = 1 << 22


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


def serve(sock: socket.socket) -> bool:
    """Answer requests until the socket closes. Returns True in a forked child once its script ran (the caller
    then lets Python exit), False in the zygote."""
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is not sock:  # a child's pidfd: it ended
                pidfd, (ident, pid) = key.fd, key.data
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                sock.send(json.dumps({"id": ident, "returncode": os.waitstatus_to_exitcode(status)}).encode())
                continue
            try:
                message, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 3)
            except OSError:
                return False
            if not message:
                return False  # the pytest worker went away
            request = json.loads(message)
            pid = os.fork()
            if pid == 0:
                for watched in list(selector.get_map().values()):  # the other children's pidfds
                    if watched.fileobj is not sock:
                        os.close(watched.fd)
                selector.close()
                sock.close()
                _exec_child(request, fds)
                return True
            for fd in fds:
                os.close(fd)
            selector.register(os.pidfd_open(pid), selectors.EVENT_READ, (request["id"], pid))
            sock.send(json.dumps({"id": request["id"], "pid": pid}).encode())


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
