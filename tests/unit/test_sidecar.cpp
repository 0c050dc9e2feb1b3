// fedgate-node expose and forward (tools/sidecar.hpp) in-process on the fake gateway on 127.0.0.1:
// local clients -> forward (process 1.7.7) -> expose (process 1.8.50) -> a local TCP server. Bytes
// checked with SHA-256 each way, half-closes from either end, 20 connections open at once, a stop
// with connections open, and what each side says when the far end is missing.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <streambuf>
#include <string>
#include <thread>
#include <vector>

#include "client/src/tcp_backend.hpp"
#include "fedgate/endpoint.hpp"
#include "tests/support/fake_gateway.hpp"
#include "tools/fedgate_node_cli.hpp"
#include "tools/sidecar.hpp"

namespace fedgate {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;
using fedgate::testing::RelayGateway;

constexpr auto kWait = 20s;  // generous: ASan and a shared 2-core machine
constexpr uint32_t kLoopback = 0x7f000001;
const std::string kServerId = "1.8.50";
const std::string kForwarderId = "1.7.7";

// ---- bytes -----------------------------------------------------------------------------------

Bytes pattern(std::size_t size, uint64_t seed) {
    Bytes b(size);
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i < size; i += 8) {
        const uint64_t v = rng();
        std::memcpy(b.data() + i, &v, std::min<std::size_t>(8, size - i));
    }
    return b;
}

Bytes sha256(const uint8_t* data, std::size_t size) {
    Bytes d(32);
    unsigned len = 0;
    EXPECT_EQ(EVP_Digest(data, size, d.data(), &len, EVP_sha256(), nullptr), 1);
    return d;
}
Bytes sha256(const Bytes& b) { return sha256(b.data(), b.size()); }

bool send_all(int fd, const uint8_t* data, std::size_t size) {
    while (size > 0) {
        const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
        if (n <= 0) return false;
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return true;
}
bool send_all(int fd, const Bytes& b) { return send_all(fd, b.data(), b.size()); }

// Everything until EOF; `reset` tells whether the socket ended with an error (reset, timeout)
// instead.
Bytes recv_to_eof(int fd, bool* reset = nullptr) {
    Bytes out;
    uint8_t buf[1 << 16];
    for (;;) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n > 0) {
            out.insert(out.end(), buf, buf + n);
            continue;
        }
        if (reset) *reset = n < 0;
        return out;
    }
}

bool recv_exact(int fd, uint8_t* data, std::size_t size) {
    while (size > 0) {
        const ssize_t n = ::recv(fd, data, size, 0);
        if (n <= 0) return false;
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return true;
}

void set_recv_timeout(int fd) {  // a test that goes wrong fails instead of hanging
    const timeval tv{std::chrono::duration_cast<std::chrono::seconds>(kWait).count(), 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

// A blocking TCP connection to 127.0.0.1:port, with a receive timeout.
int connect_local(uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(kLoopback);
    a.sin_port = htons(port);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ADD_FAILURE() << "connect 127.0.0.1:" << port << ": " << std::strerror(errno);
        ::close(fd);
        return -1;
    }
    set_recv_timeout(fd);
    return fd;
}

uint16_t local_port(int fd) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    return ntohs(a.sin_port);
}

// ---- a local TCP server behind expose --------------------------------------------------------

// Listens on 127.0.0.1 (an ephemeral port) and runs `handle(fd)` on a thread per connection; the
// server closes the socket afterwards.
class LocalServer {
public:
    explicit LocalServer(std::function<void(int)> handle) : handle_(std::move(handle)) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(kLoopback);
        if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 64) != 0 ||
            ::pipe2(stop_, O_CLOEXEC) != 0)
            throw std::runtime_error("local server: cannot listen on 127.0.0.1");
        port_ = local_port(fd_);
        thread_ = std::thread([this] { serve(); });
    }
    ~LocalServer() {
        (void)!::write(stop_[1], "x", 1);
        thread_.join();
        for (std::thread& t : handlers_) t.join();
        for (int fd : {fd_, stop_[0], stop_[1]}) ::close(fd);
    }
    uint16_t port() const { return port_; }
    int accepted() const { return accepted_.load(); }

private:
    void serve() {
        for (;;) {
            pollfd p[2] = {{fd_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
            if (::poll(p, 2, -1) < 0 || p[1].revents) return;
            const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) continue;
            ++accepted_;
            set_recv_timeout(c);
            handlers_.emplace_back([this, c] {
                handle_(c);
                ::close(c);
            });
        }
    }

    std::function<void(int)> handle_;
    int fd_ = -1;
    int stop_[2] = {-1, -1};
    uint16_t port_ = 0;
    std::atomic<int> accepted_{0};
    std::thread thread_;
    std::vector<std::thread> handlers_;  // the serving thread's alone until it is joined
};

// Sends back what it receives; passes EOF on as a shutdown of its own sending side.
void echo(int fd) {
    std::vector<uint8_t> buf(1 << 16);
    for (;;) {
        const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
        if (n <= 0) break;
        if (!send_all(fd, buf.data(), static_cast<std::size_t>(n))) return;
    }
    ::shutdown(fd, SHUT_WR);
}

// ---- fedgate-node in-process -----------------------------------------------------------------

// What fedgate-node prints, from any of its threads; a test waits for the line it expects.
class Captured : public std::streambuf {
public:
    std::string text() {
        std::lock_guard lock(mu_);
        return text_;
    }
    // The first whole line that matches `re`, waiting up to kWait for it.
    std::optional<std::string> wait_line(const std::regex& re) {
        std::unique_lock lock(mu_);
        std::optional<std::string> found;
        changed_.wait_for(lock, kWait, [&] {
            std::size_t start = 0;
            for (std::size_t end; (end = text_.find('\n', start)) != std::string::npos; start = end + 1) {
                std::string line = text_.substr(start, end - start);
                if (std::regex_match(line, re)) {
                    found = std::move(line);
                    return true;
                }
            }
            return false;
        });
        return found;
    }
    std::size_t count_lines(const std::regex& re) {
        std::lock_guard lock(mu_);
        std::size_t n = 0, start = 0;
        for (std::size_t end; (end = text_.find('\n', start)) != std::string::npos; start = end + 1)
            n += std::regex_match(text_.substr(start, end - start), re);
        return n;
    }
    bool wait_count(const std::regex& re, std::size_t n) {
        const auto until = std::chrono::steady_clock::now() + kWait;
        std::unique_lock lock(mu_);
        while (true) {
            lock.unlock();
            const bool enough = count_lines(re) >= n;
            lock.lock();
            if (enough) return true;
            if (changed_.wait_until(lock, until) == std::cv_status::timeout) return false;
        }
    }

protected:
    int_type overflow(int_type c) override {
        if (c != traits_type::eof()) {
            std::lock_guard lock(mu_);
            text_.push_back(static_cast<char>(c));
            changed_.notify_all();
        }
        return c;
    }
    std::streamsize xsputn(const char* s, std::streamsize n) override {
        std::lock_guard lock(mu_);
        text_.append(s, static_cast<std::size_t>(n));
        changed_.notify_all();
        return n;
    }

private:
    std::mutex mu_;
    std::condition_variable changed_;
    std::string text_;
};

// One `fedgate-node ARGS` on a thread of its own, stopped through its stop pipe (what SIGTERM does).
class NodeRun {
public:
    explicit NodeRun(std::vector<std::string> args) : args_(std::move(args)) {
        if (::pipe2(stop_, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
        args_.insert(args_.begin(), "fedgate-node");
        status_ = std::async(std::launch::async, [this] {
            std::vector<char*> argv;
            for (auto& a : args_) argv.push_back(a.data());
            argv.push_back(nullptr);
            std::ostream out(&out_), err(&err_);
            return run_fedgate_node(static_cast<int>(args_.size()), argv.data(), out, err, stop_[0]);
        });
    }
    ~NodeRun() {
        stop();
        ::close(stop_[0]);
        ::close(stop_[1]);
    }
    // Stops it and returns its exit status; -1 if it did not end within kWait.
    int stop() {
        if (!exit_) {
            (void)!::write(stop_[1], "x", 1);
            if (status_.wait_for(kWait) != std::future_status::ready) {
                ADD_FAILURE() << "fedgate-node did not stop; stderr:\n" << err_.text();
                status_.wait();  // nothing else is safe: it still uses this object
            }
            exit_ = status_.get();
        }
        return *exit_;
    }
    Captured out_, err_;

private:
    std::vector<std::string> args_;
    int stop_[2] = {-1, -1};
    std::future<int> status_;
    std::optional<int> exit_;
};

std::vector<std::string> node_args(const RelayGateway& gw, std::vector<std::string> command) {
    std::vector<std::string> a = {"--gateway", gw.address(), "--bind", "127.0.0.1"};
    a.insert(a.end(), command.begin(), command.end());
    return a;
}

const std::regex kForwarding("forwarding 127\\.0\\.0\\.1:([0-9]+) to [0-9.]+");

// The forward sidecar's port, read from its readiness line; 0 if it never became ready.
uint16_t forward_port(NodeRun& forward) {
    const auto line = forward.out_.wait_line(kForwarding);
    if (!line) {
        ADD_FAILURE() << "forward never said it was ready; stderr:\n" << forward.err_.text();
        return 0;
    }
    std::smatch m;
    std::regex_match(*line, m, kForwarding);
    return static_cast<uint16_t>(std::stoi(m[1]));
}

// client -> forward (1.7.7) -> the fake gateway's handshake -> expose (1.8.50) -> `server`.
struct Chain {
    explicit Chain(uint16_t server_port) {
        expose = std::make_unique<NodeRun>(node_args(gw, {"expose", "--pid", kServerId, "--to",
                                                          "127.0.0.1:" + std::to_string(server_port), "--transport",
                                                          "tcp"}));
        const std::string ready = "exposing " + kServerId + " to 127.0.0.1:" + std::to_string(server_port);
        if (!expose->out_.wait_line(std::regex(ready))) {
            ADD_FAILURE() << "expose never said '" << ready << "'; stderr:\n" << expose->err_.text();
            return;
        }
        forward = std::make_unique<NodeRun>(node_args(
            gw, {"forward", "--listen", "127.0.0.1:0", "--to", kServerId, "--pid", kForwarderId, "--transport", "tcp"}));
        port = forward_port(*forward);
    }
    RelayGateway gw;
    std::unique_ptr<NodeRun> expose, forward;
    uint16_t port = 0;
};

// "conn 0x… A <-> B tcp: N bytes A -> B, M bytes B -> A, S s", A and B regex parts.
std::regex conn_line(const std::string& a, const std::string& b, uint64_t a_to_b, uint64_t b_to_a) {
    return std::regex("conn (0x[0-9a-f]{16}) " + a + " <-> " + b + " tcp: " + std::to_string(a_to_b) + " bytes " + a +
                      " -> " + b + ", " + std::to_string(b_to_a) + " bytes " + b + " -> " + a + ", [0-9]+\\.[0-9]{3} s");
}
const std::string kAnyClient = "127\\.0\\.0\\.1:[0-9]+";
std::string server_at(uint16_t port) { return "127\\.0\\.0\\.1:" + std::to_string(port); }
const std::string kForwarderRe = "1\\.7\\.7", kServerRe = "1\\.8\\.50";

std::string conn_id_of(const std::string& line) { return line.substr(5, 18); }

// ---- bytes through both sidecars -------------------------------------------------------------

TEST(Sidecar, BytesCrossBothWaysAtOnceWithMatchingDigestsAndEachSideCountsThem) {
    LocalServer server(echo);
    Chain chain(server.port());
    ASSERT_NE(chain.port, 0);
    const int fd = connect_local(chain.port);
    ASSERT_GE(fd, 0);
    const Bytes sent = pattern(8 << 20, 1);
    // Both ways at once: the echo sends back while more is still on its way in.
    std::thread writer([&] {
        EXPECT_TRUE(send_all(fd, sent));
        ::shutdown(fd, SHUT_WR);
    });
    bool reset = false;
    const Bytes got = recv_to_eof(fd, &reset);
    writer.join();
    ::close(fd);
    EXPECT_FALSE(reset);
    ASSERT_EQ(got.size(), sent.size());
    EXPECT_EQ(sha256(got), sha256(sent));

    const auto fwd = chain.forward->out_.wait_line(conn_line(kAnyClient, kServerRe, sent.size(), sent.size()));
    const auto exp =
        chain.expose->out_.wait_line(conn_line(kForwarderRe, server_at(server.port()), sent.size(), sent.size()));
    ASSERT_TRUE(fwd) << chain.forward->out_.text() << chain.forward->err_.text();
    ASSERT_TRUE(exp) << chain.expose->out_.text() << chain.expose->err_.text();
    EXPECT_EQ(conn_id_of(*fwd), conn_id_of(*exp)) << "one fedgate connection, seen from both ends";
    EXPECT_EQ(chain.forward->stop(), 0);
    EXPECT_EQ(chain.expose->stop(), 0);
    EXPECT_NE(chain.forward->err_.text().find("forward 127.0.0.1:" + std::to_string(chain.port) + " to 1.8.50: "
                                              "1 connection, 0 failed\n"),
              std::string::npos)
        << chain.forward->err_.text();
    EXPECT_NE(chain.expose->err_.text().find("expose 1.8.50: 1 connection, 0 failed\n"), std::string::npos)
        << chain.expose->err_.text();
}

// The client shuts down its sending side first; the server answers only once it has seen that EOF,
// and the client, half-closed, still gets the whole answer.
TEST(Sidecar, AClientsHalfCloseReachesTheServerAndTheClientStillGetsTheRest) {
    constexpr std::size_t kRequest = 4 << 20, kAnswer = 3 << 20;
    const Bytes answer = pattern(kAnswer, 2);
    LocalServer server([&](int fd) {
        EVP_MD_CTX* ctx = EVP_MD_CTX_new();
        EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
        uint8_t buf[1 << 16];
        ssize_t n;
        while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) EVP_DigestUpdate(ctx, buf, static_cast<std::size_t>(n));
        if (n < 0) return EVP_MD_CTX_free(ctx);  // no EOF: the client sees no answer
        Bytes digest(32);
        unsigned len = 0;
        EVP_DigestFinal_ex(ctx, digest.data(), &len);
        EVP_MD_CTX_free(ctx);
        send_all(fd, digest);
        send_all(fd, answer);
    });
    Chain chain(server.port());
    ASSERT_NE(chain.port, 0);
    const int fd = connect_local(chain.port);
    ASSERT_GE(fd, 0);
    const Bytes request = pattern(kRequest, 1);
    ASSERT_TRUE(send_all(fd, request));
    ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
    bool reset = false;
    const Bytes got = recv_to_eof(fd, &reset);
    ::close(fd);
    EXPECT_FALSE(reset);
    ASSERT_EQ(got.size(), 32 + kAnswer);
    EXPECT_EQ(Bytes(got.begin(), got.begin() + 32), sha256(request)) << "the server's digest of the request";
    EXPECT_EQ(sha256(got.data() + 32, kAnswer), sha256(answer));
    EXPECT_TRUE(chain.forward->out_.wait_line(conn_line(kAnyClient, kServerRe, kRequest, 32 + kAnswer)))
        << chain.forward->out_.text();
    EXPECT_TRUE(chain.expose->out_.wait_line(conn_line(kForwarderRe, server_at(server.port()), kRequest, 32 + kAnswer)))
        << chain.expose->out_.text();
}

// The other way round: the server says its piece and shuts down its sending side; the client sees
// EOF, and only then sends its own data, which still reaches the server.
TEST(Sidecar, AServersHalfCloseReachesTheClientWhichCanStillSend) {
    const std::string greeting = "hello from the server; say what you will";
    const Bytes request = pattern(1 << 20, 3);
    std::promise<Bytes> server_got;
    LocalServer server([&](int fd) {
        send_all(fd, reinterpret_cast<const uint8_t*>(greeting.data()), greeting.size());
        ::shutdown(fd, SHUT_WR);
        bool reset = false;
        Bytes got = recv_to_eof(fd, &reset);
        if (reset) got.clear();
        server_got.set_value(std::move(got));
    });
    Chain chain(server.port());
    ASSERT_NE(chain.port, 0);
    const int fd = connect_local(chain.port);
    ASSERT_GE(fd, 0);
    bool reset = false;
    const Bytes first = recv_to_eof(fd, &reset);
    EXPECT_FALSE(reset);
    EXPECT_EQ(std::string(first.begin(), first.end()), greeting);
    ASSERT_TRUE(send_all(fd, request)) << "the client's side is still open after the server's EOF";
    ::shutdown(fd, SHUT_WR);
    auto f = server_got.get_future();
    ASSERT_EQ(f.wait_for(kWait), std::future_status::ready);
    const Bytes got = f.get();
    EXPECT_EQ(got.size(), request.size());
    EXPECT_EQ(sha256(got), sha256(request));
    ::close(fd);
    EXPECT_TRUE(chain.expose->out_.wait_line(
        conn_line(kForwarderRe, server_at(server.port()), request.size(), greeting.size())))
        << chain.expose->out_.text();
}

// 20 clients hold their connections open at once (each has had an answer before any goes on), then
// each moves 1 MiB through the echo; a sidecar serving one connection at a time would never let the
// second answer through.
TEST(Sidecar, TwentyConnectionsAtOnceEachGetTheirOwnBytesBack) {
    constexpr int kClients = 20;
    LocalServer server(echo);
    Chain chain(server.port());
    ASSERT_NE(chain.port, 0);
    std::mutex mu;
    std::condition_variable all_open;
    int open = 0;
    std::vector<std::string> failures(kClients);
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i)
        clients.emplace_back([&, i] {
            const int fd = connect_local(chain.port);
            if (fd < 0) return void(failures[i] = "no connection");
            uint8_t ping = static_cast<uint8_t>(i), pong = 0;
            if (!send_all(fd, &ping, 1) || !recv_exact(fd, &pong, 1) || pong != ping) failures[i] = "no first answer";
            {
                std::unique_lock lock(mu);
                ++open;
                all_open.notify_all();
                if (!all_open.wait_for(lock, kWait, [&] { return open == kClients; }))
                    failures[i] = "the others never got their first answer";
            }
            const Bytes sent = pattern(1 << 20, 100 + i);
            std::thread writer([&] {
                send_all(fd, sent);
                ::shutdown(fd, SHUT_WR);
            });
            const Bytes got = recv_to_eof(fd);
            writer.join();
            ::close(fd);
            if (got.size() != sent.size() || sha256(got) != sha256(sent))  // the ping's answer was read above
                failures[i] += " echo differs (" + std::to_string(got.size()) + " bytes)";
        });
    for (std::thread& t : clients) t.join();
    for (int i = 0; i < kClients; ++i) EXPECT_EQ(failures[i], "") << "client " << i;
    EXPECT_EQ(server.accepted(), kClients);
    const uint64_t each = (1 << 20) + 1;
    EXPECT_TRUE(chain.forward->out_.wait_count(conn_line(kAnyClient, kServerRe, each, each), kClients))
        << chain.forward->out_.text();
    EXPECT_TRUE(chain.expose->out_.wait_count(conn_line(kForwarderRe, server_at(server.port()), each, each), kClients))
        << chain.expose->out_.text();
    EXPECT_EQ(chain.forward->stop(), 0);
    EXPECT_NE(chain.forward->err_.text().find(": 20 connections, 0 failed\n"), std::string::npos)
        << chain.forward->err_.text();
}

// SIGTERM (the stop pipe) with a connection open: both sidecars close it, deregister and exit 0.
TEST(Sidecar, AStopClosesTheOpenConnectionsDeregistersAndExitsZero) {
    LocalServer server(echo);
    Chain chain(server.port());
    ASSERT_NE(chain.port, 0);
    const int fd = connect_local(chain.port);
    ASSERT_GE(fd, 0);
    uint8_t ping = 7, pong = 0;
    ASSERT_TRUE(send_all(fd, &ping, 1));
    ASSERT_TRUE(recv_exact(fd, &pong, 1));
    EXPECT_TRUE(chain.gw.registered(*parse_process_id(kServerId)));
    EXPECT_EQ(chain.expose->stop(), 0);
    EXPECT_EQ(chain.forward->stop(), 0);
    const Bytes rest = recv_to_eof(fd);  // EOF or a reset, but never a hang
    EXPECT_TRUE(rest.empty());
    ::close(fd);
    EXPECT_FALSE(chain.gw.registered(*parse_process_id(kServerId)));
    EXPECT_FALSE(chain.gw.registered(*parse_process_id(kForwarderId)));
    EXPECT_NE(chain.expose->err_.text().find("expose 1.8.50: 1 connection, 0 failed\n"), std::string::npos)
        << chain.expose->err_.text();
    EXPECT_TRUE(chain.expose->out_.wait_line(conn_line(kForwarderRe, server_at(server.port()), 1, 1)))
        << chain.expose->out_.text();
}

// ---- the far end missing ---------------------------------------------------------------------

TEST(Sidecar, AForwardToAnUnregisteredIdClosesTheLocalSocketAndSaysStageResolve) {
    RelayGateway gw;
    NodeRun forward(node_args(gw, {"forward", "--listen", "127.0.0.1:0", "--to", "1.9.99", "--pid", kForwarderId,
                                   "--transport", "tcp"}));
    const uint16_t port = forward_port(forward);
    ASSERT_NE(port, 0);
    const int fd = connect_local(port);
    ASSERT_GE(fd, 0);
    const std::string client = "127.0.0.1:" + std::to_string(local_port(fd));
    uint8_t b;
    const ssize_t n = ::recv(fd, &b, 1, 0);
    const int e = errno;
    EXPECT_TRUE(n == 0 || (n < 0 && e == ECONNRESET)) << "the local socket is closed, not left hanging: " << n << " "
                                                      << std::strerror(e);
    ::close(fd);
    EXPECT_TRUE(forward.err_.wait_line(std::regex("fedgate-node: forward: connect 1\\.9\\.99: stage resolve: "
                                                  "not_found; closed the local connection from " +
                                                  client)))
        << forward.err_.text();
    EXPECT_EQ(forward.stop(), 0);
    EXPECT_NE(forward.err_.text().find("to 1.9.99: 0 connections, 1 failed\n"), std::string::npos)
        << forward.err_.text();
    EXPECT_EQ(forward.out_.count_lines(std::regex("conn .*")), 0u);
}

TEST(Sidecar, AnExposeWhoseLocalTargetRefusesClosesTheFedgateConnectionAndSaysSo) {
    // A port bound but not listening: connecting to it is refused, and nothing else can take it.
    const int held = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(kLoopback);
    ASSERT_EQ(::bind(held, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const uint16_t closed_port = local_port(held);

    RelayGateway gw;
    NodeRun expose(node_args(gw, {"expose", "--pid", kServerId, "--to", "127.0.0.1:" + std::to_string(closed_port),
                                  "--transport", "tcp"}));
    ASSERT_TRUE(expose.out_.wait_line(std::regex("exposing 1\\.8\\.50 to 127\\.0\\.0\\.1:" + std::to_string(closed_port))))
        << expose.err_.text();
    EndpointOptions o;
    o.gateway_ipv4 = kLoopback;
    o.gateway_port = gw.port();
    o.pid = *parse_process_id("1.7.9");
    o.transport = TransportChoice::tcp;
    o.bind_ipv4 = kLoopback;
    Endpoint ep(o);
    std::unique_ptr<Connection> c = ep.connect(*parse_process_id(kServerId));
    ASSERT_TRUE(c);
    uint8_t buf[16];
    std::size_t n = 1;
    try {
        n = c->recv_some(buf);
    } catch (const ConnectionError&) {
        n = 0;  // a reset: closed as well
    }
    EXPECT_EQ(n, 0u) << "the fedgate connection is closed";
    EXPECT_TRUE(expose.err_.wait_line(std::regex("fedgate-node: expose: conn 0x[0-9a-f]{16} from 1\\.7\\.9: cannot "
                                                 "connect to TCP 127\\.0\\.0\\.1:" +
                                                 std::to_string(closed_port) +
                                                 ": Connection refused; closed the connection from 1\\.7\\.9")))
        << expose.err_.text();
    EXPECT_EQ(expose.stop(), 0);
    EXPECT_NE(expose.err_.text().find("expose 1.8.50: 0 connections, 1 failed\n"), std::string::npos)
        << expose.err_.text();
    ep.stop();
    ::close(held);
}

// ---- the pump alone --------------------------------------------------------------------------

// Both ends of one TCP connection on 127.0.0.1.
std::pair<int, int> tcp_pair() {
    const int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(kLoopback);
    socklen_t len = sizeof a;
    if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 1) != 0 ||
        ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        throw std::runtime_error("tcp_pair: cannot listen");
    const int c = connect_local(ntohs(a.sin_port));
    const int s = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
    ::close(l);
    set_recv_timeout(s);
    return {c, s};
}

// A Connection with no socket to show, as an RDMA one: the pump must use its calls.
class SocketlessConnection : public TcpConnection {
public:
    using TcpConnection::TcpConnection;
    int native_handle() const override { return -1; }
};

TEST(SidecarPump, AConnectionWithoutASocketGoesThroughItsOwnCallsAndPassesHalfClosesOn) {
    auto [fedgate_far, fedgate_near] = tcp_pair();  // the far end plays the remote process
    auto [local_far, local_near] = tcp_pair();      // the far end plays the local program
    SocketlessConnection conn(fedgate_near, 1, ProcessId::make(1, 8, 50), ProcessId::make(1, 7, 7));
    std::future<sidecar::PumpResult> r = std::async(std::launch::async, [&] { return sidecar::pump(conn, local_near); });
    const Bytes in = pattern(3 << 20, 5), out = pattern(2 << 20, 6);
    std::thread remote([&] {
        EXPECT_TRUE(send_all(fedgate_far, in));
        ::shutdown(fedgate_far, SHUT_WR);
    });
    std::thread program([&] {
        EXPECT_TRUE(send_all(local_far, out));
        ::shutdown(local_far, SHUT_WR);
    });
    bool reset = false;
    const Bytes program_got = recv_to_eof(local_far, &reset);
    EXPECT_FALSE(reset);
    const Bytes remote_got = recv_to_eof(fedgate_far, &reset);
    EXPECT_FALSE(reset);
    remote.join();
    program.join();
    ASSERT_EQ(r.wait_for(kWait), std::future_status::ready);
    const sidecar::PumpResult result = r.get();
    EXPECT_EQ(result.error, "");
    EXPECT_EQ(result.to_local, in.size());
    EXPECT_EQ(result.from_local, out.size());
    EXPECT_EQ(sha256(program_got), sha256(in));
    EXPECT_EQ(sha256(remote_got), sha256(out));
    for (int fd : {fedgate_far, local_far, local_near}) ::close(fd);
}

// The local program resets its connection: the pump ends both directions at once (the remote side
// sees its connection end) and says why; nothing dies of SIGPIPE.
TEST(SidecarPump, AResetOnOneSideEndsBothDirectionsAndSaysWhy) {
    sidecar::ignore_sigpipe();
    auto [fedgate_far, fedgate_near] = tcp_pair();
    auto [local_far, local_near] = tcp_pair();
    TcpConnection conn(fedgate_near, 1, ProcessId::make(1, 8, 50), ProcessId::make(1, 7, 7));
    std::future<sidecar::PumpResult> r = std::async(std::launch::async, [&] { return sidecar::pump(conn, local_near); });
    const Bytes hello = pattern(1000, 7);
    ASSERT_TRUE(send_all(local_far, hello));
    Bytes got(hello.size());
    ASSERT_TRUE(recv_exact(fedgate_far, got.data(), got.size()));
    EXPECT_EQ(got, hello);
    const linger hard{1, 0};  // close with RST
    ::setsockopt(local_far, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
    ::close(local_far);
    bool reset = false;
    EXPECT_TRUE(recv_to_eof(fedgate_far, &reset).empty()) << "the remote side's connection ends too";
    ASSERT_EQ(r.wait_for(kWait), std::future_status::ready);
    const sidecar::PumpResult result = r.get();
    EXPECT_EQ(result.from_local, hello.size());
    EXPECT_TRUE(result.error.starts_with("receiving from the local socket: ") ||
                result.error.starts_with("sending to the local socket: "))
        << result.error;
    EXPECT_NE(result.error.find("reset"), std::string::npos) << result.error;
    for (int fd : {fedgate_far, local_near}) ::close(fd);
}

// ---- the command line ------------------------------------------------------------------------

struct CliResult {
    int status;
    std::string out, err;
};

CliResult node_cli(std::vector<std::string> args) {
    args.insert(args.begin(), "fedgate-node");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::ostringstream out, err;
    const int status = run_fedgate_node(static_cast<int>(args.size()), argv.data(), out, err);
    return {status, out.str(), err.str()};
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

TEST(SidecarCli, BadAddressesAreUsageErrorsNamingTheInput) {
    ::unsetenv("FEDGATE_GATEWAY");
    const std::string to_rule = "expose: --to must be HOST:PORT with HOST an IPv4 address or localhost and PORT "
                                "1..65535, such as 127.0.0.1:50051, got ";
    const std::string listen_rule = "forward: --listen must be HOST:PORT with HOST an IPv4 address or localhost and "
                                    "PORT 0..65535, such as 127.0.0.1:6000, got ";
    for (const std::string bad : {"127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:", "example.com:80",
                                  "127.0.0.1:80x", "127.0.0.1:+80", "300.1.2.3:80", ":80"}) {
        const CliResult r = node_cli({"--gateway", "127.0.0.1:1", "expose", "--pid", "1.8.50", "--to", bad});
        EXPECT_EQ(r.status, 2) << bad;
        EXPECT_EQ(first_line(r.err), "fedgate-node: " + to_rule + "'" + bad + "'");
        EXPECT_NE(r.err.find("usage: fedgate-node"), std::string::npos);
    }
    for (const std::string bad : {"6000", "127.0.0.1:65536", "localhost:-1", "127.0.0.1:6000:1", "198.18.0:6000"}) {
        const CliResult r =
            node_cli({"--gateway", "127.0.0.1:1", "forward", "--listen", bad, "--to", "2.7.50", "--pid", "1.7.7"});
        EXPECT_EQ(r.status, 2) << bad;
        EXPECT_EQ(first_line(r.err), "fedgate-node: " + listen_rule + "'" + bad + "'");
    }
    CliResult r = node_cli({"--gateway", "127.0.0.1:1", "forward", "--listen", "127.0.0.1:6000", "--to", "2.x", "--pid",
                            "1.7.7"});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: forward: --to must be a process ID")) << r.err;
    EXPECT_TRUE(first_line(r.err).ends_with("got '2.x'")) << r.err;
    r = node_cli({"--gateway", "127.0.0.1:1", "forward", "--listen", "127.0.0.1:6000", "--to", "2.7.50"});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: forward: missing --pid")) << r.err;
    r = node_cli({"--gateway", "127.0.0.1:1", "expose", "--to", "127.0.0.1:50051"});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: expose: missing --pid")) << r.err;
    r = node_cli({"--gateway", "127.0.0.1:1", "expose", "--pid", "1.8.50", "--to", "127.0.0.1:50051", "--transport",
                  "roce_v2"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err), "fedgate-node: expose: --transport must be auto, rdma or tcp, got 'roce_v2'");
}

TEST(SidecarCli, LocalAddressesParseIpv4AndLocalhost) {
    using sidecar::LocalAddress;
    EXPECT_EQ(sidecar::parse_local_address("127.0.0.1:50051", 1), (LocalAddress{kLoopback, 50051}));
    EXPECT_EQ(sidecar::parse_local_address("localhost:6000", 1), (LocalAddress{kLoopback, 6000}));
    EXPECT_EQ(sidecar::parse_local_address("0.0.0.0:0", 0), (LocalAddress{0, 0}));
    EXPECT_EQ(sidecar::parse_local_address("198.18.2.10:65535", 1), (LocalAddress{0xc612020a, 65535}));
    EXPECT_FALSE(sidecar::parse_local_address("0.0.0.0:0", 1));
    EXPECT_EQ(sidecar::address_text({0xc612020a, 80}), "198.18.2.10:80");
}

TEST(SidecarCli, HelpTeachesExposeAndForwardWithExamples) {
    const CliResult all = node_cli({"help"});
    EXPECT_NE(all.out.find("\n  expose "), std::string::npos) << all.out;
    EXPECT_NE(all.out.find("\n  forward "), std::string::npos) << all.out;
    const CliResult e = node_cli({"help", "expose"});
    EXPECT_EQ(e.status, 0);
    EXPECT_NE(first_line(e.out).find("expose --pid ID --to HOST:PORT"), std::string::npos) << e.out;
    EXPECT_NE(e.out.find("'exposing ID to HOST:PORT'"), std::string::npos) << e.out;
    EXPECT_NE(e.out.find("half-close"), std::string::npos) << e.out;
    EXPECT_NE(e.out.find("expose --pid 2.7.50 --to 127.0.0.1:50051\n"), std::string::npos) << e.out;
    const CliResult f = node_cli({"forward", "--help"});
    EXPECT_EQ(f.status, 0);
    EXPECT_NE(first_line(f.out).find("forward --listen HOST:PORT --to ID --pid ID"), std::string::npos) << f.out;
    EXPECT_NE(f.out.find("'forwarding HOST:PORT to ID'"), std::string::npos) << f.out;
    EXPECT_NE(f.out.find("forward --listen 127.0.0.1:6000 --to 2.7.50 --pid 1.3.7\n"), std::string::npos) << f.out;
}

}  // namespace
}  // namespace fedgate
