#!/usr/bin/python3
"""gRPC calls with no generated code (generic handlers, raw bytes), for the port-map and sidecar tests.

  grpc_echo.py serve ADDR:PORT        answers /fedgate.Echo/Say with b"echo: " + request, and
                                      /fedgate.Echo/Stream (bidirectional) by sending every message
                                      back, then one last message: b"sha256:" and the hex SHA-256 of
                                      all it received
  grpc_echo.py call ADDR:PORT TEXT    prints the reply, exits 1 on any RPC error
  grpc_echo.py stream ADDR:PORT MIB   streams MIB MiB of pseudo-random bytes in 256 KiB messages
                                      while the replies come back; prints "stream N bytes each way,
                                      digests match" or says what differed (exit 1)
"""
import hashlib
import random
import sys
from concurrent import futures

import grpc

CHUNK = 256 * 1024  # under gRPC's 4 MiB message limit, many messages per stream


def serve(addr):
    def say(request, context):
        return b"echo: " + request

    def stream(requests, context):
        digest = hashlib.sha256()
        for message in requests:
            digest.update(message)
            yield message
        yield b"sha256:" + digest.hexdigest().encode()

    handler = grpc.method_handlers_generic_handler(
        "fedgate.Echo", {"Say": grpc.unary_unary_rpc_method_handler(say),
                         "Stream": grpc.stream_stream_rpc_method_handler(stream)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(addr)
    server.start()
    print(f"serving {addr}", flush=True)
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


def stream(addr, mib):
    rng = random.Random(mib)
    chunks = [rng.randbytes(CHUNK) for _ in range(mib * 1024 * 1024 // CHUNK)]
    sent = hashlib.sha256(b"".join(chunks)).hexdigest()
    received = hashlib.sha256()
    count = 0
    last = b""
    with grpc.insecure_channel(addr) as channel:
        call_stream = channel.stream_stream("/fedgate.Echo/Stream")
        try:
            for message in call_stream(iter(chunks), timeout=60, wait_for_ready=True):
                if last:
                    received.update(last)
                    count += len(last)
                last = message
        except grpc.RpcError as e:
            print(f"rpc failed: {e.code()}", file=sys.stderr)
            return 1
    total = sum(len(c) for c in chunks)
    if last != b"sha256:" + sent.encode():
        print(f"the server's digest {last[:80]!r} is not that of the {total} bytes sent ({sent})", file=sys.stderr)
        return 1
    if count != total or received.hexdigest() != sent:
        print(f"got back {count} bytes, sha256 {received.hexdigest()}; sent {total}, sha256 {sent}", file=sys.stderr)
        return 1
    print(f"stream {total} bytes each way, digests match")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        serve(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "call":
        sys.exit(call(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "stream" and sys.argv[3].isdigit():
        sys.exit(stream(sys.argv[2], int(sys.argv[3])))
    else:
        sys.exit(__doc__)
