// Management socket server.
#include "controlplane/mgmt_server.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "controlplane/log.hpp"

namespace fedgate {
namespace {

constexpr int kPollMs = 200;
constexpr int kClientTimeoutMs = 5000;

thread_local int t_passed_fd = -1;  // what the request being served on this thread came with

sockaddr_un address_of(const std::string& path) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (path.size() >= sizeof a.sun_path) throw MgmtError("socket path '" + path + "' is too long");
    std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
    return a;
}

bool someone_listens(const sockaddr_un& a) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const bool yes = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return yes;
}

// Waits for fd to be ready; false on timeout or error.
bool wait_fd(int fd, short events, int timeout_ms) {
    pollfd p{fd, events, 0};
    int rc;
    do rc = ::poll(&p, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    return rc > 0;
}

// recv() that also takes a descriptor sent with the bytes; more than one, or any after the first,
// are closed (the kernel closes those that do not fit the control buffer).
ssize_t recv_with_fd(int fd, char* buf, std::size_t size) {
    iovec iov{buf, size};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); n >= 0 && c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
            int passed;
            std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof passed);
            if (t_passed_fd < 0)
                t_passed_fd = passed;
            else
                ::close(passed);
        }
    }
    return n;
}

}  // namespace

int mgmt_take_passed_fd() { return std::exchange(t_passed_fd, -1); }

MgmtServer::MgmtServer(std::string path, Handler handler, tbb::task_arena& arena)
    : path_(std::move(path)), handler_(std::move(handler)), arena_(arena) {
    const sockaddr_un a = address_of(path_);
    struct stat st {};
    if (::lstat(path_.c_str(), &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) throw MgmtError("'" + path_ + "' exists and is not a socket; refusing to replace it");
        if (someone_listens(a)) throw MgmtError("socket '" + path_ + "' is in use: is another fedgated running?");
        ::unlink(path_.c_str());
    }
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw MgmtError(std::string("socket(): ") + std::strerror(errno));
    if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 64) != 0) {
        const int err = errno;
        ::close(listen_fd_);
        listen_fd_ = -1;
        throw MgmtError("cannot listen on '" + path_ + "': " + std::strerror(err));
    }
    ::chmod(path_.c_str(), 0660);
}

MgmtServer::~MgmtServer() { stop(); }

void MgmtServer::start() { thread_ = std::thread([this] { accept_loop(); }); }

void MgmtServer::stop() {
    stopping_.store(true);
    if (thread_.joinable()) thread_.join();
    arena_.execute([this] { tasks_.wait(); });
    if (listen_fd_ >= 0) {
        ::close(listen_fd_);
        listen_fd_ = -1;
        ::unlink(path_.c_str());
    }
}

void MgmtServer::accept_loop() {
    while (!stopping_.load()) {
        if (!wait_fd(listen_fd_, POLLIN, kPollMs)) continue;
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        arena_.execute([this, fd] { tasks_.run([this, fd] { serve(fd); }); });
    }
}

std::string MgmtServer::reply_for(const std::string& line, const Handler& handler) {
    nlohmann::ordered_json reply;
    try {
        const nlohmann::ordered_json req = nlohmann::ordered_json::parse(line);
        if (!req.is_object() || !req.contains("cmd") || !req["cmd"].is_string())
            throw MgmtError("request must be a JSON object with a string \"cmd\"");
        reply = {{"ok", true}, {"result", handler(req)}};
    } catch (const nlohmann::ordered_json::parse_error& e) {
        reply = {{"ok", false}, {"error", std::string("request is not JSON: ") + e.what()}};
    } catch (const std::exception& e) {
        reply = {{"ok", false}, {"error", e.what()}};
    }
    return reply.dump() + "\n";
}

void MgmtServer::serve(int fd) {
    // A handler that waits on TBB work may have this thread serve another connection meanwhile:
    // each serve() keeps its own passed descriptor.
    const int outer = std::exchange(t_passed_fd, -1);
    std::string line;
    char buf[4096];
    while (line.find('\n') == std::string::npos && line.size() < kMaxRequestBytes) {
        if (!wait_fd(fd, POLLIN, kClientTimeoutMs)) break;
        const ssize_t n = recv_with_fd(fd, buf, sizeof buf);
        if (n <= 0) break;
        line.append(buf, static_cast<std::size_t>(n));
    }
    std::string reply;
    if (const auto nl = line.find('\n'); nl != std::string::npos)
        reply = reply_for(line.substr(0, nl), handler_);
    else if (line.size() >= kMaxRequestBytes)
        reply = nlohmann::ordered_json{{"ok", false}, {"error", "request longer than 64 KiB"}}.dump() + "\n";
    else if (!line.empty())
        reply = reply_for(line, handler_);  // the client closed its side without a newline
    if (const int passed = std::exchange(t_passed_fd, outer); passed >= 0) ::close(passed);  // not taken
    for (std::size_t off = 0; off < reply.size();) {
        if (!wait_fd(fd, POLLOUT, kClientTimeoutMs)) break;
        const ssize_t n = ::send(fd, reply.data() + off, reply.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += static_cast<std::size_t>(n);
    }
    ::close(fd);
}

}  // namespace fedgate
