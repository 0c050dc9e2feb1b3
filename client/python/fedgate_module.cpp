// The Python module `fedgate` (pybind11) over the client library's Endpoint and Connection: every
// blocking call runs without the GIL, bytes move through the buffer protocol without copies, and a
// fedgate::Error becomes fedgate.Error carrying the stage that failed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pybind11/eval.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "fedgate/connection.hpp"
#include "fedgate/endpoint.hpp"
#include "fedgate/error.hpp"

namespace py = pybind11;

namespace {

// fedgate.Error, created at import (a Python class, so that it has a plain constructor and
// attributes like any exception a Python programmer writes).
PyObject* g_error_type = nullptr;

constexpr double kForeverSeconds = 365.0 * 24 * 3600;

constexpr const char* kErrorClass = R"PY(
class Error(Exception):
    """A fedgate call failed; ``stage`` says where.

    Attributes:
        stage (str): where it failed. The stages of a connect, in order: "resolve" (the target
            is not registered or its gateway does not answer), "req" (the own gateway refused
            the request), "rep" (no answer after every retry), "refused" (the target or its
            gateway said no), "transport" (no transport both sides offer, or "rdma" where
            there is no RDMA device), "rtr" and "rts" (the RDMA queue pair did not come up),
            "data" (sending or receiving failed, or the peer closed early); and "open"
            (opening the endpoint: socket, registration refused or not answered).
        why (str): the reason, without the stage.

    str(error) is "stage STAGE: why".
    """

    def __init__(self, stage, why):
        super().__init__(f"stage {stage}: {why}")
        self.stage = stage
        self.why = why

    def __reduce__(self):  # pickles (multiprocessing, concurrent.futures) with both fields
        return (type(self), (self.stage, self.why))
)PY";

// The interpreter is shutting down: no Python object may be touched (the name became public in 3.13).
inline bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing() != 0;
#else
    return _Py_IsFinalizing() != 0;
#endif
}

[[noreturn]] void throw_error(const char* stage, const std::string& why) {
    py::object e = py::reinterpret_borrow<py::object>(g_error_type)(stage, why);
    PyErr_SetObject(g_error_type, e.ptr());
    throw py::error_already_set();
}

// ---- arguments: parsed with the GIL held, refused with ValueError naming the input ----------------

fedgate::ProcessId parse_pid(const std::string& text, const char* what) {
    const auto id = fedgate::parse_process_id(text);
    if (!id) throw py::value_error(std::string(what) + " '" + text + "' is not a process ID (PARTY.NODE.LOCAL)");
    return *id;
}

std::optional<uint32_t> parse_ipv4(const std::string& text) {
    in_addr a{};
    if (::inet_pton(AF_INET, text.c_str(), &a) != 1) return std::nullopt;
    return ntohl(a.s_addr);
}

// "IP" or "IP:PORT" (default port 7410), as the C API reads it.
std::pair<uint32_t, uint16_t> parse_gateway(const std::string& text) {
    const auto bad = [&] { return py::value_error("gateway '" + text + "' is not IP or IP:PORT"); };
    std::string ip = text;
    uint16_t port = fedgate::kDefaultResolvePort;
    if (const auto colon = text.rfind(':'); colon != std::string::npos) {
        const std::string p = text.substr(colon + 1);
        if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) throw bad();
        const unsigned long v = std::stoul(p);
        if (v == 0 || v > 65535) throw bad();
        port = static_cast<uint16_t>(v);
        ip.resize(colon);
    }
    const auto a = parse_ipv4(ip);
    if (!a) throw bad();
    return {*a, port};
}

fedgate::TransportChoice parse_transport(const std::string& text) {
    const auto t = fedgate::parse_transport_choice(text);
    if (!t) throw py::value_error("transport '" + text + "' is not auto, rdma or tcp");
    return *t;
}

std::string ipv4_text(uint32_t host_order) {
    const in_addr a{htonl(host_order)};
    char buf[INET_ADDRSTRLEN];
    return ::inet_ntop(AF_INET, &a, buf, sizeof buf) != nullptr ? buf : "?";
}

// The source address the kernel routes toward the gateway: a connected UDP socket's own address
// (connect() on UDP sends nothing). Runs without the GIL; an empty result means `error` says why.
uint32_t route_source(uint32_t gateway, uint16_t port, std::string& error) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        error = std::string("cannot open a UDP socket: ") + std::strerror(errno);
        return 0;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(gateway);
    a.sin_port = htons(port);
    socklen_t len = sizeof a;
    uint32_t source = 0;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        error = "no route to the gateway " + ipv4_text(gateway) + ": " + std::strerror(errno);
    else
        source = ntohl(a.sin_addr.s_addr);
    ::close(fd);
    return source;
}

// ---- buffers: the caller's memory, borrowed for the call (no copy) -------------------------------

class BorrowedBuffer {
public:
    BorrowedBuffer(const py::buffer& b, bool writable) {
        // PyBUF_SIMPLE asks for one contiguous run of bytes; a strided view is refused by its exporter.
        if (PyObject_GetBuffer(b.ptr(), &view_, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) != 0)
            throw py::error_already_set();
    }
    ~BorrowedBuffer() { PyBuffer_Release(&view_); }
    BorrowedBuffer(const BorrowedBuffer&) = delete;
    BorrowedBuffer& operator=(const BorrowedBuffer&) = delete;

    uint8_t* data() const { return static_cast<uint8_t*>(view_.buf); }
    std::size_t size() const { return static_cast<std::size_t>(view_.len); }

private:
    Py_buffer view_{};
};

// ---- Record ------------------------------------------------------------------------------------

struct Record {
    std::string pid;
    uint32_t epoch = 0;
    std::string transport;
    std::string ipv4;
    uint16_t port = 0;
    std::string gid;
    uint32_t qpn = 0;
    uint16_t mtu = 0;

    static Record of(const fedgate::DmaAddress& a) {
        char gid[INET6_ADDRSTRLEN];
        return {fedgate::format_process_id(a.pid),
                a.epoch,
                fedgate::transport_name(a.transport),
                ipv4_text(a.ipv4),
                a.port,
                ::inet_ntop(AF_INET6, a.gid.data(), gid, sizeof gid) != nullptr ? gid : "?",
                a.qpn,
                a.mtu};
    }
    bool operator==(const Record&) const = default;

    std::string repr() const {
        return "Record(pid='" + pid + "', epoch=" + std::to_string(epoch) + ", transport='" + transport +
               "', ipv4='" + ipv4 + "', port=" + std::to_string(port) + ", gid='" + gid +
               "', qpn=" + std::to_string(qpn) + ", mtu=" + std::to_string(mtu) + ")";
    }
};

// ---- Connection --------------------------------------------------------------------------------

class PyConnection {
public:
    explicit PyConnection(std::unique_ptr<fedgate::Connection> c)
        : c_(std::move(c)),
          transport_(fedgate::transport_name(c_->transport())),
          peer_(fedgate::format_process_id(c_->peer_pid())),
          conn_id_(c_->conn_id()),
          fd_(c_->native_handle()) {}
    PyConnection(const PyConnection&) = delete;
    PyConnection& operator=(const PyConnection&) = delete;
    ~PyConnection() {
        // The last reference: a tcp close is quick, an RDMA one tears the QP down; neither needs Python.
        if (c_ != nullptr && !python_finalizing()) {
            py::gil_scoped_release nogil;
            c_.reset();
        }
    }

    std::size_t send(const py::buffer& data) {
        const BorrowedBuffer b(data, false);
        const auto c = open();
        py::gil_scoped_release nogil;
        c->send_all({b.data(), b.size()});
        return b.size();
    }

    py::bytes recv(py::ssize_t n) {
        if (n < 0) throw py::value_error("recv(n): n is negative (" + std::to_string(n) + ")");
        const auto c = open();
        PyObject* out = PyBytes_FromStringAndSize(nullptr, n);
        if (out == nullptr) throw py::error_already_set();
        auto bytes = py::reinterpret_steal<py::bytes>(out);
        std::size_t got = 0;
        if (n > 0) {
            // Nobody else sees the new bytes object until it is returned, so filling it without the
            // GIL is safe.
            auto* p = reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(out));
            py::gil_scoped_release nogil;
            got = c->recv_some({p, static_cast<std::size_t>(n)});
        }
        if (static_cast<py::ssize_t>(got) == n) return bytes;
        PyObject* shrunk = bytes.release().ptr();  // still the only reference: shrunk in place
        if (_PyBytes_Resize(&shrunk, static_cast<py::ssize_t>(got)) != 0) throw py::error_already_set();
        return py::reinterpret_steal<py::bytes>(shrunk);
    }

    std::size_t recv_into(const py::buffer& buffer, py::ssize_t nbytes) {
        const BorrowedBuffer b(buffer, true);
        const std::size_t want = checked_length(nbytes, b.size(), "recv_into");
        const auto c = open();
        if (want == 0) return 0;
        py::gil_scoped_release nogil;
        return c->recv_some({b.data(), want});
    }

    py::bytes recv_exact(py::ssize_t n) {
        if (n < 0) throw py::value_error("recv_exact(n): n is negative (" + std::to_string(n) + ")");
        PyObject* out = PyBytes_FromStringAndSize(nullptr, n);
        if (out == nullptr) throw py::error_already_set();
        auto bytes = py::reinterpret_steal<py::bytes>(out);
        fill(reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(out)), static_cast<std::size_t>(n));
        return bytes;
    }

    std::size_t recv_exact_into(const py::buffer& buffer, py::ssize_t nbytes) {
        const BorrowedBuffer b(buffer, true);
        const std::size_t want = checked_length(nbytes, b.size(), "recv_exact_into");
        fill(b.data(), want);
        return want;
    }

    void shutdown() {
        const auto c = open();
        py::gil_scoped_release nogil;
        c->shutdown_send();
    }

    void close() {
        auto c = std::move(c_);
        if (c == nullptr) return;
        // Wakes a thread blocked in recv/send on this connection (tcp or RDMA): it keeps its own
        // reference, so the connection stays valid until that call has returned.
        c->cancel();
        py::gil_scoped_release nogil;
        c.reset();
    }

    int fileno() const { return c_ != nullptr ? fd_ : -1; }
    bool closed() const { return c_ == nullptr; }
    const std::string& transport() const { return transport_; }
    const std::string& peer() const { return peer_; }
    uint64_t conn_id() const { return conn_id_; }

    std::string repr() const {
        return "<fedgate.Connection " + transport_ + " to " + peer_ + " conn_id=" + std::to_string(conn_id_) +
               (c_ == nullptr ? " closed>" : ">");
    }

private:
    // The connection for one call, or ValueError once closed (as a closed Python file does).
    std::shared_ptr<fedgate::Connection> open() const {
        if (c_ == nullptr) throw py::value_error("connection to " + peer_ + " is closed");
        return c_;
    }

    static std::size_t checked_length(py::ssize_t nbytes, std::size_t size, const char* call) {
        if (nbytes < 0 || static_cast<std::size_t>(nbytes) > size)
            throw py::value_error(std::string(call) + ": nbytes " + std::to_string(nbytes) +
                                  " is not between 0 and the buffer's " + std::to_string(size) + " bytes");
        return nbytes == 0 ? size : static_cast<std::size_t>(nbytes);
    }

    // Exactly `n` bytes into `p`, or fedgate.Error of stage data if the peer closes first.
    void fill(uint8_t* p, std::size_t n) {
        const auto c = open();
        std::size_t got = 0;
        {
            py::gil_scoped_release nogil;
            while (got < n) {
                const std::size_t k = c->recv_some({p + got, n - got});
                if (k == 0) break;
                got += k;
            }
        }
        if (got < n)
            throw_error("data", peer_ + " closed the connection after " + std::to_string(got) + " of " +
                                    std::to_string(n) + " bytes");
    }

    std::shared_ptr<fedgate::Connection> c_;  // null once closed; a call in flight holds its own
    std::string transport_, peer_;
    uint64_t conn_id_;
    int fd_;
};

// ---- Endpoint ----------------------------------------------------------------------------------

// accept() waits in slices this long, so that Ctrl-C (a signal Python handles in the main thread)
// interrupts a long wait.
constexpr std::chrono::milliseconds kAcceptSlice{250};

class PyEndpoint {
public:
    PyEndpoint(const std::string& gateway, const std::string& pid, const std::string& transport,
               const std::optional<std::string>& bind) {
        fedgate::EndpointOptions o;
        std::tie(o.gateway_ipv4, o.gateway_port) = parse_gateway(gateway);
        o.pid = parse_pid(pid, "pid");
        o.transport = parse_transport(transport);
        if (bind) {
            const auto b = parse_ipv4(*bind);
            if (!b) throw py::value_error("bind '" + *bind + "' is not an IPv4 address");
            o.bind_ipv4 = *b;
        }
        std::string error;
        {
            py::gil_scoped_release nogil;
            if (!bind) o.bind_ipv4 = route_source(o.gateway_ipv4, o.gateway_port, error);
            if (error.empty()) ep_ = std::make_unique<fedgate::Endpoint>(std::move(o));
        }
        if (!error.empty()) throw_error("open", error);
        pid_ = fedgate::format_process_id(ep_->pid());
        gateway_ = gateway;
    }
    ~PyEndpoint() {
        // Deregistering waits on the network: not with the GIL held, unless Python is shutting down.
        if (ep_ != nullptr && !python_finalizing()) {
            py::gil_scoped_release nogil;
            ep_.reset();
        }
    }

    void listen() {
        check_open();
        py::gil_scoped_release nogil;
        ep_->listen();
    }

    py::object accept(std::optional<double> timeout) {
        check_open();
        using namespace std::chrono;
        std::optional<steady_clock::time_point> deadline;
        if (timeout) {
            if (!std::isfinite(*timeout) || *timeout < 0)
                throw py::value_error("accept(timeout): timeout " + std::to_string(*timeout) +
                                      " is not a number of seconds >= 0 (None: wait for a connection)");
            // Beyond a year is "wait for a connection": the clock's nanoseconds would overflow.
            if (*timeout < kForeverSeconds)
                deadline = steady_clock::now() + duration_cast<steady_clock::duration>(duration<double>(*timeout));
        }
        for (;;) {
            std::unique_ptr<fedgate::Connection> c;
            {
                py::gil_scoped_release nogil;
                auto slice = kAcceptSlice;
                if (deadline)
                    slice = std::min(slice, ceil<milliseconds>(std::max(*deadline - steady_clock::now(),
                                                                        steady_clock::duration::zero())));
                c = ep_->accept(slice);
            }
            if (c != nullptr) return py::cast(std::make_unique<PyConnection>(std::move(c)));
            if (closed_ || (deadline && steady_clock::now() >= *deadline)) return py::none();
            if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        }
    }

    std::unique_ptr<PyConnection> connect(const std::string& target, const std::optional<std::string>& transport) {
        const fedgate::ProcessId id = parse_pid(target, "pid");
        std::optional<fedgate::TransportChoice> t;
        if (transport) t = parse_transport(*transport);
        check_open();
        std::unique_ptr<fedgate::Connection> c;
        {
            py::gil_scoped_release nogil;
            c = ep_->connect(id, t);
        }
        return std::make_unique<PyConnection>(std::move(c));
    }

    Record resolve(const std::string& target) {
        const fedgate::ProcessId id = parse_pid(target, "pid");
        check_open();
        fedgate::DmaAddress a;
        {
            py::gil_scoped_release nogil;
            a = ep_->resolve(id);
        }
        return Record::of(a);
    }

    void close() {
        if (closed_.exchange(true)) return;
        py::gil_scoped_release nogil;
        ep_->stop();
    }

    const std::string& pid() const { return pid_; }
    uint32_t epoch() const { return ep_->epoch(); }
    uint16_t tcp_port() const { return ep_->tcp_port(); }
    bool rdma_available() const { return ep_->rdma_available(); }
    bool closed() const { return closed_; }

    py::dict stats() const {
        const fedgate::EndpointStats s = ep_->stats();
        py::dict failed;
        for (std::size_t i = 0; i < fedgate::kConnStageCount; ++i)
            failed[fedgate::conn_stage_name(static_cast<fedgate::ConnStage>(i))] = s.connects_failed[i];
        py::dict d;
        d["connects_ok"] = s.connects_ok;
        d["connects_failed"] = failed;
        d["accepts"] = s.accepts;
        d["established"] = s.established;
        d["late_rtus"] = s.late_rtus;
        d["half_open_dropped"] = s.half_open_dropped;
        d["tcp_fallbacks"] = s.tcp_fallbacks;
        d["reqs_received"] = s.reqs_received;
        d["duplicate_reqs"] = s.duplicate_reqs;
        d["reqs_refused"] = s.reqs_refused;
        d["reqs_sent"] = s.reqs_sent;
        d["req_retransmits"] = s.req_retransmits;
        d["rtus_sent"] = s.rtus_sent;
        d["duplicate_reps"] = s.duplicate_reps;
        d["preambles_rejected"] = s.preambles_rejected;
        d["ignored_datagrams"] = s.ignored_datagrams;
        d["heartbeats_sent"] = s.heartbeats_sent;
        d["reregistrations"] = s.reregistrations;
        d["rdma_setup_failures"] = s.rdma_setup_failures;
        return d;
    }

    std::string repr() const {
        return "<fedgate.Endpoint " + pid_ + " via " + gateway_ + (closed_ ? " closed>" : ">");
    }

private:
    void check_open() const {
        if (closed_) throw py::value_error("endpoint " + pid_ + " is closed");
    }

    std::unique_ptr<fedgate::Endpoint> ep_;  // lives as long as this object: calls in flight use it
    std::atomic<bool> closed_{false};        // close() stops it once; later calls raise ValueError
    std::string pid_, gateway_;
};

constexpr const char* kModuleDoc =
    R"DOC(Connections between compute processes of different parties, through their gateways.

A compute process opens an Endpoint with its party's gateway and its own process ID
("PARTY.NODE.LOCAL"), which registers it. Another process then reaches it by process ID alone:
the gateways resolve where it lives and relay the connection handshake, and the two processes get
a byte stream over RDMA (RoCE v2) where both have a device, or over TCP. Every blocking call
releases the GIL, and send/recv_into take any bytes-like object without copying it (bytes,
bytearray, memoryview, numpy arrays).

Example, the listening side::

    import fedgate, numpy
    with fedgate.Endpoint("198.18.1.1", "1.8.43") as ep:
        ep.listen()
        conn = ep.accept(30.0)          # None after 30 s without a connection
        if conn is not None:
            with conn:
                header = conn.recv_exact(8)
                weights = numpy.empty(int.from_bytes(header, "big"), dtype=numpy.uint8)
                conn.recv_exact_into(weights)

and the connecting side::

    import fedgate, numpy
    weights = numpy.ones(1 << 20, dtype=numpy.float32)
    with fedgate.Endpoint("198.18.2.1:7410", "2.3.7") as ep:
        with ep.connect("1.8.43") as conn:
            conn.send(weights.nbytes.to_bytes(8, "big"))
            conn.send(weights)           # a numpy array, sent from its own memory
            conn.shutdown()

Failures raise fedgate.Error, whose ``stage`` names where it failed ("resolve", "req", "rep",
"refused", "transport", "rtr", "rts", "data", "open"); malformed arguments (a process ID, a
gateway address, a transport name) raise ValueError naming them.
)DOC";

}  // namespace

PYBIND11_MODULE(fedgate, m) {
    m.doc() = kModuleDoc;

    // fedgate.Error, defined as Python code inside the module's own namespace.
    py::dict scope;
    scope["__name__"] = "fedgate";
    scope["__builtins__"] = py::module_::import("builtins");
    py::exec(kErrorClass, scope);
    py::object error = scope["Error"];
    g_error_type = error.ptr();
    m.attr("Error") = error;  // the module keeps the class alive for g_error_type
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const fedgate::Error& e) {
            py::object exc = py::reinterpret_borrow<py::object>(g_error_type)(fedgate::conn_stage_name(e.stage()),
                                                                               e.why());
            PyErr_SetObject(g_error_type, exc.ptr());
        }
    });

    py::class_<Record>(m, "Record",
                       "A process's address record, as its gateway holds it (Endpoint.resolve returns one).\n\n"
                       "Records compare equal when every field does.")
        .def_readonly("pid", &Record::pid, "The process ID, \"PARTY.NODE.LOCAL\" (str).")
        .def_readonly("epoch", &Record::epoch, "Changes when the process restarts (int).")
        .def_readonly("transport", &Record::transport, "What it offers: \"roce_v2\" or \"tcp\" (str).")
        .def_readonly("ipv4", &Record::ipv4, "Its node's IPv4 address, dotted (str).")
        .def_readonly("port", &Record::port, "Its TCP port for the tcp transport; 0 when none (int).")
        .def_readonly("gid", &Record::gid, "Its RDMA GID in IPv6 text form; \"::\" without RDMA (str).")
        .def_readonly("qpn", &Record::qpn, "An RDMA queue pair number of its device; 0 without RDMA (int).")
        .def_readonly("mtu", &Record::mtu, "Its RDMA path MTU in bytes; 0 without RDMA (int).")
        .def("__eq__", [](const Record& a, const Record& b) { return a == b; }, py::is_operator())
        .def("__repr__", &Record::repr);

    py::class_<PyConnection>(m, "Connection",
                             "A byte stream to another compute process, over RDMA (RoCE v2) or TCP.\n\n"
                             "Made by Endpoint.connect and Endpoint.accept, never directly. Both transports\n"
                             "move bytes the same way. One thread at a time should send, and one receive.\n"
                             "Usable as a context manager: the connection closes on exit.")
        .def("send", &PyConnection::send, py::arg("data"),
             "Sends every byte of `data`, any contiguous bytes-like object (bytes, bytearray,\n"
             "memoryview, numpy array), straight from its memory: nothing is copied. Blocks while\n"
             "the peer's window is full, without the GIL; returns the number of bytes sent.\n"
             "Raises fedgate.Error (stage \"data\") if the connection fails, ValueError once closed.")
        .def("recv", &PyConnection::recv, py::arg("n"),
             "Waits (without the GIL) until at least one byte has arrived and returns up to `n` of\n"
             "them; b\"\" once the peer has shut down its side and everything it sent was read.")
        .def("recv_into", &PyConnection::recv_into, py::arg("buffer"), py::arg("nbytes") = 0,
             "Like recv, but fills the writable bytes-like `buffer` (bytearray, memoryview, numpy\n"
             "array) in place, at most `nbytes` bytes (0: its whole size). Returns how many bytes\n"
             "arrived; 0 at the end of the stream.")
        .def("recv_exact", &PyConnection::recv_exact, py::arg("n"),
             "Exactly `n` bytes. Raises fedgate.Error (stage \"data\") if the peer closes first.")
        .def("recv_exact_into", &PyConnection::recv_exact_into, py::arg("buffer"), py::arg("nbytes") = 0,
             "Fills exactly `nbytes` bytes of the writable `buffer` (0: all of it) in place and\n"
             "returns that count. Raises fedgate.Error (stage \"data\") if the peer closes first.")
        .def("shutdown", &PyConnection::shutdown,
             "Says no more will be sent: the peer's recv returns b\"\" after the last byte. This side\n"
             "can still receive.")
        .def("close", &PyConnection::close,
             "Closes the connection (idempotent). A thread blocked in recv on it returns.")
        .def("fileno", &PyConnection::fileno,
             "The TCP socket, for selectors, select and asyncio's add_reader: it turns readable when\n"
             "bytes arrive. Read with recv/recv_into, never from the socket itself. -1 for RDMA\n"
             "connections and once closed.")
        .def_property_readonly("transport", &PyConnection::transport, "\"tcp\" or \"roce_v2\" (str).")
        .def_property_readonly("peer", &PyConnection::peer, "The other process's ID, \"PARTY.NODE.LOCAL\" (str).")
        .def_property_readonly("conn_id", &PyConnection::conn_id,
                               "The connection's ID from the handshake, the same on both sides (int).")
        .def_property_readonly("closed", &PyConnection::closed, "True once close() was called.")
        .def(
            "__enter__", [](PyConnection& c) -> PyConnection& { return c; }, py::return_value_policy::reference,
            "Returns the connection itself.")
        .def(
            "__exit__", [](PyConnection& c, const py::args&) { c.close(); return false; },
            "Closes the connection; exceptions propagate.")
        .def("__repr__", &PyConnection::repr);

    py::class_<PyEndpoint>(m, "Endpoint",
                           "Endpoint(gateway, pid, transport=\"auto\", bind=None)\n\n"
                           "This compute process, registered with its party's gateway.\n\n"
                           "Args:\n"
                           "    gateway (str): the gateway's address, \"IP\" or \"IP:PORT\" (port 7410 by default).\n"
                           "    pid (str): this process's ID, \"PARTY.NODE.LOCAL\", e.g. \"1.8.43\".\n"
                           "    transport (str): \"auto\" (RDMA where this node has a device with a RoCE v2 GID,\n"
                           "        else TCP, said once on stderr), \"rdma\" or \"tcp\".\n"
                           "    bind (str or None): this node's IPv4 address, which the gateway checks the\n"
                           "        registration comes from; None: the source address the kernel routes\n"
                           "        toward the gateway.\n\n"
                           "Registering blocks (without the GIL) until the gateway answers. Raises ValueError\n"
                           "for a malformed argument and fedgate.Error (stage \"open\") when the endpoint cannot\n"
                           "be opened or the gateway refuses or does not answer. Usable as a context manager:\n"
                           "on exit the endpoint closes and deregisters; connections it made stay usable.")
        .def(py::init<const std::string&, const std::string&, const std::string&, const std::optional<std::string>&>(),
             py::arg("gateway"), py::arg("pid"), py::arg("transport") = "auto", py::arg("bind") = py::none())
        .def("listen", &PyEndpoint::listen,
             "Accepts connections from now on (before, requests are refused). Raises fedgate.Error\n"
             "(stage \"transport\") when the transport asked for cannot be offered, e.g. \"rdma\"\n"
             "without an RDMA device.")
        .def("accept", &PyEndpoint::accept, py::arg("timeout") = py::none(),
             "The next incoming Connection, waiting up to `timeout` seconds (float; None: until one\n"
             "arrives or the endpoint closes). Returns None on timeout or once closed: a timeout is\n"
             "not an error. Waits without the GIL; Ctrl-C interrupts it.")
        .def("connect", &PyEndpoint::connect, py::arg("pid"), py::arg("transport") = py::none(),
             "A connection to the process `pid` (\"PARTY.NODE.LOCAL\"; party 0: the gateways find\n"
             "the owner), over `transport` (\"auto\", \"rdma\" or \"tcp\"; None: the endpoint's).\n"
             "Blocks without the GIL while the gateways resolve the target and relay the handshake.\n"
             "Raises fedgate.Error naming the stage that failed: \"resolve\" for a process nobody\n"
             "registered, \"transport\" for \"rdma\" without a device, ...")
        .def("resolve", &PyEndpoint::resolve, py::arg("pid"),
             "The address record of the process `pid` as the gateway answers it (its cache, the\n"
             "owner's gateway or every peer). Raises fedgate.Error (stage \"resolve\") when it is not\n"
             "registered anywhere or nobody answers.")
        .def("close", &PyEndpoint::close,
             "Stops the endpoint and deregisters it from the gateway (idempotent). A thread waiting\n"
             "in accept returns None; connections already made stay usable until closed.")
        .def_property_readonly("pid", &PyEndpoint::pid, "This process's ID, \"PARTY.NODE.LOCAL\" (str).")
        .def_property_readonly("epoch", &PyEndpoint::epoch, "The epoch it registered with (int).")
        .def_property_readonly("tcp_port", &PyEndpoint::tcp_port,
                               "The TCP port it accepts the tcp transport on; 0 when tcp is not offered (int).")
        .def_property_readonly("rdma_available", &PyEndpoint::rdma_available,
                               "Whether it opened an RDMA device (bool).")
        .def_property_readonly("closed", &PyEndpoint::closed, "True once close() was called.")
        .def_property_readonly("stats", &PyEndpoint::stats,
                               "Its counters (dict): connects_ok, connects_failed (a dict by stage), accepts,\n"
                               "tcp_fallbacks, handshake and registration counters.")
        .def(
            "__enter__", [](PyEndpoint& e) -> PyEndpoint& { return e; }, py::return_value_policy::reference,
            "Returns the endpoint itself.")
        .def(
            "__exit__", [](PyEndpoint& e, const py::args&) { e.close(); return false; },
            "Closes and deregisters the endpoint; exceptions propagate.")
        .def("__repr__", &PyEndpoint::repr);
}
