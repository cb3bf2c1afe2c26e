#!/usr/bin/env python3
"""A recording relay between a client and `ctxgc serve`, for the observe configuration of the
conformance suite: it forwards every request as it came and records the SHA-256 of each request
body the client sent, so that check.py can hold each body the upstream received against them
(observe mode must forward every request byte for byte). Loopback only; standard library only.

Usage: relay.py PORT TARGET_URL RECORD
"""
import gzip
import hashlib
import http.client
import json
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

LOCK = threading.Lock()
HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}


class Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def forward(self):
        length = int(self.headers.get("content-length", "0") or 0)
        body = self.rfile.read(length) if length else b""
        if body:
            # The proxy decodes a compressed body before it forwards it (and drops the header):
            # what it must forward unchanged is the decoded JSON.
            encoding = (self.headers.get("content-encoding") or "").strip().lower()
            sent = body
            if encoding in ("gzip", "x-gzip"):
                sent = gzip.decompress(body)
            elif encoding == "deflate":
                sent = zlib.decompress(body)
            with LOCK, open(self.server.record, "a") as f:
                f.write(json.dumps({"path": self.path.split("?")[0], "sha256": hashlib.sha256(sent).hexdigest()}) + "\n")
        target = urlsplit(self.server.target)
        conn = http.client.HTTPConnection(target.hostname, target.port, timeout=300)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        conn.request(self.command, self.path, body=body if body else None, headers=headers)
        response = conn.getresponse()
        payload = response.read()
        self.send_response(response.status)
        for k, v in response.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        conn.close()

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = forward


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Relay)
    server.target, server.record = sys.argv[2], sys.argv[3]
    server.serve_forever()
