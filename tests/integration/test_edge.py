"""No way around a limit (SPEC §2 "Client identity", §3): every bypass found by trying as an
attacker would, as a regression test over real sockets — path tricks, Host and request-target
tricks, forwarding headers through a real HAProxy, address notations — plus the framing that
HTTP/1.0 clients and HEAD requests rely on (curl, ab)."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

from harness import SANITIZED, Conn, GatewayTest, free_port, get, wait_port


def log_limiter(scope, limit, **extra):
    d = {"scope": scope, "algorithm": "sliding_window_log", "rules": [{"limit": limit, "window": "1m"}]}
    d.update(extra)
    return d


class EdgeTest(GatewayTest):
    def make(self, limiters, routes, identity=None):
        self.up = self.upstream()
        cfg = {
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
            "identity": identity or {"client_ip": {"trusted_proxies": ["127.0.0.1/32"]}},
            "limiters": limiters,
            "routes": [dict({"upstream": "demo"}, **r) for r in routes],
        }
        self.gw = self.gateway(cfg)
        return self.gw

    def statuses(self, requests, port=None):
        """Sends (path, headers) pairs on one connection; returns the statuses."""
        c = Conn(port or self.gw.port)
        out = [c.request("GET", p, h).status for p, h in requests]
        c.close()
        return out


class PathBypass(EdgeTest):
    def setUp(self):
        super().setUp()
        self.make({"orders-ip": log_limiter("ip", 3)},
                  [{"name": "orders", "match": {"path_prefix": "/api/orders"}, "strip_prefix": "/api",
                    "limiters": ["orders-ip"]},
                   {"name": "public", "match": {"path_prefix": "/public"}},
                   {"name": "rest", "match": {"path_prefix": "/"}}])

    def test_dot_segments_double_slashes_and_escapes_hit_the_limited_route(self):
        tricks = ["/public/../api/orders/1", "//api/orders", "/%61pi/orders", "/public/%2e%2e/api/orders/1",
                  "/api//orders/./1", "/public/.%2E/api/orders", "/api/orders/x/../../orders"]
        c = Conn(self.gw.port)
        r = c.request("GET", tricks[0])
        self.assertEqual(r.status, 200)
        echo = r.json()
        self.assertEqual(echo["path"], "/orders/1")  # normalised, then strip_prefix: what was matched
        got = [r.status] + [c.request("GET", t).status for t in tricks[1:]]
        c.close()
        self.assertEqual(got, [200, 200, 200] + [429] * (len(tricks) - 3))

    def test_encoded_slash_is_not_a_separator_and_query_is_unchanged(self):
        r = get(self.gw.port, "/api/orders/a%2f..%2Fb?q=%2e%2e/x&y")
        self.assertEqual(r.status, 200)
        # "%2F" stays encoded (one segment, upper-cased); the query goes on byte for byte.
        self.assertEqual(r.json()["target"], "/orders/a%2F..%2Fb?q=%2e%2e/x&y")

    def test_malformed_targets_are_400(self):
        # An encoded control character or a raw backslash names one path here and another to a
        # server that stops at a NUL or splits at '\\' (SPEC 3): refused, never forwarded.
        for target in ["/api/orders/%zz", "/api/orders/%4", "/api/orders#frag", "*",
                       "/api/orders%00.json", "/public%00/../api/orders", "/api/orders/%0d%0aX:%201",
                       "/api/orders/%7F", "/api/orders/%1f", "/public\\..\\api/orders",
                       "http://t/api/orders%00"]:
            c = Conn(self.gw.port)
            r = c.request("GET", target)
            self.assertEqual(r.status, 400, target)
            self.assertEqual(r.json()["error"], "bad_request")
            self.assertTrue(c.closed_by_peer(), target)
            c.close()


class HostAndTarget(EdgeTest):
    def setUp(self):
        super().setUp()
        self.make({"per-ip": log_limiter("ip", 100)},
                  [{"name": "a-orders", "match": {"path_prefix": "/api/orders", "host": "a.example"},
                    "strip_prefix": "/api", "limiters": ["per-ip"]},
                   {"name": "port-only", "match": {"path_prefix": "/p", "host": "a.example:8080"},
                    "strip_prefix": "/p"},
                   {"name": "rest", "match": {"path_prefix": "/"}}])

    def raw(self, data):
        c = Conn(self.gw.port)
        c.send(data)
        r = c.read_response()
        closed = c.closed_by_peer(3)
        c.close()
        return r, closed

    def test_http11_needs_exactly_one_valid_host(self):
        for head in ["GET /x HTTP/1.1\r\n\r\n",
                     "GET /x HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n",
                     "GET /x HTTP/1.1\r\nHost: a b\r\n\r\n",
                     "GET /x HTTP/1.1\r\nHost: us@a.example\r\n\r\n",
                     "GET /x HTTP/1.1\r\nHost: a.example:99999\r\n\r\n",
                     "GET /x HTTP/1.0\r\nHost: a.example\r\nHost: a.example\r\n\r\n"]:
            r, closed = self.raw(head.encode())
            self.assertEqual(r.status, 400, head)
            self.assertEqual(r.json()["error"], "bad_request")
            self.assertTrue(closed, head)

    def test_http10_without_host_is_served(self):
        r, closed = self.raw(b"GET /x HTTP/1.0\r\n\r\n")
        self.assertEqual(r.status, 200)
        # Forwarded as HTTP/1.1, which needs a Host: the upstream target's.
        hosts = [v for k, v in r.json()["headers"].items() if k.lower() == "host"]
        self.assertEqual(hosts, ["127.0.0.1:%d" % self.up.port])

    def test_absolute_form_is_routed_by_its_authority_and_forwarded_in_origin_form(self):
        r, _ = self.raw(b"GET http://A.Example/api/orders/1?x=1 HTTP/1.1\r\nHost: other.example\r\n"
                        b"Connection: close\r\n\r\n")
        self.assertEqual(r.status, 200)
        echo = r.json()
        self.assertEqual(echo["path"], "/orders/1")  # strip_prefix applied, origin-form
        hdrs = {k.lower(): v for k, v in echo["headers"].items()}
        self.assertEqual(hdrs["host"], "a.example")
        self.assertEqual(r.header("RateLimit-Policy"), '"per-ip";q=100;w=60')
        # The same path under Host: other.example goes to "rest", unlimited and unstripped.
        r = get(self.gw.port, "/api/orders/1", {"Host": "other.example"})
        self.assertEqual(r.json()["path"], "/api/orders/1")
        self.assertIsNone(r.header("RateLimit-Policy"))

    def test_a_trailing_dot_names_the_same_host(self):
        # "a.example." is "a.example" (RFC 1034 3.1): it must not step around the host route
        # and its limiter to the catch-all route.
        for host in ["a.example.", "A.EXAMPLE.:80"]:
            r = get(self.gw.port, "/api/orders/1", {"Host": host})
            self.assertEqual(r.json()["path"], "/orders/1", host)
            self.assertEqual(r.header("RateLimit-Policy"), '"per-ip";q=100;w=60', host)
            self.assertEqual({k.lower(): v for k, v in r.json()["headers"].items()}["host"],
                             host.lower().replace(".:", ":").rstrip("."))
        r, _ = self.raw(b"GET http://a.example./api/orders/2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertEqual(r.json()["path"], "/orders/2")

    def test_route_host_with_port_matches_only_that_port(self):
        self.assertEqual(get(self.gw.port, "/p", {"Host": "A.example:8080"}).json()["path"], "/")
        r = get(self.gw.port, "/p", {"Host": "a.example"})  # means port 80: falls to "rest"
        self.assertEqual(r.json()["path"], "/p")
        self.assertEqual(get(self.gw.port, "/p", {"Host": "a.example:8081"}).json()["path"], "/p")

    def test_connect_is_405(self):
        r, closed = self.raw(b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n")
        self.assertEqual(r.status, 405)
        self.assertEqual(r.json()["error"], "method_not_allowed")
        r, closed = self.raw(b"CONNECT /path HTTP/1.1\r\nHost: a.example\r\n\r\n")
        self.assertEqual(r.status, 405)


class HeadFraming(EdgeTest):
    def test_head_to_404_429_502_keeps_the_connection_framed(self):
        dead = free_port()
        self.up = self.upstream()
        cfg = {
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]},
                          "dead": {"targets": ["127.0.0.1:%d" % dead], "connect_timeout": "500ms"}},
            "limiters": {"tiny": log_limiter("global", 1)},
            "routes": [{"name": "lim", "match": {"path_prefix": "/lim"}, "upstream": "demo", "limiters": ["tiny"]},
                       {"name": "dead", "match": {"path_prefix": "/dead"}, "upstream": "dead"},
                       {"name": "ok", "match": {"path": "/ok"}, "upstream": "demo"}],
        }
        self.gw = self.gateway(cfg)
        self.assertEqual(get(self.gw.port, "/lim").status, 200)  # uses the one permit
        for path, status in [("/nothing", 404), ("/lim", 429), ("/dead", 502)]:
            c = Conn(self.gw.port)
            # HEAD and a GET pipelined in one write: the GET's response must follow cleanly.
            c.send("HEAD %s HTTP/1.1\r\nHost: t\r\n\r\nGET /ok HTTP/1.1\r\nHost: t\r\n\r\n" % path)
            r = c.read_response(head=True)
            self.assertEqual(r.status, status, path)
            self.assertGreater(int(r.header("Content-Length")), 0)
            r2 = c.read_response()
            self.assertEqual(r2.status, 200, path)
            self.assertEqual(r2.json()["path"], "/ok")
            c.close()


class Http10Clients(EdgeTest):
    def setUp(self):
        super().setUp()
        self.make({}, [{"name": "all", "match": {"path_prefix": "/"}}])

    def test_http10_never_gets_chunked_and_bodies_are_exact(self):
        for path in ["/bytes?n=300000&chunked=1", "/eof?n=200000", "/bytes?n=100000"]:
            c = Conn(self.gw.port)
            c.send("GET %s HTTP/1.0\r\n\r\n" % path)
            r = c.read_response()
            self.assertIsNone(r.header("Transfer-Encoding"), path)
            self.assertEqual(r.body, b"x" * int(path.split("n=")[1].split("&")[0]), path)
            self.assertTrue(r.header("Connection", "close").lower() == "close", path)
            c.close()

    def test_http10_keep_alive_only_when_sized(self):
        c = Conn(self.gw.port)
        for _ in range(3):
            c.send(b"GET /bytes?n=1000 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            r = c.read_response()
            self.assertEqual(len(r.body), 1000)
            self.assertEqual(r.header("Connection").lower(), "keep-alive")
        c.send(b"GET /bytes?n=1000&chunked=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        r = c.read_response()  # close-delimited: read to EOF
        self.assertEqual(r.body, b"x" * 1000)
        self.assertIsNone(r.header("Transfer-Encoding"))
        c.close()

    def test_curl_http10(self):
        for path in ["/bytes?n=250000&chunked=1", "/eof?n=70000", "/bytes?n=5"]:
            out = subprocess.run(["curl", "-sS", "--http1.0", "-D", "-", "-o", "/dev/null", "-w", "%{size_download}",
                                  "--max-time", "10", "http://127.0.0.1:%d%s" % (self.gw.port, path)],
                                 capture_output=True, text=True, timeout=20)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertNotIn("transfer-encoding", out.stdout.lower())
            self.assertTrue(out.stdout.endswith(path.split("n=")[1].split("&")[0]), out.stdout)

    @unittest.skipUnless(shutil.which("ab"), "apache2-utils not installed")
    def test_ab_and_ab_keepalive(self):
        for args, path, keep in [([], "/bytes?n=2000&chunked=1", False), (["-k"], "/bytes?n=2000&chunked=1", False),
                                 (["-k"], "/bytes?n=2000", True), ([], "/eof?n=3000", False)]:
            out = subprocess.run(["ab", "-q", "-n", "300", "-c", "10", "-s", "10"] + args +
                                 ["http://127.0.0.1:%d%s" % (self.gw.port, path)],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            self.assertRegex(out.stdout, r"Complete requests:\s+300", out.stdout)
            self.assertRegex(out.stdout, r"Failed requests:\s+0\b", out.stdout)
            self.assertNotRegex(out.stdout, r"Non-2xx responses", out.stdout)
            ka = [l for l in out.stdout.splitlines() if l.startswith("Keep-Alive requests")]
            if keep:
                self.assertRegex(ka[0], r"Keep-Alive requests:\s+300")
            elif ka:
                self.assertRegex(ka[0], r"Keep-Alive requests:\s+0\b")


if __name__ == "__main__":
    unittest.main()


class AdminHardening(GatewayTest):
    def start(self, extra=None):
        self.up = self.upstream()
        self.admin_port = free_port()
        cfg = {
            "admin": {"listen": "127.0.0.1:%d" % self.admin_port},
            "limits": {"header_timeout": "1s", "max_header_bytes": 2048},
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
            "routes": [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "demo"}],
        }
        for k, v in (extra or {}).items():
            cfg[k] = dict(cfg.get(k, {}), **v) if isinstance(v, dict) else v
        self.gw = self.gateway(cfg)
        wait_port(self.admin_port, proc=self.gw.proc)

    def test_admin_header_deadline_and_size_limits(self):
        self.start()
        c = Conn(self.admin_port)
        c.send(b"GET /metrics HTTP/1.1\r\nHost: a\r\nX-Slow: ")
        t0 = time.time()
        self.assertTrue(c.closed_by_peer(5))  # a slow header block is cut at header_timeout
        self.assertLess(time.time() - t0, 4)
        c.close()
        c = Conn(self.admin_port)
        c.send(b"GET /metrics HTTP/1.1\r\nHost: a\r\nX-Big: " + b"b" * 4096 + b"\r\n\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 431)
        c.close()
        r = Conn(self.admin_port)
        r.send(b"HEAD /healthz HTTP/1.1\r\nHost: a\r\n\r\nGET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
        h = r.read_response(head=True)
        self.assertEqual(h.status, 200)
        self.assertEqual(r.read_response().json()["status"], "ok")  # HEAD left no body behind
        r.close()
        # The main listener's request-line rules (RFC 9112 §3.2): an HTTP/1.1 request needs a
        # Host, an absolute-form target is served, dot segments are resolved.
        c = Conn(self.admin_port)
        c.send(b"GET /healthz HTTP/1.1\r\n\r\n")
        r = c.read_response()
        self.assertEqual((r.status, r.json()["error"]), (400, "bad_request"))
        self.assertTrue(c.closed_by_peer(5))
        c.close()
        c = Conn(self.admin_port)
        c.send(b"GET http://admin.test/healthz HTTP/1.1\r\nHost: admin.test\r\n\r\n"
               b"GET /x/../readyz HTTP/1.1\r\nHost: a\r\n\r\n")
        self.assertEqual(c.read_response().json()["status"], "ok")
        self.assertIn(c.read_response().status, (200, 503))  # /readyz, not a 404
        c.close()

    def test_admin_connection_cap(self):
        self.start({"limits": {"header_timeout": "20s"}})
        held = [socket.create_connection(("127.0.0.1", self.admin_port)) for _ in range(1024)]
        try:
            time.sleep(0.5)
            extra = Conn(self.admin_port)
            self.assertTrue(extra.closed_by_peer(5), "the 1025th admin connection was not refused")
            extra.close()
            held.pop().close()
            time.sleep(0.3)
            self.assertEqual(get(self.admin_port, "/healthz").status, 200)
        finally:
            for s in held:
                s.close()

    def test_config_masks_url_passwords_and_secret_fields(self):
        from harness import RedisServer
        redis = self.track(RedisServer(extra=["--requirepass", "p@ss:w/rd"]))
        self.start({"redis": {"url": "redis://:p%40ss%3Aw%2Frd@127.0.0.1:" + str(redis.port) + "/0"}})
        body = get(self.admin_port, "/config").body.decode()
        self.assertNotIn("p%40ss", body)
        self.assertNotIn("p@ss", body)
        self.assertIn("****", body)
        self.assertIn("127.0.0.1:%d" % redis.port, body)

    @unittest.skipIf(SANITIZED, "the sanitizer runtime itself needs descriptors (it opens a pipe to "
                                "probe memory) and reports false vptr errors once they run out")
    def test_accept_backs_off_when_out_of_descriptors(self):
        if not shutil.which("prlimit"):
            self.skipTest("prlimit missing")
        self.start()
        subprocess.run(["prlimit", "--pid", str(self.gw.pid), "--nofile=64:64"], check=True)
        held = []
        try:
            for _ in range(80):
                try:
                    held.append(socket.create_connection(("127.0.0.1", self.admin_port), timeout=1))
                except OSError:
                    break
            time.sleep(0.3)

            def cpu():
                with open("/proc/%d/stat" % self.gw.pid) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

            before = cpu()
            time.sleep(1.5)
            used = cpu() - before
            self.assertLess(used, 0.5, "the gateway spun at %.2f s CPU per 1.5 s on EMFILE" % used)
        finally:
            for s in held:
                s.close()
        time.sleep(0.5)
        self.assertEqual(get(self.admin_port, "/healthz").status, 200)  # recovers


def request_from(source_ip, port, path, headers, timeout=10.0):
    """One HTTP/1.1 request from a chosen loopback source address; returns the Response."""
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((source_ip, 0))
    s.connect(("127.0.0.1", port))
    c = Conn.__new__(Conn)
    c.sock, c.buf = s, b""
    try:
        lines = "".join("%s: %s\r\n" % kv for kv in headers)
        c.send("GET %s HTTP/1.1\r\nHost: t\r\n%sConnection: close\r\n\r\n" % (path, lines))
        return c.read_response()
    finally:
        c.close()


class IdentityBypass(EdgeTest):
    def per_ip(self, limit=3, trusted=("127.0.0.1/32",), header=None, **extra):
        client_ip = {"trusted_proxies": list(trusted)}
        if header:
            client_ip["header"] = header
        self.make({"per-ip": log_limiter("ip", limit, **extra)},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-ip"]}],
                  identity={"client_ip": client_ip})

    def xff(self, values):
        return [get(self.gw.port, "/api/x", {"X-Forwarded-For": v}).status for v in values]

    @unittest.skipUnless(shutil.which("haproxy"), "haproxy not installed")
    def test_forged_xff_through_haproxy_forwardfor_stays_limited(self):
        # HAProxy (trusted, connecting from 127.0.0.2) adds its own X-Forwarded-For line with the
        # client's address (127.0.0.3); the client's forged line comes first.
        self.per_ip(3, trusted=["127.0.0.2/32"])
        hport = free_port()
        cfg = tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False)
        cfg.write("global\n  maxconn 200\ndefaults\n  mode http\n  timeout connect 2s\n"
                  "  timeout client 10s\n  timeout server 10s\n  option forwardfor\n"
                  "frontend fe\n  bind 127.0.0.1:%d\n  default_backend be\n"
                  "backend be\n  server gw 127.0.0.1:%d source 127.0.0.2\n" % (hport, self.gw.port))
        cfg.close()
        from harness import Process
        self.track(Process(["haproxy", "-db", "-f", cfg.name], "haproxy"))
        wait_port(hport)
        got = []
        for i in range(6):
            r = request_from("127.0.0.3", hport, "/api/x", [("X-Forwarded-For", "6.6.6.%d" % i),
                                                             ("X-Forwarded-For", "7.7.7.%d, 8.8.8.8" % i)])
            got.append(r.status)
            if i == 0:
                # Every entry the client sent, in order, then HAProxy's, then the peer.
                self.assertEqual(r.json()["headers"]["x-forwarded-for"],
                                 "6.6.6.0, 7.7.7.0, 8.8.8.8, 127.0.0.3, 127.0.0.2")
        self.assertEqual(got, [200, 200, 200, 429, 429, 429])
        self.assertEqual(request_from("127.0.0.4", hport, "/api/x", []).status, 200)  # another client

    def test_xff_field_lines_form_one_list(self):
        self.per_ip(2)
        c = Conn(self.gw.port)
        hdr = "X-Forwarded-For: 203.0.113.9\r\nX-Forwarded-For: 6.6.6.6\r\n"
        responses = []
        for i in range(3):
            # The right-most untrusted entry is the client whatever the client adds on the left.
            c.send("GET /api/x HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 1.2.3.%d\r\n%s\r\n" % (i, hdr))
            responses.append(c.read_response())
        self.assertEqual([r.status for r in responses], [200, 200, 429])
        # Forwarded on: every entry of every line, in order, then the peer.
        self.assertEqual(responses[1].json()["headers"]["x-forwarded-for"],
                         "1.2.3.1, 203.0.113.9, 6.6.6.6, 127.0.0.1")
        c.close()

    def test_ipv6_notations_share_one_counter(self):
        self.per_ip(3)
        self.assertEqual(self.xff(["2001:db8::1", "2001:0db8:0000:0000:0000:0000:0000:0001", "2001:DB8::1",
                                   "[2001:db8::1]:443", "2001:db8:0:0::1%eth0"]), [200, 200, 200, 429, 429])

    def test_ipv4_mapped_forms_are_the_ipv4_client(self):
        self.per_ip(3)
        self.assertEqual(self.xff(["::ffff:198.51.100.7", "::FFFF:198.51.100.7", "::ffff:c633:6407",
                                   "198.51.100.7", "0:0:0:0:0:ffff:c633:6407", "198.51.100.7:8080"]),
                         [200, 200, 200, 429, 429, 429])

    def test_ipv6_prefix_groups_ipv6_only(self):
        self.per_ip(1, ipv6_prefix=64)
        self.assertEqual(self.xff(["::ffff:198.51.100.7", "::ffff:198.51.100.8", "198.51.100.7"]), [200, 200, 429])
        self.assertEqual(self.xff(["2001:db8::1", "2001:db8::ffff:2"]), [200, 429])  # one /64

    def test_ipv4_prefix_groups_ipv4(self):
        self.per_ip(2, ipv4_prefix=24)
        self.assertEqual(self.xff(["198.51.100.7", "198.51.100.200", "198.51.101.1", "198.51.100.9"]),
                         [200, 200, 200, 429])

    def test_garbage_entries_share_the_trusted_hops_counter(self):
        self.per_ip(3)
        self.assertEqual(self.xff(["unknown", "999.1.1.1", "not an ip"]), [200, 200, 200])
        # All three were the trusted hop (the peer) that passed the garbage on: its counter is spent.
        self.assertEqual(self.xff(["", "_hidden", "1.2.3"]), [429, 429, 429])
        self.assertEqual(self.xff(["203.0.113.1"]), [200])

    def test_forwarded_header_rfc7239(self):
        self.per_ip(2, header="Forwarded")
        statuses = []
        for v in ['for=192.0.2.60;proto=http;by=203.0.113.43', 'for="[2001:db8:cafe::17]:4711"',
                  'for=192.0.2.43, for="[2001:db8:cafe::17]"', 'For="[2001:DB8:CAFE:0::17]"']:
            statuses.append(get(self.gw.port, "/api/x", {"Forwarded": v}).status)
        self.assertEqual(statuses, [200, 200, 200, 429])

    def test_forwarded_outside_rfc7239_grammar_is_not_an_address(self):
        self.per_ip(2, header="Forwarded")
        # Each is refused by the grammar, so the trusted peer that passed it is the client:
        # a client cannot mint a fresh counter per request with bad syntax.
        bad = ['for=192.0.2.43:47011', 'for=[2001:db8::17]', 'for = 192.0.2.44', 'fo r=192.0.2.45',
               'for="[1.1.1.1]"', 'for="0.0.0.0"', 'for="[::]"']
        got = [get(self.gw.port, "/api/x", {"Forwarded": v}).status for v in bad]
        self.assertEqual(got, [200, 200] + [429] * (len(bad) - 2))
        self.assertEqual(get(self.gw.port, "/api/x", {"Forwarded": 'for="192.0.2.43:47011"'}).status, 200)

    def test_unspecified_addresses_are_not_clients(self):
        self.per_ip(2)
        self.assertEqual(self.xff(["0.0.0.0", "::", "[::]:80", "0.0.0.0:1", "::ffff:0.0.0.0"]),
                         [200, 200, 429, 429, 429])  # all the trusted peer's counter

    def test_trusted_hops_trusts_positions_whatever_their_addresses(self):
        # A load balancer with no fixed address (a cloud LB) in front: trusted_hops 2 trusts the
        # peer and the right-most entry, and the client is the entry left of them.
        self.make({"per-ip": log_limiter("ip", 2)},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-ip"]}],
                  identity={"client_ip": {"trusted_hops": 2}})
        forged = ["6.6.6.%d, 203.0.113.5, 198.51.100.%d" % (i, i) for i in range(4)]
        got = [get(self.gw.port, "/api/x", {"X-Forwarded-For": v}).status for v in forged]
        # 203.0.113.5 is the client every time: neither the LB's address nor the forged left-most.
        self.assertEqual(got, [200, 200, 429, 429])
        self.assertEqual(self.xff(["203.0.113.6, 10.0.0.1"]), [200])
        # Fewer entries than hops: all trusted, the left-most is the client.
        self.assertEqual(self.xff(["192.0.2.1", "192.0.2.1", "192.0.2.1"]), [200, 200, 429])

    def test_one_address_header(self):
        self.per_ip(1, header="X-Real-IP")
        self.assertEqual([get(self.gw.port, "/api/x", {"X-Real-IP": v}).status
                          for v in ["192.0.2.1", "192.0.2.2", "192.0.2.1"]], [200, 200, 429])

    def test_identities_over_256_bytes_are_400(self):
        self.up = self.upstream()
        self.gw = self.gateway({
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
            "identity": {"user": {"header": "X-User-Id"}},
            "limiters": {"u": log_limiter("user", 100), "k": log_limiter("header:X-Api-Key", 100)},
            "routes": [{"name": "u", "match": {"path_prefix": "/u"}, "upstream": "demo", "limiters": ["u"]},
                       {"name": "k", "match": {"path_prefix": "/k"}, "upstream": "demo", "limiters": ["k"]},
                       {"name": "free", "match": {"path_prefix": "/free"}, "upstream": "demo"}]})
        for path, name in [("/u", "X-User-Id"), ("/k", "X-Api-Key")]:
            self.assertEqual(get(self.gw.port, path, {name: "a" * 256}).status, 200)
            r = get(self.gw.port, path, {name: "a" * 257})
            self.assertEqual(r.status, 400, path)
            self.assertEqual(r.json()["error"], "invalid_identity")
        # Not used by a limiter of the route: no check.
        self.assertEqual(get(self.gw.port, "/free", {"X-User-Id": "a" * 1000}).status, 200)

    def test_an_identity_header_on_two_lines_is_400(self):
        # The limit would take the first line, an upstream may read the other (or both joined):
        # an empty first line used to skip the per-user layer altogether.
        self.up = self.upstream()
        self.gw = self.gateway({
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
            "identity": {"user": {"header": "X-User-Id"}},
            "limiters": {"u": log_limiter("user", 2), "k": log_limiter("header:X-Api-Key", 2)},
            "routes": [{"name": "u", "match": {"path_prefix": "/u"}, "upstream": "demo", "limiters": ["u"]},
                       {"name": "k", "match": {"path_prefix": "/k"}, "upstream": "demo", "limiters": ["k"]},
                       {"name": "free", "match": {"path_prefix": "/free"}, "upstream": "demo"}]})

        def send(path, name, values):
            c = Conn(self.gw.port)
            c.send(("GET %s HTTP/1.1\r\nHost: t\r\n%sConnection: close\r\n\r\n" % (
                path, "".join("%s: %s\r\n" % (name, v) for v in values))).encode())
            r = c.read_response()
            c.close()
            return r

        for path, name in [("/u", "X-User-Id"), ("/k", "X-Api-Key")]:
            for values in (["", "alice"], ["alice", "bob"], ["alice", "alice"]):
                r = send(path, name, values)
                self.assertEqual(r.status, 400, (path, values))
                self.assertEqual(r.json()["error"], "invalid_identity")
                self.assertIn(name, r.json()["message"])
            self.assertEqual([send(path, name, ["alice"]).status for _ in range(3)], [200, 200, 429])
        # Not used by a limiter of the route: no check.
        self.assertEqual(send("/free", "X-User-Id", ["a", "b"]).status, 200)
