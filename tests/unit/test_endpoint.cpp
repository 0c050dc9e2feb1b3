// Endpoints end to end on 127.0.0.1: two (or more) compute processes register with a fake gateway
// that answers registration and resolution and relays REQ/REP/RTU between their control sockets,
// dropping the first N of a kind when asked. Plus fedgate-node listen/connect on the same fake.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "dataplane/conn_wire.hpp"
#include "drivers/digest_stream.hpp"
#include "drivers/endpoint.hpp"
#include "drivers/verbs_provider.hpp"
#include "tests/support/fake_verbs.hpp"
#include "drivers/tcp_backend.hpp"
#include "tools/fedgate_node_cli.hpp"

namespace fedgate {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

constexpr uint32_t kLoopback = 0x7f000001;
constexpr auto kWaitLimit = 20s;  // generous: ASan and a shared 2-core machine
const ProcessId kA = ProcessId::make(1, 7, 42);
const ProcessId kB = ProcessId::make(1, 8, 43);

// ---- the fake gateway ------------------------------------------------------------------------

template <typename Body>
Bytes message(MsgType type, uint64_t seq, const Body& body) {
    Bytes out(sizeof(MsgHeader) + sizeof body);
    MsgHeader h;
    encode(Header{type, 0, static_cast<uint16_t>(sizeof body), seq, 0}, h);
    std::memcpy(out.data(), &h, sizeof h);
    std::memcpy(out.data() + sizeof h, &body, sizeof body);
    return out;
}

class RelayGateway {
public:
    RelayGateway() {
        fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(kLoopback);
        if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::pipe2(stop_, O_CLOEXEC) != 0)
            throw std::runtime_error("fake gateway: cannot bind on 127.0.0.1");
        socklen_t len = sizeof a;
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { serve(); });
    }
    ~RelayGateway() {
        (void)!::write(stop_[1], "x", 1);
        thread_.join();
        for (int fd : {fd_, stop_[0], stop_[1]}) ::close(fd);
    }

    uint16_t port() const { return port_; }
    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

    // Loss injection: the first n messages of a kind vanish.
    void drop_first(MsgType type, int n) {
        std::lock_guard lock(mu_);
        drop_[type] = n;
    }
    void forget(ProcessId pid) {
        std::lock_guard lock(mu_);
        procs_.erase(pid.value);
    }
    int seen(MsgType type) {
        std::lock_guard lock(mu_);
        return seen_[type];
    }
    int dropped(MsgType type) {
        std::lock_guard lock(mu_);
        return dropped_[type];
    }
    bool wait_seen(MsgType type, int n) {
        std::unique_lock lock(mu_);
        return changed_.wait_for(lock, kWaitLimit, [&] { return seen_[type] >= n; });
    }
    bool registered(ProcessId pid) {
        std::lock_guard lock(mu_);
        return procs_.count(pid.value) != 0;
    }

private:
    struct Proc {
        DmaAddress record;
        sockaddr_in control{};
    };

    void serve() {
        for (;;) {
            pollfd p[2] = {{fd_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
            if (::poll(p, 2, -1) < 0 || p[1].revents) return;
            Bytes d(2048);
            sockaddr_in from{};
            socklen_t len = sizeof from;
            const ssize_t n = ::recvfrom(fd_, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
            if (n <= 0) continue;
            d.resize(static_cast<size_t>(n));
            ParsedMsg m;
            if (parse_message(d, m) != WireError::ok) continue;
            std::lock_guard lock(mu_);
            ++seen_[m.header.type];
            handle(m, from);
            changed_.notify_all();
        }
    }

    void reply(const sockaddr_in& to, const Bytes& b) {
        ::sendto(fd_, b.data(), b.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
    }

    void reg_reply(const sockaddr_in& to, uint64_t seq, RegStatus s, ProcessId pid, uint32_t epoch) {
        RegReplyBody b{};
        b.status = static_cast<uint8_t>(s);
        store_be64(b.pid, pid.value);
        store_be32(b.epoch, epoch);
        store_be32(b.heartbeat_ms, 200);
        reply(to, message(MsgType::reg_reply, seq, b));
    }

    void handle(const ParsedMsg& m, const sockaddr_in& from) {
        switch (m.header.type) {
        case MsgType::reg: {
            RegisterBody b;
            std::memcpy(&b, m.body.data(), sizeof b);
            const DmaAddress rec = *decode(b.record);
            procs_[rec.pid.value] = Proc{rec, from};
            return reg_reply(from, m.header.seq, RegStatus::ok, rec.pid, rec.epoch);
        }
        case MsgType::heartbeat:
        case MsgType::deregister: {
            ProcessRefBody b;
            std::memcpy(&b, m.body.data(), sizeof b);
            const ProcessId pid{load_be64(b.pid)};
            const auto it = procs_.find(pid.value);
            if (it == procs_.end()) return reg_reply(from, m.header.seq, RegStatus::unknown, pid, 0);
            if (m.header.type == MsgType::deregister) procs_.erase(it);
            return reg_reply(from, m.header.seq, RegStatus::ok, pid, load_be32(b.epoch));
        }
        case MsgType::resolve: {
            ResolveBody b;
            std::memcpy(&b, m.body.data(), sizeof b);
            ResolveReplyBody r{};
            std::memcpy(r.target, b.target, sizeof r.target);
            const auto it = procs_.find(load_be64(b.target));
            r.status = static_cast<uint8_t>(it == procs_.end() ? ResolveStatus::not_found : ResolveStatus::ok);
            r.source = static_cast<uint8_t>(AnswerSource::local);
            if (it != procs_.end()) encode(it->second.record, r.record);
            return reply(from, message(MsgType::resolve_reply, m.header.seq, r));
        }
        case MsgType::conn_req:
        case MsgType::conn_rep:
        case MsgType::conn_rtu: return relay(m, from);
        default: return;
        }
    }

    // Straight from one process's control endpoint to the other's; nothing rewritten.
    void relay(const ParsedMsg& m, const sockaddr_in& from) {
        ConnBody b;
        std::memcpy(&b, m.body.data(), sizeof b);
        const auto p = decode(b);
        if (!p) return;
        if (drop_[m.header.type] > 0) {
            --drop_[m.header.type];
            ++dropped_[m.header.type];
            return;
        }
        const auto key = std::make_pair(p->initiator.value, p->conn_id);
        const Bytes out = message(m.header.type, 0, b);
        if (m.header.type == MsgType::conn_rep) {
            if (const auto it = initiators_.find(key); it != initiators_.end()) reply(it->second, out);
            return;
        }
        const auto target = procs_.find(p->target.value);
        if (target == procs_.end()) {
            ConnParams refusal{p->conn_id, p->initiator, p->target, ConnStatus::unknown_target};
            ConnBody rb;
            encode(refusal, rb);
            if (m.header.type == MsgType::conn_req) reply(from, message(MsgType::conn_rep, 0, rb));
            return;
        }
        if (m.header.type == MsgType::conn_req) initiators_[key] = from;
        reply(target->second.control, out);
    }

    int fd_ = -1;
    int stop_[2] = {-1, -1};
    uint16_t port_ = 0;
    std::mutex mu_;
    std::condition_variable changed_;
    std::map<uint64_t, Proc> procs_;
    std::map<std::pair<uint64_t, uint64_t>, sockaddr_in> initiators_;
    std::map<MsgType, int> drop_, dropped_, seen_;
    std::thread thread_;
};

// ---- a fake RDMA device ----------------------------------------------------------------------

// Pairs the two QPs of a connection: the first to connect makes a socketpair and leaves one end for
// the other, so "RDMA" data really flows, and every path either side used is recorded.
struct FakeFabric {
    std::mutex mu;
    std::map<std::pair<uint32_t, uint32_t>, int> waiting;  // (qpn, peer qpn) -> the end left for it
    std::vector<std::pair<RdmaQpParams, RdmaPath>> connects;  // (local, path) per connect
    std::atomic<uint32_t> next_qpn{0x100};

    int take(const RdmaQpParams& local, const RdmaPath& path) {
        std::lock_guard lock(mu);
        connects.emplace_back(local, path);
        if (const auto it = waiting.find({local.qpn, path.remote.qpn}); it != waiting.end()) {
            const int fd = it->second;
            waiting.erase(it);
            return fd;
        }
        int sv[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
        waiting[{path.remote.qpn, local.qpn}] = sv[1];
        return sv[0];
    }
    ~FakeFabric() {
        for (const auto& [k, fd] : waiting) ::close(fd);
    }
};

class FakeRdmaConnection : public TcpConnection {
public:
    using TcpConnection::TcpConnection;
    Transport transport() const override { return Transport::roce_v2; }
};

class FakeQp : public PreparedQp {
public:
    FakeQp(FakeFabric& f, RdmaQpParams local, std::optional<ConnStage> fail_at)
        : fabric_(f), local_(local), fail_at_(fail_at) {}
    RdmaQpParams local() const override { return local_; }
    std::unique_ptr<Connection> connect(const RdmaPath& path, uint64_t conn_id, ProcessId local_pid, ProcessId peer_pid,
                                        ConnStage& failed, std::string& error) override {
        if (fail_at_) {
            failed = *fail_at_;
            error = std::string("ibv_modify_qp(") + (*fail_at_ == ConnStage::rtr ? "RTR" : "RTS") +
                    "): Invalid argument (fake)";
            return nullptr;
        }
        const int fd = fabric_.take(local_, path);
        return std::make_unique<FakeRdmaConnection>(fd, conn_id, local_pid, peer_pid);
    }

private:
    FakeFabric& fabric_;
    RdmaQpParams local_;
    std::optional<ConnStage> fail_at_;
};

class FakeRdma : public RdmaProvider {
public:
    FakeRdma(FakeFabric& f, uint16_t mtu, std::optional<ConnStage> fail_at = std::nullopt)
        : fabric_(f), mtu_(mtu), fail_at_(fail_at) {}
    bool open(std::string&) override { return true; }
    std::unique_ptr<PreparedQp> prepare(std::string&) override {
        std::lock_guard lock(mu_);
        RdmaQpParams q;
        q.qpn = fabric_.next_qpn++;
        q.psn = random_psn(rng_);
        q.mtu = mtu_;
        q.rkey = q.qpn * 3;
        return std::make_unique<FakeQp>(fabric_, q, fail_at_);
    }

private:
    FakeFabric& fabric_;
    uint16_t mtu_;
    std::optional<ConnStage> fail_at_;
    std::mutex mu_;
    std::mt19937_64 rng_{std::random_device{}()};
};

// ---- helpers ---------------------------------------------------------------------------------

struct Logs {
    std::mutex mu;
    std::vector<std::string> lines;
    std::function<void(const std::string&)> sink() {
        return [this](const std::string& l) {
            std::lock_guard lock(mu);
            lines.push_back(l);
        };
    }
};

EndpointOptions options(const RelayGateway& gw, ProcessId pid, TransportChoice t = TransportChoice::tcp,
                        Logs* logs = nullptr) {
    EndpointOptions o;
    o.gateway_ipv4 = kLoopback;
    o.gateway_port = gw.port();
    o.pid = pid;
    o.bind_ipv4 = kLoopback;
    o.transport = t;
    o.try_timeout = 100ms;
    o.tries = 6;
    if (logs) o.log = logs->sink();
    return o;
}

// Sends `bytes` from `from` to `to` through the digest stream, receiving on a thread.
void expect_stream(Connection& from, Connection& to, uint64_t bytes) {
    auto received = std::async(std::launch::async, [&] { return receive_digest_stream(to); });
    const StreamResult sent = send_digest_stream(from, bytes, 7);
    const StreamResult got = received.get();
    EXPECT_TRUE(sent.ok()) << sent.error;
    EXPECT_TRUE(got.ok()) << got.error;
    EXPECT_EQ(sent.bytes, bytes);
    EXPECT_EQ(got.bytes, bytes);
    EXPECT_EQ(sent.local_digest, got.local_digest);
    EXPECT_EQ(sent.peer_digest, got.local_digest);
}

ConnectError connect_fails(Endpoint& e, ProcessId target) {
    ConnectError err;
    EXPECT_EQ(e.connect(target, err), nullptr);
    return err;
}

// ---- tcp -------------------------------------------------------------------------------------

TEST(EndpointTcp, ConnectsAndMoves8MiBWithBothDigestsAgreeing) {
    RelayGateway gw;
    Endpoint a(options(gw, kA));
    Endpoint b(options(gw, kB));
    ConnectError err;
    ASSERT_TRUE(b.listen(err));
    auto out = a.connect(kB, err);
    ASSERT_NE(out, nullptr) << conn_stage_name(err.stage) << ": " << err.message;
    auto in = b.accept(kWaitLimit);
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(out->transport(), Transport::tcp);
    EXPECT_EQ(in->transport(), Transport::tcp);
    EXPECT_EQ(out->conn_id(), in->conn_id());
    EXPECT_EQ(out->peer_pid(), kB);
    EXPECT_EQ(in->peer_pid(), kA);
    EXPECT_EQ(in->local_pid(), kB);
    expect_stream(*out, *in, 8u << 20);
    EXPECT_EQ(a.stats().connects_ok, 1u);
    EXPECT_EQ(b.stats().accepts, 1u);
    EXPECT_EQ(gw.seen(MsgType::conn_req), 1);
}

TEST(EndpointTcp, TheDigestStreamWorksInTheOtherDirectionToo) {
    RelayGateway gw;
    Endpoint a(options(gw, kA));
    Endpoint b(options(gw, kB));
    ConnectError err;
    ASSERT_TRUE(b.listen(err));
    auto out = a.connect(kB, err);
    ASSERT_NE(out, nullptr) << err.message;
    auto in = b.accept(kWaitLimit);
    ASSERT_NE(in, nullptr);
    expect_stream(*in, *out, (8u << 20) + 3);  // not a multiple of the generator's 8 bytes
}

TEST(EndpointTcp, RegistersItsTcpListenPortAndDeregistersOnStop) {
    RelayGateway gw;
    {
        Endpoint a(options(gw, kA));
        EXPECT_NE(a.tcp_port(), 0);
        EXPECT_NE(a.epoch(), 0u);
        EXPECT_TRUE(gw.registered(kA));
    }
    EXPECT_EQ(gw.seen(MsgType::deregister), 1);
    EXPECT_FALSE(gw.registered(kA));
}

TEST(EndpointTcp, TargetNotListeningFailsAtStageRefused) {
    RelayGateway gw;
    Endpoint a(options(gw, kA));
    Endpoint b(options(gw, kB));
    const ConnectError err = connect_fails(a, kB);
    EXPECT_EQ(err.stage, ConnStage::refused);
    EXPECT_EQ(err.message, "not_listening (1.8.43 accepts no connections)");
    EXPECT_EQ(a.stats().connects_failed[static_cast<size_t>(ConnStage::refused)], 1u);
    EXPECT_EQ(b.stats().reqs_refused, 1u);
}

TEST(EndpointTcp, UnknownTargetFailsAtStageResolve) {
    RelayGateway gw;
    Endpoint a(options(gw, kA));
    const ConnectError err = connect_fails(a, ProcessId::make(2, 7, 42));
    EXPECT_EQ(err.stage, ConnStage::resolve);
    EXPECT_EQ(err.message, "not_found");
    EXPECT_EQ(gw.seen(MsgType::conn_req), 0);
}

TEST(EndpointTcp, LostReqAndLostRepAreRetransmittedUnderTheSameConnId) {
    RelayGateway gw;
    Endpoint a(options(gw, kA));
    Endpoint b(options(gw, kB));
    ConnectError err;
    ASSERT_TRUE(b.listen(err));
    gw.drop_first(MsgType::conn_req, 1);
    gw.drop_first(MsgType::conn_rep, 1);
    auto out = a.connect(kB, err);
    ASSERT_NE(out, nullptr) << err.message;
    auto in = b.accept(kWaitLimit);
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(gw.dropped(MsgType::conn_req), 1);
    EXPECT_EQ(gw.dropped(MsgType::conn_rep), 1);
    EXPECT_EQ(a.stats().req_retransmits, 2u);
    EXPECT_EQ(b.stats().duplicate_reqs, 1u);  // the second REQ got the saved REP
    expect_stream(*out, *in, 1 << 16);
}

TEST(EndpointTcp, LostRtuStillEstablishesThroughThePreamble) {
    RelayGateway gw;
    Endpoint a(options(gw, kA));
    Endpoint b(options(gw, kB));
    ConnectError err;
    ASSERT_TRUE(b.listen(err));
    gw.drop_first(MsgType::conn_rtu, 1);
    auto out = a.connect(kB, err);
    ASSERT_NE(out, nullptr) << err.message;
    auto in = b.accept(kWaitLimit);
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(gw.dropped(MsgType::conn_rtu), 1);
    EXPECT_EQ(in->conn_id(), out->conn_id());
    expect_stream(*out, *in, 1 << 16);
}

TEST(EndpointTcp, HundredConcurrentConnectsAllComplete) {
    constexpr int kConns = 100;
    RelayGateway gw;
    Endpoint a(options(gw, kA));
    Endpoint b(options(gw, kB));
    ConnectError listen_err;
    ASSERT_TRUE(b.listen(listen_err));
    std::atomic<int> received_ok{0};
    std::thread acceptor([&] {
        std::vector<std::thread> readers;
        for (int i = 0; i < kConns; ++i) {
            auto in = b.accept(kWaitLimit);
            if (!in) break;
            readers.emplace_back([&received_ok, c = std::move(in)] {
                if (receive_digest_stream(*c).ok()) ++received_ok;
            });
        }
        for (auto& t : readers) t.join();
    });
    std::atomic<int> sent_ok{0};
    std::vector<std::string> failures(kConns);
    std::vector<std::thread> clients;
    for (int i = 0; i < kConns; ++i)
        clients.emplace_back([&, i] {
            ConnectError err;
            auto c = a.connect(kB, err);
            if (!c) {
                failures[i] = std::string(conn_stage_name(err.stage)) + ": " + err.message;
                return;
            }
            if (send_digest_stream(*c, 4096, static_cast<uint64_t>(i)).ok()) ++sent_ok;
        });
    for (auto& t : clients) t.join();
    acceptor.join();
    for (const auto& f : failures) EXPECT_EQ(f, "");
    EXPECT_EQ(sent_ok, kConns);
    EXPECT_EQ(received_ok, kConns);
    EXPECT_EQ(a.stats().connects_ok, static_cast<uint64_t>(kConns));
    EXPECT_EQ(b.stats().accepts, static_cast<uint64_t>(kConns));
}

TEST(EndpointTcp, AHeartbeatAnsweredUnknownRegistersAgain) {
    RelayGateway gw;
    Endpoint a(options(gw, kA));
    gw.forget(kA);
    ASSERT_TRUE(gw.wait_seen(MsgType::reg, 2));  // the fake asks for heartbeats every 200 ms
    EXPECT_TRUE(gw.registered(kA));
    EXPECT_GE(a.stats().reregistrations, 1u);
}

// ---- transport choice and the RDMA hook ------------------------------------------------------

TEST(EndpointTransport, RdmaWithoutADeviceFailsAtStageTransportWithoutFallingBack) {
    RelayGateway gw;
    Endpoint a(options(gw, kA, TransportChoice::rdma));
    EXPECT_EQ(a.tcp_port(), 0);
    EXPECT_FALSE(a.rdma_available());
    ConnectError err;
    EXPECT_FALSE(a.listen(err));
    EXPECT_EQ(err.stage, ConnStage::transport);
    EXPECT_EQ(err.message, "--transport rdma: no RDMA device: ibv_get_device_list found none");
    err = connect_fails(a, kB);
    EXPECT_EQ(err.stage, ConnStage::transport);
    EXPECT_EQ(err.message, "--transport rdma: no RDMA device: ibv_get_device_list found none");
    EXPECT_EQ(gw.seen(MsgType::resolve), 0);
}

TEST(EndpointTransport, AutomaticWithoutADeviceSaysSoOnceAndCountsTcpFallbacks) {
    RelayGateway gw;
    Logs logs;
    Endpoint a(options(gw, kA, TransportChoice::automatic, &logs));
    Endpoint b(options(gw, kB, TransportChoice::tcp));
    ASSERT_EQ(logs.lines.size(), 1u);
    EXPECT_EQ(logs.lines[0], "endpoint 1.7.42: no RDMA device: ibv_get_device_list found none; using tcp");
    ConnectError err;
    ASSERT_TRUE(b.listen(err));
    auto out = a.connect(kB, err);
    ASSERT_NE(out, nullptr) << err.message;
    EXPECT_EQ(out->transport(), Transport::tcp);
    EXPECT_EQ(a.stats().tcp_fallbacks, 1u);
    EXPECT_EQ(logs.lines.size(), 1u);
}

TEST(EndpointTransport, FakeRdmaConnectsWithNegotiatedMtuAndCrossedPsns) {
    RelayGateway gw;
    FakeFabric fabric;
    FakeRdma rdma_a(fabric, 4096), rdma_b(fabric, 1024);
    Endpoint a(options(gw, kA, TransportChoice::automatic), &rdma_a);
    Endpoint b(options(gw, kB, TransportChoice::rdma), &rdma_b);
    ASSERT_TRUE(a.rdma_available());
    ConnectError err;
    ASSERT_TRUE(b.listen(err));
    auto out = a.connect(kB, err);
    ASSERT_NE(out, nullptr) << conn_stage_name(err.stage) << ": " << err.message;
    auto in = b.accept(kWaitLimit);
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(out->transport(), Transport::roce_v2);
    EXPECT_EQ(in->transport(), Transport::roce_v2);
    expect_stream(*out, *in, 1 << 20);
    std::lock_guard lock(fabric.mu);
    ASSERT_EQ(fabric.connects.size(), 2u);  // the target's (on REQ), then the initiator's (on REP)
    const auto& [target_qp, target_path] = fabric.connects[0];
    const auto& [initiator_qp, initiator_path] = fabric.connects[1];
    EXPECT_EQ(target_path.mtu, 1024);
    EXPECT_EQ(initiator_path.mtu, 1024);
    EXPECT_EQ(initiator_path.rq_psn, target_qp.psn);
    EXPECT_EQ(target_path.rq_psn, initiator_qp.psn);
    EXPECT_EQ(initiator_path.sq_psn, initiator_qp.psn);
    EXPECT_EQ(initiator_path.remote.qpn, target_qp.qpn);
    EXPECT_EQ(target_path.remote.qpn, initiator_qp.qpn);
    EXPECT_EQ(a.stats().tcp_fallbacks, 0u);
}

TEST(EndpointTransport, FakeRdmaFailingAtRtrNamesStageRtr) {
    RelayGateway gw;
    FakeFabric fabric;
    FakeRdma broken(fabric, 1024, ConnStage::rtr), fine(fabric, 1024);
    Endpoint a(options(gw, kA, TransportChoice::rdma), &broken);
    Endpoint b(options(gw, kB, TransportChoice::rdma), &fine);
    ConnectError err;
    ASSERT_TRUE(b.listen(err));
    err = connect_fails(a, kB);
    EXPECT_EQ(err.stage, ConnStage::rtr);
    EXPECT_EQ(err.message, "ibv_modify_qp(RTR): Invalid argument (fake)");
    EXPECT_EQ(a.stats().connects_failed[static_cast<size_t>(ConnStage::rtr)], 1u);
    EXPECT_EQ(gw.seen(MsgType::conn_rtu), 0);  // no RTU for a QP that never came up
}

// The whole RDMA path in one process: two endpoints through the relaying gateway, the verbs backend
// (VerbsProvider) on FakeVerbs, which enforces the QP state machine and moves the data with RDMA
// WRITE and SEND between the two QPs.
TEST(EndpointTransport, VerbsBackendOnFakeVerbsConnectsByIdAndMovesData) {
    RelayGateway gw;
    fedgate::testing::FakeVerbs verbs({fedgate::testing::default_fake_device()});
    VerbsProvider rdma_a(verbs, RdmaOptions{}), rdma_b(verbs, RdmaOptions{});
    Endpoint a(options(gw, kA, TransportChoice::rdma), &rdma_a);
    Endpoint b(options(gw, kB, TransportChoice::rdma), &rdma_b);
    ASSERT_TRUE(a.rdma_available());
    ConnectError err;
    ASSERT_TRUE(b.listen(err));
    auto out = a.connect(kB, err);
    ASSERT_NE(out, nullptr) << conn_stage_name(err.stage) << ": " << err.message;
    auto in = b.accept(kWaitLimit);
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(out->transport(), Transport::roce_v2);
    EXPECT_EQ(in->transport(), Transport::roce_v2);
    expect_stream(*out, *in, 3u << 20);
    EXPECT_GT(verbs.sends_delivered(), 0u) << "the bytes went through the fake QPs, not a socket";
}

TEST(EndpointTransport, VerbsProviderWithoutADeviceSaysSo) {
    fedgate::testing::FakeVerbs none({});
    VerbsProvider rdma(none, RdmaOptions{});
    std::string error;
    EXPECT_FALSE(rdma.open(error));
    EXPECT_NE(error.find("no RDMA device"), std::string::npos) << error;
    RemoteQp r = remote_qp(RdmaPath{RdmaQpParams{0x11, 0x22, 1024, {}, 5, 6, 7}, 0x33, 0x44, 512});
    EXPECT_EQ(r.qpn, 0x11u);
    EXPECT_EQ(r.psn, 0x33u) << "RTR takes the peer's PSN";
    EXPECT_EQ(r.mtu, 512);
    EXPECT_EQ(r.rkey, 5u);
}

TEST(EndpointTransport, TcpOnlyTargetAndRdmaOnlyInitiatorFailAtStageTransport) {
    RelayGateway gw;
    FakeFabric fabric;
    FakeRdma rdma(fabric, 1024);
    Endpoint a(options(gw, kA, TransportChoice::rdma), &rdma);
    Endpoint b(options(gw, kB, TransportChoice::tcp));
    ConnectError err;
    ASSERT_TRUE(b.listen(err));
    err = connect_fails(a, kB);
    EXPECT_EQ(err.stage, ConnStage::transport);
    EXPECT_TRUE(err.message.starts_with("transport_mismatch")) << err.message;
}

// ---- fedgate-node listen / connect -----------------------------------------------------------

struct CliResult {
    int status;
    std::string out;
    std::string err;
};

CliResult node_cli(std::vector<std::string> args, int stop_fd = -1) {
    args.insert(args.begin(), "fedgate-node");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::ostringstream out, err;
    const int status = run_fedgate_node(static_cast<int>(args.size()), argv.data(), out, err, stop_fd);
    return {status, out.str(), err.str()};
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

class NodeCliArgs : public ::testing::Test {
protected:
    void SetUp() override { ::unsetenv("FEDGATE_GATEWAY"); }
};

TEST_F(NodeCliArgs, ListenNeedsAPid) {
    const CliResult r = node_cli({"--gateway", "127.0.0.1:1", "listen"});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: listen: missing --pid")) << r.err;
    EXPECT_NE(r.err.find("usage: fedgate-node"), std::string::npos);
}

TEST_F(NodeCliArgs, BadTransportCountAndPortNameTheOption) {
    CliResult r = node_cli({"--gateway", "127.0.0.1:1", "listen", "--pid", "1.7.42", "--transport", "roce_v2"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err), "fedgate-node: listen: --transport must be auto, rdma or tcp, got 'roce_v2'");
    r = node_cli({"--gateway", "127.0.0.1:1", "listen", "--pid", "1.7.42", "--count", "0"});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: listen: --count must be an integer 1..")) << r.err;
    r = node_cli({"--gateway", "127.0.0.1:1", "listen", "--pid", "1.7.42", "--tcp-port", "70000"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err), "fedgate-node: listen: --tcp-port must be an integer 0..65535, got '70000'");
}

TEST_F(NodeCliArgs, ConnectNeedsToAndBytesWithinRange) {
    CliResult r = node_cli({"--gateway", "127.0.0.1:1", "connect", "--pid", "1.7.42", "--bytes", "10"});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: connect: missing --to")) << r.err;
    r = node_cli({"--gateway", "127.0.0.1:1", "connect", "--pid", "1.7.42", "--to", "2.x", "--bytes", "10"});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: connect: --to must be a process ID")) << r.err;
    r = node_cli({"--gateway", "127.0.0.1:1", "connect", "--pid", "1.7.42", "--to", "2.7.9", "--bytes", "-1"});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: connect: --bytes must be")) << r.err;
    r = node_cli({"--gateway", "127.0.0.1:1", "connect", "--pid", "1.7.42", "--to", "2.7.9", "--bytes", "1",
                  "--parallel", "0"});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: connect: --parallel must be an integer 1..")) << r.err;
}

TEST_F(NodeCliArgs, HelpListsListenAndConnect) {
    const CliResult r = node_cli({"help"});
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("\n  listen "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\n  connect "), std::string::npos);
    const CliResult c = node_cli({"help", "connect"});
    EXPECT_NE(first_line(c.out).find("connect --pid ID --to ID --bytes N"), std::string::npos) << c.out;
}

TEST(NodeCli, ConnectToAnUnknownProcessNamesTheStage) {
    RelayGateway gw;
    const CliResult r =
        node_cli({"--gateway", gw.address(), "--bind", "127.0.0.1", "connect", "--pid", "1.7.42", "--to", "2.7.42",
                  "--bytes", "10", "--transport", "tcp"});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "fedgate-node: connect 2.7.42: stage resolve: not_found\n");
}

// fedgate-node uses the real libibverbs: these two expect a machine without an RDMA device.
std::string real_device_error() {
    std::string error;
    return RdmaDevice::open(real_verbs(), RdmaOptions{}, error) ? std::string() : error;
}
constexpr const char* kNoRealDevice = "no RDMA device: ibv_get_device_list found none (is an RDMA NIC or rxe configured?)";

TEST(NodeCli, AutomaticTransportWithoutADeviceSaysSoOnStderr) {
    if (real_device_error() != kNoRealDevice) GTEST_SKIP() << "this machine has an RDMA device";
    RelayGateway gw;
    const CliResult r = node_cli({"--gateway", gw.address(), "--bind", "127.0.0.1", "connect", "--pid", "1.7.42",
                                  "--to", "2.7.42", "--bytes", "10"});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err,
              "fedgate-node: endpoint 1.7.42: " + std::string(kNoRealDevice) + "; using tcp\n"
              "fedgate-node: connect 2.7.42: stage resolve: not_found\n");
}

TEST(NodeCli, RdmaTransportWithoutADeviceFailsAtStageTransport) {
    if (real_device_error() != kNoRealDevice) GTEST_SKIP() << "this machine has an RDMA device";
    RelayGateway gw;
    const CliResult r = node_cli({"--gateway", gw.address(), "--bind", "127.0.0.1", "listen", "--pid", "1.7.42",
                                  "--transport", "rdma"});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "fedgate-node: listen 1.7.42: stage transport: --transport rdma: " + std::string(kNoRealDevice) + "\n");
}

TEST(NodeCli, ListenAndConnectMoveBytesAndBothSeeTheDigestsMatch) {
    RelayGateway gw;
    auto listener = std::async(std::launch::async, [&] {
        return node_cli({"--gateway", gw.address(), "--bind", "127.0.0.1", "listen", "--pid", "1.8.43", "--transport",
                         "tcp", "--count", "2"});
    });
    // connect resolves the listener, so it must be registered first; listen() follows at once.
    ASSERT_TRUE(gw.wait_seen(MsgType::reg, 1));
    CliResult c;
    for (int i = 0; i < 50; ++i) {  // its REQ may beat listen() by a moment: not_listening, retry
        c = node_cli({"--gateway", gw.address(), "--bind", "127.0.0.1", "connect", "--pid", "1.7.42", "--to",
                      "1.8.43", "--bytes", "1000003", "--parallel", "2", "--json"});
        if (c.err.find("not_listening") == std::string::npos) break;
    }
    const CliResult l = listener.get();
    EXPECT_EQ(c.status, 0) << c.err;
    EXPECT_EQ(l.status, 0) << l.err;
    const auto j = nlohmann::json::parse(c.out);
    ASSERT_EQ(j.size(), 2u) << c.out;
    for (const auto& conn : j) {
        EXPECT_EQ(conn["transport"], "tcp");
        EXPECT_EQ(conn["bytes"], 1000003);
        EXPECT_EQ(conn["digest"], "ok");
        EXPECT_GT(conn["setup_us"].get<double>(), 0);
    }
    EXPECT_EQ(std::count(l.out.begin(), l.out.end(), '\n'), 3) << l.out;  // "listening ..." + 2 connections
    EXPECT_NE(l.out.find("from 1.7.42 tcp 1000003 bytes"), std::string::npos) << l.out;
    EXPECT_NE(l.out.find("digest ok"), std::string::npos);
}

}  // namespace
}  // namespace fedgate
