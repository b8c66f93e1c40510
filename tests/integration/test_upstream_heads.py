"""What an upstream sends back, byte for byte (SPEC §3 "Forwarding"): the gateway parses the
upstream's response head itself (gateway/http/response_head), so a scripted raw upstream tries
it with malformed, oversized, dribbled and chunked responses and hop-by-hop fields."""
import socket
import socketserver
import threading
import time
import unittest

from harness import Conn, GatewayTest, proxy_config
from test_http2 import h2, RawH2, base_headers, status_of

if h2:
    from test_http2 import DataFrame, HeadersFrame

BIG_BODY = b"0123456789abcdef" * 65536  # 1 MiB, several reads and writes


def chunked(body, size=7000):
    out = b""
    for i in range(0, len(body), size):
        piece = body[i:i + size]
        out += b"%x\r\n" % len(piece) + piece + b"\r\n"
    return out + b"0\r\n\r\n"


# Path (after the route's /api prefix is stripped) -> (response bytes, write them a byte at a time).
SCRIPTS = {
    "/ok": (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Up: 1\r\n\r\nok", False),
    "/dribble": (b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Slow: yes\r\n\r\nhello", True),
    "/big": (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BIG_BODY) + BIG_BODY, False),
    "/chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(BIG_BODY), False),
    "/hop": (b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nKeep-Alive: timeout=5\r\n"
             b"Via: 1.0 inner\r\nVia: 1.1 deeper\r\nX-Request-Id: theirs\r\nContent-Length: 2\r\n\r\nok", False),
    "/bare-lf": (b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok", False),
    "/two-lengths": (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!", False),
    "/folded": (b"HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\nContent-Length: 2\r\n\r\nok", False),
    "/nul": (b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\nok", False),
    "/status": (b"HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok", False),
    "/huge": (b"HTTP/1.1 200 OK\r\n" + b"X-Filler: " + b"f" * 9000 + b"\r\nContent-Length: 2\r\n\r\nok", False),
    "/te-cl": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabcdef", False),
}

# A sloppy upstream: the head at once, then (50 ms later) bytes the head did not frame: the body
# of a HEAD answer written anyway, shaped as a response the next request would take for its own.
POISON = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\npoisoned"
LATE = {
    "/head-late": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(POISON),
    "/304-late": b"HTTP/1.1 304 Not Modified\r\nContent-Length: %d\r\n\r\n" % len(POISON),
    "/sized-late": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",  # and then more
}
# A body that ends at close (RFC 9112 §6.3): no Content-Length, no chunked; then the close.
CLOSE_DELIMITED = {
    "/eof": b"HTTP/1.1 200 OK\r\n\r\nbody to the close",
    "/gzip-eof": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nbody to the close",
}


# A head at once, then (0.8 s later) the body: an event stream's first event, or a close.
STREAMED = {
    "/events": (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
                b"d\r\ndata: hello\n\n\r\n0\r\n\r\n"),
    "/events-eof": (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", b"data: hello\n\n"),
}


class ScriptedUpstream(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), ScriptedHandler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()


class ScriptedHandler(socketserver.BaseRequestHandler):
    def handle(self):
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                data = self.request.recv(65536)
                if not data:
                    return
                buf += data
            head, buf = buf.split(b"\r\n\r\n", 1)
            path = head.split(b"\r\n", 1)[0].split(b" ")[1].decode()
            if path in LATE:
                self.request.sendall(LATE[path])
                time.sleep(0.05)
                self.request.sendall(POISON)
                continue
            if path in STREAMED:
                # A head at once, its body later (server-sent events, long polls).
                head, later = STREAMED[path]
                self.request.sendall(head)
                time.sleep(0.8)
                self.request.sendall(later)
                if not later.endswith(b"0\r\n\r\n"):
                    return
                continue
            if path == "/ok-then-close":
                # Keep-alive announced, then closed while idle (a short keep-alive timeout).
                self.request.sendall(SCRIPTS["/ok"][0])
                time.sleep(0.02)
                return
            if path in CLOSE_DELIMITED:
                self.request.sendall(CLOSE_DELIMITED[path])
                self.request.shutdown(socket.SHUT_WR)
                time.sleep(0.05)
                return
            response, slow = SCRIPTS[path]
            if slow:
                for i in range(len(response)):
                    self.request.sendall(response[i:i + 1])
                    time.sleep(0.002)
            else:
                self.request.sendall(response)


class UpstreamHeads(GatewayTest):
    def setUp(self):
        super().setUp()
        self.up = ScriptedUpstream()
        self.addCleanup(self.up.server_close)
        self.addCleanup(self.up.shutdown)
        self.gw = self.gateway(proxy_config([self.up.port]))

    def test_malformed_heads_are_502_naming_the_problem_and_the_client_goes_on(self):
        c = Conn(self.gw.port)
        cases = {"/bare-lf": "bare LF", "/two-lengths": "conflicting Content-Length",
                 "/folded": "obsolete line folding", "/nul": "NUL", "/status": "status code",
                 "/te-cl": "Content-Length with Transfer-Encoding"}
        for path, reason in cases.items():
            with self.subTest(path=path):
                r = c.request("GET", "/api" + path)
                self.assertEqual(r.status, 502)
                self.assertEqual(r.json()["error"], "upstream_error")
                self.assertIn(reason, r.json()["message"])
        # The same client connection still carries a good exchange.
        r = c.request("GET", "/api/ok")
        self.assertEqual((r.status, r.body), (200, b"ok"))
        c.close()

    def test_an_answer_whose_end_the_head_does_not_give_never_goes_back_to_the_pool(self):
        # HEAD and 304 answers whose heads announce a body a sloppy upstream then sends: the next
        # request (another client's) must not read those bytes as its response. Neither may a
        # request reuse a connection whose body ended at close (a POST is not retried: 502).
        for path, method in (("/head-late", "HEAD"), ("/304-late", "GET")):
            with self.subTest(path=path):
                a, b = Conn(self.gw.port), Conn(self.gw.port)
                r = a.request(method, "/api" + path, head=True)
                self.assertIn(r.status, (200, 304))
                r = b.request("GET", "/api/ok")
                self.assertEqual((r.status, r.body), (200, b"ok"))
                a.close(), b.close()
        for path in CLOSE_DELIMITED:
            with self.subTest(path=path):
                a, b = Conn(self.gw.port), Conn(self.gw.port)
                r = a.request("GET", "/api" + path)
                self.assertEqual((r.status, r.body), (200, b"body to the close"))
                r = b.request("POST", "/api/ok", body=b"data")
                self.assertEqual((r.status, r.body), (200, b"ok"))
                a.close(), b.close()

    def test_a_pooled_connection_the_upstream_closed_is_not_used(self):
        # The close reaches the pooled connection while it is idle: its watch takes it out of
        # the pool, so the next request (a POST, not retried, included) goes on a fresh one.
        c = Conn(self.gw.port)
        for method, body in (("GET", b""), ("POST", b""), ("POST", b"data")):
            with self.subTest(method=method, body=body):
                r = c.request("GET", "/api/ok-then-close")
                self.assertEqual((r.status, r.body), (200, b"ok"))
                time.sleep(0.1)  # the upstream's close has arrived
                started = time.monotonic()
                r = c.request(method, "/api/ok", body=body)
                self.assertEqual((r.status, r.body), (200, b"ok"))
                self.assertLess(time.monotonic() - started, 2.0)
        c.close()

    def test_a_streamed_response_head_reaches_the_client_before_its_body(self):
        # The client sees the status line and fields as soon as the upstream sent them, not when
        # the first body bytes come (an EventSource opens on the head), chunked or to the close.
        for path in STREAMED:
            with self.subTest(path=path):
                c = Conn(self.gw.port)
                c.send(b"GET /api" + path.encode() + b" HTTP/1.1\r\nHost: t\r\n\r\n")
                started = time.monotonic()
                c.sock.settimeout(5)
                first = c.sock.recv(65536)
                self.assertTrue(first.startswith(b"HTTP/1.1 200 "), first)
                self.assertLess(time.monotonic() - started, 0.5)
                c.buf = first
                r = c.read_response()
                self.assertEqual((r.status, r.body), (200, b"data: hello\n\n"))
                c.close()

    @unittest.skipUnless(h2, "python3-h2 is not installed")
    def test_a_streamed_response_head_reaches_an_http2_client_before_its_body(self):
        cfg = proxy_config([self.up.port])
        cfg["http2"] = {"h2c": True}
        gw = self.gateway(cfg)
        for path in STREAMED:
            with self.subTest(path=path):
                c = RawH2(gw.port)
                started = time.monotonic()
                c.request(1, base_headers("/api" + path))
                frames = c.collect(lambda fs: any(isinstance(f, HeadersFrame) for f in fs), timeout=5)
                self.assertLess(time.monotonic() - started, 0.5)
                self.assertEqual(status_of(frames, 1), 200)
                frames = c.collect(lambda fs: any("END_STREAM" in f.flags for f in fs), timeout=5)
                body = b"".join(f.data for f in frames if isinstance(f, DataFrame))
                self.assertEqual(body, b"data: hello\n\n")
                c.close()

    def test_bytes_an_idle_pooled_connection_receives_take_it_out_of_the_pool(self):
        # A sized answer, then (50 ms later, the connection idle in the pool) bytes nobody asked
        # for, shaped as a response: the next request, another client's, well within the time a
        # pooled connection is trusted without a probe, must get its own answer.
        for pause in (0.2, 0.6):
            with self.subTest(pause=pause):
                a, b = Conn(self.gw.port), Conn(self.gw.port)
                r = a.request("GET", "/api/sized-late")
                self.assertEqual((r.status, r.body), (200, b"ok"))
                time.sleep(pause)
                r = b.request("GET", "/api/ok")
                self.assertEqual((r.status, r.body), (200, b"ok"))
                a.close(), b.close()

    def test_http10_expect_100_continue_gets_no_1xx(self):
        # RFC 9110 §10.1.1 and §15.2: the expectation is ignored, no 1xx goes to HTTP/1.0.
        c = Conn(self.gw.port)
        c.send(b"POST /api/ok HTTP/1.0\r\nHost: test.local\r\nContent-Length: 4\r\n"
               b"Expect: 100-continue\r\n\r\n")
        c.sock.settimeout(0.5)
        try:
            early = c.sock.recv(100)
        except socket.timeout:
            early = b""
        self.assertEqual(early, b"")
        c.send(b"data")
        r = c.read_response()
        self.assertEqual((r.status, r.body), (200, b"ok"))
        c.close()

    def test_a_head_over_8_kib_is_502(self):
        r = Conn(self.gw.port).request("GET", "/api/huge")
        self.assertEqual(r.status, 502)

    def test_a_head_dribbled_a_byte_at_a_time_arrives_whole(self):
        c = Conn(self.gw.port)
        for _ in range(2):
            r = c.request("GET", "/api/dribble")
            self.assertEqual((r.status, r.reason, r.body), (201, "Created", b"hello"))
            self.assertEqual(r.header("X-Slow"), "yes")
        c.close()

    def test_sized_and_chunked_bodies_arrive_intact_and_framed_per_version(self):
        c = Conn(self.gw.port)
        r = c.request("GET", "/api/big")
        self.assertEqual(r.body, BIG_BODY)
        self.assertEqual(r.header("Content-Length"), str(len(BIG_BODY)))
        r = c.request("GET", "/api/chunked")
        self.assertEqual(r.body, BIG_BODY)
        self.assertEqual(r.header("Transfer-Encoding"), "chunked")
        self.assertIsNone(r.header("Content-Length"))
        c.close()
        # HTTP/1.0 never gets Transfer-Encoding: the body runs to the close.
        c = Conn(self.gw.port)
        c.send(b"GET /api/chunked HTTP/1.0\r\nHost: t\r\n\r\n")
        r = c.read_response()
        self.assertIsNone(r.header("Transfer-Encoding"))
        self.assertEqual(r.body, BIG_BODY)
        c.close()

    def test_hop_by_hop_fields_go_and_via_lines_merge(self):
        r = Conn(self.gw.port).request("GET", "/api/hop")
        names = [k.lower() for k, _ in r.headers]
        self.assertNotIn("x-secret", names)
        self.assertNotIn("keep-alive", names)
        self.assertNotIn("connection", names)
        self.assertEqual(r.header_all("Via"), ["1.0 inner, 1.1 deeper, 1.1 rategate"])
        self.assertEqual(r.header_all("X-Request-Id"), ["theirs"])
        self.assertEqual(r.body, b"ok")
