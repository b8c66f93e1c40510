"""HTTP/2 on the listener (SPEC §3 "HTTP/2" and "gRPC"): curl over h2c (prior knowledge) and over
TLS (ALPN h2); frame-level cases with Python's h2/hyperframe/hpack (Debian python3-h2): per-stream
limits on one connection, REFUSED_STREAM above the stream cap, rapid reset, CONTINUATION flood,
oversized header block, malformed requests; gRPC refusals trailers-only; the gateway still
serving after each attack."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import h2.config
    import h2.connection
    import h2.events
    import hpack
    from hyperframe.frame import (ContinuationFrame, DataFrame, Frame, GoAwayFrame, HeadersFrame,
                                  PingFrame, RstStreamFrame, SettingsFrame, WindowUpdateFrame)
except ImportError:  # a Python other than Debian's: its packages are still there
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        import h2.config
        import h2.connection
        import h2.events
        import hpack
        from hyperframe.frame import (ContinuationFrame, DataFrame, Frame, GoAwayFrame, HeadersFrame,
                                      PingFrame, RstStreamFrame, SettingsFrame, WindowUpdateFrame)
    except ImportError:
        h2 = None
os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # its complaints about the non-gRPC demo upstream
try:
    import grpc
except ImportError:
    grpc = None

from harness import SANITIZED, GatewayTest, free_port, get, rss_kib, wait_port
from test_tls import make_pki

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
PROTOCOL_ERROR, REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM = 0x1, 0x7, 0x8, 0xB


class RawH2:
    """A client that writes frames as given (hyperframe) and reads what comes back, decoding
    header blocks (hpack): for the requests a well-behaved client library refuses to send."""

    def __init__(self, port, settings=None, auto_ack=True):
        self.auto_ack = auto_ack
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.buf = b""
        self.closed = False
        first = SettingsFrame(0)
        for k, v in (settings or {}).items():
            first.settings[k] = v
        self.sock.sendall(PREFACE + first.serialize())

    def close(self):
        self.sock.close()

    def block(self, headers):
        return self.enc.encode(headers)

    def send(self, *frames):
        self.sock.sendall(b"".join(f.serialize() for f in frames))

    def request(self, stream_id, headers, end_stream=True):
        f = HeadersFrame(stream_id, self.block(headers))
        f.flags.add("END_HEADERS")
        if end_stream:
            f.flags.add("END_STREAM")
        self.send(f)

    def _frame(self, deadline):
        while True:
            if len(self.buf) >= 9:
                header, length = Frame.parse_frame_header(memoryview(self.buf[:9]))
                if len(self.buf) >= 9 + length:
                    header.parse_body(memoryview(self.buf[9:9 + length]))
                    self.buf = self.buf[9 + length:]
                    if self.auto_ack and isinstance(header, SettingsFrame) and "ACK" not in header.flags:
                        ack = SettingsFrame(0)
                        ack.flags.add("ACK")
                        try:
                            self.send(ack)
                        except OSError:
                            pass
                    return header
            left = deadline - time.time()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return None
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            if not chunk:
                self.closed = True
                return None
            self.buf += chunk

    def collect(self, until=lambda frames: False, timeout=10):
        """Frames until `until(frames)` holds, the connection closes, or `timeout` passes; header
        blocks come back decoded as frame.decoded."""
        frames = []
        deadline = time.time() + timeout
        while not until(frames):
            f = self._frame(deadline)
            if f is None:
                break
            if isinstance(f, HeadersFrame):
                f.decoded = dict(self.dec.decode(f.data))
            frames.append(f)
        return frames


def status_of(frames, stream_id):
    for f in frames:
        if isinstance(f, HeadersFrame) and f.stream_id == stream_id:
            return int(f.decoded[":status"])
    return None


def reset_of(frames, stream_id):
    for f in frames:
        if isinstance(f, RstStreamFrame) and f.stream_id == stream_id:
            return f.error_code
    return None


def goaway_of(frames):
    for f in frames:
        if isinstance(f, GoAwayFrame):
            return f.error_code
    return None


def base_headers(path, method="GET", authority="localhost", extra=()):
    h = [(":method", method), (":scheme", "http"), (":authority", authority), (":path", path)]
    return h + list(extra)


class H2Client:
    """A well-behaved HTTP/2 client (h2's state machine) over one socket."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        self.streams = {}
        self.terminated = None

    def close(self):
        self.sock.close()

    def request(self, path, method="GET", headers=(), body=None):
        sid = self.conn.get_next_available_stream_id()
        h = base_headers(path, method, extra=headers)
        self.conn.send_headers(sid, h, end_stream=body is None)
        self.streams[sid] = {"headers": None, "data": b"", "ended": False, "reset": None, "trailers": None}
        if body is not None:
            self.pending = (sid, memoryview(body))
            self._send_body()
        self.sock.sendall(self.conn.data_to_send())
        return sid

    def _send_body(self):
        sid, rest = getattr(self, "pending", (None, b""))
        while sid is not None and len(rest):
            window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if window <= 0:
                break
            self.conn.send_data(sid, rest[:window].tobytes())
            rest = rest[window:]
        if sid is not None and not len(rest):
            self.conn.end_stream(sid)
            sid = None
        self.pending = (sid, rest)

    def run(self, done, timeout=20):
        deadline = time.time() + timeout
        while not done() and self.terminated is None and time.time() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.time()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                break
            if not data:
                break
            for e in self.conn.receive_data(data):
                s = self.streams.get(getattr(e, "stream_id", None))
                if isinstance(e, h2.events.ResponseReceived):
                    s["headers"] = dict(e.headers)
                elif isinstance(e, h2.events.TrailersReceived):
                    s["trailers"] = dict(e.headers)
                elif isinstance(e, h2.events.DataReceived):
                    s["data"] += e.data
                    self.conn.acknowledge_received_data(e.flow_controlled_length, e.stream_id)
                elif isinstance(e, h2.events.StreamEnded):
                    s["ended"] = True
                elif isinstance(e, h2.events.StreamReset):
                    if s is not None:
                        s["reset"] = e.error_code
                elif isinstance(e, h2.events.ConnectionTerminated):
                    self.terminated = e.error_code
                elif isinstance(e, h2.events.WindowUpdated):
                    self._send_body()
            self.sock.sendall(self.conn.data_to_send())
        return done()

    def all_done(self):
        return all(s["ended"] or s["reset"] is not None for s in self.streams.values())


@unittest.skipUnless(h2 is not None, "python3-h2 needed")
class Http2(GatewayTest):
    def start(self, http2=None, limits=None, **extra):
        self.up = self.upstream()
        cfg = {
            "http2": dict({"h2c": True}, **(http2 or {})),
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]},
                          "down": {"targets": ["127.0.0.1:%d" % free_port()]}},  # nothing listens
            "identity": {"user": {"header": "X-User-Id"}},
            # A sliding-window log has no window boundary for a test to straddle (a fixed window's count
            # starts again at each minute, and then a sixth request passes).
            "limiters": {"per-user": {"scope": "user", "algorithm": "sliding_window_log",
                                      "rules": [{"limit": 5, "window": "1m"}]}},
            "routes": [{"name": "lim", "match": {"path_prefix": "/lim"}, "upstream": "demo",
                        "limiters": ["per-user"], "on_limit": {"status": 429, "message": "slow down, 100% sure"}},
                       {"name": "api", "match": {"path_prefix": "/api"}, "upstream": "demo", "strip_prefix": "/api"}],
        }
        if limits:
            cfg["limits"] = limits
        self.admin_port = free_port()
        cfg["admin"] = {"listen": "127.0.0.1:%d" % self.admin_port}
        cfg.update(extra)
        self.gw = self.gateway(cfg)
        wait_port(self.admin_port, proc=self.gw.proc)

    def metric(self, name, at_least):
        """`name`'s value once it reaches `at_least` (metrics are published every 250 ms)."""
        deadline = time.time() + 5
        while True:
            value = None
            for line in get(self.admin_port, "/metrics").body.decode().splitlines():
                if line.startswith(name + " "):
                    value = float(line.split()[1])
            if (value is not None and value >= at_least) or time.time() > deadline:
                return value
            time.sleep(0.1)

    def curl(self, *args):
        out = subprocess.run(["curl", "-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_version} %{http_code}"] +
                             list(args), capture_output=True, text=True, timeout=20)
        self.assertEqual(out.returncode, 0, out.stderr)
        body, tail = out.stdout.rsplit("\n", 1)
        version, status = tail.split()
        return version, int(status), body

    def assert_still_serving(self):
        c = H2Client(self.gw.port)
        sid = c.request("/api/anything")
        self.assertTrue(c.run(lambda: c.streams[sid]["ended"]))
        self.assertEqual(c.streams[sid]["headers"][":status"], "200")
        c.close()
        self.assertEqual(get(self.gw.port, "/api/anything").status, 200)

    # --- curl ---------------------------------------------------------------------------------

    def test_curl_h2c_prior_knowledge_and_http11_on_the_same_port(self):
        self.start()
        version, status, body = self.curl("--http2-prior-knowledge", "-H", "X-Forwarded-For: 1.2.3.4",
                                          "http://127.0.0.1:%d/api/anything?q=1" % self.gw.port)
        self.assertEqual((version, status), ("2", 200))
        echo = json.loads(body)
        self.assertEqual(echo["path"], "/anything")
        headers = {k.lower(): v for k, v in echo["headers"].items()}
        self.assertEqual(headers["host"], "127.0.0.1:%d" % self.gw.port)
        self.assertIn("x-request-id", headers)
        self.assertTrue(headers["x-forwarded-for"].endswith("127.0.0.1"))
        # The same port still speaks HTTP/1.1.
        self.assertEqual(self.curl("http://127.0.0.1:%d/api/anything" % self.gw.port)[:2], ("1.1", 200))

    def test_h2c_off_refuses_the_preface(self):
        self.start(http2={"h2c": False})
        out = subprocess.run(["curl", "-sS", "--max-time", "5", "--http2-prior-knowledge",
                              "http://127.0.0.1:%d/api/anything" % self.gw.port], capture_output=True, timeout=20)
        self.assertNotEqual(out.returncode, 0)
        self.assertEqual(get(self.gw.port, "/api/anything").status, 200)

    def test_upstream_connections_are_reused_across_protocols(self):
        self.start()
        c = H2Client(self.gw.port)
        seen = []
        for method, body in (("GET", None), ("POST", b"abc"), ("GET", None)):
            sid = c.request("/api/anything", method, body=body)
            self.assertTrue(c.run(lambda: c.streams[sid]["ended"]))
            self.assertEqual(c.streams[sid]["headers"][":status"], "200")
            seen.append(json.loads(c.streams[sid]["data"])["connection"])
        c.close()
        r = get(self.gw.port, "/api/anything", method="POST", body=b"xyz")
        self.assertEqual(r.status, 200)
        seen.append(r.json()["connection"])
        self.assertEqual(len(set(seen)), 1, seen)  # one pooled upstream connection throughout

    def test_large_bodies_both_ways(self):
        self.start(http2={"initial_window_size": "64KiB"})
        up = b"0123456789abcdef" * (96 * 1024)  # 1.5 MiB (the echo upstream wants text)
        c = H2Client(self.gw.port)
        post = c.request("/api/anything", "POST", [("content-type", "application/octet-stream")], body=up)
        big = c.request("/api/bytes?n=3000000")
        chunked = c.request("/api/bytes?n=1200000&chunked=1")
        self.assertTrue(c.run(c.all_done, timeout=60))
        self.assertEqual(c.streams[post]["headers"][":status"], "200")
        self.assertEqual(json.loads(c.streams[post]["data"])["body_bytes"], len(up))
        self.assertEqual(c.streams[big]["headers"][":status"], "200")
        self.assertEqual(c.streams[big]["headers"]["content-length"], "3000000")
        self.assertEqual(len(c.streams[big]["data"]), 3000000)
        self.assertEqual(len(c.streams[chunked]["data"]), 1200000)
        self.assertNotIn("transfer-encoding", c.streams[chunked]["headers"])
        c.close()

    def test_body_over_max_body_bytes_is_413(self):
        self.start(limits={"max_body_bytes": "1KiB"})
        c = H2Client(self.gw.port)
        sized = c.request("/api/anything", "POST", [("content-length", "2048")], body=b"x" * 2048)
        streamed = c.request("/api/anything", "POST", body=b"y" * 4096)  # no content-length
        grpc_sized = c.request("/api/anything", "POST", [("content-type", "application/grpc"),
                                                         ("content-length", "2048")], body=b"z" * 2048)
        small = c.request("/api/anything", "POST", body=b"ok")
        self.assertTrue(c.run(c.all_done))
        self.assertEqual(c.streams[sized]["headers"][":status"], "413")
        self.assertEqual(c.streams[streamed]["headers"][":status"], "413")
        self.assertEqual(c.streams[grpc_sized]["headers"]["grpc-status"], "8")
        self.assertEqual(c.streams[small]["headers"][":status"], "200")
        c.close()

    def test_head_and_204_have_no_body_and_cookies_are_joined(self):
        self.start()
        c = H2Client(self.gw.port)
        cookies = c.request("/api/anything", headers=[("cookie", "a=1"), ("cookie", "b=2")])
        head = c.request("/api/bytes?n=100", "HEAD")
        nc = c.request("/api/status/204")
        self.assertTrue(c.run(c.all_done))
        self.assertEqual(c.streams[head]["headers"][":status"], "200")
        self.assertEqual(c.streams[head]["data"], b"")
        self.assertEqual(c.streams[nc]["headers"][":status"], "204")
        self.assertEqual(c.streams[nc]["data"], b"")
        self.assertEqual(json.loads(c.streams[cookies]["data"])["headers"]["cookie"], "a=1; b=2")
        c.close()

    # --- limits per stream ----------------------------------------------------------------------

    def test_twenty_streams_limit_five(self):
        self.start()
        c = H2Client(self.gw.port)
        ids = [c.request("/lim/x", headers=[("x-user-id", "alice")]) for _ in range(20)]
        self.assertTrue(c.run(c.all_done))
        statuses = [int(c.streams[i]["headers"][":status"]) for i in ids]
        self.assertEqual(statuses.count(200), 5, statuses)
        self.assertEqual(statuses.count(429), 15, statuses)
        refused = [c.streams[i]["headers"] for i in ids if c.streams[i]["headers"][":status"] == "429"]
        for h in refused:
            self.assertIn("retry-after", h)
            self.assertEqual(h["ratelimit-policy"], '"per-user";q=5;w=60')
            self.assertIn('"per-user";r=0;', h["ratelimit"])
            self.assertNotIn("connection", h)
        c.close()
        # The user's HTTP/1.1 requests share the counters.
        self.assertEqual(get(self.gw.port, "/lim/x", {"X-User-Id": "alice"}).status, 429)
        self.assertEqual(get(self.gw.port, "/lim/x", {"X-User-Id": "bob"}).status, 200)
        self.assertGreaterEqual(self.metric("rategate_http2_streams_total", 20), 20)
        self.assertGreaterEqual(self.metric("rategate_http2_connections_total", 1), 1)
        # Requests by protocol: the 20 streams as h2, the two HTTP/1.1 requests as http/1.1.
        self.assertEqual(self.metric('rategate_requests_by_protocol_total{route="lim",protocol="h2"}', 20), 20)
        self.assertEqual(self.metric('rategate_requests_by_protocol_total{route="lim",protocol="http/1.1"}', 2), 2)

    def test_grpc_refusals_are_trailers_only(self):
        self.start()
        c = H2Client(self.gw.port)
        grpc = [("content-type", "application/grpc"), ("te", "trailers"), ("x-user-id", "carol")]
        ids = [c.request("/lim/svc/Method", "POST", grpc) for _ in range(6)]
        nowhere = c.request("/nowhere/svc/Method", "POST", grpc)
        web = c.request("/nowhere/x", "POST", [("content-type", "application/grpc-web")])
        self.assertTrue(c.run(c.all_done))
        limited = c.streams[ids[5]]["headers"]
        self.assertEqual(limited[":status"], "200")
        self.assertEqual(limited["grpc-status"], "8")
        self.assertEqual(limited["grpc-message"], "slow down, 100%25 sure")
        self.assertEqual(limited["content-type"], "application/grpc")
        self.assertIn("retry-after", limited)
        self.assertIn('"per-user";r=0;', limited["ratelimit"])
        self.assertEqual(c.streams[ids[5]]["data"], b"")
        self.assertEqual(c.streams[nowhere]["headers"]["grpc-status"], "12")
        self.assertEqual(c.streams[web]["headers"][":status"], "404")  # grpc-web is plain HTTP
        c.close()
        # gRPC over HTTP/1.1 is refused with 426.
        r = get(self.gw.port, "/api/anything", {"Content-Type": "application/grpc"}, "POST", b"")
        self.assertEqual(r.status, 426)

    @unittest.skipUnless(grpc is not None, "python3-grpcio needed")
    def test_grpc_client_sees_resource_exhausted_and_unimplemented(self):
        self.start(routes=[{"name": "greeter", "match": {"path_prefix": "/greet.Greeter"}, "upstream": "demo",
                            "limiters": ["per-user"], "on_limit": {"status": 429, "message": "Greeter: über limit"}},
                           {"name": "down", "match": {"path_prefix": "/down.Service"}, "upstream": "down",
                            "limiters": ["per-down"]}],
                   limiters={"per-user": {"scope": "user", "algorithm": "sliding_window_log",
                                          "rules": [{"limit": 5, "window": "1m"}]},
                             "per-down": {"scope": "user", "algorithm": "sliding_window_log",
                                          "rules": [{"limit": 5, "window": "1m"}]}})
        with grpc.insecure_channel("127.0.0.1:%d" % self.gw.port) as ch:
            say = ch.unary_unary("/greet.Greeter/SayHello")
            codes = []
            for _ in range(6):
                try:
                    say(b"\x00", metadata=[("x-user-id", "erin")], timeout=5)
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as e:
                    codes.append(e.code())
                    last = e
            # The first five reach the (HTTP/1.1, not gRPC) demo upstream; the sixth is ours.
            self.assertNotIn(grpc.StatusCode.RESOURCE_EXHAUSTED, codes[:5])
            self.assertEqual(codes[5], grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertEqual(last.details(), "Greeter: über limit")
            names = [k for k, _ in tuple(last.initial_metadata() or ()) + tuple(last.trailing_metadata() or ())]
            self.assertIn("retry-after", names)
            self.assertIn("ratelimit", names)
            with self.assertRaises(grpc.RpcError) as nowhere:
                ch.unary_unary("/other.Service/Call")(b"", timeout=5)
            self.assertEqual(nowhere.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
            with self.assertRaises(grpc.RpcError) as down:
                ch.unary_unary("/down.Service/Call")(b"", metadata=[("x-user-id", "erin")], timeout=5)
            self.assertEqual(down.exception.code(), grpc.StatusCode.UNAVAILABLE)
            # The limited route's refusal for an upstream that is down carries its rate-limit
            # headers (SPEC §3: every response that went through a limiter).
            names = [k for k, _ in tuple(down.exception.initial_metadata() or ()) +
                     tuple(down.exception.trailing_metadata() or ())]
            self.assertIn("ratelimit-policy", names)

    # --- stream errors --------------------------------------------------------------------------

    def test_malformed_requests_are_protocol_errors(self):
        self.start()
        c = RawH2(self.gw.port)
        cases = {
            1: base_headers("/api/anything")[:3],  # no :path
            3: base_headers("/api/anything") + [(":path", "/again")],
            5: base_headers("/api/anything") + [(":protocol", "websocket")],
            7: base_headers("/api/anything") + [("X-Upper", "1")],
            9: base_headers("/api/anything") + [("connection", "keep-alive")],
            11: base_headers("/api/anything") + [("transfer-encoding", "chunked")],
            13: base_headers("/api/anything") + [("host", "elsewhere.test")],
        }
        for sid, h in cases.items():
            c.request(sid, h)
        # content-length not matching the DATA
        c.request(15, base_headers("/api/anything", "POST") + [("content-length", "10")], end_stream=False)
        c.send(DataFrame(15, b"12345", flags=["END_STREAM"]))
        c.request(17, base_headers("/api/anything", "POST") + [("content-length", "2")], end_stream=False)
        c.send(DataFrame(17, b"12345", flags=["END_STREAM"]))
        # neither :authority nor host: 400
        c.request(19, [(":method", "GET"), (":scheme", "http"), (":path", "/api/anything")])
        # and a good one after all that, on the same connection
        c.request(21, base_headers("/api/anything"))
        # controls an HTTP/1.1 client could not send either (RFC 9110 5.5), in the user id
        c.request(23, base_headers("/api/anything") + [("x-user-id", "\x1b[2Jalice")])
        c.request(25, base_headers("/api/anything") + [("x-a", "a\x01b\x7f")])
        # trailers that do not end the stream (RFC 9113 §8.1), then more DATA
        c.request(27, base_headers("/api/anything", "POST"), end_stream=False)
        c.send(DataFrame(27, b"12345"))
        c.request(27, [("x-trailer", "1")], end_stream=False)
        c.send(DataFrame(27, b"more", flags=["END_STREAM"]))
        frames = c.collect(lambda fs: all(reset_of(fs, s) or status_of(fs, s)
                                          for s in list(cases) + [15, 17, 19, 23, 25, 27])
                           and any(isinstance(f, DataFrame) and f.stream_id == 21 and "END_STREAM" in f.flags
                                   for f in fs))
        for sid in list(cases) + [15, 17, 23, 25, 27]:
            self.assertEqual(reset_of(frames, sid), PROTOCOL_ERROR, "stream %d" % sid)
            self.assertIsNone(status_of(frames, sid), "stream %d" % sid)
        self.assertEqual(status_of(frames, 19), 400)
        self.assertEqual(status_of(frames, 21), 200)
        self.assertIsNone(goaway_of(frames))
        c.close()

    def test_streams_above_the_cap_are_refused(self):
        self.start(http2={"max_concurrent_streams": 2})
        c = RawH2(self.gw.port)
        # A client that does not wait for the server's SETTINGS (as most do not).
        for sid in (1, 3, 5, 7):
            c.request(sid, base_headers("/api/slow?ms=500"))
        frames = c.collect(lambda fs: all(reset_of(fs, s) or any(
            isinstance(f, DataFrame) and f.stream_id == s and "END_STREAM" in f.flags for f in fs)
            for s in (1, 3, 5, 7)))
        settings = {}
        for f in frames:
            if isinstance(f, SettingsFrame) and "ACK" not in f.flags:
                settings.update(f.settings)
        self.assertEqual(settings[SettingsFrame.MAX_CONCURRENT_STREAMS], 2)
        self.assertEqual([status_of(frames, s) for s in (1, 3)], [200, 200])
        self.assertEqual([reset_of(frames, s) for s in (5, 7)], [REFUSED_STREAM, REFUSED_STREAM])
        # After the client acknowledged the cap: still refused, and the connection goes on.
        self.assertTrue(any(isinstance(f, SettingsFrame) and "ACK" in f.flags for f in frames))
        for sid in (9, 11, 13):
            c.request(sid, base_headers("/api/slow?ms=500"))
        frames = c.collect(lambda fs: reset_of(fs, 13) is not None and all(any(
            isinstance(f, DataFrame) and f.stream_id == s and "END_STREAM" in f.flags for f in fs) for s in (9, 11)))
        self.assertEqual([status_of(frames, s) for s in (9, 11)], [200, 200])
        self.assertEqual(reset_of(frames, 13), REFUSED_STREAM)
        self.assertIsNone(goaway_of(frames))
        c.close()
        self.assert_still_serving()

    def test_rapid_reset_ends_the_connection(self):
        self.start(http2={"max_resets_per_second": 10})
        c = RawH2(self.gw.port)
        for i in range(30):
            sid = 1 + 2 * i
            c.request(sid, base_headers("/api/slow?ms=2000"))
            c.send(RstStreamFrame(sid, error_code=0x8))
        frames = c.collect(lambda fs: goaway_of(fs) is not None)
        self.assertEqual(goaway_of(frames), ENHANCE_YOUR_CALM)
        c.collect(timeout=5)
        self.assertTrue(c.closed)
        c.close()
        self.assertEqual(self.metric("rategate_http2_enhance_your_calm_total", 1), 1)
        self.assert_still_serving()

    def test_resets_the_client_provokes_count_as_its_own(self):
        # "MadeYouReset" (CVE-2025-8671): streams the gateway resets for being malformed go
        # against max_resets_per_second like the client's own RST_STREAMs.
        self.start(http2={"max_resets_per_second": 10})
        c = RawH2(self.gw.port)
        for i in range(30):
            c.request(1 + 2 * i, base_headers("/api/anything") + [("X-Upper", "1")])
        frames = c.collect(lambda fs: goaway_of(fs) is not None)
        self.assertEqual(goaway_of(frames), ENHANCE_YOUR_CALM)
        c.close()
        self.assert_still_serving()

    def test_a_gateway_answer_ends_a_request_left_open(self):
        # A 404 (or 429) to a request whose body never comes: after the whole response,
        # RST_STREAM NO_ERROR (RFC 9113 8.1). Left half-open, the stream kept the connection
        # (and a max_connections slot) with no deadline at all.
        self.start(limits={"idle_timeout": "1s"})
        c = RawH2(self.gw.port)
        c.request(1, base_headers("/nothing-here", "POST"), end_stream=False)
        frames = c.collect(lambda fs: reset_of(fs, 1) is not None, timeout=5)
        self.assertEqual(status_of(frames, 1), 404)
        self.assertEqual(reset_of(frames, 1), 0)  # NO_ERROR
        last_data = max(i for i, f in enumerate(frames) if isinstance(f, DataFrame) and f.stream_id == 1)
        self.assertIn("END_STREAM", frames[last_data].flags)
        self.assertLess(last_data, [i for i, f in enumerate(frames) if isinstance(f, RstStreamFrame)][0])
        c.collect(timeout=4)  # then the connection idles out
        self.assertTrue(c.closed)
        c.close()

    def test_ping_and_settings_floods(self):
        self.start()
        padded = [DataFrame(1, b"", flags=["PADDED"]) for _ in range(150)]  # padding alone
        for f in padded:
            f.pad_length = 0
        for flood in ([PingFrame(0, opaque_data=b"12345678") for _ in range(150)],
                      [SettingsFrame(0) for _ in range(150)],
                      [DataFrame(1, b"") for _ in range(150)], padded):
            c = RawH2(self.gw.port)
            if isinstance(flood[0], DataFrame):
                c.request(1, base_headers("/api/anything", "POST"), end_stream=False)
            c.send(*flood)
            frames = c.collect(lambda fs: goaway_of(fs) is not None)
            self.assertEqual(goaway_of(frames), ENHANCE_YOUR_CALM, type(flood[0]).__name__)
            c.close()
        self.assert_still_serving()

    def test_oversized_header_block_is_431_and_a_continuation_flood_ends_the_connection(self):
        self.start(limits={"max_header_bytes": 4096})
        c = RawH2(self.gw.port)
        c.request(1, base_headers("/api/anything", extra=[("x-big", "a" * 5000)]))
        c.request(3, base_headers("/api/anything"))
        frames = c.collect(lambda fs: status_of(fs, 1) and status_of(fs, 3))
        settings = [f for f in frames if isinstance(f, SettingsFrame) and "ACK" not in f.flags][0]
        self.assertEqual(settings.settings[SettingsFrame.MAX_HEADER_LIST_SIZE], 4096)
        self.assertEqual((status_of(frames, 1), status_of(frames, 3)), (431, 200))
        c.close()

        # A header block of more than four times max_header_bytes (an HPACK bomb's effect) in
        # frames of 8 KiB: the connection ends.
        c = RawH2(self.gw.port)
        block = c.block(base_headers("/api/anything") + [("x-f%d" % i, os.urandom(60).hex()) for i in range(300)])
        frames = [HeadersFrame(5, block[:8192])]
        for off in range(8192, len(block), 8192):
            frames.append(ContinuationFrame(5, block[off:off + 8192]))
        frames[-1].flags.add("END_HEADERS")
        self.assertLess(len(frames), 8)
        c.send(*frames)
        got = c.collect(lambda fs: goaway_of(fs) is not None)
        self.assertEqual(goaway_of(got), ENHANCE_YOUR_CALM)
        self.assertIsNone(status_of(got, 5))
        c.close()

        # The same block after a malformed field: the stream is refused at once, and its block
        # is still measured.
        c = RawH2(self.gw.port)
        block = c.block(base_headers("/api/anything") + [("X-Upper", "1")] +
                        [("x-f%d" % i, os.urandom(60).hex()) for i in range(300)])
        frames = [HeadersFrame(5, block[:8192])]
        for off in range(8192, len(block), 8192):
            frames.append(ContinuationFrame(5, block[off:off + 8192]))
        frames[-1].flags.add("END_HEADERS")
        c.send(*frames)
        self.assertEqual(goaway_of(c.collect(lambda fs: goaway_of(fs) is not None)), ENHANCE_YOUR_CALM)
        c.close()

        # CONTINUATION flood: a block in 200-byte frames, never ended early.
        c = RawH2(self.gw.port)
        block = c.block(base_headers("/api/anything") + [("x-f%d" % i, os.urandom(60).hex()) for i in range(500)])
        frames = [HeadersFrame(5, block[:200])]
        for off in range(200, len(block), 200):
            frames.append(ContinuationFrame(5, block[off:off + 200]))
        frames[-1].flags.add("END_HEADERS")
        try:
            c.send(*frames)
        except OSError:
            pass
        got = c.collect(lambda fs: goaway_of(fs) is not None)
        self.assertEqual(goaway_of(got), ENHANCE_YOUR_CALM)
        self.assertIsNone(status_of(got, 5))
        c.close()

        # Empty CONTINUATION frames.
        c = RawH2(self.gw.port)
        head = HeadersFrame(1, c.block(base_headers("/api/anything")))
        c.send(head, *[ContinuationFrame(1, b"") for _ in range(150)])
        got = c.collect(lambda fs: goaway_of(fs) is not None)
        self.assertEqual(goaway_of(got), ENHANCE_YOUR_CALM)
        c.close()
        self.assert_still_serving()

    def test_idle_connection_closes_after_idle_timeout(self):
        self.start(limits={"idle_timeout": "500ms"})
        c = RawH2(self.gw.port)
        c.request(1, base_headers("/api/anything"))
        started = time.time()
        frames = c.collect(timeout=5)
        self.assertEqual(status_of(frames, 1), 200)
        self.assertTrue(c.closed)
        self.assertLess(time.time() - started, 3)
        c.close()

    def test_zero_window_and_a_header_block_left_open_end_by_the_deadlines(self):
        self.start(limits={"idle_timeout": "1s", "header_timeout": "1s"})
        # A client that never opens its window: the stream is cancelled after idle_timeout.
        c = RawH2(self.gw.port, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 0})
        c.request(1, base_headers("/api/bytes?n=1000"))
        frames = c.collect(lambda fs: reset_of(fs, 1) is not None, timeout=6)
        self.assertEqual(status_of(frames, 1), 200)
        self.assertEqual(reset_of(frames, 1), CANCEL)
        self.assertFalse([f for f in frames if isinstance(f, DataFrame) and f.data])
        c.close()
        # A header block never ended: the connection closes after header_timeout (a SETTINGS
        # ACK now would be a protocol error: CONTINUATION must come next).
        c = RawH2(self.gw.port, auto_ack=False)
        c.send(HeadersFrame(1, c.block(base_headers("/api/anything"))))
        started = time.time()
        frames = c.collect(timeout=6)
        self.assertTrue(c.closed)
        self.assertIsNone(goaway_of(frames))
        self.assertGreater(time.time() - started, 0.9)
        self.assertLess(time.time() - started, 4)
        c.close()
        self.assert_still_serving()

    def test_reload_sends_goaway(self):
        self.start()
        c = RawH2(self.gw.port)
        c.request(1, base_headers("/api/anything"))
        self.assertEqual(status_of(c.collect(lambda fs: status_of(fs, 1)), 1), 200)
        # A PING answered: the gateway has read everything sent before it (the SETTINGS acks).
        # A frame it reads after the reload gets the GOAWAY; stream 3 must be that frame.
        c.send(PingFrame(0, opaque_data=b"beforeHU"))
        c.collect(lambda fs: any(isinstance(f, PingFrame) and "ACK" in f.flags for f in fs))
        self.gw.proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        c.request(3, base_headers("/api/anything"))
        frames = c.collect(lambda fs: goaway_of(fs) is not None and status_of(fs, 3))
        self.assertEqual(status_of(frames, 3), 200)  # the stream that saw the reload is served
        self.assertEqual(goaway_of(frames), 0)
        c.collect(timeout=5)
        self.assertTrue(c.closed)
        c.close()
        self.assert_still_serving()

    @unittest.skipIf(SANITIZED, "ASan's shadow memory and quarantine make RSS meaningless here")
    def test_memory_per_open_connection(self):
        self.start(limits={"max_connections": 1000})
        conns = [RawH2(self.gw.port) for _ in range(20)]
        for c in conns:
            c.request(1, base_headers("/api/anything"))
            self.assertEqual(status_of(c.collect(lambda fs: status_of(fs, 1)), 1), 200)
        time.sleep(0.3)
        before = rss_kib(self.gw.pid)
        more = [RawH2(self.gw.port) for _ in range(300)]
        for c in more:
            c.request(1, base_headers("/api/anything"))
        for c in more:
            self.assertEqual(status_of(c.collect(lambda fs: status_of(fs, 1)), 1), 200)
        time.sleep(0.3)
        per_connection = (rss_kib(self.gw.pid) - before) / len(more)
        print("\nHTTP/2: %.1f KiB RSS per open connection (after one request each)" % per_connection,
              file=sys.stderr)
        self.assertLess(per_connection, 128)
        for c in conns + more:
            c.close()

    def test_shutdown_sends_goaway_and_finishes_streams(self):
        self.start()
        c = RawH2(self.gw.port)
        c.request(1, base_headers("/api/slow?ms=700"))
        c.collect(lambda fs: any(isinstance(f, SettingsFrame) and "ACK" in f.flags for f in fs), timeout=5)
        time.sleep(0.2)  # the stream is with the upstream
        self.gw.proc.send_signal(15)
        frames = c.collect(lambda fs: any(isinstance(f, DataFrame) and f.stream_id == 1 and "END_STREAM" in f.flags
                                          for f in fs), timeout=10)
        self.assertEqual(goaway_of(frames), 0)
        self.assertEqual(status_of(frames, 1), 200)
        c.close()
        self.assertEqual(self.gw.proc.wait(10), 0)


@unittest.skipUnless(h2 is not None and shutil.which("openssl") and shutil.which("curl"),
                     "python3-h2, openssl and curl needed")
class Http2OverTls(GatewayTest):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="rategate-pki-")
        make_pki(cls.dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def start(self, http2=None):
        self.up = self.upstream()
        cfg = {"tls": {"cert": os.path.join(self.dir, "server.pem"), "key": os.path.join(self.dir, "server.key")},
               "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
               "routes": [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "demo"}]}
        if http2 is not None:
            cfg["http2"] = http2
        self.gw = self.gateway(cfg)

    def curl(self, *args):
        out = subprocess.run(["curl", "-sS", "--cacert", os.path.join(self.dir, "ca.pem"), "--max-time", "10",
                              "-o", "-", "-w", "\n%{http_version} %{http_code}"] + list(args) +
                             ["https://localhost:%d/anything" % self.gw.port],
                             capture_output=True, text=True, timeout=20)
        self.assertEqual(out.returncode, 0, out.stderr)
        body, tail = out.stdout.rsplit("\n", 1)
        return tail.split()[0], int(tail.split()[1]), body

    def test_curl_http2_over_tls(self):
        self.start()
        version, status, body = self.curl("--http2")
        self.assertEqual((version, status), ("2", 200))
        headers = {k.lower(): v for k, v in json.loads(body)["headers"].items()}
        self.assertEqual(headers["x-forwarded-proto"], "https")
        self.assertEqual(self.curl("--http1.1")[:2], ("1.1", 200))

    def test_http2_disabled_offers_only_http11(self):
        self.start(http2={"enabled": False})
        self.assertEqual(self.curl("--http2")[:2], ("1.1", 200))


if __name__ == "__main__":
    unittest.main()
