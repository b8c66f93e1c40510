"""Memory per route does not grow with the number of event loops (10,000 routes): per-loop
metrics are allocated only for routes that see traffic, in a compact form."""
import time
import unittest

from harness import SANITIZED, GatewayTest, get, rss_kib


class RoutesTimesLoops(GatewayTest):
    def rss_with_threads(self, threads, up):
        gw = self.gateway({
            "threads": threads,
            "upstreams": {"u": {"targets": ["127.0.0.1:%d" % up.port]}},
            "limiters": {"ip": {"scope": "ip", "algorithm": "token_bucket",
                                "rules": [{"rate": 1000, "period": "1s", "burst": 1000}]}},
            "routes": [{"name": "r%d" % i, "match": {"path_prefix": "/r%d/" % i}, "upstream": "u",
                        "limiters": ["ip"]} for i in range(10000)]})
        # Traffic on a spread of routes, so their metrics exist on some loop.
        for i in range(0, 10000, 500):
            self.assertEqual(get(gw.port, "/r%d/x" % i).status, 200)
        time.sleep(0.5)
        rss = rss_kib(gw.pid)
        gw.stop()
        return rss

    @unittest.skipIf(SANITIZED, "ASan's shadow memory and quarantine make RSS meaningless here")
    def test_each_event_loop_beyond_the_first_adds_at_most_5_mb(self):
        up = self.upstream()
        one, two, four = (self.rss_with_threads(t, up) for t in (1, 2, 4))
        per_loop_kib = max(two - one, (four - one) / 3)
        self.assertLessEqual(per_loop_kib, 5 * 1024, "RSS 1/2/4 loops: %d/%d/%d KiB" % (one, two, four))


if __name__ == "__main__":
    unittest.main()
