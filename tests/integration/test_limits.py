"""Rate-limited routes over real sockets: gateway + demo upstream + redis-server (SPEC §2-§3)."""
import json
import math
import threading
import time

from harness import Conn, Gateway, GatewayTest, RedisServer, get


def limiter(scope, algorithm, rules, **extra):
    d = {"scope": scope, "algorithm": algorithm, "rules": rules}
    d.update(extra)
    return d


# Exact counts use sliding_window_log: a fixed window could roll over mid-test.
class LimitTest(GatewayTest):
    def make(self, limiters, routes, redis=True, on_redis_error="allow", threads=1, **extra):
        self.up = self.upstream()
        self.redis = self.track(RedisServer()) if redis is True else redis
        cfg = {
            "threads": threads,
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
            "identity": {"user": {"header": "X-User-Id"}, "client_ip": {"trusted_proxies": ["127.0.0.1/32"]}},
            "limiters": limiters,
            "routes": [dict({"upstream": "demo", "on_redis_error": on_redis_error}, **r) for r in routes],
        }
        if self.redis:
            cfg["redis"] = {"url": "redis://127.0.0.1:%d/0" % self.redis.port, "command_timeout": "200ms"}
        cfg.update(extra)
        self.cfg = cfg
        self.gw = self.gateway(cfg)
        return self.gw

    def statuses(self, path, n, headers=None, port=None):
        c = Conn(port or self.gw.port)
        out = [c.request("GET", path, headers).status for _ in range(n)]
        c.close()
        return out


class Scopes(LimitTest):
    def test_per_user_limits_isolate_users(self):
        self.make({"per-user": limiter("user", "sliding_window_log", [{"limit": 3, "window": "1m"}])},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-user"]}])
        self.assertEqual(self.statuses("/api/x", 5, {"X-User-Id": "alice"}), [200, 200, 200, 429, 429])
        self.assertEqual(self.statuses("/api/x", 3, {"X-User-Id": "bob"}), [200, 200, 200])

    def test_global_is_shared_across_routes_route_scope_is_not(self):
        self.make({"g": limiter("global", "sliding_window_log", [{"limit": 4, "window": "1m"}]),
                   "r": limiter("route", "sliding_window_log", [{"limit": 2, "window": "1m"}])},
                  [{"name": "a", "match": {"path_prefix": "/a"}, "limiters": ["g"]},
                   {"name": "b", "match": {"path_prefix": "/b"}, "limiters": ["g"]},
                   {"name": "c", "match": {"path_prefix": "/c"}, "limiters": ["r"]},
                   {"name": "d", "match": {"path_prefix": "/d"}, "limiters": ["r"]}])
        self.assertEqual(self.statuses("/a", 2) + self.statuses("/b", 3), [200, 200, 200, 200, 429])
        self.assertEqual(self.statuses("/c", 3), [200, 200, 429])
        self.assertEqual(self.statuses("/d", 2), [200, 200])  # its own counter

    def test_forwarded_for_only_believed_from_trusted_proxies(self):
        self.make({"per-ip": limiter("ip", "sliding_window_log", [{"limit": 2, "window": "1m"}])},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-ip"]}])
        # From 127.0.0.1 (trusted): the right-most untrusted X-Forwarded-For address is the client.
        self.assertEqual(self.statuses("/api/x", 3, {"X-Forwarded-For": "198.51.100.1"}), [200, 200, 429])
        self.assertEqual(self.statuses("/api/x", 2, {"X-Forwarded-For": "198.51.100.2"}), [200, 200])
        self.assertEqual(self.statuses("/api/x", 1, {"X-Forwarded-For": "9.9.9.9, 198.51.100.2"}), [429])

    def test_untrusted_client_cannot_dodge_with_forged_forwarded_for(self):
        self.make({"per-ip": limiter("ip", "sliding_window_log", [{"limit": 2, "window": "1m"}])},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-ip"]}],
                  identity={"user": {"header": "X-User-Id"}, "client_ip": {"trusted_proxies": ["10.0.0.0/8"]}})
        forged = [self.statuses("/api/x", 1, {"X-Forwarded-For": "203.0.113.%d" % i})[0] for i in range(4)]
        self.assertEqual(forged, [200, 200, 429, 429])  # every forged value maps to the real peer

    def test_missing_identity_policies(self):
        self.make({"skip": limiter("user", "sliding_window_log", [{"limit": 1, "window": "1m"}]),
                   "deny": limiter("user", "sliding_window_log", [{"limit": 5, "window": "1m"}], on_missing_key="deny"),
                   "anon": limiter("user", "sliding_window_log", [{"limit": 2, "window": "1m"}],
                                   on_missing_key="anonymous")},
                  [{"name": "s", "match": {"path_prefix": "/s"}, "limiters": ["skip"]},
                   {"name": "d", "match": {"path_prefix": "/d"}, "limiters": ["deny"]},
                   {"name": "a", "match": {"path_prefix": "/a"}, "limiters": ["anon"]}])
        self.assertEqual(self.statuses("/s", 3), [200, 200, 200])  # no user id: layer skipped
        r = get(self.gw.port, "/d")
        self.assertEqual(r.status, 403)
        self.assertEqual(r.json()["error"], "forbidden")
        self.assertEqual(self.statuses("/a", 3), [200, 200, 429])  # one shared anonymous key
        self.assertEqual(self.statuses("/a", 1, {"X-User-Id": "u"}), [200])


class Headers(LimitTest):
    def test_ietf_and_legacy_headers_count_down(self):
        self.make({"per-user": limiter("user", "token_bucket", [{"rate": 1, "period": "1s", "burst": 3}])},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-user"], "headers": "both",
                    "on_limit": {"status": 429, "message": "slow down"}}])
        c = Conn(self.gw.port)
        rs = [c.request("GET", "/api/x", {"X-User-Id": "h"}) for _ in range(4)]
        c.close()
        self.assertEqual([r.status for r in rs], [200, 200, 200, 429])
        self.assertEqual([r.header("RateLimit") for r in rs[:3]],
                         ['"per-user";r=2;t=1', '"per-user";r=1;t=2', '"per-user";r=0;t=3'])
        self.assertEqual(rs[0].header("RateLimit-Policy"), '"per-user";q=3;w=1')
        self.assertEqual([r.header("X-RateLimit-Remaining") for r in rs[:3]], ["2", "1", "0"])
        self.assertEqual(rs[0].header("X-RateLimit-Limit"), "3")
        limited = rs[3]
        body = limited.json()
        self.assertEqual((body["error"], body["limiter"], body["message"]), ("rate_limited", "per-user", "slow down"))
        self.assertGreater(body["retry_after_ms"], 900)
        self.assertEqual(limited.header("Retry-After"), "1")
        # Retry-After is never shorter than the real wait: after it, the request passes.
        time.sleep(int(limited.header("Retry-After")))
        self.assertEqual(get(self.gw.port, "/api/x", {"X-User-Id": "h"}).status, 200)

    def test_gateway_errors_after_the_limiters_carry_their_headers(self):
        # SPEC §3: every response that went through a limiter carries the headers, the
        # gateway's own 502 for an upstream that is down included.
        self.make({"u": limiter("user", "sliding_window_log", [{"limit": 3, "window": "1m"}])},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["u"], "headers": "both"}])
        self.up.stop()
        r = get(self.gw.port, "/api/x", {"X-User-Id": "d"})
        self.assertEqual(r.status, 502)
        self.assertEqual(r.header("RateLimit-Policy"), '"u";q=3;w=60')
        self.assertIn('"u";r=2;', r.header("RateLimit"))
        self.assertEqual((r.header("X-RateLimit-Limit"), r.header("X-RateLimit-Remaining")), ("3", "2"))
        self.assertEqual(r.json()["error"], "upstream_unavailable")
        # Before the limiters (no route): none.
        r = get(self.gw.port, "/nowhere", {"X-User-Id": "d"})
        self.assertEqual(r.status, 404)
        self.assertIsNone(r.header("RateLimit-Policy"))

    def test_reset_counts_down_and_default_is_ietf_only(self):
        self.make({"w": limiter("user", "fixed_window", [{"limit": 2, "window": "1m"}])},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["w"]}])
        if 60 - time.time() % 60 < 4:  # keep clear of a window boundary
            time.sleep(60 - time.time() % 60 + 0.2)
        self.assertEqual(self.statuses("/api/x", 2, {"X-User-Id": "r"}), [200, 200])
        a = get(self.gw.port, "/api/x", {"X-User-Id": "r"})
        time.sleep(1.1)
        b = get(self.gw.port, "/api/x", {"X-User-Id": "r"})
        self.assertEqual((a.status, b.status), (429, 429))
        ta = int(a.header("RateLimit").split("t=")[1])
        tb = int(b.header("RateLimit").split("t=")[1])
        self.assertLessEqual(tb, ta - 1)
        self.assertGreaterEqual(int(b.header("Retry-After")), tb - 1)
        self.assertIsNone(a.header("X-RateLimit-Remaining"))

    def test_backend_ratelimit_headers_are_never_loosened(self):
        self.make({"u": limiter("user", "sliding_window_log", [{"limit": 100, "window": "1m"}])},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["u"], "headers": "legacy",
                    "strip_prefix": "/api"}])
        r = get(self.gw.port, "/api/headers?set=X-RateLimit-Remaining:3&set=X-RateLimit-Limit:5",
                {"X-User-Id": "b"})
        self.assertEqual(r.header("X-RateLimit-Remaining"), "3")  # the backend's stricter value stays
        r2 = get(self.gw.port, "/api/headers?set=X-RateLimit-Remaining:500", {"X-User-Id": "b"})
        self.assertEqual(r2.header("X-RateLimit-Remaining"), "98")  # ours is stricter


class ChainRule(LimitTest):
    def test_rejections_by_the_user_layer_do_not_drain_the_global_layer(self):
        self.make({"global": limiter("global", "sliding_window_log", [{"limit": 10, "window": "1m"}]),
                   "per-user": limiter("user", "sliding_window_log", [{"limit": 2, "window": "1m"}])},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["global", "per-user"]}])
        self.assertEqual(self.statuses("/api/x", 20, {"X-User-Id": "greedy"}), [200, 200] + [429] * 18)
        # 18 rejected requests consumed nothing globally: 8 more users' worth still pass
        passed = sum(self.statuses("/api/x", 1, {"X-User-Id": "u%d" % i})[0] == 200 for i in range(10))
        self.assertEqual(passed, 8)

    def test_shadow_layer_never_rejects(self):
        self.make({"shadow": limiter("user", "sliding_window_log", [{"limit": 1, "window": "1m"}], mode="shadow")},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["shadow"]}])
        self.assertEqual(self.statuses("/api/x", 5, {"X-User-Id": "s"}), [200] * 5)


class Distributed(LimitTest):
    def two_gateways(self, limiters):
        gw1 = self.make(limiters, [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["l"]}], threads=2)
        gw2 = self.gateway(self.cfg)  # a second process on its own port, same Redis
        return gw1, gw2

    def hammer(self, ports, per_port_threads=4, seconds=1.5, user="shared"):
        counts = {200: 0, 429: 0, "other": 0}
        lock = threading.Lock()
        stop = time.time() + seconds

        def worker(port):
            c = Conn(port)
            while time.time() < stop:
                s = c.request("GET", "/api/x", {"X-User-Id": user}).status
                with lock:
                    counts[s if s in (200, 429) else "other"] += 1
            c.close()
        threads = [threading.Thread(target=worker, args=(p,)) for p in ports for _ in range(per_port_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return counts

    def test_two_gateways_share_one_sliding_log_limit_exactly(self):
        gw1, gw2 = self.two_gateways({"l": limiter("user", "sliding_window_log", [{"limit": 25, "window": "1m"}])})
        counts = self.hammer([gw1.port, gw2.port])
        self.assertEqual(counts[200], 25)
        self.assertGreater(counts[429], 50)
        self.assertEqual(counts["other"], 0)

    def test_two_gateways_share_one_token_bucket_within_its_burst(self):
        gw1, gw2 = self.two_gateways({"l": limiter("user", "token_bucket", [{"rate": 10, "period": "1s", "burst": 20}])})
        start = time.time()
        counts = self.hammer([gw1.port, gw2.port], seconds=2.0)
        elapsed = time.time() - start
        self.assertLessEqual(counts[200], 20 + math.ceil(10 * elapsed) + 1)
        self.assertGreaterEqual(counts[200], 20 + int(10 * 1.8))


class RedisFailure(LimitTest):
    ROUTES = [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["u"]}]
    LIMITERS = {"u": limiter("user", "sliding_window_log", [{"limit": 3, "window": "1m"}])}

    def kill_redis(self):
        self.redis.stop()
        time.sleep(0.3)

    def restart_redis(self):
        port = self.redis.port
        self.redis = self.track(RedisServer(port=port))
        deadline = time.time() + 8
        while time.time() < deadline:  # the gateway reconnects by itself: decisions land in Redis again
            get(self.gw.port, "/api/x", {"X-User-Id": "probe"})
            if self.redis.cli("DBSIZE") not in ("", "0"):
                return
            time.sleep(0.1)
        self.fail("the gateway did not reconnect to Redis within 8 s")

    def test_allow_fails_open_and_limiting_resumes(self):
        self.make(self.LIMITERS, self.ROUTES, on_redis_error="allow")
        self.assertEqual(self.statuses("/api/x", 4, {"X-User-Id": "a"}), [200, 200, 200, 429])
        self.kill_redis()
        start = time.time()
        self.assertEqual(self.statuses("/api/x", 5, {"X-User-Id": "a"}), [200] * 5)
        self.assertLess(time.time() - start, 3)  # command_timeout bounds each request
        self.restart_redis()
        self.assertEqual(self.statuses("/api/x", 4, {"X-User-Id": "z"}), [200, 200, 200, 429])

    def test_deny_fails_closed_with_503(self):
        self.make(self.LIMITERS, self.ROUTES, on_redis_error="deny")
        self.kill_redis()
        r = get(self.gw.port, "/api/x", {"X-User-Id": "a"})
        self.assertEqual(r.status, 503)
        self.assertEqual(r.json()["error"], "limiter_unavailable")
        self.restart_redis()
        self.assertEqual(self.statuses("/api/x", 4, {"X-User-Id": "y"}), [200, 200, 200, 429])

    def test_local_uses_the_in_process_twin(self):
        self.make(self.LIMITERS, self.ROUTES, on_redis_error="local")
        self.kill_redis()
        self.assertEqual(self.statuses("/api/x", 4, {"X-User-Id": "l"}), [200, 200, 200, 429])
        self.restart_redis()
        self.assertEqual(self.statuses("/api/x", 4, {"X-User-Id": "x"}), [200, 200, 200, 429])

    def test_killed_under_load_no_hang_no_crash(self):
        self.make(self.LIMITERS, self.ROUTES, on_redis_error="allow", threads=2)
        results = []

        def load():
            c = Conn(self.gw.port)
            for i in range(300):
                results.append(c.request("GET", "/api/x", {"X-User-Id": "load%d" % (i % 50)}).status)
            c.close()
        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.2)
        self.kill_redis()
        for t in threads:
            t.join()
        self.assertEqual(len(results), 1200)
        self.assertTrue(set(results) <= {200, 429})


class InProcess(LimitTest):
    def test_no_redis_section_limits_in_process_across_threads(self):
        self.make({"u": limiter("user", "sliding_window_log", [{"limit": 30, "window": "1m"}])},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["u"]}], redis=None, threads=2)
        counts = Distributed.hammer(self, [self.gw.port], per_port_threads=6, seconds=1.0)
        self.assertEqual(counts[200], 30)


class Shaping(LimitTest):
    def test_delay_turns_a_burst_into_a_paced_stream(self):
        self.make({"paced": limiter("user", "token_bucket", [{"rate": 20, "period": "1s", "burst": 1}],
                                    delay="3s")},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["paced"]}])
        times, statuses = [], []
        lock = threading.Lock()
        start = time.time()

        def one():
            s = get(self.gw.port, "/api/x", {"X-User-Id": "burst"}).status
            with lock:
                statuses.append(s)
                times.append(time.time() - start)
        threads = [threading.Thread(target=one) for _ in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(statuses, [200] * 50)  # none rejected within the delay
        times.sort()
        # 50 requests at 20/s with burst 1: the last cannot be served before 49 / 20 = 2.45 s
        self.assertGreater(times[-1], 2.3)
        for i, t in enumerate(times):
            self.assertGreaterEqual(t, i / 20.0 - 0.1, "request %d served early" % i)

    def test_delay_beyond_the_limit_is_rejected(self):
        self.make({"paced": limiter("user", "token_bucket", [{"rate": 10, "period": "1s", "burst": 1}],
                                    delay="250ms")},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["paced"]}])
        statuses = []
        threads = [threading.Thread(target=lambda: statuses.append(get(self.gw.port, "/api/x",
                                                                       {"X-User-Id": "d"}).status))
                   for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(statuses.count(200), 3)  # now, +100 ms, +200 ms
        self.assertEqual(statuses.count(429), 7)
