# The Python module fedgate (client/python/) against the fake gateway program (FEDGATE_FAKE_GATEWAY,
# tests/support/fake_gateway_main.cpp) on 127.0.0.1: endpoints, connections, bytes-like objects
# without copies, errors with their stage, the GIL released while blocked, and the docs.
# Run by ctest as python_module (tests/unit/python.part.cmake), with PYTHONPATH at the module.
import hashlib
import os
import pydoc
import select
import subprocess
import threading
import time

import numpy
import pytest

import fedgate

WAIT = 20.0  # seconds: generous, the machine is shared (and may run this under ASan)


@pytest.fixture
def gateway():
    """A fake gateway on 127.0.0.1; yields "127.0.0.1:PORT" and stops it afterwards."""
    program = os.environ.get("FEDGATE_FAKE_GATEWAY")
    if not program:
        pytest.fail("FEDGATE_FAKE_GATEWAY is not set (the path of fedgate_fake_gateway)")
    proc = subprocess.Popen([program], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], WAIT)
        assert ready, f"{program} printed nothing within {WAIT} s"
        line = proc.stdout.readline()
        assert line.startswith("fake gateway 127.0.0.1:"), f"{program} printed {line!r}"
        yield line.split()[-1]
    finally:
        proc.stdin.close()  # it stops on EOF of stdin
        try:
            proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


@pytest.fixture
def pair(gateway):
    """Endpoints 1.8.43 (listening, tcp) and 1.7.42 (auto), and a connection from the second to the
    first: yields (listener, connector, accepted connection, connecting connection)."""
    with fedgate.Endpoint(gateway, "1.8.43", transport="tcp", bind="127.0.0.1") as b, \
            fedgate.Endpoint(gateway, "1.7.42") as a:
        b.listen()
        out = a.connect("1.8.43")
        inc = b.accept(WAIT)
        assert inc is not None, "the listener accepted nothing"
        with out, inc:
            yield b, a, inc, out


def run_thread(fn, *args):
    """fn(*args) in a thread; returns (thread, result dict with "value" or "error")."""
    result = {}

    def body():
        try:
            result["value"] = fn(*args)
        except BaseException as e:  # handed to the test's thread
            result["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, result


def joined(t, result):
    t.join(WAIT)
    assert not t.is_alive(), "the thread did not finish"
    if "error" in result:
        raise result["error"]
    return result.get("value")


def socket_buffers_max():
    """The most a loopback TCP connection can hold in flight: both ends' largest buffers."""
    def max_of(name):
        with open(f"/proc/sys/net/ipv4/{name}") as f:
            return int(f.read().split()[2])
    return max_of("tcp_wmem") + max_of("tcp_rmem")


def recv_all(conn, chunk=1 << 20):
    parts = []
    while True:
        b = conn.recv(chunk)
        if not b:
            return b"".join(parts)
        parts.append(b)


# ---- connections --------------------------------------------------------------------------------


def test_connection_knows_its_transport_peer_and_id(pair):
    b, a, inc, out = pair
    assert out.transport == "tcp" and inc.transport == "tcp"
    assert out.peer == "1.8.43"
    assert inc.peer == "1.7.42"
    assert out.conn_id == inc.conn_id != 0
    assert a.stats["connects_ok"] == 1
    if not a.rdma_available:
        assert a.stats["tcp_fallbacks"] == 1, "auto without an RDMA device falls back to tcp, visibly"
    assert b.stats["accepts"] == 1


def test_eight_mib_each_way_arrive_with_the_same_sha256(pair):
    _, _, inc, out = pair
    rng = numpy.random.default_rng(7)
    there = rng.integers(0, 256, 8 * 1024 * 1024 + 12345, dtype=numpy.uint8).tobytes()
    back = rng.integers(0, 256, 8 * 1024 * 1024 + 999, dtype=numpy.uint8).tobytes()

    def send_then_shutdown(conn, data):
        conn.send(data)
        conn.shutdown()

    # Both directions at once: each side's sender in a thread, its receiver in another.
    senders = [run_thread(send_then_shutdown, out, there), run_thread(send_then_shutdown, inc, back)]
    got_back = run_thread(recv_all, out)
    got_there = recv_all(inc)
    for s in senders:
        joined(*s)
    assert hashlib.sha256(got_there).hexdigest() == hashlib.sha256(there).hexdigest()
    assert hashlib.sha256(joined(*got_back)).hexdigest() == hashlib.sha256(back).hexdigest()


def test_send_takes_bytes_bytearray_memoryview_and_numpy(pair):
    _, _, inc, out = pair
    arr = numpy.arange(1000, dtype=numpy.uint32)
    big = bytearray(range(256)) * 4
    pieces = [b"bytes!", bytearray(b"bytearray"), memoryview(big)[100:300], arr, arr[10:20]]
    sent = [out.send(p) for p in pieces]
    out.shutdown()
    assert sent == [6, 9, 200, 4000, 40], "send returns the byte count of each object"
    got = recv_all(inc)
    assert got == b"bytes!" + b"bytearray" + bytes(big[100:300]) + arr.tobytes() + arr[10:20].tobytes()


def test_send_refuses_a_non_contiguous_array_rather_than_copying_it(pair):
    _, _, _, out = pair
    strided = numpy.arange(100, dtype=numpy.uint8)[::2]
    with pytest.raises((BufferError, ValueError)):
        out.send(strided)
    with pytest.raises(TypeError):
        out.send("text is not bytes")


def test_send_reads_the_callers_buffer_in_place(pair):
    """While a send blocks (the peer reads nothing yet), the bytearray is exported to it, so Python
    refuses to resize it: the library sends from the object's own memory, not from a copy."""
    _, _, inc, out = pair
    data = bytearray(os.urandom(1 << 20)) * (socket_buffers_max() // (1 << 20) + 1)
    t, result = run_thread(out.send, data)
    received = hashlib.sha256(inc.recv_exact(1))  # the send has started
    with pytest.raises(BufferError):
        data.extend(b"x")
    assert t.is_alive(), f"{len(data)} bytes cannot all be in the socket buffers yet"
    chunk = bytearray(1 << 20)
    left = len(data) - 1
    while left:
        n = inc.recv_into(chunk, min(left, len(chunk)))
        assert n > 0, f"the stream ended {left} bytes early"
        received.update(memoryview(chunk)[:n])
        left -= n
    assert joined(t, result) == len(data)
    assert received.hexdigest() == hashlib.sha256(data).hexdigest()


def test_recv_into_fills_numpy_arrays_and_bytearrays_in_place(pair):
    _, _, inc, out = pair
    floats = numpy.linspace(0.0, 1.0, 4096, dtype=numpy.float32)
    out.send(floats)
    out.send(b"0123456789")
    out.shutdown()
    into = numpy.zeros(4096, dtype=numpy.float32)
    assert inc.recv_exact_into(into) == floats.nbytes
    assert numpy.array_equal(into, floats)
    buf = bytearray(16)
    n = inc.recv_into(buf, 4)
    assert 1 <= n <= 4 and buf[:n] == b"0123"[:n] and buf[n:] == bytes(16 - n)
    rest = bytearray(10 - n)
    inc.recv_exact_into(rest)
    assert bytes(buf[:n] + rest) == b"0123456789"
    assert inc.recv_into(buf) == 0, "0 at the end of the stream"
    assert inc.recv(10) == b""
    with pytest.raises(ValueError, match="nbytes 17"):
        inc.recv_into(buf, 17)


def test_recv_exact_raises_stage_data_when_the_peer_closes_early(pair):
    _, _, inc, out = pair
    out.send(b"0123456789")
    out.shutdown()
    with pytest.raises(fedgate.Error) as e:
        inc.recv_exact(20)
    assert e.value.stage == "data"
    assert "after 10 of 20 bytes" in str(e.value)


def test_fileno_is_the_socket_select_reports_readable_after_the_peer_sends(pair):
    _, _, inc, out = pair
    fd = inc.fileno()
    assert fd >= 0
    readable, _, _ = select.select([fd], [], [], 0)
    assert readable == [], "nothing sent yet"
    out.send(b"ping")
    readable, _, _ = select.select([fd], [], [], WAIT)
    assert readable == [fd]
    assert inc.recv_exact(4) == b"ping"


def test_close_wakes_a_thread_blocked_in_recv(pair):
    _, _, inc, out = pair
    t, result = run_thread(inc.recv, 100)
    out.send(b"a")
    assert joined(t, result) == b"a"
    # Closed while the thread waits in recv (it then returns b""), or just before it gets there (it
    # then raises ValueError): either way it must not hang on a peer that sends nothing more.
    t, result = run_thread(inc.recv, 100)
    inc.close()
    try:
        assert joined(t, result) == b""
    except ValueError as e:
        assert "closed" in str(e)
    assert inc.closed and inc.fileno() == -1
    with pytest.raises(ValueError, match="closed"):
        inc.recv(1)


# ---- endpoints ----------------------------------------------------------------------------------


def test_accept_times_out_with_none_within_a_bounded_time(gateway):
    with fedgate.Endpoint(gateway, "1.8.43", transport="tcp") as b:
        b.listen()
        start = time.monotonic()
        assert b.accept(0.3) is None
        took = time.monotonic() - start
        assert 0.29 <= took < WAIT, f"accept(0.3) took {took:.3f} s"
        assert b.accept(0) is None


def test_the_gil_is_released_while_accept_waits(gateway):
    """A Python thread counts while another waits in accept(2.0); the count must grow a long way
    while the waiting thread is still inside accept (a held GIL would stop it until accept ends)."""
    with fedgate.Endpoint(gateway, "1.8.43", transport="tcp") as b:
        b.listen()
        inside = threading.Event()

        def waiter():
            inside.set()
            return b.accept(2.0)

        counted = {"n": 0, "waiter_alive": None}

        def counter(waiter_thread):
            inside.wait(WAIT)
            n = 0
            while n < 200_000:
                n += 1
            counted["n"] = n
            counted["waiter_alive"] = waiter_thread.is_alive()

        w, wres = run_thread(waiter)
        c, cres = run_thread(counter, w)
        joined(c, cres)
        assert joined(w, wres) is None
        assert counted["n"] == 200_000
        assert counted["waiter_alive"], "the count finished only after accept had returned"


def test_close_wakes_a_thread_waiting_in_accept(gateway):
    b = fedgate.Endpoint(gateway, "1.8.43", transport="tcp")
    b.listen()
    t, result = run_thread(b.accept, None)  # None: until a connection or close
    b.close()
    assert joined(t, result) is None
    assert b.closed
    with pytest.raises(ValueError, match="endpoint 1.8.43 is closed"):
        b.accept(1.0)


def test_connect_to_an_unregistered_process_fails_at_stage_resolve(gateway):
    with fedgate.Endpoint(gateway, "1.7.42", transport="tcp") as a:
        with pytest.raises(fedgate.Error) as e:
            a.connect("1.9.9")
        assert isinstance(e.value, Exception)
        assert e.value.stage == "resolve"
        assert str(e.value).startswith("stage resolve: ")
        assert a.stats["connects_failed"]["resolve"] == 1


def test_rdma_without_a_device_fails_at_stage_transport(gateway):
    with fedgate.Endpoint(gateway, "1.7.42") as probe:
        if probe.rdma_available:
            pytest.skip("this machine has an RDMA device: the no-device failure cannot be seen here")
        with fedgate.Endpoint(gateway, "1.8.43", transport="rdma") as r:
            assert not r.rdma_available
            with pytest.raises(fedgate.Error) as e:
                r.listen()
            assert e.value.stage == "transport"
        with fedgate.Endpoint(gateway, "1.8.44", transport="tcp") as t:
            t.listen()
            with pytest.raises(fedgate.Error) as e:
                probe.connect("1.8.44", transport="rdma")
            assert e.value.stage == "transport"
            assert "no RDMA device" in e.value.why


def test_resolve_returns_the_record_the_gateway_holds(gateway):
    with fedgate.Endpoint(gateway, "1.8.43", transport="tcp") as b, \
            fedgate.Endpoint(gateway, "1.7.42", transport="tcp") as a:
        rec = a.resolve("1.8.43")
        assert isinstance(rec, fedgate.Record)
        assert rec.pid == "1.8.43"
        assert rec.port == b.tcp_port != 0
        assert rec.transport == "tcp"
        assert rec.ipv4 == "127.0.0.1", "bind=None: the source address toward the gateway"
        assert rec.epoch == b.epoch
        assert (rec.qpn, rec.mtu) == (0, 0)
        assert repr(rec).startswith("Record(pid='1.8.43', epoch=")
        assert f"port={b.tcp_port}" in repr(rec)
        assert rec == a.resolve("1.8.43")
        with pytest.raises(fedgate.Error) as e:
            a.resolve("1.9.9")
        assert e.value.stage == "resolve"


def test_context_managers_close_and_deregister(gateway):
    with fedgate.Endpoint(gateway, "1.7.42", transport="tcp") as a:
        with fedgate.Endpoint(gateway, "1.8.43", transport="tcp") as b:
            b.listen()
            assert a.resolve("1.8.43").pid == "1.8.43"
            with a.connect("1.8.43") as conn:
                assert conn.fileno() >= 0
            assert conn.closed and conn.fileno() == -1
            with pytest.raises(ValueError, match="connection to 1.8.43 is closed"):
                conn.send(b"x")
        assert b.closed
        with pytest.raises(fedgate.Error) as e:
            a.resolve("1.8.43")
        assert e.value.stage == "resolve", "leaving the with block deregistered 1.8.43"
        assert a.pid == "1.7.42" and b.pid == "1.8.43"


def test_bad_arguments_raise_value_error_naming_them(gateway):
    with pytest.raises(ValueError, match=r"pid '1\.7' is not a process ID"):
        fedgate.Endpoint(gateway, "1.7")
    with pytest.raises(ValueError, match="gateway 'gw.example:7410' is not IP or IP:PORT"):
        fedgate.Endpoint("gw.example:7410", "1.7.42")
    with pytest.raises(ValueError, match="gateway '127.0.0.1:99999'"):
        fedgate.Endpoint("127.0.0.1:99999", "1.7.42")
    with pytest.raises(ValueError, match="transport 'carrier-pigeon' is not auto, rdma or tcp"):
        fedgate.Endpoint(gateway, "1.7.42", transport="carrier-pigeon")
    with pytest.raises(ValueError, match="bind 'localhost' is not an IPv4 address"):
        fedgate.Endpoint(gateway, "1.7.42", bind="localhost")
    with fedgate.Endpoint(gateway, "1.7.42", transport="tcp") as a:
        with pytest.raises(ValueError, match="pid 'x.y.z'"):
            a.connect("x.y.z")
        with pytest.raises(ValueError, match="pid '1.2.3.4'"):
            a.resolve("1.2.3.4")
        with pytest.raises(ValueError, match="transport 'udp'"):
            a.connect("1.8.43", transport="udp")
        with pytest.raises(ValueError, match="timeout"):
            a.accept(-1.0)


# ---- documentation ------------------------------------------------------------------------------


def test_help_reads_well():
    text = pydoc.render_doc(fedgate, renderer=pydoc.plaintext)
    for want in ["Endpoint(gateway, pid, transport=\"auto\", bind=None)", "ep.listen()", "ep.accept(",
                 "ep.connect(\"1.8.43\")", "conn.send(", "class Error", "stage", "class Record"]:
        assert want in text, f"help(fedgate) lacks {want!r}"
    for cls in (fedgate.Endpoint, fedgate.Connection, fedgate.Record, fedgate.Error):
        assert cls.__doc__ and len(cls.__doc__) > 40, f"{cls.__name__} has no docstring"
        for name, member in vars(cls).items():
            if name.startswith("_"):
                continue
            assert getattr(member, "__doc__", None), f"{cls.__name__}.{name} has no docstring"


def test_error_pickles_with_its_stage_and_reason(gateway):
    import pickle
    with fedgate.Endpoint(gateway, "1.7.42", transport="tcp") as ep:
        with pytest.raises(fedgate.Error) as info:
            ep.connect("1.9.99")
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is fedgate.Error
    assert (back.stage, back.why, str(back)) == (info.value.stage, info.value.why, str(info.value))
