"""`rategate replay` end to end: decisions per line, summary, errors naming the line, and the
Redis backend giving the same decisions as the in-process one."""
import json
import os
import random
import subprocess
import tempfile

from harness import GatewayTest, RedisServer, binary

CONFIG = {
    "listen": "127.0.0.1:1",
    "upstreams": {"u": {"targets": ["127.0.0.1:9"]}},
    "identity": {"user": {"header": "X-User-Id"}},
    "limiters": {
        "global": {"scope": "global", "algorithm": "token_bucket", "rules": [{"rate": 50, "period": "1s", "burst": 20}]},
        "route": {"scope": "route", "algorithm": "sliding_window_log",
                  "rules": [{"limit": 30, "window": "2s"}, {"limit": 100, "window": "20s"}]},
        "user": {"scope": "user", "algorithm": "gcra", "rules": [{"rate": 2, "period": "1s", "burst": 3}],
                 "on_missing_key": "deny"},
        "ip": {"scope": "ip", "algorithm": "fixed_window", "rules": [{"limit": 2, "window": "1s"}], "mode": "shadow"},
        "paced": {"scope": "user", "algorithm": "token_bucket", "rules": [{"rate": 5, "period": "1s", "burst": 1}],
                  "delay": "400ms"},
    },
    "routes": [
        {"name": "orders", "match": {"path_prefix": "/api/orders"}, "upstream": "u",
         "limiters": ["global", "route", "user", "ip"]},
        {"name": "slow", "match": {"path": "/slow"}, "upstream": "u", "limiters": ["paced"]},
    ],
}


class ReplayCase(GatewayTest):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp()

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def replay(self, config, lines, backend="local"):
        cfg = self.write("c.json", json.dumps(config))
        trace = self.write("t.jsonl", "".join(json.dumps(l) + "\n" for l in lines))
        return subprocess.run([binary("rategate"), "replay", "--config", cfg, "--trace", trace, "--backend", backend],
                              capture_output=True, text=True, timeout=120)



class Replay(ReplayCase):
    def trace(self, n=3000, seed=7):
        rnd = random.Random(seed)
        t = 1_700_000_000_000.0
        out = []
        for _ in range(n):
            t += rnd.choice([0, 0, 1, 5, 40, 300, 1500])
            line = {"t_ms": t, "ip": "10.0.0.%d" % rnd.randrange(6), "cost": rnd.choice([1, 1, 1, 2])}
            if rnd.random() < 0.15:
                line.update({"route": "slow", "user": "p%d" % rnd.randrange(3)})
            else:
                line["route"] = "orders"
                if rnd.random() > 0.02:
                    line["user"] = "u%d" % rnd.randrange(8)
            out.append(line)
        return out

    def test_one_decision_per_line_then_summary(self):
        lines = [{"t_ms": 1000 + i, "route": "orders", "user": "a", "ip": "1.2.3.4"} for i in range(5)]
        lines.append({"t_ms": 2000, "method": "GET", "path": "/api/orders/7", "user": "b", "ip": "1.2.3.4"})
        lines.append({"t_ms": 2001, "route": "orders", "ip": "1.2.3.4"})  # no user: denied
        p = self.replay(CONFIG, lines)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = [json.loads(l) for l in p.stdout.splitlines()]
        self.assertEqual(len(out), len(lines) + 1)
        self.assertEqual([d["allowed"] for d in out[:5]], [True, True, True, False, False])
        self.assertEqual(out[3]["limiter"], "user")
        # gcra 2/s burst 3: three cells end at 2500 ms, the fourth may start at 1500 ms: 1500 - 1003
        self.assertEqual(out[3]["retry_after_ms"], 497)
        self.assertTrue(out[5]["allowed"])
        self.assertEqual(out[6]["denied"], "missing_key")
        summary = out[-1]["summary"]
        self.assertEqual(summary["requests"], 7)
        self.assertEqual(summary["limiters"]["user"]["limited"], 2)
        # the third request passes although the shadow ip layer (2/s) would have rejected it;
        # the two rejected by "user" would have been rejected by it too
        self.assertEqual(out[2]["shadow_limited"], ["ip"])
        self.assertEqual(summary["limiters"]["ip"]["shadow_limited"], 3)

    def test_paths_route_as_the_gateway_routes_them(self):
        # The gateway routes the normalised path (merged slashes, dot segments, the query aside)
        # and reads the Host as a Host field; a replay of its traffic routes the same way.
        lines = [{"t_ms": 1000, "path": "/api//x/../orders/7?page=2", "user": "a", "ip": "1.2.3.4"},
                 {"t_ms": 1001, "path": "/./slow", "host": "Example.COM.", "user": "a"}]
        p = self.replay(CONFIG, lines)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = [json.loads(l) for l in p.stdout.splitlines()]
        self.assertEqual([d["route"] for d in out[:2]], ["orders", "slow"])
        # A target the gateway would refuse is an error naming the line.
        p = self.replay(CONFIG, [{"t_ms": 1, "path": "/api/orders/%zz"}])
        self.assertEqual(p.returncode, 1)
        self.assertIn("t.jsonl:1: the gateway would refuse this request (400)", p.stderr)

    def test_delay_layers_report_wait(self):
        lines = [{"t_ms": 5000, "route": "slow", "user": "x"} for _ in range(4)]
        out = [json.loads(l) for l in self.replay(CONFIG, lines).stdout.splitlines()]
        self.assertEqual([d["wait_ms"] for d in out[:4]], [0, 200, 400, 0])  # the 4th would wait 600 ms
        self.assertEqual([d["allowed"] for d in out[:4]], [True, True, True, False])

    def test_errors_name_the_line(self):
        p = self.replay(CONFIG, [{"t_ms": 1, "route": "orders", "user": "a"}, {"route": "orders"}])
        self.assertEqual(p.returncode, 1)
        self.assertIn("t.jsonl:2: \"t_ms\" (number) is required", p.stderr)
        cfg = self.write("c2.json", json.dumps(CONFIG))
        trace = self.write("bad.jsonl", '{"t_ms": 1, "route": "orders", "user": "a"}\nnot json\n')
        p = subprocess.run([binary("rategate"), "replay", "--config", cfg, "--trace", trace], capture_output=True,
                           text=True, timeout=30)
        self.assertIn("bad.jsonl:2: not a JSON object", p.stderr)

    def test_times_and_costs_beyond_the_clock_are_errors_not_crashes(self):
        # t_ms 1e308 is infinite in µs: a sliding_window_counter layer crashed (SIGSEGV); a cost
        # of 1e308 printed "retry_after_ms":inf, which is not JSON.
        config = dict(CONFIG, limiters=dict(CONFIG["limiters"], swc={
            "scope": "ip", "algorithm": "sliding_window_counter", "rules": [{"limit": 5, "window": "1s"}]}))
        config["routes"] = [{"name": "r", "match": {"path_prefix": "/"}, "upstream": "u",
                             "limiters": ["swc", "paced"]}]
        ok = {"t_ms": 1_700_000_000_000, "route": "r", "ip": "1.2.3.4", "user": "a"}
        p = self.replay(config, [ok, dict(ok, t_ms=1e308)])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("t.jsonl:2: \"t_ms\" must be between 0 and 9007199254740", p.stderr)
        p = self.replay(config, [ok, dict(ok, cost=1e308)])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("t.jsonl:2: \"cost\" must be at most 1000000000", p.stderr)
        for line in p.stdout.splitlines():
            json.loads(line)
        # A cost within 1e9 that takes a rule past the config's span bound (1e15 us): the local
        # twin printed a retry of 8.64e16 ms, the Redis backend 0 (its reply decoding).
        slow = dict(CONFIG, limiters={"daily": {"scope": "global", "algorithm": "token_bucket",
                                                "rules": [{"rate": 1, "period": "24h", "burst": 10}]}})
        slow["routes"] = [{"name": "r", "match": {"path_prefix": "/"}, "upstream": "u", "limiters": ["daily"]}]
        p = self.replay(slow, [dict(ok, cost=1_000_000_000)])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("t.jsonl:1: \"cost\" is too large for limiter \"daily\"", p.stderr)

    def test_redis_backend_matches_local(self):
        redis = self.track(RedisServer())
        config = dict(CONFIG, redis={"url": "redis://127.0.0.1:%d/0" % redis.port, "key_prefix": "replay:"})
        lines = self.trace()
        local = self.replay(config, lines, "local")
        remote = self.replay(config, lines, "redis")
        self.assertEqual(local.returncode, 0, local.stderr)
        self.assertEqual(remote.returncode, 0, remote.stderr)
        a, b = local.stdout.splitlines(), remote.stdout.splitlines()
        self.assertEqual(len(a), len(lines) + 1)
        self.assertEqual(a[:-1], b[:-1])
        limited = sum(1 for l in a[:-1] if '"allowed":false' in l)
        self.assertGreater(limited, 100)
        self.assertNotEqual(redis.cli("DBSIZE"), "0")


    def test_redis_backend_with_a_leased_layer_stays_within_n_of_local(self):
        # SPEC §2 `sync`: over the whole trace a leased layer admits at most N more than the
        # exact limiter (replay runs one event loop); per-user layers stay exact.
        redis = self.track(RedisServer())
        n = 8
        config = {
            "listen": "127.0.0.1:1",
            "upstreams": {"u": {"targets": ["127.0.0.1:9"]}},
            "identity": {"user": {"header": "X-User-Id"}},
            "redis": {"url": "redis://127.0.0.1:%d/0" % redis.port, "key_prefix": "lease:"},
            "limiters": {
                "global": {"scope": "global", "algorithm": "token_bucket", "sync": {"lease": n},
                           "rules": [{"rate": 40, "period": "1s", "burst": 30}]},
                "user": {"scope": "user", "algorithm": "fixed_window", "rules": [{"limit": 5, "window": "1s"}]},
            },
            "routes": [{"name": "orders", "match": {"path_prefix": "/"}, "upstream": "u",
                        "limiters": ["global", "user"]}],
        }
        rnd = random.Random(11)
        t, lines = 1_700_000_000_000.0, []
        for _ in range(4000):
            t += rnd.choice([0, 1, 5, 20, 60])
            lines.append({"t_ms": t, "route": "orders", "user": "u%d" % rnd.randrange(20), "ip": "10.0.0.1"})
        local = self.replay(config, lines, "local")
        remote = self.replay(config, lines, "redis")
        self.assertEqual(local.returncode, 0, local.stderr)
        self.assertEqual(remote.returncode, 0, remote.stderr)
        exact = sum(1 for l in local.stdout.splitlines()[:-1] if '"allowed":true' in l)
        leased = sum(1 for l in remote.stdout.splitlines()[:-1] if '"allowed":true' in l)
        print("replay: %d admitted exact, %d with a lease of %d" % (exact, leased, n))
        self.assertGreater(exact, 500)
        self.assertLess(exact, 3500)
        self.assertLessEqual(leased, exact + n)
        self.assertGreaterEqual(leased, exact - 4 * n)


# Floods over every algorithm, in chains the over-limit cache may answer (no shadow or delay
# layer); routes with different costs share limiters.
CACHE_CONFIG = {
    "listen": "127.0.0.1:1",
    "upstreams": {"u": {"targets": ["127.0.0.1:9"]}},
    "identity": {"user": {"header": "X-User-Id"}},
    "limiters": {
        "global": {"scope": "global", "algorithm": "token_bucket", "rules": [{"rate": 300, "period": "1s", "burst": 60}]},
        "user-log": {"scope": "user", "algorithm": "sliding_window_log", "rules": [{"limit": 5, "window": "2s"}]},
        "user-log2": {"scope": "user", "algorithm": "sliding_window_log",
                      "rules": [{"limit": 3, "window": "300ms"}, {"limit": 8, "window": "3s"}]},
        "user-fw": {"scope": "user", "algorithm": "fixed_window", "rules": [{"limit": 4, "window": "3s"}]},
        "user-swc": {"scope": "user", "algorithm": "sliding_window_counter",
                     "rules": [{"limit": 6, "window": "2s", "buckets": 4}]},
        "user-gcra": {"scope": "user", "algorithm": "gcra", "rules": [{"rate": 2, "period": "1s", "burst": 4}]},
        "ip-leaky": {"scope": "ip", "algorithm": "leaky_bucket", "rules": [{"rate": 3, "period": "700ms", "capacity": 6}]},
        "user-bursty": {"scope": "user", "algorithm": "smooth_bursty", "rules": [{"rate": 4, "max_burst_seconds": 1}]},
        "ip-tb": {"scope": "ip", "algorithm": "token_bucket", "per_route": True,
                  "rules": [{"rate": 3, "period": "1s", "burst": 2}, {"rate": 20, "period": "10s", "burst": 6}]},
        "user-warm": {"scope": "user", "algorithm": "smooth_warming_up", "rules": [{"rate": 5, "warmup_period": "1s"}]},
    },
    "routes": [
        {"name": "log", "match": {"path": "/l"}, "upstream": "u", "limiters": ["global", "user-log"]},
        {"name": "log-heavy", "match": {"path": "/lh"}, "upstream": "u", "cost": 2, "limiters": ["user-log", "global"]},
        {"name": "log2", "match": {"path": "/l2"}, "upstream": "u", "limiters": ["user-log2", "ip-leaky"]},
        {"name": "fw", "match": {"path": "/f"}, "upstream": "u", "limiters": ["global", "user-fw"]},
        {"name": "swc", "match": {"path": "/s"}, "upstream": "u", "limiters": ["user-swc", "global"]},
        {"name": "gcra", "match": {"path": "/g"}, "upstream": "u", "cost": 2, "limiters": ["global", "user-gcra", "ip-leaky"]},
        {"name": "bursty", "match": {"path": "/b"}, "upstream": "u", "limiters": ["user-bursty", "ip-tb"]},
        {"name": "warm", "match": {"path": "/w"}, "upstream": "u", "limiters": ["user-warm"]},
    ],
}


class OverLimitCache(ReplayCase):
    """The over-limit cache on Redis: with it on, replay gives decision for decision what it
    gives with it off (every call to Redis), and the cache answers a large share of a flood."""

    def flood(self, n, seed):
        rnd = random.Random(seed)
        t = 1_700_000_000_000.0
        routes = [r["name"] for r in CACHE_CONFIG["routes"]]
        out = []
        for _ in range(n):
            step = rnd.random()
            t += rnd.uniform(0, 2) if step < 0.85 else rnd.uniform(0, 100) if step < 0.98 else rnd.uniform(0, 2000)
            t = round(t, 3)
            line = {"t_ms": t, "route": rnd.choice(routes), "user": "u%d" % rnd.randrange(3),
                    "ip": "10.0.0.%d" % rnd.randrange(3)}
            if rnd.random() < 0.02:
                line["cost"] = rnd.choice([1, 3])  # a trace may cost other than its route
            out.append(line)
        return out

    def test_cache_on_and_off_give_the_same_decisions(self):
        redis = self.track(RedisServer())
        hits = 0
        for seed in (1, 2, 3):
            lines = self.flood(4000, seed)
            outputs = []
            for entries in (0, 10000):
                redis.cli("FLUSHALL")
                config = dict(CACHE_CONFIG, redis={"url": "redis://127.0.0.1:%d/0" % redis.port,
                                                   "over_limit_cache": entries})
                p = self.replay(config, lines, "redis")
                self.assertEqual(p.returncode, 0, p.stderr)
                outputs.append(p.stdout.splitlines())
            off, on = outputs
            self.assertEqual(len(off), len(lines) + 1)
            for i, (a, b) in enumerate(zip(off[:-1], on[:-1])):
                self.assertEqual(a, b, "seed %d, line %d: %s" % (seed, i + 1, json.dumps(lines[i])))
            self.assertEqual(json.loads(off[-1])["summary"]["cache_hits"], 0)
            summary = json.loads(on[-1])["summary"]
            hits += summary["cache_hits"]
            self.assertGreater(summary["limited"], len(lines) // 3)
            self.assertGreater(summary["cache_hits"], summary["limited"] // 3, summary)
        print("over-limit cache on Redis: %d answers from the cache in 3 x 4000 requests" % hits)
