"""Hot reload (SPEC §5): SIGHUP and file changes, invalid files refused while the old config
keeps serving, limiter state surviving, no request lost under load."""
import json
import signal
import threading
import time

from harness import Conn, GatewayTest, RedisServer, free_port, get


def config(upstream_port, limit, extra_route=None, redis_port=None, admin_port=None):
    cfg = {
        "threads": 2,
        "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % upstream_port]}},
        "limiters": {"u": {"scope": "user", "algorithm": "sliding_window_log", "rules": [{"limit": limit, "window": "1m"}]}},
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

    def test_sighup_applies_new_limits_and_keeps_state(self):
        self.start(3)
        self.assertEqual([get(self.gw.port, "/api/x", {"X-User-Id": "k"}).status for _ in range(4)],
                         [200, 200, 200, 429])
        self.rewrite(config(self.up.port, 5, redis_port=self.redis.port, admin_port=self.admin_port))
        self.gw.proc.send_signal(signal.SIGHUP)
        self.assertTrue(self.wait_for(lambda: self.limit_seen("probe") == "5"))
        # "k" used 3 of its window before the reload: the changed rate applies to the existing count
        self.assertEqual([get(self.gw.port, "/api/x", {"X-User-Id": "k"}).status for _ in range(3)], [200, 200, 429])

    def test_file_change_reloads_routes(self):
        self.start(3)
        self.assertEqual(get(self.gw.port, "/new/x").status, 404)
        self.rewrite(config(self.up.port, 3, {"name": "new", "match": {"path_prefix": "/new"}, "upstream": "demo"},
                            redis_port=self.redis.port, admin_port=self.admin_port))
        self.assertTrue(self.wait_for(lambda: get(self.gw.port, "/new/x").status == 200, seconds=6))
        metrics = get(self.admin_port, "/metrics").body.decode()
        self.assertIn('rategate_config_reloads_total{outcome="success"} 1', metrics)

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
