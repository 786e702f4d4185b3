"""A hostile S3 endpoint on 127.0.0.1 for tests and the remote-store fuzzer (threads, no dependencies).

It speaks just enough S3 for s3fs: ``GET`` (with ``Range``), ``PUT`` (create-only with ``If-None-Match``),
``HEAD``, ``DELETE`` and ``ListObjectsV2``, over keep-alive HTTP/1.1. ``mode`` decides how it answers each
request (settable between requests):

- ``"ok"``: an honest server over ``objects`` (``{bucket/key: bytes}``).
- ``"hang"``: reads the request, never answers (``"hang_get"``: only object reads hang; listings answer).
- ``"drip"``: answers one byte every ``drip_s`` seconds, never finishing.
- ``"ignore_range"``: GET returns the whole object with 200, whatever ``Range`` asked (``flood`` bytes of
  zeros when the object is absent: a server streaming far more than asked).
- ``"short"`` / ``"long"``: ``Content-Length`` says fewer / more bytes than the body sent (then closes).
- ``"garbage"``: 200 with random bytes for any request.
- ``"wrong"``: GET answers with another stored object's bytes (a misrouting cache or proxy).

``sent`` counts the body bytes written to sockets (a whole response body as its send starts, a streamed one chunk by
chunk as sent), so a test can prove a reader stopped early.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from email.utils import formatdate
from urllib.parse import unquote, urlsplit

__all__ = ["FakeS3"]

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class FakeS3:
    """See the module docstring. ``url``; ``options()`` are s3fs storage options for it; ``stop()``."""

    def __init__(self, mode: str = "ok", drip_s: float = 0.5, flood: int = 64 << 20) -> None:
        self.mode, self.drip_s, self.flood = mode, drip_s, flood
        self.objects: dict[str, bytes] = {}
        self.sent = 0
        self.requests = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="fake-s3").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def options(self, **config) -> dict:
        """s3fs storage options for this endpoint (``config`` goes to botocore's Config)."""
        return {"endpoint_url": self.url, "key": "AKIAFAKEFAKEFAKE", "secret": "fakesecretfakesecretfake",
                "config_kwargs": {"connect_timeout": 1, "read_timeout": 5, **config}}

    def stop(self) -> None:
        self._stopped.set()
        try:
            self._sock.close()
        except OSError:
            pass
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.close()
            except OSError:
                pass

    # -- serving -----------------------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                c, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _read_request(self, c: socket.socket, buf: bytearray):
        while b"\r\n\r\n" not in buf:
            chunk = c.recv(65536)
            if not chunk:
                return None
            buf += chunk
        end = buf.index(b"\r\n\r\n")
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        del buf[:end + 4]
        method, target = lines[0].split(" ")[:2]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        if headers.get("expect", "").lower() == "100-continue":
            c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # botocore waits for it before sending a PUT's body
        while len(buf) < length:
            chunk = c.recv(65536)
            if not chunk:
                return None
            buf += chunk
        body = bytes(buf[:length])
        del buf[:length]
        return method, target, headers, body

    def _send(self, c: socket.socket, status: str, body: bytes = b"", headers: dict | None = None,
              length: int | None = None, head: bool = False) -> None:
        fields = {"Content-Length": str(len(body) if length is None else length), "Date": formatdate(usegmt=True),
                  "Last-Modified": formatdate(usegmt=True), "ETag": '"0"', **(headers or {})}
        out = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
        c.sendall(out.encode())
        if not head and body:
            # counted before the send: a client holding the body must find it counted (a test resets ``sent``
            # right after a read; counted after, the increment could land behind that reset)
            with self._lock:
                self.sent += len(body)
            c.sendall(body)

    def _serve(self, c: socket.socket) -> None:
        buf = bytearray()
        try:
            while not self._stopped.is_set():
                req = self._read_request(c, buf)
                if req is None:
                    return
                with self._lock:
                    self.requests += 1
                if not self._answer(c, *req):
                    return
        except OSError:
            return
        finally:
            try:
                c.close()
            except OSError:
                pass

    def _answer(self, c: socket.socket, method: str, target: str, headers: dict, body: bytes) -> bool:
        """Answer one request; False closes the connection."""
        mode = self.mode
        if mode == "hang" or (mode == "hang_get" and method == "GET" and "list-type" not in target):
            while c.recv(65536):  # until the client gives up and closes
                pass
            return False
        if mode == "drip":
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100_000:
                if self._stopped.wait(self.drip_s):
                    return False
                c.sendall(bytes([byte]))
            return False
        if mode == "garbage":
            self._send(c, "200 OK", os.urandom(300), {"Content-Type": "application/xml"})
            return True
        split = urlsplit(target)
        path = unquote(split.path).lstrip("/")
        bucket, _, key = path.partition("/")
        if method == "GET" and (not key or "list-type" in split.query):
            return self._list(c, bucket, split.query)
        name = f"{bucket}/{key}"
        data = self.objects.get(name)
        if method == "PUT":
            if headers.get("if-none-match") == "*" and name in self.objects:
                self._send(c, "412 Precondition Failed", _error("PreconditionFailed", "exists"),
                           {"Content-Type": "application/xml"})
            else:
                self.objects[name] = body
                self._send(c, "200 OK")
            return True
        if method == "DELETE":
            self.objects.pop(name, None)
            self._send(c, "204 No Content")
            return True
        if mode == "ignore_range" and method == "GET":
            blob = data if data is not None else bytes(self.flood)
            self._stream(c, blob)
            return False
        if mode == "wrong" and method == "GET" and self.objects:
            others = [v for k, v in sorted(self.objects.items()) if k != name]
            data = others[0] if others else data
        if data is None:
            self._send(c, "404 Not Found", _error("NoSuchKey", "absent"), {"Content-Type": "application/xml"},
                       head=method == "HEAD")
            return True
        if method == "HEAD":
            self._send(c, "200 OK", data, head=True)
            return True
        start, end = 0, len(data)
        m = _RANGE.fullmatch(headers.get("range", ""))
        if m:
            start, end = int(m.group(1)), min(len(data), int(m.group(2)) + 1 if m.group(2) else len(data))
            if start >= len(data):
                self._send(c, "416 Requested Range Not Satisfiable", _error("InvalidRange", "range"),
                           {"Content-Type": "application/xml"})
                return True
        part = data[start:end]
        if mode == "short":
            self._send(c, "206 Partial Content", part[: len(part) // 2], length=len(part))
            return False
        if mode == "long":
            self._send(c, "206 Partial Content", part, length=len(part) + 1000)
            return False
        self._send(c, "206 Partial Content" if m else "200 OK", part,
                   {"Content-Range": f"bytes {start}-{end - 1}/{len(data)}"} if m else None)
        return True

    def _stream(self, c: socket.socket, blob: bytes) -> None:
        c.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(blob)}\r\n\r\n".encode())
        view = memoryview(blob)
        for i in range(0, len(blob), 1 << 16):
            c.sendall(view[i:i + (1 << 16)])
            with self._lock:
                self.sent += len(view[i:i + (1 << 16)])

    def _list(self, c: socket.socket, bucket: str, query: str) -> bool:
        from urllib.parse import parse_qs

        prefix = (parse_qs(query).get("prefix") or [""])[0]
        keys = sorted(k.partition("/")[2] for k in self.objects if k.startswith(f"{bucket}/{prefix}"))
        items = "".join(f"<Contents><Key>{k}</Key><Size>{len(self.objects[f'{bucket}/{k}'])}</Size>"
                        f"<LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>\"0\"</ETag></Contents>"
                        for k in keys)
        xml = (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>{bucket}</Name>'
               f"<Prefix>{prefix}</Prefix><KeyCount>{len(keys)}</KeyCount><IsTruncated>false</IsTruncated>"
               f"{items}</ListBucketResult>").encode()
        self._send(c, "200 OK", xml, {"Content-Type": "application/xml"})
        return True


def _error(code: str, message: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
            "</Error>").encode()
