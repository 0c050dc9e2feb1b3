// NodeClient: one UDP socket, request/reply with retries, replies matched on type, ID and source.
#include "fedgate/node_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "client/src/socket_util.hpp"

namespace fedgate {
namespace {

using Clock = std::chrono::steady_clock;

// Retries double the wait; past this it stops growing (keeps poll's int timeout in range).
constexpr std::chrono::milliseconds kMaxTryTimeout{3'600'000};
// Larger than any valid message, so an oversized datagram is seen whole enough to be refused.
constexpr std::size_t kRxBuffer = 2048;

std::string ipv4_text(uint32_t host_order) {
    const in_addr a{htonl(host_order)};
    char buf[INET_ADDRSTRLEN];
    return ::inet_ntop(AF_INET, &a, buf, sizeof buf) ? buf : "?";
}

}  // namespace

NodeClient::NodeClient(uint32_t gateway_ipv4, uint16_t gateway_port, NodeClientOptions options)
    : gateway_ipv4_(gateway_ipv4), gateway_port_(gateway_port), options_(options) {
    if (options_.tries < 1)
        throw std::invalid_argument("NodeClient: tries must be at least 1, got " + std::to_string(options_.tries));
    if (options_.timeout < std::chrono::milliseconds{1})
        throw std::invalid_argument("NodeClient: the timeout must be at least 1 ms");
    if (gateway_port_ == 0)
        throw std::invalid_argument("NodeClient: gateway port 0");
    std::random_device rd;
    std::seed_seq seed{rd(), rd(), rd(), rd()};
    ids_.seed(seed);

    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd_ < 0)
        throw std::system_error(errno, std::generic_category(), "NodeClient: cannot open a UDP socket");
    if (options_.bind_ipv4) {
        const sockaddr_in local = sockaddr_of(*options_.bind_ipv4, 0);
        if (::bind(fd_, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
            const int e = errno;
            close_socket();
            throw std::system_error(e, std::generic_category(),
                                    "NodeClient: cannot bind to " + ipv4_text(*options_.bind_ipv4));
        }
    }
}

NodeClient::~NodeClient() { close_socket(); }

NodeClient::NodeClient(NodeClient&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      gateway_ipv4_(other.gateway_ipv4_),
      gateway_port_(other.gateway_port_),
      options_(other.options_),
      ids_(other.ids_),
      stats_(other.stats_) {}

NodeClient& NodeClient::operator=(NodeClient&& other) noexcept {
    if (this != &other) {
        close_socket();
        fd_ = std::exchange(other.fd_, -1);
        gateway_ipv4_ = other.gateway_ipv4_;
        gateway_port_ = other.gateway_port_;
        options_ = other.options_;
        ids_ = other.ids_;
        stats_ = other.stats_;
    }
    return *this;
}

void NodeClient::close_socket() {
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = -1;
}

std::string NodeClient::gateway() const { return ipv4_text(gateway_ipv4_) + ":" + std::to_string(gateway_port_); }

uint16_t NodeClient::local_port() const {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        return 0;
    return ntohs(a.sin_port);
}

bool NodeClient::exchange(MsgType type, std::span<const uint8_t> body, MsgType reply_type,
                          const std::function<bool(std::span<const uint8_t>)>& accept, std::string& error) {
    const uint64_t id = ids_();
    std::array<uint8_t, sizeof(MsgHeader) + kMaxBody> request{};
    MsgHeader wire_header;
    encode(Header{type, 0, static_cast<uint16_t>(body.size()), id, 0}, wire_header);
    std::memcpy(request.data(), &wire_header, sizeof wire_header);
    std::memcpy(request.data() + sizeof wire_header, body.data(), body.size());
    const std::size_t request_len = sizeof wire_header + body.size();
    const sockaddr_in to = sockaddr_of(gateway_ipv4_, gateway_port_);

    int last_send_errno = 0;
    std::chrono::milliseconds wait = options_.timeout;
    for (int attempt = 0; attempt < options_.tries; ++attempt) {
        if (attempt > 0) {
            ++stats_.retries;
            wait = std::min(wait * 2, kMaxTryTimeout);
        }
        if (::sendto(fd_, request.data(), request_len, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to) < 0) {
            last_send_errno = errno;
            ++stats_.send_errors;
        } else {
            ++stats_.requests_sent;
        }

        const Clock::time_point deadline = Clock::now() + wait;
        for (Clock::time_point now = Clock::now(); now < deadline; now = Clock::now()) {
            // Rounded up: a timeout of 0 would spin through the last fraction of a millisecond.
            const auto remaining = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
            pollfd p{fd_, POLLIN, 0};
            const int n = ::poll(&p, 1, static_cast<int>(remaining.count()));
            if (n < 0 && errno != EINTR) {
                error = "cannot wait for the reply from gateway " + gateway() + ": " + std::strerror(errno);
                ++stats_.no_reply;
                return false;
            }
            if (n <= 0)
                continue;
            for (;;) {
                std::array<uint8_t, kRxBuffer> rx;
                sockaddr_in from{};
                socklen_t from_len = sizeof from;
                const ssize_t got = ::recvfrom(fd_, rx.data(), rx.size(), MSG_TRUNC,
                                               reinterpret_cast<sockaddr*>(&from), &from_len);
                if (got < 0) {
                    if (errno == EINTR)
                        continue;
                    break;  // EAGAIN: drained
                }
                const bool from_gateway = from_len == sizeof from && from.sin_family == AF_INET &&
                                          from.sin_addr.s_addr == to.sin_addr.s_addr && from.sin_port == to.sin_port;
                ParsedMsg msg;
                if (from_gateway && static_cast<std::size_t>(got) <= rx.size() &&
                    parse_message({rx.data(), static_cast<std::size_t>(got)}, msg) == WireError::ok &&
                    msg.header.type == reply_type && msg.header.seq == id && accept(msg.body)) {
                    ++stats_.replies;
                    return true;
                }
                ++stats_.ignored_replies;
            }
        }
    }
    ++stats_.no_reply;
    error = "no reply from gateway " + gateway() + " after " + std::to_string(options_.tries) +
            (options_.tries == 1 ? " try" : " tries");
    if (last_send_errno != 0)
        error += std::string(" (last send failed: ") + std::strerror(last_send_errno) + ")";
    return false;
}

RegResult NodeClient::reg_call(MsgType type, std::span<const uint8_t> body) {
    RegResult result;
    auto accept = [&result](std::span<const uint8_t> b) {
        if (b.size() != sizeof(RegReplyBody))
            return false;
        RegReplyBody r;
        std::memcpy(&r, b.data(), sizeof r);
        if (r.status > static_cast<uint8_t>(kLastRegStatus))
            return false;
        result.status = static_cast<RegStatus>(r.status);
        result.pid = ProcessId{load_be64(r.pid)};
        result.epoch = load_be32(r.epoch);
        result.heartbeat_ms = load_be32(r.heartbeat_ms);
        return true;
    };
    exchange(type, body, MsgType::reg_reply, accept, result.error);
    return result;
}

RegResult NodeClient::register_process(const DmaAddress& record) {
    RegisterBody body;
    encode(record, body.record);
    return reg_call(MsgType::reg, bytes_of(body));
}

RegResult NodeClient::heartbeat(ProcessId pid, uint32_t epoch) {
    ProcessRefBody body;
    store_be64(body.pid, pid.value);
    store_be32(body.epoch, epoch);
    return reg_call(MsgType::heartbeat, bytes_of(body));
}

RegResult NodeClient::deregister(ProcessId pid, uint32_t epoch) {
    ProcessRefBody body;
    store_be64(body.pid, pid.value);
    store_be32(body.epoch, epoch);
    return reg_call(MsgType::deregister, bytes_of(body));
}

ResolveResult NodeClient::resolve(ProcessId target) {
    ResolveResult result;
    auto accept = [&result](std::span<const uint8_t> b) {
        if (b.size() != sizeof(ResolveReplyBody))
            return false;
        ResolveReplyBody r;
        std::memcpy(&r, b.data(), sizeof r);
        if (r.status > static_cast<uint8_t>(ResolveStatus::busy) ||
            r.source > static_cast<uint8_t>(AnswerSource::negative_cache))
            return false;
        DmaAddress record;
        if (r.status == static_cast<uint8_t>(ResolveStatus::ok)) {
            const auto decoded = decode(r.record);
            if (!decoded)
                return false;  // "ok" with a record we cannot read is no answer
            record = *decoded;
        }
        result.status = static_cast<ResolveStatus>(r.status);
        result.source = static_cast<AnswerSource>(r.source);
        result.target = ProcessId{load_be64(r.target)};
        result.record = record;
        return true;
    };
    ResolveBody body;
    store_be64(body.target, target.value);
    exchange(MsgType::resolve, bytes_of(body), MsgType::resolve_reply, accept, result.error);
    return result;
}

}  // namespace fedgate
