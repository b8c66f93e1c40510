"""Redis Sentinel (SPEC §2 "Redis deployments"): the master is asked of the sentinels (any that
answers; a dead or silent one is skipped), and the gateway follows a failover to the new master
without a restart, on +switch-master. While no master is reachable the route's on_redis_error
applies; /readyz is 200 when the Sentinel master answers.

Real processes: a master, a replica and three sentinels (harness.SentinelSet), quorum 2,
down-after 1 s, so a failover takes a few seconds.
"""
import threading
import time

from harness import Conn, GatewayTest, Load, RedisServer, SANITIZED, SentinelSet, SilentServer, free_port, get

SLOW = 3 if SANITIZED else 1


def limiter(scope, algorithm, rules, **extra):
    d = {"scope": scope, "algorithm": algorithm, "rules": rules}
    d.update(extra)
    return d


def exact(limit):
    return limiter("user", "sliding_window_log", [{"limit": limit, "window": "1m"}])


class Sentinel(GatewayTest):
    wall_clock_cap = 60

    def deployment(self, **kw):
        s = SentinelSet(self.track, **kw)
        self.sets = getattr(self, "sets", []) + [s]
        self.addCleanup(s.stop)  # after tearDown: removes its temp dir
        s.wait_ready()
        return s

    def make(self, redis, limiters, routes, on_redis_error="deny", threads=1, ready=True):
        self.up = self.upstream()
        self.admin_port = free_port()
        cfg = {
            "threads": threads,
            "admin": {"listen": "127.0.0.1:%d" % self.admin_port},
            "redis": redis,
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
            "identity": {"user": {"header": "X-User-Id"}},
            "limiters": limiters,
            "routes": [dict({"upstream": "demo", "on_redis_error": on_redis_error}, **r) for r in routes],
        }
        self.started = time.time()
        self.gw = self.gateway(cfg)
        if ready:
            self.wait_readyz(200, 5 * SLOW)
        return self.gw

    def admin(self, path):
        return get(self.admin_port, path)

    def readyz(self):
        try:
            return self.admin("/readyz").status
        except (OSError, EOFError):
            return None

    def wait_readyz(self, status, timeout):
        deadline = time.time() + timeout
        while self.readyz() != status and time.time() < deadline:
            time.sleep(0.05)
        if self.readyz() != status:
            self.fail("readyz is %s, not %s, %.1fs after start\n%s" % (self.readyz(), status, time.time() - self.started,
                                                                   self.diagnosis()))

    def diagnosis(self):
        """What the gateway logged and counts of Redis, and what the sentinels say, for a failure."""
        try:
            metrics = [l for l in self.admin("/metrics").body.decode().splitlines()
                       if l.startswith("rategate_redis")]
        except (OSError, EOFError) as e:
            metrics = ["/metrics: %s" % e]
        seen = []
        for s in getattr(self, "sets", []):
            for port in s.sentinel_ports:
                seen.append("sentinel %d: %s" % (port, s.sentinel_cli(port, "SENTINEL", "get-master-addr-by-name",
                                                                      s.name)))
            for port in s.data_nodes:
                role = s.cli(port, "ROLE")
                seen.append("data node %d: %s" % (port, role.split()[0] if role else role))
        return "gateway log:\n%s\nmetrics:\n%s\n%s" % (self.gw_log(), "\n".join(metrics), "\n".join(seen))

    def statuses(self, path, n, headers=None):
        c = Conn(self.gw.port)
        out = [c.request("GET", path, headers).status for _ in range(n)]
        c.close()
        return out

    def keys_of(self, sentinels, port, user):
        """The keys on a data node whose name holds this user id."""
        out = sentinels.cli(port, "--scan", "--pattern", "*%s*" % user)
        return out.split() if out else []

    def wait_writes_on(self, s, old, new, bound, note=""):
        """Sends requests of fresh users until one's key lands on the new master; fails after
        `bound` seconds. A 503 (on_redis_error deny) is allowed while the gateway switches."""
        start = time.time()
        i = 0
        while True:
            user = "probe-%d-sx" % i
            self.assertIn(get(self.gw.port, "/api/x", {"X-User-Id": user}).status, (200, 503))
            if self.keys_of(s, new, user):
                return time.time() - start
            self.assertLess(time.time() - start, bound,
                            "%.1fs after the failover the gateway still writes to the old master %d, not %d%s; "
                            "gateway log:\n%s" % (time.time() - start, old, new, note, self.gw_log()))
            time.sleep(0.1)
            i += 1

    def gw_log(self):
        """The gateway's log without the access log lines."""
        lines = [l for l in self.gw.output().splitlines() if not l[:4].isdigit()]
        return "\n".join(lines[-30:])

    def assert_alive(self):
        self.assertIsNone(self.gw.proc.poll(), "gateway died:\n" + self.gw.output()[-4000:])

    # --- discovery -----------------------------------------------------------------------

    def test_exact_limits_through_sentinel_discovery(self):
        s = self.deployment()
        self.make(s.config(), {"per-user": exact(5)},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-user"]}])
        self.assertEqual(self.statuses("/api/x", 7, {"X-User-Id": "alice-sx"}), [200] * 5 + [429] * 2)
        self.assertGreater(s.dbsize(s.master.port), 0)
        self.assertTrue(self.keys_of(s, s.master.port, "alice-sx"), "no key of the user on the master")
        self.assertEqual(self.readyz(), 200)
        self.assert_alive()

    def test_dead_and_silent_sentinels_listed_first_are_skipped(self):
        s = self.deployment()
        silent = SilentServer()
        self.addCleanup(silent.stop)
        dead = free_port()  # nothing listens there: connection refused
        redis = s.config()
        redis["sentinel"]["nodes"] = ["127.0.0.1:%d" % dead, "127.0.0.1:%d" % silent.port] + s.nodes()
        self.make(redis, {"per-user": exact(3)},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-user"]}], ready=False)
        self.wait_readyz(200, 3 * SLOW)
        took = time.time() - self.started
        self.assertLess(took, 3 * SLOW, "ready only %.1fs after start" % took)
        self.assertEqual(self.statuses("/api/x", 4, {"X-User-Id": "bob-sx"}), [200, 200, 200, 429])
        self.assertTrue(self.keys_of(s, s.master.port, "bob-sx"), "no key of the user on the master")
        self.assert_alive()

    def test_sentinel_and_data_node_passwords(self):
        s = self.deployment(password="data-pw-sx", sentinel_password="sentinel-pw-sx")
        self.make(s.config(), {"per-user": exact(2)},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-user"]}])
        self.assertEqual(self.statuses("/api/x", 3, {"X-User-Id": "carol-sx"}), [200, 200, 429])
        self.assertTrue(self.keys_of(s, s.master.port, "carol-sx"), "no key of the user on the master")
        cfg = self.admin("/config")
        self.assertEqual(cfg.status, 200)
        self.assertNotIn("data-pw-sx", cfg.body.decode())
        self.assertNotIn("sentinel-pw-sx", cfg.body.decode())
        self.assert_alive()

    # --- failover ------------------------------------------------------------------------

    def test_master_killed_under_load_failover_without_restart(self):
        s = self.deployment()
        self.make(s.config(), {"bulk": exact(1000000), "exact": exact(3)},
                  [{"name": "bulk", "match": {"path_prefix": "/bulk"}, "limiters": ["bulk"]},
                   {"name": "exact", "match": {"path_prefix": "/exact"}, "limiters": ["exact"]}], threads=2)
        load = Load(self.gw.port, "/bulk/x", {"X-User-Id": "load-sx"})
        self.addCleanup(load.stop)
        deadline = time.time() + 5
        while load.count(200) < 20 and time.time() < deadline:
            time.sleep(0.05)
        self.assertGreaterEqual(load.count(200), 20, "no load got through: %s" % load.results[-5:])

        old = s.kill_master()
        new = s.wait_failover(old, timeout=20)
        failed_over = time.time()
        before = s.dbsize(new.port)
        # The gateway follows to the new master without a restart.
        recovered = None
        while time.time() < failed_over + 10 * SLOW:
            if get(self.gw.port, "/bulk/x", {"X-User-Id": "probe-sx"}).status == 200:
                recovered = time.time()
                break
            time.sleep(0.05)
        self.assertIsNotNone(recovered, "still no 200 10s after the failover to port %d; gateway log:\n%s"
                             % (new.port, self.gw_log()))
        time.sleep(1.5)
        self.assertEqual(self.statuses("/exact/x", 4, {"X-User-Id": "fresh-sx"}), [200, 200, 200, 429])
        self.assertGreater(s.dbsize(new.port), before)
        self.assertTrue(self.keys_of(s, new.port, "fresh-sx"), "no key of the user on the new master")
        load.stop()

        outcomes = [o for _, _, o in load.results]
        self.assertLessEqual(set(outcomes), {200, 503}, "unexpected outcomes: %s" % sorted(set(map(str, outcomes))))
        # With the master gone and none promoted yet, on_redis_error "deny" applies.
        self.assertIn(503, outcomes)
        after = [o for start, _, o in load.results if start > recovered + 1.0]
        self.assertTrue(after)
        self.assertEqual(set(after), {200}, "503s after the gateway followed the failover")
        slowest = max(d for _, d, _ in load.results)
        self.assertLess(slowest, 2.0 * SLOW, "a request took %.1fs" % slowest)
        self.assert_alive()

    def test_switch_master_is_followed_while_the_old_master_still_answers(self):
        """SENTINEL FAILOVER leaves the old master up and writable until the sentinels demote it
        (about 10 s after the switch): no lost connection nor READONLY reply tells the gateway;
        only +switch-master (or asking the sentinels again) does."""
        s = self.deployment()
        self.make(s.config(), {"per-user": exact(3)},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-user"]}])
        self.assertEqual(self.statuses("/api/x", 1, {"X-User-Id": "early-sx"}), [200])
        old = s.manual_failover()
        new = s.wait_failover(old)
        self.wait_writes_on(s, old, new.port, 3 * SLOW)
        self.assertEqual(self.statuses("/api/x", 4, {"X-User-Id": "late-sx"}), [200, 200, 200, 429])
        self.assertTrue(self.keys_of(s, new.port, "late-sx"))
        self.assertFalse(self.keys_of(s, old, "late-sx"))
        # Still the case the test means: the old master had not been demoted yet.
        self.assertEqual(s.cli(old, "ROLE").splitlines()[0], "master")
        # /readyz reads the state each loop publishes 4 times a second: it may trail the
        # switch (a reconnect) by one publication.
        self.wait_readyz(200, 1 * SLOW)
        self.assert_alive()

    def test_failover_followed_with_dead_and_silent_sentinels_listed_first(self):
        """The +switch-master watch must end up on a sentinel that answers: a refused one and
        one that accepts but never answers (its SUBSCRIBE never confirmed) are passed over.
        The old master stays writable, so only the event (or asking again) moves the gateway."""
        s = self.deployment()
        silent = SilentServer()
        self.addCleanup(silent.stop)
        redis = s.config()
        redis["sentinel"]["nodes"] = ["127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % silent.port] + s.nodes()
        self.make(redis, {"per-user": exact(3)},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-user"]}])
        self.assertEqual(self.statuses("/api/x", 1, {"X-User-Id": "early-sx"}), [200])
        old = s.manual_failover()
        new = s.wait_failover(old)
        # 4 s: the watch passes the refused sentinel, waits out the silent one's confirmation
        # (connect_timeout) and backs off between them; 3 s was missed by 0.08 s on a loaded machine.
        self.wait_writes_on(s, old, new.port, 4 * SLOW,
                            " (connections held by the silent sentinel: %d)" % len(silent.held))
        self.assertEqual(self.statuses("/api/x", 4, {"X-User-Id": "late-sx"}), [200, 200, 200, 429])
        self.assertTrue(self.keys_of(s, new.port, "late-sx"))
        self.assertFalse(self.keys_of(s, old, "late-sx"))
        self.assert_alive()

    # --- no master -----------------------------------------------------------------------

    def test_master_down_without_failover_denies_quickly_then_recovers(self):
        """No replica to promote: the sentinels keep naming the dead master. Requests get the
        route's on_redis_error (deny: 503 with a JSON body) at once; when a master comes back at
        that address the gateway uses it without a restart."""
        s = self.deployment(replicas=0)
        old = s.kill_master()
        self.make(s.config(), {"per-user": exact(3)},
                  [{"name": "api", "match": {"path_prefix": "/api"}, "limiters": ["per-user"]}], ready=False)
        # At startup each loop waits up to 3 s for Redis before taking clients (server.cpp,
        # wait_for_redis): the first request may wait that long in the listen backlog.
        r = get(self.gw.port, "/api/x", {"X-User-Id": "dan-sx"})
        took = time.time() - self.started
        self.assertEqual(r.status, 503, r.body)
        self.assertLess(took, 3.0 + 1.0 * SLOW, "first answer %.2fs after start" % took)
        for i in range(5):
            start = time.time()
            r = get(self.gw.port, "/api/x", {"X-User-Id": "dan-sx"})
            took = time.time() - start
            self.assertEqual(r.status, 503, r.body)
            body = r.json()
            self.assertIn("error", body)
            self.assertIn("message", body)
            self.assertLess(took, 1.0 * SLOW, "request %d took %.2fs" % (i, took))
        self.assertEqual(self.readyz(), 503)
        self.assertEqual(s.master_addr()[1], old)
        # The master comes back (empty) where the sentinels say it is.
        s.master = self.track(RedisServer(port=old, extra=["--dir", s.dir]))
        self.wait_readyz(200, 10 * SLOW)
        self.assertEqual(self.statuses("/api/x", 4, {"X-User-Id": "erin-sx"}), [200, 200, 200, 429])
        self.assertTrue(self.keys_of(s, old, "erin-sx"))
        self.assert_alive()


if __name__ == "__main__":
    import unittest
    unittest.main()
