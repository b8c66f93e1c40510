"""gRPC end to end (SPEC §3 "gRPC"): a grpcio client (python3-grpcio) through rategate's h2c
listener to a grpcio service behind an upstream with "protocol": "h2c"
(tests/integration/grpc_service.py). Unary and server-streaming calls, metadata and trailers
end to end, messages relayed as they arrive, the deadline the smaller of grpc-timeout and
response_timeout (the rest passed on), RESOURCE_EXHAUSTED when limited, the service's own
status passed through, UNAVAILABLE with the service down. Also an HTTP/2 client to an HTTP/2
origin without gRPC (curl)."""
import os
import shutil
import subprocess
import sys
import time
import unittest

from harness import GatewayTest, Process, free_port, wait_port
from test_h2_upstream import H2Upstream

try:
    import grpc
except ImportError:  # a Python other than Debian's: use Debian's python3-grpcio
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        import grpc
    except ImportError:
        grpc = None

HERE = os.path.dirname(os.path.abspath(__file__))
IDENT = dict(request_serializer=None, response_deserializer=None)


class GrpcService(Process):
    def __init__(self):
        self.port = free_port()
        super().__init__([sys.executable, "-B", os.path.join(HERE, "grpc_service.py"), "--port", str(self.port)],
                         "grpc-service")
        wait_port(self.port, proc=self.proc)


@unittest.skipUnless(grpc is not None, "python3-grpcio needed")
class GrpcThroughTheGateway(GatewayTest):
    def make(self, service_port, response_timeout="10s", limiters=None):
        cfg = {"threads": 1, "http2": {"h2c": True},
               "upstreams": {"svc": {"targets": ["127.0.0.1:%d" % service_port], "protocol": "h2c",
                                     "response_timeout": response_timeout, "connect_timeout": "1s"}},
               "routes": [{"name": "echo", "match": {"path_prefix": "/test.Echo/"}, "upstream": "svc",
                           "limiters": list(limiters or {})}]}
        if limiters:
            cfg["limiters"] = limiters
        self.gw = self.gateway(cfg)
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.gw.port)
        self.addCleanup(self.channel.close)
        return self.gw

    def unary(self, method="Unary"):
        return self.channel.unary_unary("/test.Echo/" + method, **IDENT)

    def test_unary_with_metadata_and_trailers(self):
        svc = self.track(GrpcService())
        self.make(svc.port)
        reply, call = self.unary().with_call(b"hello", metadata=(("x-meta", "m1"),), timeout=10)
        self.assertEqual(reply, b"hello")
        self.assertIn(("x-meta-echo", "m1"), call.initial_metadata())
        self.assertIn(("x-trailer", "done"), call.trailing_metadata())
        self.assertEqual(call.code(), grpc.StatusCode.OK)
        big = bytes(range(256)) * 4096  # 1 MiB each way
        self.assertEqual(self.unary()(big, timeout=10), big)
        # The service's own failure comes through with its status and message.
        with self.assertRaises(grpc.RpcError) as e:
            self.unary("Fail")(b"", timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assertEqual(e.exception.details(), "no")
        # No route: UNIMPLEMENTED from the gateway.
        with self.assertRaises(grpc.RpcError) as e:
            self.channel.unary_unary("/other.Svc/X", **IDENT)(b"", timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)

    def test_server_streaming_is_relayed_as_messages_arrive(self):
        svc = self.track(GrpcService())
        self.make(svc.port)
        stream = self.channel.unary_stream("/test.Echo/Count", **IDENT)
        t0 = time.monotonic()
        seen = []
        for msg in stream(b"10", timeout=10):
            seen.append((msg, time.monotonic() - t0))
        self.assertEqual([m for m, _ in seen], [str(i).encode() for i in range(10)])
        # One message every 50 ms: the first arrives long before the last is written.
        self.assertLess(seen[0][1], seen[-1][1] - 0.25, seen)

    def test_bidirectional_streaming_answers_while_the_request_goes_on(self):
        # Ping-pong: each message is sent only after the answer to the previous one came back,
        # so a gateway that waited for the end of the request stream would hang here.
        import queue
        svc = self.track(GrpcService())
        self.make(svc.port)
        outbox = queue.Queue()

        def requests():
            while True:
                m = outbox.get()
                if m is None:
                    return
                yield m

        chat = self.channel.stream_stream("/test.Echo/Chat", **IDENT)
        replies = chat(requests(), timeout=10)
        got = []
        for i in range(5):
            outbox.put(b"m%d" % i)
            got.append(next(replies))
        outbox.put(None)
        self.assertEqual(list(replies), [])
        self.assertEqual(got, [b"echo:m%d" % i for i in range(5)])

    def test_deadline_is_the_smaller_of_grpc_timeout_and_response_timeout(self):
        svc = self.track(GrpcService())
        self.make(svc.port, response_timeout="2s")
        # The client's 5 s is cut to the upstream's 2 s, and the service is told what is left.
        reply, call = self.unary("Sleep").with_call(b"10", timeout=5)
        left = int(dict(call.trailing_metadata())["x-time-remaining-ms"])
        self.assertLessEqual(left, 2000)
        self.assertGreater(left, 1500)
        # A client deadline shorter than the call: DEADLINE_EXCEEDED.
        with self.assertRaises(grpc.RpcError) as e:
            self.unary("Sleep")(b"1500", timeout=0.4)
        self.assertEqual(e.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        # And response_timeout alone (no grpc-timeout from the client) ends it from the gateway.
        with self.assertRaises(grpc.RpcError) as e:
            self.unary("Sleep")(b"3000")
        self.assertEqual(e.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertEqual(self.unary()(b"still serving", timeout=10), b"still serving")

    def test_limited_calls_are_resource_exhausted(self):
        svc = self.track(GrpcService())
        self.make(svc.port, limiters={"per-ip": {"scope": "ip", "algorithm": "fixed_window",
                                                 "rules": [{"limit": 3, "window": "1h"}]}})
        codes = []
        for _ in range(5):
            try:
                self.unary()(b"x", timeout=10)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
        self.assertEqual(codes, [grpc.StatusCode.OK] * 3 + [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2)

    def test_service_down_is_unavailable(self):
        svc = self.track(GrpcService())
        self.make(svc.port)
        self.assertEqual(self.unary()(b"up", timeout=10), b"up")
        svc.stop()
        with self.assertRaises(grpc.RpcError) as e:
            self.unary()(b"down", timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.gw.assert_clean(self)


@unittest.skipUnless(shutil.which("curl"), "curl needed")
class HttpTwoBothSides(GatewayTest):
    def test_h2c_client_to_h2c_origin(self):
        up = self.track(H2Upstream())
        gw = self.gateway({"http2": {"h2c": True},
                           "upstreams": {"h2": {"targets": ["127.0.0.1:%d" % up.port], "protocol": "h2c"}},
                           "routes": [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "h2"}]})
        out = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-D", "-", "-H", "X-Reply-Trailers: 1",
                              "-H", "X-Reply-Bytes: 300000", "-o", "/dev/null",
                              "http://127.0.0.1:%d/a" % gw.port], capture_output=True, timeout=30)
        head = out.stdout.decode().lower()
        self.assertIn("http/2 200", head)
        self.assertIn("x-upstream: h2", head)
        out = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "--data-binary", "@-",
                              "http://127.0.0.1:%d/echo" % gw.port], input=b"z" * 200000,
                             capture_output=True, timeout=30)
        import json
        echo = json.loads(out.stdout)
        self.assertEqual(echo["body_bytes"], 200000)
        self.assertEqual(echo["method"], "POST")


if __name__ == "__main__":
    unittest.main()
