"""Operations (SPEC §4-§5): admin endpoint metrics, health and readiness, /config masking,
access log lines, graceful shutdown under load."""
import json
import os
import re
import signal
import threading
import time

from harness import Conn, GatewayTest, RedisServer, free_port, get, wait_port

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
                    r'(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*)?\})? (-?[0-9.eE+-]+|\+Inf|NaN)$')


def parse_exposition(text):
    """Parses Prometheus text format 0.0.4 strictly; returns {(name, labels): value}."""
    samples = {}
    declared = {}
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            assert kind in ("counter", "gauge", "histogram"), line
            declared[name] = kind
            continue
        m = SAMPLE.match(line)
        assert m, "not an exposition sample: %r" % line
        name = m.group(1)
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in declared or base in declared, "sample without TYPE: %r" % line
        labels = tuple(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        samples[(name, labels)] = float(m.group(5))
    return samples


class Admin(GatewayTest):
    def make(self, redis=None, log=None, password=None):
        self.up = self.upstream()
        self.admin_port = free_port()
        cfg = {
            "threads": 2,
            "admin": {"listen": "127.0.0.1:%d" % self.admin_port},
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
            "limiters": {
                "per-user": {"scope": "user", "algorithm": "sliding_window_log", "rules": [{"limit": 2, "window": "1m"}]},
                "shadow": {"scope": "user", "algorithm": "sliding_window_log", "rules": [{"limit": 1, "window": "1m"}],
                           "mode": "shadow"},
            },
            "routes": [
                {"name": "limited", "match": {"path_prefix": "/l"}, "upstream": "demo",
                 "limiters": ["per-user", "shadow"], "on_redis_error": "deny"},
                {"name": "open", "match": {"path_prefix": "/o"}, "upstream": "demo", "strip_prefix": "/o"},
            ],
        }
        if redis:
            auth = ":%s@" % password if password else ""
            cfg["redis"] = {"url": "redis://%s127.0.0.1:%d/0" % (auth, redis.port), "command_timeout": "200ms"}
        if log:
            cfg["log"] = log
        self.gw = self.gateway(cfg)
        wait_port(self.admin_port, proc=self.gw.proc)  # its own listener, up a moment later
        return self.gw

    def admin(self, path):
        return get(self.admin_port, path)

    def test_metrics_count_what_was_sent_and_parse(self):
        self.make()
        for _ in range(3):
            get(self.gw.port, "/o/x")
        get(self.gw.port, "/o/status/503")
        for _ in range(4):
            get(self.gw.port, "/l/x", {"X-User-Id": "m"})
        get(self.gw.port, "/nowhere")
        # A request is counted when it ends, just after its response is written: the client can
        # read the response first. Scrape until the last one is counted (then every count exact).
        deadline = time.time() + 3
        while True:
            r = self.admin("/metrics")
            self.assertEqual(r.status, 200)
            s = parse_exposition(r.body.decode())
            req = lambda route, status: s.get(("rategate_requests_total", (("route", route), ("status", status))), 0)
            if req("", "404") >= 1 or time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertTrue(r.header("Content-Type").startswith("text/plain; version=0.0.4"))
        self.assertEqual(req("open", "200"), 3)
        self.assertEqual(req("open", "503"), 1)
        self.assertEqual(req("limited", "200"), 2)
        self.assertEqual(req("limited", "429"), 2)
        self.assertEqual(req("", "404"), 1)
        dec = lambda limiter, outcome: s[("rategate_limiter_decisions_total",
                                          (("limiter", limiter), ("outcome", outcome)))]
        self.assertEqual(dec("per-user", "allowed"), 2)
        self.assertEqual(dec("per-user", "limited"), 2)
        self.assertEqual(dec("shadow", "allowed"), 1)
        # the shadow layer says no to the 2nd request (passed anyway) and to the 3rd and 4th
        self.assertEqual(dec("shadow", "shadow_limited"), 3)
        self.assertEqual(s[("rategate_request_duration_seconds_count", (("route", "open"),))], 4)
        self.assertEqual(s[("rategate_request_duration_seconds_bucket", (("route", "open"), ("le", "+Inf")))], 4)
        self.assertEqual(s[("rategate_upstream_duration_seconds_count", (("upstream", "demo"),))], 6)
        self.assertIn(("rategate_open_connections", ()), s)

    def test_health_ready_and_config_masking(self):
        redis = self.track(RedisServer(extra=["--requirepass", "s3cret"]))
        self.make(redis=redis, password="s3cret")
        self.assertEqual(self.admin("/healthz").status, 200)
        deadline = time.time() + 5
        while self.admin("/readyz").status != 200 and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.admin("/readyz").status, 200)
        cfg = self.admin("/config")
        self.assertEqual(cfg.status, 200)
        self.assertNotIn("s3cret", cfg.body.decode())
        self.assertEqual(cfg.json()["routes"][0]["name"], "limited")
        self.assertEqual(self.admin("/nope").status, 404)

    def test_readyz_flips_when_redis_goes_away_and_back(self):
        redis = self.track(RedisServer())
        self.make(redis=redis)
        deadline = time.time() + 5
        while self.admin("/readyz").status != 200 and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.admin("/readyz").status, 200)
        port = redis.port
        redis.stop()
        deadline = time.time() + 5
        while self.admin("/readyz").status != 503 and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.admin("/readyz").status, 503)
        self.assertEqual(get(self.gw.port, "/l/x", {"X-User-Id": "r"}).status, 503)  # on_redis_error deny
        self.track(RedisServer(port=port))
        deadline = time.time() + 8
        while self.admin("/readyz").status != 200 and time.time() < deadline:
            time.sleep(0.1)
        self.assertEqual(self.admin("/readyz").status, 200)
        s = parse_exposition(self.admin("/metrics").body.decode())
        self.assertGreaterEqual(s[("rategate_redis_reconnects_total", ())], 1)
        self.assertGreaterEqual(s[("rategate_limiter_decisions_total", (("limiter", "per-user"), ("outcome", "error")))], 1)


class AccessLog(GatewayTest):
    def run_with(self, fmt):
        up = self.upstream()
        gw = self.gateway({"upstreams": {"demo": {"targets": ["127.0.0.1:%d" % up.port]}},
                           "routes": [{"name": "r", "match": {"path_prefix": "/"}, "upstream": "demo"}],
                           "log": {"access_log": True, "format": fmt}})
        get(gw.port, "/hello?x=1", {"X-Request-Id": "rid-1"})
        get(gw.port, "/status/404")
        self.assertEqual(gw.stop(), 0)
        return [l for l in gw.output().splitlines() if "rid-1" in l or " 404 " in l or '"status":404' in l]

    def test_text_lines(self):
        lines = self.run_with("text")
        self.assertEqual(len(lines), 2, lines)
        self.assertRegex(lines[0], r"127\.0\.0\.1 r GET /hello 200 0 \d+ [\d.]+ms limit=-:- upstream=127\.0\.0\.1:\d+ "
                                   r"id=rid-1")

    def test_json_lines(self):
        lines = self.run_with("json")
        entry = json.loads(lines[0])
        self.assertEqual((entry["route"], entry["method"], entry["path"], entry["status"], entry["request_id"]),
                         ("r", "GET", "/hello", 200, "rid-1"))
        self.assertIn("time", entry)
        self.assertGreater(entry["bytes_out"], 0)


class Shutdown(GatewayTest):
    def test_sigterm_under_load_completes_every_in_flight_request(self):
        for threads in (2, 1):  # loops on threads of their own; the one loop on the main thread
            with self.subTest(threads=threads):
                self.sigterm_under_load(threads)

    def sigterm_under_load(self, threads):
        up = self.upstream()
        gw = self.gateway({"threads": threads, "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % up.port]}},
                           "routes": [{"name": "r", "match": {"path_prefix": "/"}, "upstream": "demo"}]})
        statuses, errors = [], []
        started = threading.Event()

        def client(i):
            try:
                c = Conn(gw.port)
                started.set()
                statuses.append(c.request("GET", "/slow?ms=%d" % (200 + 10 * i)).status)
                c.close()
            except Exception as e:  # a request cut short would land here
                errors.append(repr(e))
        threads = [threading.Thread(target=client, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        started.wait(5)
        time.sleep(0.1)
        gw.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(statuses, [200] * 20)
        self.assertEqual(gw.proc.wait(15), 0)


class OneThread(GatewayTest):
    """threads: 1 runs the one event loop on the main thread, with the admin listener on it: the
    process has one thread (a second makes every socket call dearer), and SIGHUP, SIGTERM and
    the admin endpoint still work."""

    def config(self, threads, redis, admin_port):
        return {
            "threads": threads,
            "log": {"access_log": False},  # on, its writer is a thread of its own
            "admin": {"listen": "127.0.0.1:%d" % admin_port},
            "redis": {"url": "redis://127.0.0.1:%d/0" % redis.port},
            "identity": {"user": {"header": "X-User-Id"}},
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
            "limiters": {"per-user": {"scope": "user", "algorithm": "token_bucket",
                                      "rules": [{"rate": 3, "period": "1h", "burst": 3}]}},
            "routes": [{"name": "r", "match": {"path_prefix": "/"}, "upstream": "demo", "limiters": ["per-user"]}],
        }

    def threads_of(self, gw):
        return len(os.listdir("/proc/%d/task" % gw.proc.pid))

    def test_one_loop_one_thread(self):
        redis = self.track(RedisServer())
        self.up = self.upstream()
        for threads, expected in ((1, 1), (2, 4)):  # main thread + 2 loops + the admin's
            with self.subTest(threads=threads):
                admin_port = free_port()
                gw = self.gateway(self.config(threads, redis, admin_port))
                statuses = [get(gw.port, "/x", headers={"X-User-Id": "t%d" % threads}).status for _ in range(4)]
                self.assertEqual(statuses, [200, 200, 200, 429])
                self.assertEqual(get(admin_port, "/readyz").status, 200)
                self.assertIn(b"rategate_requests_total", get(admin_port, "/metrics").body)
                self.assertEqual(self.threads_of(gw), expected)
                gw.proc.send_signal(signal.SIGTERM)
                self.assertEqual(gw.proc.wait(10), 0)

    def test_reload_and_stop_with_an_admin_connection_open(self):
        redis = self.track(RedisServer())
        self.up = self.upstream()
        admin_port = free_port()
        cfg = self.config(1, redis, admin_port)
        gw = self.gateway(cfg)
        self.assertEqual(get(gw.port, "/x", headers={"X-User-Id": "a"}).status, 200)
        # SIGHUP reloads on the loop's own thread: the new limit is in force at once after.
        cfg["routes"][0]["limiters"] = []
        with open(gw.config_file.name, "w") as f:
            json.dump(dict(cfg, listen="127.0.0.1:%d" % gw.port), f)
        gw.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 5
        while time.time() < deadline:
            statuses = [get(gw.port, "/x", headers={"X-User-Id": "a"}).status for _ in range(4)]
            if statuses == [200] * 4:
                break
            time.sleep(0.1)
        self.assertEqual(statuses, [200] * 4)
        # A keep-alive admin connection, idle, does not hold the stop up (its idle timeout is 60 s).
        c = Conn(admin_port)
        self.assertEqual(c.request("GET", "/healthz").status, 200)
        started = time.time()
        gw.proc.send_signal(signal.SIGTERM)
        self.assertEqual(gw.proc.wait(10), 0)
        self.assertLess(time.time() - started, 2.0)
        c.close()
