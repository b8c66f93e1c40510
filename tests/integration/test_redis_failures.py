"""The gateway when Redis fails the handshake, under concurrent load, and Redis at shutdown
(SPEC §1 graceful shutdown, §2 "Redis deployments", on_redis_error).

A wrong password, or a server that accepts, reads the first command and closes, used to make the
Redis client complete handshake replies into a coroutine frame that was already gone: a
heap-use-after-free under load. Here the gateway must keep answering per on_redis_error (allow:
200, deny: 503) and exit cleanly; the harness fails any test whose gateway log has a sanitizer
report.
"""
import shutil
import signal
import socket
import subprocess
import threading
import time

from harness import Conn, GatewayTest, RedisServer, SANITIZED, SilentServer, free_port, get


class CloseAfterFirstCommand:
    """A fake Redis: accepts, reads the first command, closes. Counts connections."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            try:
                c.settimeout(2)
                c.recv(65536)
            except OSError:
                pass
            c.close()

    def stop(self):
        self.closed = True
        self.sock.close()


def load(port, path, threads=20, per_thread=40):
    """Concurrent clients, each on a keep-alive connection (reopened when closed); returns the
    status of every request, or the exception text for a request that got no response."""
    results = []
    lock = threading.Lock()

    def client():
        conn = None
        mine = []
        for _ in range(per_thread):
            try:
                if conn is None:
                    conn = Conn(port, timeout=10)
                r = conn.request("GET", path)
                mine.append(r.status)
                if (r.header("Connection") or "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, EOFError) as e:
                mine.append(repr(e))
                if conn:
                    conn.close()
                conn = None
        if conn:
            conn.close()
        with lock:
            results.extend(mine)

    ts = [threading.Thread(target=client) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results


def ab(port, path, n=3000, c=50):
    """ApacheBench's summary lines, or None when ab is not installed."""
    if not shutil.which("ab"):
        return None
    out = subprocess.run(["ab", "-q", "-n", str(n), "-c", str(c), "http://127.0.0.1:%d%s" % (port, path)],
                         capture_output=True, text=True, timeout=300).stdout
    return {line.split(":")[0].strip(): line.split(":", 1)[1].strip() for line in out.splitlines() if ":" in line}


class RedisHandshakeFailureTest(GatewayTest):
    wall_clock_cap = 180

    def make(self, redis_url, on_redis_error):
        up = self.upstream()
        cfg = {
            "threads": 2,
            "redis": {"url": redis_url, "command_timeout": "50ms"},
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % up.port]}},
            "limiters": {"per-ip": {"scope": "ip", "algorithm": "fixed_window",
                                    "rules": [{"limit": 1000000, "window": "10s"}]}},
            "routes": [{"name": "api", "match": {"path_prefix": "/api"}, "upstream": "demo",
                        "strip_prefix": "/api", "limiters": ["per-ip"], "on_redis_error": on_redis_error}],
        }
        return self.gateway(cfg)

    def check_load(self, gw, expected):
        statuses = load(gw.port, "/api/x")
        self.assertEqual(len(statuses), 800)
        self.assertEqual(set(statuses), {expected}, "statuses: %s" % sorted(set(map(str, statuses))))
        summary = ab(gw.port, "/api/x")
        if summary is not None:
            # ab's "Failed requests" counts bodies whose length differs (echoed request ids).
            self.assertEqual(summary.get("Complete requests"), "3000", summary)
            self.assertEqual(summary.get("Non-2xx responses"), None if expected == 200 else "3000", summary)
        self.assertIsNone(gw.proc.poll(), "gateway died:\n" + gw.output()[-4000:])
        # Still answering after the storm.
        self.assertEqual(get(gw.port, "/api/x").status, expected)
        gw.assert_clean(self)

    def wrong_password(self, on_redis_error, expected):
        redis = self.track(RedisServer(extra=["--requirepass", "right"]))
        gw = self.make("redis://:wrong@127.0.0.1:%d/0" % redis.port, on_redis_error)
        self.check_load(gw, expected)
        warnings = [l for l in gw.output().splitlines() if "[warning]" in l]
        self.assertTrue(any("WRONGPASS" in l for l in warnings), "\n".join(warnings[-5:]))

    def closing_server(self, on_redis_error, expected):
        fake = CloseAfterFirstCommand()
        self.addCleanup(fake.stop)
        gw = self.make("redis://127.0.0.1:%d/0" % fake.port, on_redis_error)
        self.check_load(gw, expected)
        self.assertGreater(fake.accepted, 1, "the gateway should keep re-trying the handshake")

    def test_wrong_password_allow_serves_200(self):
        self.wrong_password("allow", 200)

    def test_wrong_password_deny_serves_503(self):
        self.wrong_password("deny", 503)

    def test_server_closing_after_first_command_allow_serves_200(self):
        self.closing_server("allow", 200)

    def test_server_closing_after_first_command_deny_serves_503(self):
        self.closing_server("deny", 503)


class RedisShutdownTest(GatewayTest):
    wall_clock_cap = 120

    def test_in_flight_decision_is_made_by_redis_during_shutdown(self):
        """SIGTERM while a request waits for its limiter decision: Redis still decides it (the
        connections close after the sessions), so on_redis_error "deny" does not turn it into a
        503."""
        redis = self.track(RedisServer(extra=["--enable-debug-command", "yes"]))
        up = self.upstream()
        gw = self.gateway({
            "threads": 1,
            "redis": {"url": "redis://127.0.0.1:%d/0" % redis.port, "command_timeout": "3s"},
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % up.port]}},
            "limiters": {"per-ip": {"scope": "ip", "algorithm": "fixed_window",
                                    "rules": [{"limit": 1000, "window": "10s"}]}},
            "routes": [{"name": "api", "match": {"path_prefix": "/api"}, "upstream": "demo",
                        "strip_prefix": "/api", "limiters": ["per-ip"], "on_redis_error": "deny"}],
        })
        self.assertEqual(get(gw.port, "/api/warm").status, 200)
        # Stall Redis (single-threaded) so the next decision is pending when SIGTERM arrives.
        sleeper = subprocess.Popen(["redis-cli", "-p", str(redis.port), "DEBUG", "SLEEP", "0.8"],
                                   stdout=subprocess.DEVNULL)
        time.sleep(0.1)
        result = {}

        def request():
            try:
                result["status"] = get(gw.port, "/api/in-flight").status
            except (OSError, EOFError) as e:
                result["error"] = repr(e)

        t = threading.Thread(target=request)
        t.start()
        time.sleep(0.2)
        gw.proc.send_signal(signal.SIGTERM)
        t.join(10)
        sleeper.wait(10)
        self.assertEqual(result.get("status"), 200, result)
        self.assertEqual(gw.proc.wait(15), 0, gw.output()[-4000:])
        gw.assert_clean(self)

    def test_request_outliving_the_drain_deadline_exits_cleanly(self):
        """A request stuck on an upstream that never answers is cut off at the 10 s drain
        deadline; the process exits 0 with no sanitizer finding (no crash at exit)."""
        redis = self.track(RedisServer())
        silent = SilentServer()
        self.addCleanup(silent.stop)
        gw = self.gateway({
            "threads": 1,
            "redis": {"url": "redis://127.0.0.1:%d/0" % redis.port, "command_timeout": "500ms"},
            "upstreams": {"stuck": {"targets": ["127.0.0.1:%d" % silent.port], "response_timeout": "120s"}},
            "limiters": {"per-ip": {"scope": "ip", "algorithm": "fixed_window",
                                    "rules": [{"limit": 1000, "window": "10s"}]}},
            "routes": [{"name": "api", "match": {"path_prefix": "/api"}, "upstream": "stuck",
                        "limiters": ["per-ip"], "on_redis_error": "deny"}],
        })
        conns = []
        for _ in range(5):
            c = Conn(gw.port, timeout=30)
            c.send("GET /api/stuck HTTP/1.1\r\nHost: x\r\n\r\n")
            conns.append(c)
        deadline = time.time() + 10
        while len(silent.held) < 5 and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(len(silent.held), 5)
        started = time.time()
        gw.proc.send_signal(signal.SIGTERM)
        code = gw.proc.wait(30 if SANITIZED else 20)
        took = time.time() - started
        for c in conns:
            c.close()
        self.assertEqual(code, 0, gw.output()[-4000:])
        self.assertGreaterEqual(took, 9.5)
        self.assertIn("cancelling them", gw.output())
        gw.assert_clean(self)


if __name__ == "__main__":
    import unittest
    unittest.main()
