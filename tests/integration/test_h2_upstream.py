"""HTTP/2 to upstreams (SPEC §3, upstream `protocol` "h2c" and "h2"): HTTP/1.1 clients through
rategate to an HTTP/2 origin (tests/integration/h2_upstream.py, python3-h2): the request head
as an HTTP/2 header list, bodies streamed both ways with flow control, streams multiplexed on
one connection per target and loop until the origin's stream limit, ALPN under TLS, and the
upstream errors (refused ALPN, down, too slow) as 502 and 504."""
import concurrent.futures
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import socket
import time

from harness import Conn, GatewayTest, Process, free_port, get, rss_kib, wait_port
from test_tls import make_pki

HERE = os.path.dirname(os.path.abspath(__file__))


class H2Upstream(Process):
    def __init__(self, *extra):
        self.port = free_port()
        super().__init__([sys.executable, "-B", os.path.join(HERE, "h2_upstream.py"), "--port", str(self.port)]
                         + list(extra), "h2-upstream")
        wait_port(self.port, proc=self.proc)


def body_bytes(n):
    return bytes(i % 251 for i in range(n))


class HttpTwoUpstream(GatewayTest):
    def make(self, up, protocol="h2c", tls=None, threads=1, response_timeout="10s", limiter_defs=None,
             **route):
        upstream = {"targets": ["127.0.0.1:%d" % up.port], "protocol": protocol,
                    "response_timeout": response_timeout, "connect_timeout": "2s"}
        if tls:
            upstream["tls"] = tls
        cfg = {"threads": threads, "upstreams": {"h2": upstream},
               "routes": [dict({"name": "api", "match": {"path_prefix": "/"}, "upstream": "h2"}, **route)]}
        if limiter_defs:
            cfg["limiters"] = limiter_defs
        return self.gateway(cfg)

    def test_request_head_becomes_an_http2_header_list(self):
        up = self.track(H2Upstream())
        gw = self.make(up, strip_prefix="/api", match={"path_prefix": "/api"})
        c = Conn(gw.port)
        r = c.request("GET", "/api/orders/1?x=%2e&y", {"Host": "shop.example:8080", "X-Custom": "a",
                                                       "Connection": "keep-alive, X-Hop", "X-Hop": "gone",
                                                       "TE": "gzip", "Keep-Alive": "timeout=5"})
        self.assertEqual(r.status, 200, r.body)
        echo = r.json()
        self.assertEqual(echo["method"], "GET")
        self.assertEqual(echo["path"], "/orders/1?x=%2e&y")  # stripped, query unchanged
        self.assertEqual(echo["authority"], "shop.example:8080")
        self.assertEqual(echo["scheme"], "http")
        h = echo["headers"]
        self.assertEqual(h["x-custom"], "a")
        for gone in ("connection", "x-hop", "te", "keep-alive", "host", "transfer-encoding"):
            self.assertNotIn(gone, h)
        self.assertEqual(h["x-forwarded-for"], "127.0.0.1")
        self.assertIn("x-request-id", h)
        self.assertEqual(r.header("X-Upstream"), "h2")
        self.assertIsNotNone(r.header("Via"))
        self.assertEqual(r.header("X-Request-Id"), h["x-request-id"])
        # The client's connection carries on, and its requests share the upstream connection.
        again = c.request("GET", "/api/orders/2").json()
        self.assertEqual(again["connection"], echo["connection"])
        self.assertNotEqual(again["stream"], echo["stream"])
        head = c.request("HEAD", "/api/orders/3", head=True)
        self.assertEqual(head.status, 200)
        self.assertEqual(head.body, b"")
        c.close()

    def test_bodies_stream_both_ways(self):
        up = self.track(H2Upstream())
        gw = self.make(up)
        c = Conn(gw.port, timeout=30)
        # A 3 MiB request body, chunked by the client, arrives whole and in order.
        data = body_bytes(3 << 20)
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + 100000]), data[i:i + 100000])
                           for i in range(0, len(data), 100000)) + b"0\r\n\r\n"
        c.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
        echo = c.read_response().json()
        self.assertEqual(echo["body_bytes"], len(data))
        self.assertEqual(echo["body_sum"], sum(data) % 1000000007)
        # A 5 MiB response with Content-Length goes on sized; one with trailers (no length) is
        # chunked for an HTTP/1.1 client and close-delimited for an HTTP/1.0 one.
        r = c.request("GET", "/big", {"X-Reply-Bytes": str(5 << 20)})
        self.assertEqual(r.header("Content-Length"), str(5 << 20))
        self.assertEqual(hashlib.sha256(r.body).hexdigest(), hashlib.sha256(body_bytes(5 << 20)).hexdigest())
        r = c.request("GET", "/big", {"X-Reply-Bytes": str(1 << 20), "X-Reply-Trailers": "1"})
        self.assertEqual(r.header("Transfer-Encoding"), "chunked")
        self.assertEqual(r.body, body_bytes(1 << 20))
        c.close()
        c = Conn(gw.port, timeout=30)
        c.send(b"GET /big HTTP/1.0\r\nX-Reply-Bytes: 70000\r\nX-Reply-Trailers: 1\r\n\r\n")
        r = c.read_response()
        self.assertIsNone(r.header("Transfer-Encoding"))
        self.assertEqual(r.body, body_bytes(70000))
        self.assertTrue(c.closed_by_peer())
        c.close()

    def test_an_early_answer_closes_a_connection_whose_body_was_not_all_read(self):
        # The upstream answers an upload before taking its body: the rest of the body is still
        # on the client connection, so it must close, or those bytes would be read as the
        # next request (smuggling).
        up = self.track(H2Upstream())
        gw = self.make(up)
        c = Conn(gw.port, timeout=10)
        smuggled = b"GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"
        body = smuggled * ((3 << 20) // len(smuggled))
        c.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nX-Reply-Early: 1\r\nContent-Length: %d\r\n\r\n"
               % len(body))
        try:
            c.send(body)
        except OSError:
            pass  # the gateway may close before taking it all
        r = c.read_response()
        self.assertEqual(r.status, 403)
        self.assertEqual(r.header("Connection"), "close")
        self.assertTrue(c.closed_by_peer())
        c.close()

    def test_a_slow_client_holds_the_upstream_back(self):
        # 64 MiB from the upstream to a client that reads nothing for a while: the stream's
        # window (1 MiB) stops the upstream; the gateway never holds the body.
        up = self.track(H2Upstream())
        gw = self.make(up)
        get(gw.port, "/warm")
        before = rss_kib(gw.pid)
        s = socket.create_connection(("127.0.0.1", gw.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(b"GET /big HTTP/1.1\r\nHost: t\r\nX-Reply-Bytes: %d\r\n\r\n" % (64 << 20))
        time.sleep(2)
        grown = rss_kib(gw.pid) - before
        self.assertLess(grown, 16 * 1024, "gateway grew %d KiB holding a slow client's body" % grown)
        got = 0
        s.settimeout(30)
        while got < (64 << 20):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
        s.close()
        self.assertGreaterEqual(got, 64 << 20)  # all of it (and the head) once the client reads

    def test_streams_multiplex_up_to_the_upstream_limit_then_another_connection(self):
        up = self.track(H2Upstream("--max-streams", "3"))
        gw = self.make(up)
        get(gw.port, "/warm")  # the first connection has the upstream's SETTINGS

        def slow(i):
            r = get(gw.port, "/slow/%d" % i, {"X-Delay-Ms": "400"})
            return r.status, r.json().get("connection", r.body[:200])

        with concurrent.futures.ThreadPoolExecutor(9) as pool:
            got = list(pool.map(slow, range(9)))
        self.assertEqual([s for s, _ in got], [200] * 9)
        conns = {c for _, c in got}
        # 9 at once over streams of at most 3 each: at least 3 connections, never one per request.
        self.assertGreaterEqual(len(conns), 3, got)
        self.assertLess(len(conns), 9, got)

    def established_to(self, port):
        out = subprocess.run(["ss", "-Htn", "state", "established", "dport", "= :%d" % port],
                             capture_output=True, text=True).stdout
        return len([l for l in out.splitlines() if l.strip()])

    @unittest.skipUnless(shutil.which("ss"), "ss (iproute2) needed")
    def test_connections_beyond_the_idle_cap_close_and_a_zero_stream_limit_is_refused(self):
        # One stream per connection: ten at once open ten; once idle, the next request leaves
        # at most max_idle_per_target (2) of them open.
        up = self.track(H2Upstream("--max-streams", "1"))
        gw = self.gateway({"upstreams": {"h2": {"targets": ["127.0.0.1:%d" % up.port], "protocol": "h2c",
                                                "max_idle_per_target": 2}},
                           "routes": [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "h2"}]})
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            got = list(pool.map(lambda i: get(gw.port, "/s%d" % i, {"X-Delay-Ms": "300"}).status, range(10)))
        self.assertEqual(got, [200] * 10)
        self.assertGreaterEqual(self.established_to(up.port), 5)
        self.assertEqual(get(gw.port, "/next").status, 200)
        deadline = time.time() + 5
        while self.established_to(up.port) > 2 and time.time() < deadline:
            time.sleep(0.05)
        self.assertLessEqual(self.established_to(up.port), 2)
        # An upstream that allows no stream (SETTINGS_MAX_CONCURRENT_STREAMS 0): a 502 at once,
        # and no connection left behind per request.
        zero = self.track(H2Upstream("--max-streams", "0"))
        gw = self.gateway({"upstreams": {"h2": {"targets": ["127.0.0.1:%d" % zero.port], "protocol": "h2c"}},
                           "routes": [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "h2"}]})
        for i in range(4):
            started = time.monotonic()
            self.assertEqual(get(gw.port, "/z%d" % i).status, 502)
            self.assertLess(time.monotonic() - started, 1.0)
        time.sleep(0.3)
        self.assertLessEqual(self.established_to(zero.port), 1)

    def test_limits_hold_for_an_http2_upstream(self):
        up = self.track(H2Upstream())
        gw = self.make(up, limiter_defs={"per-ip": {"scope": "ip", "algorithm": "fixed_window",
                                                "rules": [{"limit": 3, "window": "1h"}]}},
                       **{"limiters": ["per-ip"]})
        self.assertEqual([get(gw.port, "/x").status for _ in range(5)], [200, 200, 200, 429, 429])

    def test_upstream_down_slow_or_broken_is_502_or_504(self):
        up = self.track(H2Upstream())
        gw = self.make(up, response_timeout="300ms")
        first = get(gw.port, "/fine").json()["connection"]
        r = get(gw.port, "/slow", {"X-Delay-Ms": "2000"})
        self.assertEqual(r.status, 504)
        self.assertEqual(r.json()["error"], "upstream_timeout")
        # A connection a stream timed out on may be dead (a peer gone without a FIN): like an
        # HTTP/1.1 exchange that timed out, it takes no more streams; the next goes on a new one.
        fine = get(gw.port, "/fine")
        self.assertEqual(fine.status, 200)
        self.assertNotEqual(fine.json()["connection"], first)
        r = get(gw.port, "/reset", {"X-Reply-Status": "abc"})  # an invalid :status: stream error
        self.assertEqual(r.status, 502)
        up.stop()
        r = get(gw.port, "/down")
        self.assertEqual(r.status, 502)
        self.assertEqual(r.json()["error"], "upstream_unavailable")
        gw.assert_clean(self)

    def test_interim_heads_do_not_extend_the_response_timeout(self):
        # Eight 100 heads over two seconds, then the answer: the final head is due within
        # response_timeout (1 s) of the request, whatever comes before it.
        up = self.track(H2Upstream())
        gw = self.make(up, response_timeout="1s")
        started = time.monotonic()
        r = get(gw.port, "/interim", {"X-Reply-Interim": "8"})
        self.assertEqual(r.status, 504)
        self.assertLess(time.monotonic() - started, 1.8)
        self.assertEqual(get(gw.port, "/interim", {"X-Reply-Interim": "1"}).status, 200)

    def test_requests_waiting_on_a_connection_that_never_opens_fail_together(self):
        # A target that accepts TCP but never sends SETTINGS: the first request opens, the
        # others wait on it; when it fails after connect_timeout (500 ms) they all fail with it
        # (they used to take turns opening, the k-th waiting k times as long).
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        self.addCleanup(silent.close)
        gw = self.gateway({"upstreams": {"h2": {"targets": ["127.0.0.1:%d" % silent.getsockname()[1]],
                                                "protocol": "h2c", "connect_timeout": "500ms",
                                                "response_timeout": "5s"}},
                           "routes": [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "h2"}]})

        def timed(i):
            started = time.monotonic()
            r = get(gw.port, "/x%d" % i)
            return r.status, time.monotonic() - started

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(timed, range(8)))
        self.assertTrue(all(status in (502, 504) for status, _ in results), results)
        # One opening, then the retry's: two connect_timeouts at most for every request.
        self.assertLess(max(t for _, t in results), 1.6, results)

    def test_a_grpc_deadline_bounds_the_wait_for_a_connection(self):
        # SPEC §3 "gRPC": the deadline is the smaller of grpc-timeout and response_timeout; it
        # bounds opening the upstream connection too (connect_timeout 2 s, grpc-timeout 300 ms).
        from test_http2 import H2Client
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        self.addCleanup(silent.close)
        gw = self.gateway({"http2": {"h2c": True},
                           "upstreams": {"h2": {"targets": ["127.0.0.1:%d" % silent.getsockname()[1]],
                                                "protocol": "h2c", "connect_timeout": "2s"}},
                           "routes": [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "h2"}]})
        c = H2Client(gw.port)
        started = time.monotonic()
        sid = c.request("/svc/Method", "POST", [("content-type", "application/grpc"), ("te", "trailers"),
                                                 ("grpc-timeout", "300m")], body=b"\x00\x00\x00\x00\x00")
        self.assertTrue(c.run(c.all_done, timeout=10))
        self.assertEqual(c.streams[sid]["headers"]["grpc-status"], "4")  # DEADLINE_EXCEEDED
        self.assertLess(time.monotonic() - started, 1.0)
        c.close()

    @unittest.skipUnless(shutil.which("openssl"), "openssl needed")
    def test_h2_over_tls_needs_alpn_h2(self):
        d = tempfile.mkdtemp()
        make_pki(d)
        cert, key, ca = (os.path.join(d, n) for n in ("server.pem", "server.key", "ca.pem"))
        up = self.track(H2Upstream("--cert", cert, "--key", key))
        gw = self.make(up, protocol="h2", tls={"ca": ca, "server_name": "localhost"})
        echo = get(gw.port, "/secure").json()
        self.assertEqual(echo["scheme"], "https")
        # A target whose ALPN picks HTTP/1.1 is not an HTTP/2 server: 502.
        old = self.track(H2Upstream("--cert", cert, "--key", key, "--alpn", "http/1.1"))
        gw2 = self.make(old, protocol="h2", tls={"ca": ca, "server_name": "localhost"})
        r = get(gw2.port, "/secure")
        self.assertEqual(r.status, 502)
        self.assertIn("HTTP/2", r.json()["message"])
        # And a wrong CA still fails verification.
        gw3 = self.make(up, protocol="h2", tls={"ca": os.path.join(d, "other-ca.pem"), "server_name": "localhost"})
        self.assertEqual(get(gw3.port, "/secure").status, 502)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
