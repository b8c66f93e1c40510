"""Hot reload (SPEC §5): SIGHUP and file changes, invalid files refused while the old config
keeps serving, limiter state surviving, no request lost under load."""
import json
import os
import signal
import threading
import time

from harness import Conn, GatewayTest, RedisServer, free_port, get


def config(upstream_port, limit, extra_route=None, redis_port=None, admin_port=None, algorithm=None):
    rules = [{"limit": limit, "window": "1m"}]
    if algorithm == "token_bucket":
        rules = [{"rate": 1, "period": "1m", "burst": limit}]
    cfg = {
        "threads": 2,
        "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % upstream_port]}},
        "limiters": {"u": {"scope": "user", "algorithm": algorithm or "sliding_window_log", "rules": rules,
                           "on_missing_key": "anonymous"}},
        "routes": [{"name": "api", "match": {"path_prefix": "/api"}, "upstream": "demo", "limiters": ["u"],
                    "headers": "legacy"}],
    }
    if extra_route:
        cfg["routes"].append(extra_route)
    if redis_port:
        cfg["redis"] = {"url": "redis://127.0.0.1:%d/0" % redis_port}
    if admin_port:
        cfg["admin"] = {"listen": "127.0.0.1:%d" % admin_port}
    return cfg


class Reload(GatewayTest):
    def setUp(self):
        super().setUp()
        self.up = self.upstream()
        self.redis = self.track(RedisServer())
        self.admin_port = free_port()

    def start(self, limit):
        self.gw = self.gateway(config(self.up.port, limit, redis_port=self.redis.port, admin_port=self.admin_port))

    def rewrite(self, cfg):
        cfg = dict(cfg, listen="127.0.0.1:%d" % self.gw.port)
        with open(self.gw.config_file.name, "w") as f:
            json.dump(cfg, f)

    def wait_for(self, predicate, seconds=5):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if predicate():
                return True
            time.sleep(0.05)
        return False

    def limit_seen(self, user):
        return get(self.gw.port, "/api/x", {"X-User-Id": user}).header("X-RateLimit-Limit")

    def statuses(self, user, n):
        return [get(self.gw.port, "/api/x", {"X-User-Id": user}).status for _ in range(n)]

    def test_sighup_applies_new_limits_unchanged_limiters_keep_state(self):
        self.start(3)
        self.assertEqual(self.statuses("k", 4), [200, 200, 200, 429])
        # A reload that leaves the limiter alone keeps its state in Redis.
        self.rewrite(config(self.up.port, 3, {"name": "new", "match": {"path_prefix": "/new"}, "upstream": "demo"},
                            redis_port=self.redis.port, admin_port=self.admin_port))
        self.gw.proc.send_signal(signal.SIGHUP)
        self.assertTrue(self.wait_for(lambda: get(self.gw.port, "/new/x").status == 200))
        self.assertEqual(self.statuses("k", 1), [429])
        # Changed rules: the limiter starts fresh keys (SPEC §5).
        self.rewrite(config(self.up.port, 5, redis_port=self.redis.port, admin_port=self.admin_port))
        self.gw.proc.send_signal(signal.SIGHUP)
        self.assertTrue(self.wait_for(lambda: self.limit_seen("probe") == "5"))
        self.assertEqual(self.statuses("k", 6), [200] * 5 + [429])

    def test_algorithm_change_on_live_keys_starts_fresh_keys_without_errors(self):
        self.start(3)
        self.assertEqual(self.statuses("live", 4), [200, 200, 200, 429])
        self.assertEqual(self.statuses("", 1), [200])  # the anonymous key is live too
        # Same limiter name, another algorithm: its old keys hold a ZSET; the new ones a string.
        self.rewrite(config(self.up.port, 2, redis_port=self.redis.port, admin_port=self.admin_port,
                            algorithm="token_bucket"))
        self.gw.proc.send_signal(signal.SIGHUP)
        self.assertTrue(self.wait_for(lambda: self.limit_seen("probe") == "2"))
        self.assertEqual(self.statuses("live", 3), [200, 200, 429])
        self.assertEqual(self.statuses("", 1), [200])
        self.assertNotIn("WRONGTYPE", self.gw.output())
        metrics = get(self.admin_port, "/metrics").body.decode()
        self.assertIn('rategate_limiter_decisions_total{limiter="u",outcome="error"} 0', metrics)

    def test_file_change_reloads_routes(self):
        self.start(3)
        self.assertEqual(get(self.gw.port, "/new/x").status, 404)
        self.rewrite(config(self.up.port, 3, {"name": "new", "match": {"path_prefix": "/new"}, "upstream": "demo"},
                            redis_port=self.redis.port, admin_port=self.admin_port))
        self.assertTrue(self.wait_for(lambda: get(self.gw.port, "/new/x").status == 200, seconds=6))
        metrics = get(self.admin_port, "/metrics").body.decode()
        self.assertIn('rategate_config_reloads_total{outcome="success"} 1', metrics)

    def test_sighup_burst_during_reloads_never_ends_the_process(self):
        # Signals reach the main thread only (they are blocked before the access log's thread
        # starts): a SIGHUP that arrives while a reload runs waits for the next one instead of
        # taking another thread's default action, which ends the process.
        self.start(3)
        pid = self.gw.proc.pid
        for _ in range(20000):
            os.kill(pid, signal.SIGHUP)
        reloads = lambda: get(self.admin_port, "/metrics").body.decode()
        self.assertTrue(self.wait_for(lambda: 'rategate_config_reloads_total{outcome="success"} 0' not in reloads()))
        time.sleep(0.5)
        self.assertIsNone(self.gw.proc.poll(), self.gw.output()[-2000:])
        self.assertEqual(get(self.gw.port, "/api/x", {"X-User-Id": "burst"}).status, 200)

    def test_invalid_reload_keeps_serving_and_logs_every_error(self):
        self.start(3)
        with open(self.gw.config_file.name, "w") as f:
            f.write('{"listen": "127.0.0.1:%d", "threds": 2, "upstreams": {}, "routes": []}' % self.gw.port)
        self.gw.proc.send_signal(signal.SIGHUP)
        self.assertTrue(self.wait_for(lambda: "config reload refused" in self.gw.output()))
        out = self.gw.output()
        self.assertIn('threds: unknown key "threds"', out)
        self.assertIn("upstreams: expected a non-empty object", out)
        self.assertEqual(get(self.gw.port, "/api/x", {"X-User-Id": "still"}).status, 200)
        self.assertEqual(self.limit_seen("still"), "3")
        metrics = get(self.admin_port, "/metrics").body.decode()
        self.assertIn('rategate_config_reloads_total{outcome="failure"} 1', metrics)

    def test_a_reload_naming_an_unusable_key_or_ca_is_refused_and_every_loop_serves(self):
        # The loader accepts these files; building them fails (a malformed PEM, a CA file with
        # no certificate). Each loop's install used to throw and end the loop while /healthz
        # said ok: the reload is refused instead, the old config serving on both loops.
        self.start(1000)
        bad = os.path.join(os.path.dirname(self.gw.config_file.name), "not-a-pem-%d.pem" % self.gw.port)
        with open(bad, "w") as f:
            f.write("-----BEGIN PUBLIC KEY-----\nnot base64 at all\n-----END PUBLIC KEY-----\n")
        self.addCleanup(os.unlink, bad)
        jwt = config(self.up.port, 1000, redis_port=self.redis.port, admin_port=self.admin_port)
        jwt["identity"] = {"user": {"jwt": {"algorithms": ["RS256"], "public_keys": [bad]}}}
        ca = config(self.up.port, 1000, redis_port=self.redis.port, admin_port=self.admin_port)
        ca["upstreams"]["demo"]["tls"] = {"ca": bad}
        for n, (cfg, path) in enumerate(((jwt, "identity.user.jwt"), (ca, "upstreams.demo.tls.ca")), 1):
            with self.subTest(path=path):
                self.rewrite(cfg)
                self.gw.proc.send_signal(signal.SIGHUP)
                metrics = lambda: get(self.admin_port, "/metrics").body.decode()
                self.assertTrue(self.wait_for(
                    lambda: 'rategate_config_reloads_total{outcome="failure"} %d' % n in metrics()))
                self.assertIn(path + ": ", self.gw.output())
                self.assertNotIn("event loop failed", self.gw.output())
                # Both loops (SO_REUSEPORT spreads new connections) answer on the old config.
                self.assertEqual([get(self.gw.port, "/api/x", {"X-User-Id": "r%d" % i}).status
                                  for i in range(20)], [200] * 20)
        self.assertEqual(self.gw.proc.poll(), None)

    def test_a_changed_upstream_protocol_takes_effect(self):
        # The pool of an upstream whose protocol changed is replaced, not kept speaking the old
        # one: h2c to an HTTP/1.1 server is a 502, http/1.1 after the reload a 200.
        cfg = config(self.up.port, 1000, redis_port=self.redis.port, admin_port=self.admin_port)
        cfg["upstreams"]["demo"]["protocol"] = "h2c"
        self.gw = self.gateway(cfg)
        self.assertEqual(get(self.gw.port, "/api/x", {"X-User-Id": "p"}).status, 502)
        cfg["upstreams"]["demo"]["protocol"] = "http/1.1"
        self.rewrite(cfg)
        self.gw.proc.send_signal(signal.SIGHUP)
        self.assertTrue(self.wait_for(lambda: get(self.gw.port, "/api/x", {"X-User-Id": "p"}).status == 200))

    def test_reload_under_steady_load_loses_no_request(self):
        self.start(1000000)
        results, errors = [], []
        stop = threading.Event()

        def load(i):
            try:
                c = Conn(self.gw.port)
                while not stop.is_set():
                    r = c.request("GET", "/api/x", {"X-User-Id": "load%d" % i})
                    results.append((r.status, r.header("X-RateLimit-Limit")))
                c.close()
            except Exception as e:
                errors.append(repr(e))
        threads = [threading.Thread(target=load, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        for limit in (2000000, 3000000):
            self.rewrite(config(self.up.port, limit, redis_port=self.redis.port, admin_port=self.admin_port))
            self.gw.proc.send_signal(signal.SIGHUP)
            time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertGreater(len(results), 200)
        self.assertEqual({s for s, _ in results}, {200})
        seen = {l for _, l in results}
        self.assertTrue({"1000000", "3000000"} <= seen, seen)

    def counted(self):
        body = get(self.admin_port, "/metrics").body.decode()
        for line in body.splitlines():
            if line.startswith('rategate_requests_total{route="api",status="200"}'):
                return int(line.split()[1])
        return 0

    def test_counters_of_the_process_survive_a_reload(self):
        self.start(1000)
        for i in range(20):
            self.assertEqual(get(self.gw.port, "/api/x", {"X-User-Id": "m%d" % i}).status, 200)
        deadline = time.time() + 5
        while self.counted() < 20 and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.counted(), 20)
        self.rewrite(config(self.up.port, 1000, {"name": "new", "match": {"path_prefix": "/new"}, "upstream": "demo"},
                            redis_port=self.redis.port, admin_port=self.admin_port))
        self.gw.proc.send_signal(signal.SIGHUP)
        self.assertTrue(self.wait_for(lambda: get(self.gw.port, "/new/x").status == 200))
        self.assertGreaterEqual(self.counted(), 20)  # not reset by the reload
        for i in range(5):
            get(self.gw.port, "/api/x", {"X-User-Id": "n%d" % i})
        self.assertTrue(self.wait_for(lambda: self.counted() == 25))
        body = get(self.admin_port, "/metrics").body.decode()
        self.assertIn('rategate_limiter_decisions_total{limiter="u",outcome="allowed"} 25', body)

    def test_counters_never_go_back_and_count_every_request_across_reloads(self):
        # Two loops, requests in flight (a slow upstream path) while reloads reorder the routes:
        # each scrape of /metrics is at least the previous one, series by series, and in the
        # end every request a client completed is counted once.
        slow = {"name": "slow", "match": {"path_prefix": "/slow"}, "upstream": "demo", "limiters": ["u"]}

        def cfg(n):
            c = config(self.up.port, 1000000000 + n, dict(slow), admin_port=self.admin_port)
            if n % 2:
                c["routes"].reverse()  # the same names at other positions
            return c
        self.gw = self.gateway(cfg(0))
        done, errors = {"api": 0, "slow": 0}, []
        lock, stop = threading.Lock(), threading.Event()

        def load(i):
            try:
                c = Conn(self.gw.port)
                k = 0
                while not stop.is_set():
                    k += 1
                    route = "slow" if k % 2 else "api"
                    path = "/slow?ms=%d" % (40 + 23 * ((i + k) % 5)) if route == "slow" else "/api/x"
                    r = c.request("GET", path, {"X-User-Id": "c%d" % i})
                    if r.status != 200:
                        errors.append("%s %d" % (path, r.status))
                    with lock:
                        done[route] += 1
                c.close()
            except Exception as e:
                errors.append(repr(e))

        def scrape():
            series, counted = {}, False
            for line in get(self.admin_port, "/metrics").body.decode().splitlines():
                if line.startswith("# TYPE "):
                    counted = line.split()[3] in ("counter", "histogram")
                elif line and not line.startswith("#") and counted:
                    key, value = line.rsplit(" ", 1)
                    series[key] = float(value)
            return series

        decreases = []

        def watch():
            last = {}
            while not stop.is_set():
                now = scrape()
                decreases.extend("%s %s -> %s" % (k, last[k], v) for k, v in now.items()
                                 if k in last and v < last[k])
                last = now  # a series gone (a removed name) ends; none is removed here
        threads = [threading.Thread(target=load, args=(i,)) for i in range(8)]
        threads.append(threading.Thread(target=watch))
        for t in threads:
            t.start()
        for n in range(1, 13):
            time.sleep(0.2)
            self.rewrite(cfg(n))
            self.gw.proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        stop.set()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertGreater(done["slow"], 100)

        def totals():
            s = scrape()
            total = lambda prefix: sum(v for k, v in s.items() if k.startswith(prefix))
            return {"api": total('rategate_requests_total{route="api"'),
                    "slow": total('rategate_requests_total{route="slow"'),
                    "decisions": total('rategate_limiter_decisions_total{limiter="u"'),
                    "latency": total("rategate_request_duration_seconds_count")}
        want = {"api": done["api"], "slow": done["slow"], "decisions": done["api"] + done["slow"],
                "latency": done["api"] + done["slow"]}
        self.wait_for(lambda: totals() == want, 3)
        self.maxDiff = None
        self.assertEqual((totals(), len(decreases), decreases[:5]), (want, 0, []))
