// The tcp backend: sockets with plain blocking I/O, and the preamble's encoding.
#include "client/src/tcp_backend.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "client/src/socket_util.hpp"

namespace fedgate {
namespace {

std::string where(uint32_t ipv4, uint16_t port) { return ipv4_text(ipv4) + ":" + std::to_string(port); }

std::string errno_text(int e) { return std::strerror(e); }

void set_blocking(int fd) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

}  // namespace

std::string ipv4_text(uint32_t host_order) {
    const in_addr a{htonl(host_order)};
    char buf[INET_ADDRSTRLEN];
    return ::inet_ntop(AF_INET, &a, buf, sizeof buf) ? buf : "?";
}

void encode(const Preamble& p, PreambleWire& w) {
    std::memset(&w, 0, sizeof w);
    store_be32(w.magic, kPreambleMagic);
    w.version = kPreambleVersion;
    store_be64(w.conn_id, p.conn_id);
    store_be64(w.initiator, p.initiator.value);
    store_be64(w.target, p.target.value);
}

std::optional<Preamble> decode(const PreambleWire& w) {
    if (load_be32(w.magic) != kPreambleMagic || w.version != kPreambleVersion) return std::nullopt;
    if (w.reserved[0] != 0 || w.reserved[1] != 0 || w.reserved[2] != 0) return std::nullopt;
    Preamble p{load_be64(w.conn_id), ProcessId{load_be64(w.initiator)}, ProcessId{load_be64(w.target)}};
    if (p.conn_id == 0 || p.initiator.value == 0 || p.target.value == 0) return std::nullopt;
    return p;
}

int open_tcp_listener(uint32_t ipv4, uint16_t port, int backlog, std::string& error) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        error = "cannot open a TCP socket: " + errno_text(errno);
        return -1;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const sockaddr_in a = sockaddr_of(ipv4, port);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, backlog) != 0) {
        error = "cannot listen on TCP " + where(ipv4, port) + ": " + errno_text(errno);
        ::close(fd);
        return -1;
    }
    return fd;
}

uint16_t socket_port(int fd) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    if (fd < 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return 0;
    return ntohs(a.sin_port);
}

int tcp_connect(uint32_t ipv4, uint16_t port, std::chrono::milliseconds timeout, std::string& error) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        error = "cannot open a TCP socket: " + errno_text(errno);
        return -1;
    }
    const sockaddr_in a = sockaddr_of(ipv4, port);
    int e = 0;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
        e = errno;
        if (e == EINPROGRESS) {
            pollfd p{fd, POLLOUT, 0};
            int n;
            do n = ::poll(&p, 1, static_cast<int>(timeout.count()));
            while (n < 0 && errno == EINTR);
            socklen_t len = sizeof e;
            if (n == 0)
                e = ETIMEDOUT;
            else if (n < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
                e = errno;
        }
    }
    if (e != 0) {
        error = "cannot connect to TCP " + where(ipv4, port) + ": " + errno_text(e);
        ::close(fd);
        return -1;
    }
    set_blocking(fd);
    return fd;
}

// Nagle stays on and the buffers are the kernel's autotuned ones: the stream is written in large
// chunks, where both do better than fixed settings.
TcpConnection::TcpConnection(int fd, uint64_t conn_id, ProcessId local, ProcessId peer)
    : fd_(fd), conn_id_(conn_id), local_(local), peer_(peer) {
    set_blocking(fd_);
}

TcpConnection::~TcpConnection() {
    if (fd_ >= 0) ::close(fd_);
}

void TcpConnection::send_all(std::span<const uint8_t> data) {
    while (!data.empty()) {
        const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw ConnectionError("tcp send to " + format_process_id(peer_) + ": " + errno_text(errno));
        }
        data = data.subspan(static_cast<std::size_t>(n));
    }
}

std::size_t TcpConnection::recv_some(std::span<uint8_t> buf) {
    if (buf.empty()) return 0;
    for (;;) {
        const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
        if (n >= 0) return static_cast<std::size_t>(n);
        if (errno != EINTR)
            throw ConnectionError("tcp receive from " + format_process_id(peer_) + ": " + errno_text(errno));
    }
}

void TcpConnection::shutdown_send() {
    if (::shutdown(fd_, SHUT_WR) != 0 && errno != ENOTCONN)
        throw ConnectionError("tcp shutdown to " + format_process_id(peer_) + ": " + errno_text(errno));
}

void TcpConnection::cancel() {
    if (fd_ >= 0) (void)::shutdown(fd_, SHUT_RDWR);  // blocked reads return 0, writes fail EPIPE
}

}  // namespace fedgate
