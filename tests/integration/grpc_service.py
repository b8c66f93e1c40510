#!/usr/bin/env python3
"""A gRPC service for the tests (python3-grpcio, generic handlers: no generated code), h2c on
--port. Messages are raw bytes (identity serializers).
  /test.Echo/Unary   returns the request; echoes metadata `x-meta` as initial metadata
                     `x-meta-echo` and ends with trailing metadata `x-trailer: done`
  /test.Echo/Count   server streaming: the request is a decimal N; N messages b"0".."N-1",
                     one every 50 ms
  /test.Echo/Sleep   sleeps the request's decimal milliseconds, then answers b"awake"; the
                     time the server saw left (its context's time_remaining) goes back as
                     trailing metadata `x-time-remaining-ms`
  /test.Echo/Fail    aborts with PERMISSION_DENIED "no"
  /test.Echo/Chat    bidirectional streaming: answers each request message b"m" with b"echo:m"
                     at once, while the request stream goes on
"""
import argparse
import sys
import time
from concurrent import futures

try:
    import grpc
except ImportError:  # a Python other than Debian's: use Debian's python3-grpcio
    sys.path.append("/usr/lib/python3/dist-packages")
    import grpc


def unary(request, context):
    meta = dict(context.invocation_metadata())
    if "x-meta" in meta:
        context.send_initial_metadata((("x-meta-echo", meta["x-meta"]),))
    context.set_trailing_metadata((("x-trailer", "done"),))
    return request


def count(request, context):
    for i in range(int(request.decode())):
        yield str(i).encode()
        time.sleep(0.05)


def sleep(request, context):
    left = context.time_remaining()
    time.sleep(int(request.decode()) / 1000)
    context.set_trailing_metadata((("x-time-remaining-ms", "none" if left is None else str(int(left * 1000))),))
    return b"awake"


def chat(requests, context):
    for m in requests:
        yield b"echo:" + m


def fail(request, context):
    context.abort(grpc.StatusCode.PERMISSION_DENIED, "no")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    ident = dict(request_deserializer=None, response_serializer=None)
    handler = grpc.method_handlers_generic_handler("test.Echo", {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, **ident),
        "Count": grpc.unary_stream_rpc_method_handler(count, **ident),
        "Sleep": grpc.unary_unary_rpc_method_handler(sleep, **ident),
        "Fail": grpc.unary_unary_rpc_method_handler(fail, **ident),
        "Chat": grpc.stream_stream_rpc_method_handler(chat, **ident),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port("127.0.0.1:%d" % args.port)
    server.start()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
