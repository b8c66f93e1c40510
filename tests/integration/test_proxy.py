"""Reverse proxy behaviour of SPEC §3 over real sockets: gateway + demo upstream on loopback."""
import hashlib
import json
import os
import signal
import socket
import subprocess
import threading
import time

from harness import (SANITIZED, Conn, GatewayTest, binary, free_port, get, proxy_config, rss_kib)

BIG = (100 if SANITIZED else 1024) * 1024 * 1024  # bytes streamed each way in the big-body tests


class RoundTrip(GatewayTest):
    def setUp(self):
        super().setUp()
        self.up = self.upstream("a")
        self.gw = self.gateway(proxy_config([self.up.port]))

    def test_round_trip_strips_prefix_and_keeps_query(self):
        r = get(self.gw.port, "/api/items/7?sort=asc&x=%2F")
        self.assertEqual(r.status, 200)
        echo = r.json()
        self.assertEqual(echo["method"], "GET")
        self.assertEqual(echo["target"], "/items/7?sort=asc&x=%2F")
        self.assertEqual(echo["upstream"], "a")

    def test_no_route_is_404_json(self):
        r = get(self.gw.port, "/nothing/here")
        self.assertEqual(r.status, 404)
        self.assertEqual(r.header("Content-Type"), "application/json")
        self.assertEqual(r.json()["error"], "not_found")

    def test_keep_alive_reuses_client_and_upstream_connections(self):
        c = Conn(self.gw.port)
        first = c.request("GET", "/api/one").json()
        second = c.request("GET", "/api/two").json()
        c.close()
        self.assertEqual(first["path"], "/one")
        self.assertEqual(second["path"], "/two")
        # one thread, one target: the pooled upstream connection is reused
        self.assertEqual(first["connection"], second["connection"])
        third = get(self.gw.port, "/api/three").json()
        self.assertEqual(third["connection"], first["connection"])

    def test_client_pipelining_answers_in_order(self):
        c = Conn(self.gw.port)
        c.send("".join("GET /api/p%d HTTP/1.1\r\nHost: h\r\n\r\n" % i for i in range(5)))
        paths = [c.read_response().json()["path"] for _ in range(5)]
        c.close()
        self.assertEqual(paths, ["/p0", "/p1", "/p2", "/p3", "/p4"])

    def test_pipelined_post_bodies_stay_framed(self):
        c = Conn(self.gw.port)
        c.send(b"POST /api/a HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
               b"POST /api/b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
               b"GET /api/c HTTP/1.1\r\nHost: h\r\n\r\n")
        a, b, cc = (c.read_response().json() for _ in range(3))
        c.close()
        self.assertEqual((a["path"], a["body"]), ("/a", "hello"))
        self.assertEqual((b["path"], b["body"]), ("/b", "abc"))
        self.assertEqual(cc["path"], "/c")

    def test_sized_and_chunked_request_bodies(self):
        body = os.urandom(200_000).hex()
        r = get(self.gw.port, "/api/up", method="POST", body=body.encode()).json()
        self.assertEqual(r["body_bytes"], len(body))
        self.assertEqual(r["body"], body[:65536])
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (b"x" * 1000, b"y" * 70000, b"z"))
        c = Conn(self.gw.port)
        c.send(b"POST /api/chunked HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")
        r = c.read_response().json()
        c.close()
        self.assertEqual(r["body_bytes"], 71001)
        self.assertEqual(r["headers"].get("transfer-encoding"), "chunked")
        self.assertNotIn("content-length", r["headers"])

    def test_sized_chunked_and_eof_delimited_responses(self):
        c = Conn(self.gw.port)
        sized = c.request("GET", "/api/bytes?n=300000")
        chunked = c.request("GET", "/api/bytes?n=300000&chunked=1")
        eof = c.request("GET", "/api/eof?n=5000")  # re-framed as chunked: the client connection survives
        after = c.request("GET", "/api/still-open")
        c.close()
        self.assertEqual((sized.status, len(sized.body), sized.header("Content-Length")), (200, 300000, "300000"))
        self.assertEqual((len(chunked.body), chunked.header("Transfer-Encoding")), (300000, "chunked"))
        self.assertEqual((len(eof.body), eof.header("Transfer-Encoding")), (5000, "chunked"))
        self.assertEqual(after.json()["path"], "/still-open")

    def test_head_has_no_body(self):
        c = Conn(self.gw.port)
        r = c.request("HEAD", "/api/bytes?n=1000", head=True)
        self.assertEqual((r.status, r.header("Content-Length")), (200, "1000"))
        self.assertEqual(c.request("GET", "/api/next").json()["path"], "/next")
        c.close()

    def test_hop_by_hop_headers_removed_both_ways(self):
        r = get(self.gw.port, "/api/headers?set=X-Up-Secret:1&set=Connection:X-Up-Secret&set=Keep-Alive:timeout%3D9"
                              "&set=Proxy-Connection:keep-alive&set=X-Visible:yes",
                headers={"Connection": "keep-alive, X-Client-Secret", "X-Client-Secret": "s", "Keep-Alive": "300",
                         "TE": "trailers", "Upgrade": "h2c", "Proxy-Connection": "keep-alive", "X-Kept": "k"})
        sent = r.json()["headers"]
        for name in ("x-client-secret", "keep-alive", "te", "upgrade", "proxy-connection"):
            self.assertNotIn(name, sent)
        self.assertNotIn("close", sent.get("connection", ""))
        self.assertEqual(sent["x-kept"], "k")
        self.assertIsNone(r.header("X-Up-Secret"))
        self.assertIsNone(r.header("Keep-Alive"))
        self.assertIsNone(r.header("Proxy-Connection"))
        self.assertEqual(r.header("X-Visible"), "yes")

    def test_forwarding_headers(self):
        r = get(self.gw.port, "/api/fwd", headers={"Host": "shop.example:8443", "X-Forwarded-For": "203.0.113.9",
                                                   "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil"})
        sent = r.json()["headers"]
        self.assertEqual(sent["x-forwarded-for"], "203.0.113.9, 127.0.0.1")
        self.assertEqual(sent["x-forwarded-proto"], "http")
        self.assertEqual(sent["x-forwarded-host"], "shop.example:8443")
        self.assertEqual(sent["host"], "shop.example:8443")
        self.assertEqual(sent["via"], "1.1 rategate")
        self.assertEqual(r.header("Via"), "1.1 rategate")
        generated = sent["x-request-id"]
        self.assertRegex(generated, "^[0-9a-f]{32}$")
        self.assertEqual(r.header("X-Request-Id"), generated)
        passed = get(self.gw.port, "/api/fwd", headers={"X-Request-Id": "req-42"})
        self.assertEqual(passed.json()["headers"]["x-request-id"], "req-42")
        self.assertEqual(passed.header("X-Request-Id"), "req-42")

    def test_expect_100_continue(self):
        c = Conn(self.gw.port)
        c.send(b"POST /api/e HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        interim = c.read_response()
        self.assertEqual(interim.status, 100)
        c.send(b"data")
        r = c.read_response().json()
        c.close()
        self.assertEqual(r["body"], "data")
        self.assertNotIn("expect", r["headers"])

    def test_upstream_status_passes_through(self):
        self.assertEqual(get(self.gw.port, "/api/status/503").status, 503)
        self.assertEqual(get(self.gw.port, "/api/status/204").status, 204)


class Limits(GatewayTest):
    def make(self, **limits):
        self.up = self.upstream()
        cfg = proxy_config([self.up.port])
        cfg["limits"] = limits
        self.gw = self.gateway(cfg)

    def test_header_block_too_large_is_431(self):
        self.make(max_header_bytes=2048)
        c = Conn(self.gw.port)
        c.send("GET /api/x HTTP/1.1\r\nHost: h\r\nX-Big: %s\r\n\r\n" % ("a" * 4000))
        r = c.read_response()
        self.assertEqual(r.status, 431)
        self.assertEqual(r.json()["error"], "headers_too_large")
        self.assertTrue(c.closed_by_peer())
        self.assertEqual(get(self.gw.port, "/api/x", headers={"X-Small": "a" * 1000}).status, 200)

    def test_body_too_large_is_413(self):
        self.make(max_body_bytes="1KiB")
        c = Conn(self.gw.port)
        c.send(b"POST /api/x HTTP/1.1\r\nHost: h\r\nContent-Length: 5000\r\n\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 413)
        self.assertEqual(r.json()["error"], "body_too_large")
        c.close()
        c = Conn(self.gw.port)
        c.send(b"POST /api/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"400\r\n" + b"a" * 1024 + b"\r\n" + b"10\r\n" + b"b" * 16 + b"\r\n0\r\n\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 413)
        c.close()
        self.assertEqual(get(self.gw.port, "/api/x", method="POST", body=b"a" * 1024).status, 200)

    def test_slowloris_is_cut_at_header_timeout(self):
        self.make(header_timeout="700ms")
        c = Conn(self.gw.port)
        start = time.time()
        closed = False
        try:
            for piece in [b"GET /api/x HTTP/1.1\r\n"] + [b"X-Drip-%d: 1\r\n" % i for i in range(40)]:
                c.send(piece)  # one header line every 100 ms: each read succeeds, the block never ends
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        closed = closed or c.closed_by_peer(3)
        elapsed = time.time() - start
        self.assertTrue(closed)
        self.assertLess(elapsed, 3.0)
        self.assertGreater(elapsed, 0.6)

    def test_idle_keep_alive_is_closed(self):
        self.make(idle_timeout="500ms", header_timeout="5s")
        c = Conn(self.gw.port)
        self.assertEqual(c.request("GET", "/api/x").status, 200)
        start = time.time()
        self.assertTrue(c.closed_by_peer(4))
        self.assertGreater(time.time() - start, 0.4)

    def test_max_connections(self):
        self.make(max_connections=2)
        a, b = Conn(self.gw.port), Conn(self.gw.port)
        self.assertEqual(a.request("GET", "/api/a").status, 200)
        self.assertEqual(b.request("GET", "/api/b").status, 200)
        third = Conn(self.gw.port)
        self.assertTrue(third.closed_by_peer(3))
        a.close()
        time.sleep(0.2)
        self.assertEqual(get(self.gw.port, "/api/again").status, 200)
        b.close()


class StrictParsing(GatewayTest):
    def setUp(self):
        super().setUp()
        self.up = self.upstream()
        self.gw = self.gateway(proxy_config([self.up.port]))

    def assert_400_and_close(self, raw, reason_part=None):
        c = Conn(self.gw.port)
        c.send(raw)
        r = c.read_response()
        self.assertEqual(r.status, 400, raw)
        self.assertEqual(r.json()["error"], "bad_request")
        if reason_part:
            self.assertIn(reason_part, r.json()["message"])
        self.assertTrue(c.closed_by_peer(), "connection left open after %r" % raw)

    def test_content_length_with_transfer_encoding_is_smuggling(self):
        self.assert_400_and_close(b"POST /api/x HTTP/1.1\r\nHost: h\r\nContent-Length: 6\r\n"
                                  b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /api/smuggled HTTP/1.1\r\n\r\n",
                                  "both Content-Length and Transfer-Encoding")

    def test_transfer_encoding_read_otherwise_by_beast_is_smuggling(self):
        # Each passed a "last coding is chunked" check, while Beast's parser (first "chunked"
        # token last, clean tokens) saw no body: the head went upstream with its
        # Transfer-Encoding and the body became the next request.
        for te in [b"chunked, chunked", b"x y, chunked", b"gzip;q=1, chunked", b"gzip ;a=b, chunked",
                   b'"x", chunked', b"gzip,, chunked"]:
            self.assert_400_and_close(b"POST /api/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: " + te +
                                      b"\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /api/smuggled HTTP/1.1\r\n\r\n",
                                      "Transfer-Encoding")
        # The codings that stay: clean tokens, chunked once and last.
        c = Conn(self.gw.port)
        c.send(b"POST /api/te HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: CHUNKED\r\nConnection: close\r\n\r\n"
               b"5\r\nhello\r\n0\r\n\r\n")
        self.assertEqual(c.read_response().status, 200)

    def test_invalid_content_length(self):
        self.assert_400_and_close(b"POST /api/x HTTP/1.1\r\nHost: h\r\nContent-Length: 1x\r\n\r\n", "Content-Length")
        self.assert_400_and_close(b"POST /api/x HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n")

    def test_bare_lf_obs_fold_space_before_colon_nul_bare_cr(self):
        self.assert_400_and_close(b"GET /api/x HTTP/1.1\nHost: h\n\n", "bare LF")
        self.assert_400_and_close(b"GET /api/x HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n folded\r\n\r\n", "folding")
        self.assert_400_and_close(b"GET /api/x HTTP/1.1\r\nHost : h\r\n\r\n", "colon")
        self.assert_400_and_close(b"GET /api/x HTTP/1.1\r\nHost: h\x00x\r\n\r\n", "NUL")
        self.assert_400_and_close(b"GET /api/x HTTP/1.1\r\nHost: h\rx\r\n\r\n", "bare CR")

    def test_garbage_request_line(self):
        self.assert_400_and_close(b"THIS IS NOT HTTP\r\n\r\n")

    def test_bad_chunk_encoding(self):
        c = Conn(self.gw.port)
        c.send(b"POST /api/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
        r = c.read_response()
        self.assertEqual(r.status, 400)
        self.assertTrue(c.closed_by_peer())


class UpstreamFailures(GatewayTest):
    def test_unreachable_upstream_is_502(self):
        dead = free_port()
        gw = self.gateway(proxy_config([dead]))
        r = get(gw.port, "/api/x")
        self.assertEqual(r.status, 502)
        self.assertEqual(r.json()["error"], "upstream_unavailable")

    def test_slow_upstream_is_504(self):
        up = self.upstream()
        cfg = proxy_config([up.port])
        cfg["upstreams"]["demo"]["response_timeout"] = "300ms"
        gw = self.gateway(cfg)
        start = time.time()
        r = get(gw.port, "/api/slow?ms=2000")
        self.assertEqual(r.status, 504)
        self.assertEqual(r.json()["error"], "upstream_timeout")
        self.assertLess(time.time() - start, 1.5)
        self.assertEqual(get(gw.port, "/api/slow?ms=10").status, 200)

    def test_failed_connect_retried_on_next_target_for_idempotent_methods(self):
        up = self.upstream("live")
        gw = self.gateway(proxy_config([free_port(), up.port]))
        statuses = [get(gw.port, "/api/x").status for _ in range(6)]
        self.assertEqual(statuses, [200] * 6)
        posts = [get(gw.port, "/api/x", method="POST", body=b"1").status for _ in range(4)]
        self.assertIn(502, posts)  # POST is not retried: every other one hits the dead target
        self.assertIn(200, posts)

    def test_round_robin_across_targets(self):
        a, b = self.upstream("a"), self.upstream("b")
        gw = self.gateway(proxy_config([a.port, b.port]))
        seen = [get(gw.port, "/api/x").json()["upstream"] for _ in range(6)]
        self.assertEqual(sorted(set(seen)), ["a", "b"])
        self.assertEqual(seen.count("a"), 3)

    def test_upstream_restart_stale_pool_connection_is_replaced(self):
        up = self.upstream("first")
        gw = self.gateway(proxy_config([up.port]))
        self.assertEqual(get(gw.port, "/api/x").status, 200)
        port = up.port
        up.stop()
        # restart on the same port: the pooled connection is dead
        from harness import Process, wait_port
        again = self.track(Process([binary("demo_upstream"), "--listen", "127.0.0.1:%d" % port, "--name", "second"],
                                   "upstream-second"))
        wait_port(port)
        r = get(gw.port, "/api/x")
        self.assertEqual((r.status, r.json()["upstream"]), (200, "second"))


class Streaming(GatewayTest):
    wall_clock_cap = 300

    def setUp(self):
        super().setUp()
        self.up = self.upstream()
        cfg = proxy_config([self.up.port])
        cfg["limits"] = {"max_body_bytes": "2GiB"}
        self.gw = self.gateway(cfg)

    def _watch_rss(self, stop, peak):
        while not stop.is_set():
            peak[0] = max(peak[0], rss_kib(self.gw.pid))
            time.sleep(0.05)

    def _with_rss(self, fn):
        base = rss_kib(self.gw.pid)
        stop, peak = threading.Event(), [base]
        t = threading.Thread(target=self._watch_rss, args=(stop, peak))
        t.start()
        try:
            fn()
        finally:
            stop.set()
            t.join()
        return (peak[0] - base) / 1024.0

    def test_big_upload_streams_with_flat_memory(self):
        def upload():
            c = Conn(self.gw.port, timeout=60)
            c.send(b"POST /api/sink HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n" % BIG)
            block = b"u" * (1 << 20)
            for _ in range(BIG // len(block)):
                c.sock.sendall(block)
            r = c.read_response().json()
            c.close()
            self.assertEqual(r["body_bytes"], BIG)
        growth = self._with_rss(upload)
        print("upload %d MiB: gateway RSS growth %.1f MiB" % (BIG >> 20, growth))
        self.assertLess(growth, 50)

    def test_big_download_streams_with_flat_memory(self):
        def download():
            c = Conn(self.gw.port, timeout=60)
            got = [0]
            c.send(b"GET /api/bytes?n=%d HTTP/1.1\r\nHost: h\r\n\r\n" % BIG)
            r = c.read_response(sink=lambda b: got.__setitem__(0, got[0] + len(b)))
            c.close()
            self.assertEqual((r.status, got[0]), (200, BIG))
        growth = self._with_rss(download)
        print("download %d MiB: gateway RSS growth %.1f MiB" % (BIG >> 20, growth))
        self.assertLess(growth, 50)


class Lifecycle(GatewayTest):
    def test_sigterm_finishes_in_flight_requests_and_exits_0(self):
        up = self.upstream()
        gw = self.gateway(proxy_config([up.port]))
        results = []

        def slow():
            results.append(get(gw.port, "/api/slow?ms=800").status)
        threads = [threading.Thread(target=slow) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        idle = Conn(gw.port)
        self.assertEqual(idle.request("GET", "/api/x").status, 200)
        gw.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", gw.port), timeout=1).recv(1)
        for t in threads:
            t.join()
        self.assertEqual(results, [200] * 4)
        self.assertTrue(idle.closed_by_peer(3))  # idle keep-alive closed at shutdown
        self.assertEqual(gw.proc.wait(10), 0)


class CheckCommand(GatewayTest):
    def run_check(self, text):
        path = os.path.join(self.tmp, "c.json")
        with open(path, "w") as f:
            f.write(text)
        p = subprocess.run([binary("rategate"), "check", "--config", path], capture_output=True, text=True,
                           timeout=20)
        return p, path

    def setUp(self):
        super().setUp()
        import tempfile
        self.tmp = tempfile.mkdtemp()

    def test_an_unusable_key_is_named_by_check_and_stops_startup(self):
        bad = os.path.join(self.tmp, "bad.pem")
        with open(bad, "w") as f:
            f.write("-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n")
        text = json.dumps({"listen": "127.0.0.1:%d" % free_port(),
                           "identity": {"user": {"jwt": {"algorithms": ["RS256"], "public_keys": [bad]}}},
                           "upstreams": {"u": {"targets": ["127.0.0.1:9001"], "tls": {"ca": bad}}},
                           "routes": [{"name": "r", "match": {"path_prefix": "/"}, "upstream": "u"}]})
        p, path = self.run_check(text)
        self.assertEqual(p.returncode, 1)
        self.assertIn(path + ": identity.user.jwt: ", p.stderr)
        self.assertIn(path + ": upstreams.u.tls.ca: ", p.stderr)
        served = subprocess.run([binary("rategate"), "--config", path], capture_output=True, text=True, timeout=20)
        self.assertEqual(served.returncode, 1)
        self.assertIn(path + ": identity.user.jwt: ", served.stderr)

    def test_three_mistakes_three_lines_exit_1(self):
        p, path = self.run_check("""{
          // a comment is fine
          "listen": "0.0.0.0:80800",
          "upstreams": { "u": { "targets": ["127.0.0.1:9001"], "connect_timeout": "soon" } },
          "routes": [ { "name": "r", "match": { "path_prefix": "/" }, "upstream": "u", "cots": 2 } ]
        }""")
        self.assertEqual(p.returncode, 1)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 3, p.stderr)
        self.assertTrue(all(l.startswith(path + ": ") for l in lines))
        self.assertIn(path + ": listen: ", p.stderr)
        self.assertIn(path + ": upstreams.u.connect_timeout: ", p.stderr)
        self.assertIn(path + ': routes[0].cots: unknown key "cots" (did you mean "cost"?)', p.stderr)

    def test_valid_config_prints_routes_and_chains(self):
        example = os.path.join(os.path.dirname(__file__), "..", "..", "config", "example.json")
        p = subprocess.run([binary("rategate"), "check", "--config", example], capture_output=True, text=True,
                           timeout=20)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("route ", p.stdout)
        self.assertIn("limiters:", p.stdout)

    def test_version_help_and_unknown_command(self):
        v = subprocess.run([binary("rategate"), "--version"], capture_output=True, text=True, timeout=10)
        self.assertEqual((v.returncode, v.stdout.startswith("rategate ")), (0, True))
        h = subprocess.run([binary("rategate"), "--help"], capture_output=True, text=True, timeout=10)
        self.assertEqual(h.returncode, 0)
        for word in ("--config", "check", "replay", "--backend"):
            self.assertIn(word, h.stdout)
        u = subprocess.run([binary("rategate"), "frobnicate", "--config", "x.json"], capture_output=True, text=True,
                           timeout=10)
        self.assertEqual(u.returncode, 2)
        self.assertIn("unknown command", u.stderr)
        # Replay's options beside check or a serve: said, not ignored.
        example = os.path.join(os.path.dirname(__file__), "..", "..", "config", "example.json")
        for args in (["check", "--trace", "t.jsonl"], ["--backend", "redis"]):
            r = subprocess.run([binary("rategate")] + args + ["--config", example], capture_output=True,
                               text=True, timeout=10)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn("--trace and --backend belong to replay", r.stderr)
