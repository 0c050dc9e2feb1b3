// One request/reply exchange with fedgated over its Unix management socket (no DPDK here).
#include "tools/mgmt_client.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

namespace fedgate {
namespace {

using Clock = std::chrono::steady_clock;

// A reply is a few KB; anything near this is a confused peer, not a big status.
constexpr size_t kMaxReplyBytes = 16u << 20;

class Fd {
public:
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() {
        if (fd_ >= 0)
            ::close(fd_);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }

private:
    int fd_;
};

std::string errno_text(int err) { return std::strerror(err); }

[[noreturn]] void fail(MgmtCallError::Kind kind, const std::string& message) { throw MgmtCallError(kind, message); }

std::string seconds_text(std::chrono::milliseconds ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms.count()) / 1000.0);
    return buf;
}

// Waits until fd is ready for `events` or the deadline passes; false on timeout.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0)
            return false;
        pollfd p{fd, events, 0};
        int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 60'000)));
        if (n > 0)
            return true;
        if (n < 0 && errno != EINTR)
            return true;  // let the following read/write report the error
    }
}

// send() with `pass` attached to the first byte (SCM_RIGHTS): the descriptor travels once, with
// whatever part of the line this call sends.
ssize_t send_with_fd(int fd, const char* data, size_t size, int pass) {
    iovec iov{const_cast<char*>(data), size};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass, sizeof pass);
    return ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace

MgmtReply mgmt_call(const std::string& socket_path, const nlohmann::ordered_json& request,
                    std::chrono::milliseconds timeout, int pass_fd) {
    const auto deadline = Clock::now() + timeout;
    const std::string where = "fedgated at " + socket_path;

    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (socket_path.empty() || socket_path.size() >= sizeof addr.sun_path)
        fail(MgmtCallError::Kind::unreachable,
             "cannot reach " + where + ": " + errno_text(socket_path.empty() ? ENOENT : ENAMETOOLONG));
    std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());

    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0)
        fail(MgmtCallError::Kind::unreachable, "cannot reach " + where + ": " + errno_text(errno));

    // A Unix connect blocks only while the listen backlog is full; SO_SNDTIMEO bounds that wait.
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int rc;
    do {
        rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0)
        fail(MgmtCallError::Kind::unreachable, "cannot reach " + where + ": " + errno_text(errno));

    const std::string line = request.dump() + "\n";
    for (size_t sent = 0; sent < line.size();) {
        if (!wait_ready(fd.get(), POLLOUT, deadline))
            fail(MgmtCallError::Kind::timeout, where + " did not take the request within " + seconds_text(timeout));
        ssize_t n = sent == 0 && pass_fd >= 0 ? send_with_fd(fd.get(), line.data(), line.size(), pass_fd)
                                              : ::send(fd.get(), line.data() + sent, line.size() - sent,
                                                       MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            fail(MgmtCallError::Kind::protocol, "lost connection to " + where + ": " + errno_text(errno));
        }
        sent += static_cast<size_t>(n);
    }

    std::string reply;
    for (;;) {
        if (reply.find('\n') != std::string::npos)
            break;
        if (reply.size() > kMaxReplyBytes)
            fail(MgmtCallError::Kind::protocol, where + " sent a reply over " + std::to_string(kMaxReplyBytes) + " bytes");
        if (!wait_ready(fd.get(), POLLIN, deadline))
            fail(MgmtCallError::Kind::timeout, where + " did not reply within " + seconds_text(timeout));
        char buf[16384];
        ssize_t n = ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            fail(MgmtCallError::Kind::protocol, "lost connection to " + where + ": " + errno_text(errno));
        }
        if (n == 0)
            break;  // closed: accept a last line without its newline
        reply.append(buf, static_cast<size_t>(n));
    }
    reply = reply.substr(0, reply.find('\n'));
    if (reply.empty())
        fail(MgmtCallError::Kind::protocol, where + " closed the connection without replying");

    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(reply);
    } catch (const nlohmann::json::parse_error& e) {
        fail(MgmtCallError::Kind::protocol, where + " sent a reply that is not JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("ok") || !j["ok"].is_boolean())
        fail(MgmtCallError::Kind::protocol, where + " sent a reply without a boolean \"ok\"");

    MgmtReply out;
    out.ok = j["ok"].get<bool>();
    if (out.ok) {
        if (!j.contains("result"))
            fail(MgmtCallError::Kind::protocol, where + " replied ok without a \"result\"");
        out.result = std::move(j["result"]);
    } else {
        auto it = j.find("error");
        out.error = it != j.end() && it->is_string() ? it->get<std::string>() : "request refused (no reason given)";
    }
    return out;
}

}  // namespace fedgate
