#!/usr/bin/python3
"""examples/fedavg/fedavg.py — a FedAvg job (one aggregator, several trainers) that moves its model
through fedgate three ways: gRPC through a static port map, gRPC through the sidecar by process ID,
and the fedgate Python module directly.

The model is logistic regression over a hashed feature space (--model-mib MiB of float32 weights;
32 MiB = 8388608 weights). Each trainer makes its own synthetic data from a seed and its ID. Each
round the aggregator sends the global model to every trainer, each trainer takes a few local
gradient steps and sends its model back, and the aggregator averages the replies weighted by sample
count, always in trainer-ID order, so the result is bit-identical whatever carried the bytes.

  fedavg.py aggregator --transport grpc-portmap|grpc-pid --trainer 1=HOST:PORT --trainer 2=HOST:PORT
  fedavg.py aggregator --transport fedgate --gateway IP[:PORT] --pid P.N.L --trainer 1=P.N.L ...
  fedavg.py trainer --id 1 --transport grpc-portmap|grpc-pid --listen HOST:PORT
  fedavg.py trainer --id 1 --transport fedgate --gateway IP[:PORT] --pid P.N.L

A trainer prints 'trainer K ready ...' once it can be reached and exits after the aggregator's
last message. The aggregator prints 'initial model sha256 HEX', one line per round, then
'final model sha256 HEX rounds R bytes B seconds S'.
"""
import argparse
import hashlib
import struct
import sys
import threading
import time

import numpy as np

F32 = np.dtype("<f4")  # the wire's and the checksum's byte order, whatever the host's

# ---- the job: model, data, training ------------------------------------------------------------

VOCAB = 4096            # tokens in the synthetic language; each hashes to one of the model's weights
TOKENS_PER_SAMPLE = 32
SAMPLES_PER_TRAINER = 8192
VALIDATION_SAMPLES = 8192
TEACHER_SEED = 7        # the hidden rule that labels every sample, the same for every party
VALIDATION_SEED = 1000
LABEL_NOISE = 0.5


def model_size(model_mib):
    n = int(model_mib * (1 << 20)) // F32.itemsize
    if n < VOCAB:
        raise SystemExit(f"fedavg: --model-mib {model_mib} is too small (fewer weights than {VOCAB} tokens)")
    return n


def initial_model(n, seed):
    return (np.random.default_rng(seed).standard_normal(n, dtype=np.float32) * np.float32(0.01)).astype(F32)


def sha256(model):
    return hashlib.sha256(memoryview(np.ascontiguousarray(model, dtype=F32)).cast("B")).hexdigest()


def make_data(seed, n_weights, n_samples):
    """Samples of TOKENS_PER_SAMPLE (token, value) pairs, each token hashed to a weight index."""
    rng = np.random.default_rng(seed)
    teacher = np.random.default_rng(TEACHER_SEED).standard_normal(VOCAB).astype(np.float32)
    tokens = rng.integers(0, VOCAB, size=(n_samples, TOKENS_PER_SAMPLE))
    values = rng.standard_normal((n_samples, TOKENS_PER_SAMPLE), dtype=np.float32)
    logit = (teacher[tokens] * values).sum(axis=1) + LABEL_NOISE * rng.standard_normal(n_samples).astype(np.float32)
    labels = (logit > 0).astype(np.float32)
    index = (tokens.astype(np.uint64) * np.uint64(2654435761) + np.uint64(40503)) % np.uint64(n_weights)
    return index.astype(np.int64), values, labels


def evaluate(model, data):
    index, values, labels = data
    z = (model[index] * values).sum(axis=1)
    p = 1.0 / (1.0 + np.exp(-z.astype(np.float64)))
    eps = 1e-7
    loss = -(labels * np.log(p + eps) + (1 - labels) * np.log(1 - p + eps)).mean()
    return float(loss), float(((z > 0) == (labels > 0)).mean())


class LocalTrainer:
    """A trainer's data and its local steps: full-batch gradient descent with L2 weight decay."""

    def __init__(self, trainer_id, seed, n_weights, steps, lr, decay):
        self.index, self.values, self.labels = make_data(seed * 1000 + trainer_id, n_weights, SAMPLES_PER_TRAINER)
        # The weights these samples touch, and where each (sample, token) adds its gradient.
        self.touched, self.slot = np.unique(self.index, return_inverse=True)
        self.slot = self.slot.ravel()
        self.steps, self.lr, self.decay = steps, np.float32(lr), np.float32(1 - lr * decay)
        self.samples = len(self.labels)

    def train(self, model):
        w = np.array(model, dtype=F32)  # a copy: the received buffer stays as it came
        for _ in range(self.steps):
            z = (w[self.index] * self.values).sum(axis=1)
            p = (1.0 / (1.0 + np.exp(-z))).astype(np.float32)
            g = ((p - self.labels) / np.float32(self.samples))[:, None] * self.values
            grad = np.bincount(self.slot, weights=g.ravel(), minlength=len(self.touched)).astype(np.float32)
            w *= self.decay
            w[self.touched] -= self.lr * grad
        return w, evaluate(w, (self.index, self.values, self.labels))


# ---- messages: one framing for every transport ---------------------------------------------------
# A message is a 24-byte header, then `length` bytes of little-endian float32 weights.

HEADER = struct.Struct("<4sHHIIQ")  # magic, kind, trainer ID, round, samples, payload length
MAGIC = b"FAVG"
KIND_MODEL, KIND_UPDATE, KIND_DONE, KIND_BYE = 1, 2, 3, 4
MAX_PAYLOAD = 4 << 30  # a bad header must not make the receiver allocate without bound


class Header:
    __slots__ = ("kind", "trainer", "round", "samples", "length")

    def __init__(self, kind, trainer, rnd, samples=0, length=0):
        self.kind, self.trainer, self.round, self.samples, self.length = kind, trainer, rnd, samples, length

    def pack(self):
        return HEADER.pack(MAGIC, self.kind, self.trainer, self.round, self.samples, self.length)

    @classmethod
    def unpack(cls, data):
        if len(data) != HEADER.size:
            raise ProtocolError(f"header of {len(data)} bytes, want {HEADER.size}")
        magic, kind, trainer, rnd, samples, length = HEADER.unpack(bytes(data))
        if magic != MAGIC:
            raise ProtocolError(f"bad magic {magic!r}")
        return cls(kind, trainer, rnd, samples, length)


class ProtocolError(Exception):
    pass


def payload_buffer(length):
    """A float32 array to receive `length` payload bytes into, and a byte view of it."""
    if length % F32.itemsize or length > MAX_PAYLOAD:
        raise ProtocolError(f"payload of {length} bytes is not whole float32s, or over {MAX_PAYLOAD} bytes")
    array = np.empty(length // F32.itemsize, dtype=F32)
    return array, memoryview(array).cast("B")


def byte_view(model):
    return memoryview(np.ascontiguousarray(model, dtype=F32)).cast("B")


# ---- gRPC (grpc-portmap, grpc-pid): one bidirectional stream per message exchange ----------------

GRPC_METHOD = "/fedavg.Trainer/Exchange"
GRPC_MAX_MESSAGE = 8 << 20  # chunks are at most 4 MiB; the limit only has to hold one chunk


def grpc_options():
    return [("grpc.max_receive_message_length", GRPC_MAX_MESSAGE),
            ("grpc.max_send_message_length", GRPC_MAX_MESSAGE)]


def grpc_chunks(header, payload, chunk):
    yield header.pack()
    for off in range(0, len(payload), chunk):
        yield bytes(payload[off:off + chunk])


def grpc_assemble(stream):
    """Header and payload from a stream of chunks (the header is the first chunk)."""
    it = iter(stream)
    try:
        header = Header.unpack(next(it))
    except StopIteration:
        raise ProtocolError("empty stream") from None
    array, view = payload_buffer(header.length)
    off = 0
    for piece in it:
        if off + len(piece) > header.length:
            raise ProtocolError(f"more than the {header.length} payload bytes announced")
        view[off:off + len(piece)] = piece
        off += len(piece)
    if off != header.length:
        raise ProtocolError(f"stream ended after {off} of {header.length} payload bytes")
    return header, array


class GrpcLink:
    """The aggregator's side of one trainer over gRPC."""

    def __init__(self, target, chunk, timeout, connect_timeout):
        import grpc
        self.channel = grpc.insecure_channel(target, options=grpc_options())
        try:
            grpc.channel_ready_future(self.channel).result(timeout=connect_timeout)
        except grpc.FutureTimeoutError:
            raise SystemExit(f"fedavg: no gRPC connection to {target} within {connect_timeout:.0f} s") from None
        self.call = self.channel.stream_stream(GRPC_METHOD)
        self.chunk, self.timeout = chunk, timeout

    def exchange(self, header, payload):
        return grpc_assemble(self.call(grpc_chunks(header, payload, self.chunk), timeout=self.timeout))

    def close(self):
        self.channel.close()


def serve_grpc(listen, handle, chunk):
    """Runs a gRPC server on `listen` until `handle` says the job is done."""
    from concurrent import futures

    import grpc
    done = threading.Event()

    def exchange(request_iterator, context):
        header, payload = grpc_assemble(request_iterator)
        reply, reply_payload, finished = handle(header, payload)
        yield from grpc_chunks(reply, byte_view(reply_payload) if reply_payload is not None else b"", chunk)
        if finished:
            done.set()

    handler = grpc.method_handlers_generic_handler(
        "fedavg.Trainer", {"Exchange": grpc.stream_stream_rpc_method_handler(exchange)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=grpc_options())
    server.add_generic_rpc_handlers((handler,))
    if server.add_insecure_port(listen) == 0:
        raise SystemExit(f"fedavg: cannot listen on {listen}")
    server.start()
    yield f"grpc {listen}"
    done.wait()
    server.stop(grace=10).wait()


# ---- fedgate: the Python module, one connection per trainer for the whole job --------------------

def import_fedgate():
    try:
        import fedgate
    except ImportError as e:
        raise SystemExit(f"fedavg: the fedgate Python module is not importable ({e}); "
                         "set PYTHONPATH to the build tree's module directory") from None
    return fedgate


def conn_send(conn, header, payload):
    conn.send(header.pack())
    if len(payload):
        conn.send(payload)


def conn_recv(conn):
    raw = bytearray(HEADER.size)
    conn.recv_exact_into(raw)
    header = Header.unpack(raw)
    array, view = payload_buffer(header.length)
    if header.length:
        conn.recv_exact_into(view)
    return header, array


class FedgateLink:
    """The aggregator's side of one trainer over a fedgate connection by process ID."""

    def __init__(self, endpoint, pid):
        self.conn = endpoint.connect(pid)

    def exchange(self, header, payload):
        conn_send(self.conn, header, payload)
        return conn_recv(self.conn)

    def close(self):
        self.conn.close()


def serve_fedgate(gateway, pid, transport, handle, accept_timeout):
    fedgate = import_fedgate()
    with fedgate.Endpoint(gateway=gateway, pid=pid, transport=transport) as endpoint:
        endpoint.listen()
        yield f"fedgate {pid} via {gateway}"
        deadline = time.monotonic() + accept_timeout
        conn = None
        while conn is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SystemExit(f"fedavg: no aggregator connected to {pid} within {accept_timeout:.0f} s")
            conn = endpoint.accept(left)
        with conn:
            finished = False
            while not finished:
                header, payload = conn_recv(conn)
                reply, reply_payload, finished = handle(header, payload)
                conn_send(conn, reply, byte_view(reply_payload) if reply_payload is not None else b"")
            conn.shutdown()


# ---- roles --------------------------------------------------------------------------------------

def say(*parts):
    print(*parts, flush=True)


def run_trainer(args):
    state = {"trainer": None, "round": 0}

    def handle(header, payload):
        if header.trainer != args.id:
            raise ProtocolError(f"a message for trainer {header.trainer}, not {args.id}")
        if header.kind == KIND_DONE:
            say(f"trainer {args.id} done after {state['round']} rounds")
            return Header(KIND_BYE, args.id, header.round), None, True
        if header.kind != KIND_MODEL:
            raise ProtocolError(f"unexpected message kind {header.kind}")
        if header.round != state["round"] + 1:
            raise ProtocolError(f"round {header.round} after round {state['round']}")
        if state["trainer"] is None:  # the data hash into the model's size, which the first model tells
            state["trainer"] = LocalTrainer(args.id, args.seed, len(payload), args.local_steps, args.lr, args.decay)
            state["weights"] = len(payload)
        trainer = state["trainer"]
        if len(payload) != state["weights"]:
            raise ProtocolError(f"a model of {len(payload)} weights after one of {state['weights']}")
        start = time.monotonic()
        model, (loss, acc) = trainer.train(payload)
        state["round"] = header.round
        say(f"trainer {args.id} round {header.round}: local loss {loss:.4f} accuracy {acc:.4f} "
            f"({time.monotonic() - start:.2f} s)")
        return Header(KIND_UPDATE, args.id, header.round, trainer.samples, model.nbytes), model, False

    if args.transport == "fedgate":
        if not args.gateway or not args.pid:
            raise SystemExit("fedavg: trainer --transport fedgate needs --gateway and --pid")
        steps = serve_fedgate(args.gateway, args.pid, args.fedgate_transport, handle, args.timeout)
    else:
        if not args.listen:
            raise SystemExit(f"fedavg: trainer --transport {args.transport} needs --listen HOST:PORT")
        steps = serve_grpc(args.listen, handle, args.chunk_mib << 20)
    for where in steps:  # the first step is the server up: say so, then serve until done
        say(f"trainer {args.id} ready on {where}")
    return 0


def parse_trainers(specs):
    trainers = {}
    for spec in specs:
        tid, sep, address = spec.partition("=")
        if not sep or not tid.isdigit() or not address or not 0 < int(tid) < 65536:
            raise SystemExit(f"fedavg: --trainer wants ID=ADDRESS with ID 1..65535, got '{spec}'")
        if int(tid) in trainers:
            raise SystemExit(f"fedavg: trainer {tid} given twice")
        trainers[int(tid)] = address
    if not trainers:
        raise SystemExit("fedavg: the aggregator needs at least one --trainer ID=ADDRESS")
    return dict(sorted(trainers.items()))


def describe(error):
    """One line for a failed exchange: gRPC's status, fedgate's stage, or the exception."""
    if callable(getattr(error, "code", None)) and callable(getattr(error, "details", None)):
        return f"gRPC {error.code().name}: {error.details()}"
    stage = getattr(error, "stage", None)
    return f"{type(error).__name__}{f' (stage {stage})' if stage else ''}: {error}"


def run_aggregator(args):
    trainers = parse_trainers(args.trainer)
    n = model_size(args.model_mib)
    model = initial_model(n, args.seed)
    validation = make_data(VALIDATION_SEED, n, VALIDATION_SAMPLES)
    say(f"aggregator: transport {args.transport}, trainers {' '.join(map(str, trainers))}, "
        f"model {n} float32 ({model.nbytes / (1 << 20):.1f} MiB), {args.rounds} rounds")
    say(f"initial model sha256 {sha256(model)}")
    loss, acc = evaluate(model, validation)
    say(f"round 0: validation loss {loss:.4f} accuracy {acc:.4f}")

    start = time.monotonic()
    endpoint = None
    if args.transport == "fedgate":
        if not args.gateway or not args.pid:
            raise SystemExit("fedavg: aggregator --transport fedgate needs --gateway and --pid")
        fedgate = import_fedgate()
        endpoint = fedgate.Endpoint(gateway=args.gateway, pid=args.pid, transport=args.fedgate_transport)
        links = {tid: FedgateLink(endpoint, pid) for tid, pid in trainers.items()}
    else:
        links = {tid: GrpcLink(target, args.chunk_mib << 20, args.timeout, args.connect_timeout) for tid, target in trainers.items()}
    moved = 0

    def exchange_all(make_header, payload):
        """Every trainer's exchange at once, one thread each; the replies keyed by trainer ID."""
        replies, errors = {}, {}

        def one(tid):
            try:
                replies[tid] = links[tid].exchange(make_header(tid), payload)
            except Exception as e:  # reported below, by trainer
                errors[tid] = e
        threads = [threading.Thread(target=one, args=(tid,)) for tid in links]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for tid, e in sorted(errors.items()):
            raise SystemExit(f"fedavg: trainer {tid}: {describe(e)}")
        return replies

    for rnd in range(1, args.rounds + 1):
        round_start = time.monotonic()
        payload = byte_view(model)
        replies = exchange_all(lambda tid: Header(KIND_MODEL, tid, rnd, 0, len(payload)), payload)
        total = 0
        for tid, (header, update) in replies.items():
            if (header.kind, header.trainer, header.round, len(update)) != (KIND_UPDATE, tid, rnd, n):
                raise SystemExit(f"fedavg: trainer {tid} answered round {rnd} with kind {header.kind}, "
                                 f"trainer {header.trainer}, round {header.round}, {len(update)} weights")
            total += header.samples
            moved += 2 * HEADER.size + len(payload) + header.length
        # FedAvg, in trainer-ID order (never arrival order), in float64: the same bits every time.
        acc64 = np.zeros(n, dtype=np.float64)
        for tid in sorted(replies):
            header, update = replies[tid]
            acc64 += update.astype(np.float64) * (header.samples / total)
        model = acc64.astype(F32)
        del acc64, replies
        loss, acc = evaluate(model, validation)
        say(f"round {rnd}/{args.rounds}: validation loss {loss:.4f} accuracy {acc:.4f}, "
            f"{moved / (1 << 20):.1f} MiB moved so far, {time.monotonic() - round_start:.2f} s")

    exchange_all(lambda tid: Header(KIND_DONE, tid, args.rounds + 1), b"")
    for link in links.values():
        link.close()
    if endpoint is not None:
        endpoint.close()
    seconds = time.monotonic() - start
    say(f"final model sha256 {sha256(model)} rounds {args.rounds} bytes {moved} seconds {seconds:.2f}")
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", choices=["aggregator", "trainer"])
    p.add_argument("--transport", required=True, choices=["grpc-portmap", "grpc-pid", "fedgate"])
    p.add_argument("--trainer", action="append", default=[], metavar="ID=ADDRESS",
                   help="aggregator: a trainer and where to reach it (HOST:PORT for gRPC, a process ID for fedgate)")
    p.add_argument("--id", type=int, help="trainer: its ID (1..65535)")
    p.add_argument("--listen", help="trainer, gRPC: HOST:PORT to serve on")
    p.add_argument("--gateway", help="fedgate: the gateway's internal address IP[:PORT]")
    p.add_argument("--pid", help="fedgate: this process's ID, P.N.L")
    p.add_argument("--fedgate-transport", default="auto", choices=["auto", "rdma", "tcp"],
                   help="fedgate: the connection's transport (default auto)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--model-mib", type=float, default=32.0, help="model size in MiB of float32 (default 32)")
    p.add_argument("--seed", type=int, default=1, help="initial model and data seed (default 1)")
    p.add_argument("--local-steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=50.0)
    p.add_argument("--decay", type=float, default=1e-4, help="L2 weight decay")
    p.add_argument("--chunk-mib", type=int, default=1, choices=[1, 2, 3, 4], help="gRPC stream message size")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds a trainer waits for the aggregator, and one exchange may take (default 600)")
    p.add_argument("--connect-timeout", type=float, default=60.0,
                   help="seconds the aggregator waits to reach a gRPC trainer (default 60)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.role == "trainer":
        if args.id is None or not 0 < args.id < 65536:
            p.error("a trainer needs --id 1..65535")
        return run_trainer(args)
    return run_aggregator(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
