#!/usr/bin/python3
"""A gRPC unary call with no generated code (generic handlers, raw bytes), for the port-map test.

  grpc_echo.py serve ADDR:PORT      answers /fedgate.Echo/Say with b"echo: " + request
  grpc_echo.py call ADDR:PORT TEXT  prints the reply, exits 1 on any RPC error
"""
import sys
from concurrent import futures

import grpc


def serve(addr):
    def say(request, context):
        return b"echo: " + request

    handler = grpc.method_handlers_generic_handler(
        "fedgate.Echo", {"Say": grpc.unary_unary_rpc_method_handler(say)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(addr)
    server.start()
    server.wait_for_termination()


def call(addr, text):
    with grpc.insecure_channel(addr) as channel:
        say = channel.unary_unary("/fedgate.Echo/Say")
        try:
            print(say(text.encode(), timeout=10, wait_for_ready=True).decode())
        except grpc.RpcError as e:
            print(f"rpc failed: {e.code()}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "call":
        sys.exit(call(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
