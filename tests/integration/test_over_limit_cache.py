"""The exact over-limit cache on real sockets (SPEC §2 "Exact shortcuts"): one user flooding two
gateway instances on one Redis is admitted exactly burst + rate x elapsed, its refusals cost
Redis almost nothing, other users are unaffected, and a cached 429 carries what Redis would
have said."""
import re
import threading
import time

from harness import Conn, GatewayTest, RedisServer, free_port, get

RATE, BURST = 5, 10


class OverLimitCache(GatewayTest):
    def make(self, redis, cache=10000, threads=1, global_rule=None, user_limiter=None):
        admin = free_port()
        cfg = {
            "threads": threads,
            "admin": {"listen": "127.0.0.1:%d" % admin},
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
            "identity": {"user": {"header": "X-User-Id"}},
            "redis": {"url": "redis://127.0.0.1:%d/0" % redis.port, "command_timeout": "500ms",
                      "over_limit_cache": cache},
            "limiters": {
                "global": {"scope": "global", "algorithm": "token_bucket",
                           "rules": [global_rule or {"rate": 100000, "period": "1s", "burst": 100000}]},
                "per-user": user_limiter or {"scope": "user", "algorithm": "token_bucket",
                                             "rules": [{"rate": RATE, "period": "1s", "burst": BURST}]},
            },
            "routes": [{"name": "api", "match": {"path_prefix": "/api"}, "upstream": "demo",
                        "limiters": ["global", "per-user"], "headers": "both"}],
        }
        gw = self.gateway(cfg)
        gw.admin_port = admin
        return gw

    def metric(self, gw, pattern):
        text = get(gw.admin_port, "/metrics").body.decode()
        m = re.search(pattern + r" (\d+)", text)
        return int(m.group(1)) if m else 0

    def evalsha_calls(self, redis):
        m = re.search(r"cmdstat_evalsha:calls=(\d+)", redis.cli("INFO", "commandstats"))
        return int(m.group(1)) if m else 0

    def flood(self, ports, user, seconds, per_port=2):
        """Keep-alive connections per port sending as fast as they can; returns statuses and
        the time span in which the admitted requests may have been decided."""
        results, lock = [], threading.Lock()
        start = time.monotonic()
        stop_at = start + seconds

        def run(port):
            c = Conn(port)
            mine = []
            while time.monotonic() < stop_at:
                r = c.request("GET", "/api/x", {"X-User-Id": user})
                mine.append(r.status)
            c.close()
            with lock:
                results.extend(mine)

        threads = [threading.Thread(target=run, args=(p,)) for p in ports for _ in range(per_port)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results, time.monotonic() - start

    def test_flood_over_two_instances_is_exact_and_spares_redis(self):
        self.up = self.upstream()
        redis = self.track(RedisServer())
        a, b = self.make(redis, threads=2), self.make(redis)
        calls0 = self.evalsha_calls(redis)
        other = []

        def bystander():
            c = Conn(a.port)
            for i in range(8):
                other.append(c.request("GET", "/api/y", {"X-User-Id": "bystander"}).status)
                time.sleep(0.3)
            c.close()

        t = threading.Thread(target=bystander)
        t.start()
        statuses, elapsed = self.flood([a.port, b.port], "flooder", 3.0)
        t.join()
        calls = self.evalsha_calls(redis) - calls0
        admitted = statuses.count(200)
        refused = statuses.count(429)
        self.assertEqual(admitted + refused, len(statuses), set(statuses))
        # Token bucket: burst at once, then RATE per second (±1 for the edges of the run).
        self.assertGreaterEqual(admitted, BURST + int(RATE * (elapsed - 0.3)) - 1, (admitted, elapsed))
        self.assertLessEqual(admitted, BURST + int(RATE * elapsed) + 1, (admitted, elapsed))
        self.assertEqual(other, [200] * 8)  # other users are unaffected
        hits = sum(self.metric(g, r'rategate_limiter_cache_hits_total\{limiter="per-user"\}') for g in (a, b))
        limited = sum(self.metric(g, r'rategate_limiter_decisions_total\{limiter="per-user",outcome="limited"\}')
                      for g in (a, b))
        self.assertEqual(limited, refused)  # cached answers are counted like any other
        self.assertGreater(refused, 500)
        print("flood: %d refused, %d admitted in %.2f s; %d answered by the cache; %.4f EVALSHA per refusal"
              % (refused, admitted, elapsed, hits, calls / refused))
        self.assertGreater(hits, refused * 0.9)
        self.assertLess(calls / refused, 0.05)
        self.assertEqual(self.metric(a, "rategate_over_limit_cache_entries") >= 1, True)

    def test_flood_behind_a_shared_quota_costs_redis_nothing(self):
        # A quota of 100k per hour: the global layer's retry bound (cost / rate) is one hour,
        # above any retry of the user's own layer. SPEC 2's latitude lets the cache answer
        # anyway, naming the user's layer (never a later Retry-After than Redis's).
        self.up = self.upstream()
        redis = self.track(RedisServer())
        quota = {"rate": 1, "period": "1h", "burst": 100000}
        users = {
            "token_bucket": ({"rate": RATE, "period": "1s", "burst": BURST},
                             lambda e: (BURST + int(RATE * (e - 0.3)) - 1, BURST + int(RATE * e) + 1)),
            "sliding_window_log": ({"limit": BURST, "window": "2s"},
                                   lambda e: (BURST, BURST * (int(e / 2) + 1))),
            "fixed_window": ({"limit": BURST, "window": "2s"},
                             lambda e: (BURST, BURST * (int(e / 2) + 2))),
        }
        for algorithm, (rule, bounds) in users.items():
            with self.subTest(algorithm=algorithm):
                redis.cli("FLUSHALL")
                limiter = {"scope": "user", "algorithm": algorithm, "rules": [rule]}
                a = self.make(redis, threads=2, global_rule=quota, user_limiter=limiter)
                b = self.make(redis, global_rule=quota, user_limiter=limiter)
                calls0 = self.evalsha_calls(redis)
                statuses, elapsed = self.flood([a.port, b.port], "flooder", 2.5)
                calls = self.evalsha_calls(redis) - calls0
                admitted, refused = statuses.count(200), statuses.count(429)
                self.assertEqual(admitted + refused, len(statuses), set(statuses))
                low, high = bounds(elapsed)
                self.assertGreaterEqual(admitted, low, (admitted, elapsed))
                self.assertLessEqual(admitted, high, (admitted, elapsed))
                self.assertGreater(refused, 500)
                print("%s behind a 100k/h quota: %d refused, %d admitted in %.2f s; %.4f EVALSHA per refusal"
                      % (algorithm, refused, admitted, elapsed, calls / refused))
                self.assertLess(calls / refused, 0.05)
                r = get(a.port, "/api/x", {"X-User-Id": "flooder"})
                if r.status == 429:
                    self.assertEqual(r.json()["limiter"], "per-user")  # the layer that rejects
                for g in (a, b):
                    g.stop()

    def test_cached_refusal_says_what_redis_says(self):
        self.up = self.upstream()
        redis = self.track(RedisServer())
        gw = self.make(redis)
        c = Conn(gw.port)
        for _ in range(BURST):
            self.assertEqual(c.request("GET", "/api/x", {"X-User-Id": "u"}).status, 200)
        first = c.request("GET", "/api/x", {"X-User-Id": "u"})  # from Redis: learns the state
        self.assertEqual(first.status, 429)
        hits0 = self.metric(gw, r'rategate_limiter_cache_hits_total\{limiter="per-user"\}')
        calls0 = self.evalsha_calls(redis)
        cached = c.request("GET", "/api/x", {"X-User-Id": "u"})
        self.assertEqual(self.evalsha_calls(redis), calls0)  # Redis was not asked
        self.assertEqual(self.metric(gw, r'rategate_limiter_cache_hits_total\{limiter="per-user"\}'), hits0 + 1)
        self.assertEqual(cached.status, 429)
        for name in ("Content-Type", "RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining"):
            self.assertEqual(cached.header(name), first.header(name), name)
        body, body0 = cached.json(), first.json()
        self.assertEqual(body["limiter"], "per-user")
        self.assertEqual({k: v for k, v in body.items() if k != "retry_after_ms"},
                         {k: v for k, v in body0.items() if k != "retry_after_ms"})
        self.assertLessEqual(body["retry_after_ms"], body0["retry_after_ms"])  # time went on
        self.assertGreater(body["retry_after_ms"], 0)
        # Once the bucket has a token again, Redis decides (and admits) again.
        time.sleep(body["retry_after_ms"] / 1000 + 0.05)
        self.assertEqual(c.request("GET", "/api/x", {"X-User-Id": "u"}).status, 200)
        self.assertGreater(self.evalsha_calls(redis), calls0)
        c.close()
        gw.assert_clean(self)
