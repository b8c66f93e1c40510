"""The admin dashboard (SPEC §4) as a person sees it: the page is loaded in headless Chromium
while traffic flows, its DOM is checked for drawn charts and the limited-keys table, and a
screenshot is taken; /top names the flooding user first."""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

from harness import Conn, GatewayTest, Process, free_port, get, wait_port

try:
    import websocket  # Debian python3-websocket
except ImportError:  # a python3 other than Debian's on PATH: use Debian's packages
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        import websocket
    except ImportError:
        websocket = None

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class DevTools:
    """A minimal Chrome DevTools Protocol client over one page's websocket."""

    def __init__(self, port, timeout=30):
        deadline = time.time() + timeout
        while True:
            try:
                pages = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json" % port, timeout=2))
                page = next(p for p in pages if p.get("type") == "page")
                break
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg["result"]

    def evaluate(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return r["result"].get("value")


class Dashboard(GatewayTest):
    wall_clock_cap = 120

    def setUp(self):
        super().setUp()
        self.up = self.upstream()
        self.admin_port = free_port()
        self.gw = self.gateway({
            "admin": {"listen": "127.0.0.1:%d" % self.admin_port},
            "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
            "identity": {"user": {"header": "X-User-Id"}},
            "limiters": {"per-user": {"scope": "user", "algorithm": "token_bucket",
                                      "rules": [{"rate": 5, "period": "1s", "burst": 5}]},
                         "global": {"scope": "global", "algorithm": "token_bucket",
                                    "rules": [{"rate": 10000, "period": "1s", "burst": 10000}]}},
            "routes": [{"name": "orders", "match": {"path_prefix": "/api"}, "upstream": "demo",
                        "limiters": ["global", "per-user"]},
                       {"name": "public", "match": {"path_prefix": "/"}, "upstream": "demo"}]})
        wait_port(self.admin_port, proc=self.gw.proc)
        self.stop_traffic = threading.Event()
        self.traffic = threading.Thread(target=self.run_traffic, daemon=True)
        self.traffic.start()

    def tearDown(self):
        self.stop_traffic.set()
        self.traffic.join(10)
        super().tearDown()

    def run_traffic(self):
        """A flooding user (alice), a few polite users, and unlimited traffic, until stopped."""
        c = Conn(self.gw.port)
        i = 0
        while not self.stop_traffic.is_set():
            c.request("GET", "/api/orders", {"X-User-Id": "alice"})
            if i % 5 == 0:
                c.request("GET", "/api/orders", {"X-User-Id": "user%d" % (i % 3)})
                c.request("GET", "/public/x")
            i += 1
            time.sleep(0.005)
        c.close()

    def test_top_names_the_flooding_user_first(self):
        time.sleep(1.0)
        top = get(self.admin_port, "/top").json()
        self.assertGreater(len(top), 0)
        self.assertEqual(top[0]["limiter"], "per-user")
        self.assertEqual(top[0]["key"], "u=alice")
        self.assertGreater(top[0]["limited"], 10)
        for row in top[1:]:
            self.assertLessEqual(row["limited"], top[0]["limited"])
        stats = get(self.admin_port, "/stats").json()
        self.assertEqual([r["name"] for r in stats["routes"]][:2], ["orders", "public"])
        self.assertGreater(stats["routes"][0]["statuses"]["429"], 10)

    @unittest.skipUnless(CHROMIUM and websocket, "chromium or python3-websocket missing")
    def test_page_draws_live_charts_in_chromium(self):
        page = get(self.admin_port, "/")
        self.assertEqual(page.status, 200)
        self.assertIn("text/html", page.header("Content-Type"))
        self.assertNotIn(b"http://", page.body.replace(b"http://www.w3.org/2000/svg", b""))  # no CDN
        port = free_port()
        profile = tempfile.mkdtemp(prefix="chromium-")
        browser = self.track(Process([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                                      "--no-first-run", "--hide-scrollbars", "--window-size=1400,1200",
                                      "--remote-debugging-port=%d" % port, "--user-data-dir=" + profile,
                                      "about:blank"], "chromium"))
        try:
            cdp = DevTools(port)
            cdp.call("Page.enable")
            cdp.call("Page.navigate", url="http://127.0.0.1:%d/" % self.admin_port)
            # Several real polls (one a second) with traffic flowing.
            deadline = time.time() + 30
            state = {}
            while time.time() < deadline:
                time.sleep(1)
                state = cdp.evaluate("""({
                    requests: document.querySelectorAll('#chart-requests path').length,
                    decisions: document.querySelectorAll('#chart-decisions path').length,
                    latency: document.querySelectorAll('#chart-latency path').length,
                    legend: document.getElementById('legend-requests').textContent,
                    decisionLegend: document.getElementById('legend-decisions').textContent,
                    rps: document.getElementById('kpi-rps').textContent,
                    top: [...document.querySelectorAll('#top-body tr')].map(r => r.textContent),
                    redis: document.getElementById('redis-pill').textContent })""") or {}
                if state.get("requests", 0) >= 2 and state.get("top") and "alice" in state["top"][0] \
                        and time.time() > deadline - 25:
                    break
            self.assertGreaterEqual(state.get("requests", 0), 2, state)
            self.assertGreaterEqual(state.get("decisions", 0), 2, state)
            self.assertGreaterEqual(state.get("latency", 0), 2, state)
            self.assertIn("orders 429", state["legend"])
            self.assertIn("public 200", state["legend"])
            self.assertIn("per-user limited", state["decisionLegend"])
            self.assertNotEqual(state["rps"].strip(), "–/s")
            self.assertIn("per-user", state["top"][0])
            self.assertIn("u=alice", state["top"][0])
            self.assertIn("not configured", state["redis"])
            shot = base64.b64decode(cdp.call("Page.captureScreenshot", format="png")["data"])
            self.assertEqual(shot[:8], b"\x89PNG\r\n\x1a\n")
            out = os.environ.get("RATEGATE_DASHBOARD_SCREENSHOT") or os.path.join(
                tempfile.gettempdir(), "rategate-dashboard.png")
            with open(out, "wb") as f:
                f.write(shot)
        finally:
            browser.stop()
            shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
