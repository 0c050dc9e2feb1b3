// fedgate-node expose/forward: the pump between a fedgate Connection and a local TCP socket, and the
// accept loops that start one per connection.
#include "tools/sidecar.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <iomanip>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "client/src/tcp_backend.hpp"
#include "proto/conn_wire.hpp"

namespace fedgate::sidecar {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kStopCheck = std::chrono::milliseconds{200};  // how soon expose's accept notices a stop
constexpr int kPipeBytes = 1 << 20;                          // splice's pipe: one chunk in flight

std::string errno_text(int e) { return std::strerror(e); }

// ---- the pump --------------------------------------------------------------------------------

// Why a direction stopped: EOF (passed on to the other side) or an error (both sides shut down).
struct DirectionEnd {
    bool eof = false;
    std::string error;
};

int send_flags() { return MSG_NOSIGNAL; }

// All of `data` into socket `fd`; false with `error` set when the socket fails.
bool send_fd(int fd, const uint8_t* data, std::size_t size, std::string& error) {
    while (size > 0) {
        const ssize_t n = ::send(fd, data, size, send_flags());
        if (n < 0) {
            if (errno == EINTR) continue;
            error = errno_text(errno);
            return false;
        }
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return true;
}

// Socket to socket with plain recv/send, through one large buffer.
DirectionEnd copy_fds(int from, int to, uint64_t& moved, const char* from_name, const char* to_name) {
    std::vector<uint8_t> buf(kPumpChunk);
    for (;;) {
        const ssize_t n = ::recv(from, buf.data(), buf.size(), 0);
        if (n == 0) return {true, {}};
        if (n < 0) {
            if (errno == EINTR) continue;
            return {false, std::string("receiving from ") + from_name + ": " + errno_text(errno)};
        }
        std::string error;
        if (!send_fd(to, buf.data(), static_cast<std::size_t>(n), error))
            return {false, std::string("sending to ") + to_name + ": " + error};
        moved += static_cast<uint64_t>(n);
    }
}

// Socket to socket through a pipe, the bytes never copied to user space. Falls back to copy_fds
// when the kernel refuses to splice these sockets before the first byte.
DirectionEnd splice_fds(int from, int to, uint64_t& moved, const char* from_name, const char* to_name) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return copy_fds(from, to, moved, from_name, to_name);
    (void)::fcntl(p[1], F_SETPIPE_SZ, kPipeBytes);  // best effort: the default 64 KiB still works
    DirectionEnd end;
    for (;;) {
        const ssize_t n = ::splice(from, nullptr, p[1], nullptr, kPumpChunk, SPLICE_F_MOVE);
        if (n == 0) {
            end.eof = true;
            break;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EINVAL && moved == 0) {
                ::close(p[0]);
                ::close(p[1]);
                return copy_fds(from, to, moved, from_name, to_name);
            }
            end.error = std::string("receiving from ") + from_name + ": " + errno_text(errno);
            break;
        }
        // No SPLICE_F_MORE: it would hold small messages (an RPC's) back like TCP_CORK.
        std::size_t left = static_cast<std::size_t>(n);
        while (left > 0 && end.error.empty()) {
            const ssize_t m = ::splice(p[0], nullptr, to, nullptr, left, SPLICE_F_MOVE);
            if (m < 0 && errno == EINTR) continue;
            if (m <= 0)
                end.error = std::string("sending to ") + to_name + ": " + errno_text(m < 0 ? errno : EPIPE);
            else
                left -= static_cast<std::size_t>(m);
        }
        if (!end.error.empty()) break;
        moved += static_cast<uint64_t>(n);
    }
    ::close(p[0]);
    ::close(p[1]);
    return end;
}

// A Connection without a socket (RDMA): its own calls, through one large buffer.
DirectionEnd conn_to_fd(Connection& conn, int to, uint64_t& moved) {
    std::vector<uint8_t> buf(kPumpChunk);
    for (;;) {
        std::size_t n = 0;
        try {
            n = conn.recv_some(buf);
        } catch (const std::exception& e) {
            return {false, std::string("receiving from the fedgate connection: ") + e.what()};
        }
        if (n == 0) return {true, {}};
        std::string error;
        if (!send_fd(to, buf.data(), n, error)) return {false, "sending to the local socket: " + error};
        moved += n;
    }
}

DirectionEnd fd_to_conn(int from, Connection& conn, uint64_t& moved) {
    std::vector<uint8_t> buf(kPumpChunk);
    for (;;) {
        const ssize_t n = ::recv(from, buf.data(), buf.size(), 0);
        if (n == 0) return {true, {}};
        if (n < 0) {
            if (errno == EINTR) continue;
            return {false, "receiving from the local socket: " + errno_text(errno)};
        }
        try {
            conn.send_all({buf.data(), static_cast<std::size_t>(n)});
        } catch (const std::exception& e) {
            return {false, std::string("sending to the fedgate connection: ") + e.what()};
        }
        moved += static_cast<uint64_t>(n);
    }
}

void set_nodelay(int fd) {  // an RPC's small messages go at once, as the program asked of its own socket
    const int one = 1;
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Each connection holds six descriptors (two sockets, two splice pipes): the soft limit's usual
// 1024 would cap a sidecar near 170 connections, so take what the hard limit allows.
void raise_descriptor_limit() {
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        (void)::setrlimit(RLIMIT_NOFILE, &r);
    }
}

}  // namespace

void ignore_sigpipe() {
    struct sigaction sa {};
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGPIPE, &sa, nullptr);
}

PumpResult pump(Connection& conn, int local_fd) {
    const int conn_fd = conn.native_handle();
    set_nodelay(local_fd);
    if (conn_fd >= 0) set_nodelay(conn_fd);

    std::mutex mu;
    std::string first_error;
    // An error in one direction ends both: the other is woken by the shutdowns and the connection's
    // cancel() (a blocked read sees EOF, a blocked write fails). An RDMA connection's peer is told
    // with shutdown_send first.
    auto fail = [&](const std::string& why) {
        {
            std::lock_guard lock(mu);
            if (!first_error.empty()) return;
            first_error = why;
        }
        ::shutdown(local_fd, SHUT_RDWR);
        if (conn_fd < 0) {  // RDMA: tell the peer, then wake our own reader
            try {
                conn.shutdown_send();
            } catch (const std::exception&) {
            }
        }
        conn.cancel();
    };

    PumpResult r;
    std::thread inbound;
    try {
        inbound = std::thread([&] {  // fedgate connection -> local socket
        const DirectionEnd end = conn_fd >= 0 ? splice_fds(conn_fd, local_fd, r.to_local, "the fedgate connection",
                                                          "the local socket")
                                              : conn_to_fd(conn, local_fd, r.to_local);
        if (!end.eof)
            fail(end.error);
        else if (::shutdown(local_fd, SHUT_WR) != 0 && errno != ENOTCONN)
            fail("passing the fedgate connection's EOF on to the local socket: " + errno_text(errno));
        });
    } catch (const std::system_error& e) {  // no thread to be had (pid or memory limits)
        fail(std::string("no thread for the connection: ") + e.what());
        r.error = first_error;
        return r;
    }
    const DirectionEnd end = conn_fd >= 0 ? splice_fds(local_fd, conn_fd, r.from_local, "the local socket",
                                                      "the fedgate connection")
                                          : fd_to_conn(local_fd, conn, r.from_local);
    if (!end.eof) {
        fail(end.error);
    } else {
        try {
            conn.shutdown_send();
        } catch (const std::exception& e) {
            fail(std::string("passing the local socket's EOF on to the fedgate connection: ") + e.what());
        }
    }
    inbound.join();
    r.error = first_error;
    return r;
}

// ---- addresses -------------------------------------------------------------------------------

std::optional<LocalAddress> parse_local_address(std::string_view text, uint16_t min_port) {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    const std::string host(text.substr(0, colon));
    const std::string_view port_text = text.substr(colon + 1);
    LocalAddress a;
    in_addr ip{};
    if (host == "localhost")
        a.ipv4 = INADDR_LOOPBACK;
    else if (::inet_pton(AF_INET, host.c_str(), &ip) == 1)
        a.ipv4 = ntohl(ip.s_addr);
    else
        return std::nullopt;
    uint32_t port = 0;
    const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (port_text.empty() || port_text.size() > 5 || ec != std::errc{} || end != port_text.data() + port_text.size() ||
        port < min_port || port > 65535)
        return std::nullopt;
    a.port = static_cast<uint16_t>(port);
    return a;
}

std::string address_text(LocalAddress a) { return ipv4_text(a.ipv4) + ":" + std::to_string(a.port); }

namespace {

// ---- the connections under way ---------------------------------------------------------------

// The sidecar's connections: a thread each, and the sockets that a stop shuts down so that every
// blocked pump wakes. A socket leaves the set (unwatch) before it is closed, under the same lock as
// the stop's shutdowns, so a stop never touches a number the kernel has handed to something else.
class Sessions {
public:
    ~Sessions() {
        stop();
        join();
    }

    // False once stopping: the caller closes `fd` and ends. -1 is ignored (true).
    bool watch(int fd) {
        if (fd < 0) return true;
        std::lock_guard lock(mu_);
        if (stopping_) return false;
        fds_.insert(fd);
        return true;
    }
    void unwatch(int fd) {
        std::lock_guard lock(mu_);
        fds_.erase(fd);
    }
    // The same for a fedgate connection, which a stop cancels (an RDMA one has no socket).
    bool watch(Connection& c) {
        std::lock_guard lock(mu_);
        if (stopping_) return false;
        conns_.insert(&c);
        return true;
    }
    void unwatch(Connection& c) {
        std::lock_guard lock(mu_);
        conns_.erase(&c);
    }
    bool stopping() {
        std::lock_guard lock(mu_);
        return stopping_;
    }

    // Runs `body` on a thread of its own; reaps the threads that have finished. False when no
    // thread can be had: `body` did not run (its captures are the caller's to release).
    template <class Body>
    bool spawn(Body body) {
        reap();
        auto& s = running_.emplace_back();
        try {
            s.thread = std::thread([&done = s.done, body = std::move(body)]() mutable {
                body();
                done.store(true, std::memory_order_release);
            });
        } catch (const std::system_error&) {
            running_.pop_back();
            return false;
        }
        return true;
    }

    void stop() {
        std::lock_guard lock(mu_);
        stopping_ = true;
        for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
        for (Connection* c : conns_) c->cancel();
    }
    void join() {
        for (Running& s : running_)
            if (s.thread.joinable()) s.thread.join();
        running_.clear();
    }

private:
    struct Running {
        std::thread thread;
        std::atomic<bool> done{false};
    };
    void reap() {
        for (auto it = running_.begin(); it != running_.end();) {
            if (it->done.load(std::memory_order_acquire)) {
                it->thread.join();
                it = running_.erase(it);
            } else {
                ++it;
            }
        }
    }

    std::mutex mu_;
    bool stopping_ = false;
    std::set<int> fds_;
    std::set<Connection*> conns_;
    std::list<Running> running_;  // touched by the accepting thread only
};

bool stop_now(int stop_fd, int timeout_ms) {
    if (stop_fd < 0) {
        if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
        return false;
    }
    pollfd p{stop_fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) > 0;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// "conn 0x… A <-> B tcp: N bytes A -> B, M bytes B -> A, S s[; ended: why]".
std::string conn_line(uint64_t conn_id, Transport t, const std::string& a, const std::string& b, uint64_t a_to_b,
                      uint64_t b_to_a, double seconds, const std::string& error) {
    std::ostringstream s;
    s << "conn " << format_conn_id(conn_id) << " " << a << " <-> " << b << " " << transport_name(t) << ": " << a_to_b
      << " bytes " << a << " -> " << b << ", " << b_to_a << " bytes " << b << " -> " << a << ", " << std::fixed
      << std::setprecision(3) << seconds << " s";
    if (!error.empty()) s << "; ended: " << error;
    return s.str();
}

// One connection carried to its end: pumps both ways, then lets go of the local socket (closed) and
// the fedgate connection (its owner closes it), unwatched first so a stop never touches them after.
struct Carried {
    PumpResult r;
    double seconds = 0;
};
Carried carry(Sessions& sessions, Connection& c, int local) {
    const auto t0 = Clock::now();
    Carried k{pump(c, local), 0};
    k.seconds = seconds_since(t0);
    sessions.unwatch(local);
    ::close(local);
    sessions.unwatch(c);
    return k;
}

std::string peer_text(const sockaddr_in& a) {
    return address_text(LocalAddress{ntohl(a.sin_addr.s_addr), ntohs(a.sin_port)});
}

}  // namespace

// ---- expose ----------------------------------------------------------------------------------

Totals expose(Endpoint& ep, LocalAddress target, int stop_fd, const Report& report) {
    ignore_sigpipe();
    raise_descriptor_limit();
    std::atomic<uint64_t> connections{0}, failed{0};
    const std::string target_text = address_text(target);
    {
        Sessions sessions;
        while (!stop_now(stop_fd, 0)) {
            std::unique_ptr<Connection> accepted = ep.accept(kStopCheck);
            if (!accepted) continue;
            auto shared = std::shared_ptr<Connection>(std::move(accepted));
            const bool spawned = sessions.spawn([&, c = shared] {
                const std::string peer = format_process_id(c->peer_pid());
                if (!sessions.watch(*c)) return;
                std::string error;
                const int local = tcp_connect(target.ipv4, target.port, kLocalConnectTimeout, error);
                if (local < 0 || !sessions.watch(local)) {
                    if (local >= 0) {
                        ::close(local);
                    } else {
                        ++failed;
                        report.err("expose: conn " + format_conn_id(c->conn_id()) + " from " + peer + ": " + error +
                                   "; closed the connection from " + peer);
                    }
                    sessions.unwatch(*c);
                    return;  // the Connection closes as `c` goes
                }
                const Carried k = carry(sessions, *c, local);
                ++connections;
                report.out(conn_line(c->conn_id(), c->transport(), peer, target_text, k.r.to_local, k.r.from_local,
                                     k.seconds, k.r.error));
            });
            if (!spawned) {
                ++failed;
                report.err("expose: conn " + format_conn_id(shared->conn_id()) + ": no thread for it; closed it");
            }
        }
        sessions.stop();
    }  // joins every connection's thread
    return {connections.load(), failed.load()};
}

// ---- forward ---------------------------------------------------------------------------------

Totals forward(Endpoint& ep, int listen_fd, LocalAddress listening, ProcessId to, int stop_fd, const Report& report) {
    ignore_sigpipe();
    raise_descriptor_limit();
    std::atomic<uint64_t> connections{0}, failed{0};
    const std::string to_text = format_process_id(to);
    {
        Sessions sessions;
        for (;;) {
            pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
            const int n = ::poll(p, stop_fd >= 0 ? 2 : 1, -1);
            if (n < 0 && errno != EINTR) {
                report.err("forward: poll: " + errno_text(errno));
                break;
            }
            if (n <= 0) continue;
            if (stop_fd >= 0 && p[1].revents) break;
            sockaddr_in from{};
            socklen_t len = sizeof from;
            // Blocking, whatever the listener is: Linux does not pass O_NONBLOCK on through accept.
            const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
                report.err("forward: accept on " + address_text(listening) + ": " + errno_text(errno));
                if (stop_now(stop_fd, 100)) break;  // out of descriptors, say: give the others time to end
                continue;
            }
            const bool spawned = sessions.spawn([&, fd, client = peer_text(from)] {
                if (!sessions.watch(fd)) {
                    ::close(fd);
                    return;
                }
                std::unique_ptr<Connection> c;
                try {
                    c = ep.connect(to);
                } catch (const std::exception& e) {
                    sessions.unwatch(fd);
                    ::close(fd);
                    if (sessions.stopping()) return;  // the stop failed it: not the target's doing
                    ++failed;
                    report.err("forward: connect " + to_text + ": " + e.what() + "; closed the local connection from " +
                               client);
                    return;
                }
                if (!sessions.watch(*c)) {
                    sessions.unwatch(fd);
                    ::close(fd);
                    return;
                }
                const Carried k = carry(sessions, *c, fd);
                ++connections;
                report.out(conn_line(c->conn_id(), c->transport(), client, to_text, k.r.from_local, k.r.to_local,
                                     k.seconds, k.r.error));
            });
            if (!spawned) {
                ::close(fd);
                ++failed;
                report.err("forward: no thread for the connection from " + peer_text(from) + "; closed it");
            }
        }
        sessions.stop();
        ep.stop();  // a connect still waiting for its handshake fails now
        sessions.join();
    }
    return {connections.load(), failed.load()};
}

}  // namespace fedgate::sidecar
