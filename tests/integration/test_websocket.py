"""WebSocket pass-through (SPEC §3, RFC 6455) against a real echo server (python3-websockets):
frames both ways, a 1 MiB message, ping/pong, close; the handshake goes through the limiter
chain; idle tunnels are closed by idle_timeout; elsewhere Upgrade stays hop-by-hop."""
import asyncio
import logging
import socket
import sys
import threading
import time
import unittest

from harness import Conn, GatewayTest, free_port, get, wait_port

try:
    import websocket  # websocket-client (Debian python3-websocket)
    import websockets  # server (Debian python3-websockets)
except ImportError:
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        import websocket
        import websockets
    except ImportError:
        websocket = websockets = None


# Tunnels closed by idle_timeout end without a close frame: expected here, not worth a traceback.
logging.getLogger("websockets").setLevel(logging.CRITICAL)


class EchoServer:
    """A WebSocket echo server on its own asyncio loop and thread."""

    def __init__(self):
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def echo(ws, path=None):
            async for message in ws:
                await ws.send(message)

        async def main():
            self.server = await websockets.serve(echo, "127.0.0.1", self.port, max_size=None,
                                                 ping_interval=None, compression=None)
            ready.set()
            await self.server.wait_closed()

        self.thread = threading.Thread(target=lambda: self.loop.run_until_complete(main()), daemon=True)
        self.thread.start()
        ready.wait(10)

    def stop(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.thread.join(10)


def metric(port, name):
    for line in get(port, "/metrics").body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


@unittest.skipUnless(websocket and websockets, "python3-websocket and python3-websockets needed")
class WebSocket(GatewayTest):
    def setUp(self):
        super().setUp()
        self.echo = EchoServer()
        self.addCleanup(self.echo.stop)
        self.up = self.upstream()
        self.admin_port = free_port()
        self.gw = self.gateway({
            "admin": {"listen": "127.0.0.1:%d" % self.admin_port},
            "limits": {"idle_timeout": "1s"},
            "upstreams": {"ws": {"targets": ["127.0.0.1:%d" % self.echo.port]},
                          "demo": {"targets": ["127.0.0.1:%d" % self.up.port]}},
            "limiters": {"per-ip": {"scope": "ip", "algorithm": "sliding_window_log",
                                    "rules": [{"limit": 3, "window": "1m"}]}},
            "routes": [{"name": "live", "match": {"path_prefix": "/live"}, "upstream": "ws", "websocket": True,
                        "limiters": ["per-ip"]},
                       {"name": "idle", "match": {"path_prefix": "/idle"}, "upstream": "ws", "websocket": True},
                       {"name": "plain", "match": {"path_prefix": "/plain"}, "upstream": "demo"}]})
        wait_port(self.admin_port, proc=self.gw.proc)

    def url(self, path):
        return "ws://127.0.0.1:%d%s" % (self.gw.port, path)

    def test_frames_both_ways_big_message_ping_and_close(self):
        ws = websocket.create_connection(self.url("/live/a"), timeout=10)
        ws.send("hello")
        self.assertEqual(ws.recv(), "hello")
        ws.send_binary(bytes(range(256)) * 4)
        self.assertEqual(ws.recv(), bytes(range(256)) * 4)
        big = bytes((i * 7) % 251 for i in range(1 << 20))
        ws.send_binary(big)
        self.assertEqual(ws.recv(), big)
        ws.ping(b"are-you-there")
        opcode, frame = ws.recv_data_frame(control_frame=True)
        self.assertEqual(opcode, websocket.ABNF.OPCODE_PONG)
        self.assertEqual(frame.data, b"are-you-there")
        ws.close()  # sends close and waits for the server's close frame through the tunnel

    def test_fourth_handshake_over_a_per_ip_limit_of_3_is_429(self):
        opened = [websocket.create_connection(self.url("/live/%d" % i), timeout=10) for i in range(3)]
        with self.assertRaises(websocket.WebSocketBadStatusException) as ctx:
            websocket.create_connection(self.url("/live/4"), timeout=10)
        self.assertEqual(ctx.exception.status_code, 429)
        for ws in opened:
            ws.send("still here")
            self.assertEqual(ws.recv(), "still here")
            ws.close()

    def test_idle_tunnels_are_closed_by_idle_timeout(self):
        held = [websocket.create_connection(self.url("/idle/%d" % i), timeout=10) for i in range(200)]
        self.assertEqual(metric(self.admin_port, "rategate_websocket_tunnels_open"), 200)
        held[0].send("keeps one alive")  # bytes passing reset its idle timer
        self.assertEqual(held[0].recv(), "keeps one alive")
        deadline = time.time() + 10
        while metric(self.admin_port, "rategate_websocket_tunnels_open") > 0 and time.time() < deadline:
            time.sleep(0.2)
        self.assertEqual(metric(self.admin_port, "rategate_websocket_tunnels_open"), 0)
        self.assertGreaterEqual(metric(self.admin_port, "rategate_websocket_tunnels_total"), 200)
        for ws in held:
            ws.sock.settimeout(5)
            try:
                self.assertEqual(ws.sock.recv(1), b"")  # closed by the gateway
            except ConnectionResetError:
                pass
            ws.sock.close()

    def test_upgrade_is_hop_by_hop_elsewhere(self):
        r = get(self.gw.port, "/plain/x", {"Upgrade": "websocket", "Connection": "Upgrade",
                                            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                                            "Sec-WebSocket-Version": "13"})
        self.assertEqual(r.status, 200)
        headers = r.json()["headers"]
        self.assertNotIn("upgrade", headers)
        self.assertNotIn("upgrade", headers.get("connection", "").lower())
        # An Upgrade other than websocket on a websocket route is not tunnelled either.
        c = Conn(self.gw.port)
        c.send(b"GET /idle/x HTTP/1.1\r\nHost: t\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n")
        r = c.read_response()
        self.assertNotEqual(r.status, 101)
        c.close()


if __name__ == "__main__":
    unittest.main()
