#!/usr/bin/env python3
"""An HTTP/2 upstream for the tests (python3-h2): h2c with prior knowledge, or TLS with ALPN
"h2" (--cert/--key). Every request is answered with a JSON echo of what arrived:
{"method", "path", "authority", "scheme", "headers": {name: value, ...}, "body_bytes", "body_sum",
"connection": n, "stream": id}. A request header `x-reply-bytes: N` answers N bytes of body instead
(sent as the flow-control window allows); `x-reply-early: 1` answers 403 at once and resets the
stream (NO_ERROR) without reading the body; `x-reply-trailers: 1` ends with trailers
(`x-checksum: ...`); `x-reply-status: N` sets the status; `x-delay-ms: N` waits first;
`x-reply-interim: N` sends N interim `100` heads, 250 ms apart, before the answer.
--max-streams sets SETTINGS_MAX_CONCURRENT_STREAMS. --alpn sets what TLS offers."""
import argparse
import json
import socket
import ssl
import sys
import threading
import time

try:
    import h2  # noqa: F401
except ImportError:  # a Python other than Debian's: its python3-h2 is pure Python
    sys.path.append("/usr/lib/python3/dist-packages")
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--cert")
parser.add_argument("--key")
parser.add_argument("--alpn", default="h2")
parser.add_argument("--max-streams", type=int, default=100)
args = parser.parse_args()

connections = [0]
counter_lock = threading.Lock()


class Conn:
    def __init__(self, sock, number):
        self.sock = sock
        self.number = number
        self.lock = threading.Lock()  # the h2 state machine and the socket's writes
        self.window_open = threading.Condition(self.lock)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False,
                                                                        validate_inbound_headers=True))
        self.requests = {}

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def run(self):
        with self.lock:
            self.conn.local_settings = h2.settings.Settings(
                client=False, initial_values={h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: args.max_streams})
            self.conn.initiate_connection()
            self.flush()
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                break
            if not data:
                break
            with self.lock:
                try:
                    events = self.conn.receive_data(data)
                except Exception:
                    break
                for ev in events:
                    try:
                        self.handle(ev)
                    except h2.exceptions.StreamClosedError:
                        pass  # DATA for a stream we reset (an early answer)
                self.flush()
                self.window_open.notify_all()
        try:
            self.sock.close()
        except OSError:
            pass

    def handle(self, ev):
        if isinstance(ev, h2.events.RequestReceived):
            headers = [(k.decode(), v.decode()) for k, v in ev.headers]
            if ("x-reply-early", "1") in headers:
                # Answers before the body (a 403 to an upload), then ends the stream with
                # RST_STREAM NO_ERROR (RFC 9113 §8.1): the rest of the body is not wanted.
                self.conn.send_headers(ev.stream_id, [(":status", "403"), ("content-length", "2")])
                self.conn.send_data(ev.stream_id, b"no", end_stream=True)
                self.conn.reset_stream(ev.stream_id, 0)
                return
            self.requests[ev.stream_id] = {"headers": headers, "body": 0, "sum": 0}
        elif isinstance(ev, h2.events.DataReceived):
            r = self.requests.get(ev.stream_id)
            if r is not None:
                r["body"] += len(ev.data)
                r["sum"] = (r["sum"] + sum(ev.data)) % 1000000007
            self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            r = self.requests.pop(ev.stream_id, None)
            if r is not None:
                threading.Thread(target=self.respond, args=(ev.stream_id, r), daemon=True).start()
        elif isinstance(ev, h2.events.StreamReset):
            self.requests.pop(ev.stream_id, None)

    def respond(self, stream_id, r):
        pseudo = {k: v for k, v in r["headers"] if k.startswith(":")}
        fields = {}
        for k, v in r["headers"]:
            if not k.startswith(":"):
                fields[k] = fields[k] + ", " + v if k in fields else v
        if "x-delay-ms" in fields:
            time.sleep(int(fields["x-delay-ms"]) / 1000)
        try:
            for _ in range(int(fields.get("x-reply-interim", "0"))):
                with self.lock:
                    self.conn.send_headers(stream_id, [(":status", "100")])
                    self.flush()
                time.sleep(0.25)
        except Exception:
            return  # the stream went away
        status = fields.get("x-reply-status", "200")
        trailers = fields.get("x-reply-trailers") == "1"
        if "x-reply-bytes" in fields:
            body = bytes(i % 251 for i in range(int(fields["x-reply-bytes"])))
            ctype = "application/octet-stream"
        else:
            body = json.dumps({"method": pseudo.get(":method"), "path": pseudo.get(":path"),
                               "authority": pseudo.get(":authority"), "scheme": pseudo.get(":scheme"),
                               "headers": fields, "body_bytes": r["body"], "body_sum": r["sum"],
                               "connection": self.number, "stream": stream_id}).encode()
            ctype = "application/json"
        head = [(":status", status), ("content-type", ctype), ("x-upstream", "h2")]
        if not trailers and pseudo.get(":method") != "HEAD":
            head.append(("content-length", str(len(body))))
        try:
            with self.lock:
                self.conn.send_headers(stream_id, head, end_stream=pseudo.get(":method") == "HEAD")
                self.flush()
            if pseudo.get(":method") == "HEAD":
                return
            sent = 0
            while sent < len(body):
                with self.lock:
                    while True:
                        window = min(self.conn.local_flow_control_window(stream_id),
                                     self.conn.max_outbound_frame_size)
                        if window > 0:
                            break
                        self.window_open.wait(10)
                    chunk = body[sent:sent + window]
                    self.conn.send_data(stream_id, chunk)
                    self.flush()
                    sent += len(chunk)
            with self.lock:
                if trailers:
                    self.conn.send_headers(stream_id, [("x-checksum", str(sum(body) % 1000000007))],
                                           end_stream=True)
                else:
                    self.conn.end_stream(stream_id)
                self.flush()
        except Exception:
            pass  # the stream or the connection went away


def serve(sock):
    with counter_lock:
        connections[0] += 1
        number = connections[0]
    Conn(sock, number).run()


listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", args.port))
listener.listen(128)
tls = None
if args.cert:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(args.cert, args.key)
    tls.set_alpn_protocols(args.alpn.split(","))
while True:
    s, _ = listener.accept()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls:
        try:
            s.settimeout(5)
            s = tls.wrap_socket(s, server_side=True)
            s.settimeout(None)
        except (ssl.SSLError, OSError):
            s.close()
            continue
    threading.Thread(target=serve, args=(s,), daemon=True).start()
