// Endpoints end to end on 127.0.0.1: two (or more) compute processes register with a fake gateway
// that answers registration and resolution and relays REQ/REP/RTU between their control sockets,
// dropping the first N of a kind when asked. Plus fedgate-node listen/connect on the same fake, with
// and without --handshake-only (the RDMA handshake with no device).
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
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/conn_wire.hpp"
#include "client/src/digest_stream.hpp"
#include "fedgate/endpoint.hpp"
#include "fedgate/fedgate.h"
#include "fedgate/handshake_only.hpp"
#if FEDGATE_VERBS  // the verbs backend's tests; a FEDGATE_VERBS=OFF build has no verbs code
#include "drivers/verbs_provider.hpp"
#include "tests/support/fake_verbs.hpp"
#endif
#include "tests/support/fake_gateway.hpp"
#include "client/src/tcp_backend.hpp"
#include "tools/fedgate_node_cli.hpp"

namespace fedgate {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

constexpr uint32_t kLoopback = 0x7f000001;
constexpr auto kWaitLimit = 20s;  // generous: ASan and a shared 2-core machine
const ProcessId kA = ProcessId::make(1, 7, 42);
const ProcessId kB = ProcessId::make(1, 8, 43);

using fedgate::testing::RelayGateway;

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
    std::unique_ptr<Connection> connect(const RdmaPath& path, uint64_t conn_id, ProcessId local_pid,
                                        ProcessId peer_pid) override {
        if (fail_at_)
            throw Error(*fail_at_, std::string("ibv_modify_qp(") + (*fail_at_ == ConnStage::rtr ? "RTR" : "RTS") +
                                       "): Invalid argument (fake)");
        const int fd = fabric_.take(local_, path);
        return std::make_unique<FakeRdmaConnection>(fd, conn_id, local_pid, peer_pid);
    }

private:
    FakeFabric& fabric_;
    RdmaQpParams local_;
    std::optional<ConnStage> fail_at_;
};

std::array<uint8_t, 16> gid_of(const char* text) {
    std::array<uint8_t, 16> gid{};
    EXPECT_EQ(::inet_pton(AF_INET6, text, gid.data()), 1) << text;
    return gid;
}

constexpr uint32_t kFakeDeviceQpn = 0xabc;

class FakeRdma : public RdmaProvider {
public:
    FakeRdma(FakeFabric& f, uint16_t mtu, std::optional<ConnStage> fail_at = std::nullopt)
        : fabric_(f), mtu_(mtu), fail_at_(fail_at) {}
    void open() override {}
    RdmaDeviceParams device_params() const override { return {gid_of("::ffff:198.18.0.9"), kFakeDeviceQpn, mtu_}; }
    std::unique_ptr<PreparedQp> prepare() override {
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

#if FEDGATE_VERBS
const std::string kNoDeviceMessage = "no RDMA device: ibv_get_device_list found none (is an RDMA NIC or rxe configured?)";
#endif

// The public API throws Error; these keep the failure as a value for the assertions.
bool listen_or(Endpoint& e, ConnectError& err) {
    try {
        e.listen();
        return true;
    } catch (const Error& x) {
        err = ConnectError{x.stage(), x.why()};
        return false;
    }
}

std::unique_ptr<Connection> connect_or(Endpoint& e, ProcessId target, ConnectError& err,
                                       std::optional<TransportChoice> t = std::nullopt) {
    try {
        return e.connect(target, t);
    } catch (const Error& x) {
        err = ConnectError{x.stage(), x.why()};
        return nullptr;
    }
}

ConnectError connect_fails(Endpoint& e, ProcessId target) {
    ConnectError err;
    EXPECT_EQ(connect_or(e, target, err), nullptr);
    return err;
}

// ---- tcp -------------------------------------------------------------------------------------

// ---- one error convention ------------------------------------------------------------------

TEST(EndpointApi, ResolveReturnsTheRecordOrThrowsErrorOfStageResolve) {
    RelayGateway gw;
    Endpoint a(options(gw, kA));
    Endpoint b(options(gw, kB));
    const DmaAddress r = a.resolve(kB);
    EXPECT_EQ(r.pid, kB);
    EXPECT_EQ(r.ipv4, kLoopback);
    EXPECT_EQ(r.port, b.tcp_port());
    try {
        (void)a.resolve(ProcessId::make(1, 9, 9));
        ADD_FAILURE() << "an unregistered ID resolved";
    } catch (const Error& e) {
        EXPECT_EQ(e.stage(), ConnStage::resolve);
        EXPECT_EQ(std::string(e.what()).rfind("stage resolve: 1.9.9: ", 0), 0u) << e.what();
    }
}

TEST(EndpointApi, BadOptionsAndAnUnansweredRegistrationThrowErrorOfStageOpen) {
    RelayGateway gw;
    EndpointOptions no_party = options(gw, ProcessId::make(0, 7, 1));
    EndpointOptions no_gateway = options(gw, kA);
    no_gateway.gateway_port = 0;
    EndpointOptions silent = options(gw, kA);
    silent.gateway_port = 9;  // discard: nobody answers
    silent.try_timeout = 20ms;
    silent.tries = 2;
    for (EndpointOptions* o : {&no_party, &no_gateway, &silent}) {
        try {
            Endpoint e(*o);
            ADD_FAILURE() << "opened";
        } catch (const Error& e) {
            EXPECT_EQ(e.stage(), ConnStage::open) << e.what();
            EXPECT_EQ(std::string(e.what()).rfind("stage open: ", 0), 0u) << e.what();
        }
    }
}

TEST(EndpointTcp, ConnectsAndMoves8MiBWithBothDigestsAgreeing) {
    RelayGateway gw;
    Endpoint a(options(gw, kA));
    Endpoint b(options(gw, kB));
    ConnectError err;
    ASSERT_TRUE(listen_or(b, err));
    auto out = connect_or(a, kB, err);
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
    ASSERT_TRUE(listen_or(b, err));
    auto out = connect_or(a, kB, err);
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
    ASSERT_TRUE(listen_or(b, err));
    gw.drop_first(MsgType::conn_req, 1);
    gw.drop_first(MsgType::conn_rep, 1);
    auto out = connect_or(a, kB, err);
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
    ASSERT_TRUE(listen_or(b, err));
    gw.drop_first(MsgType::conn_rtu, 1);
    auto out = connect_or(a, kB, err);
    ASSERT_NE(out, nullptr) << err.message;
    auto in = b.accept(kWaitLimit);
    ASSERT_NE(in, nullptr);
    // B may accept through the preamble before the relay has even taken the RTU off its socket:
    // wait for the relay to have dropped it.
    const auto deadline = std::chrono::steady_clock::now() + kWaitLimit;
    while (gw.dropped(MsgType::conn_rtu) == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(1ms);
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
    ASSERT_TRUE(listen_or(b, listen_err));
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
            auto c = connect_or(a, kB, err);
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

#if FEDGATE_VERBS
TEST(EndpointTransport, RdmaWithoutADeviceFailsAtStageTransportWithoutFallingBack) {
    RelayGateway gw;
    fedgate::testing::FakeVerbs none({});  // the library's own verbs backend, on a machine without a device
    VerbsProvider rdma(none, RdmaOptions{});
    Endpoint a(options(gw, kA, TransportChoice::rdma), &rdma);
    EXPECT_EQ(a.tcp_port(), 0);
    EXPECT_FALSE(a.rdma_available());
    ConnectError err;
    EXPECT_FALSE(listen_or(a, err));
    EXPECT_EQ(err.stage, ConnStage::transport);
    EXPECT_EQ(err.message, "--transport rdma: " + kNoDeviceMessage);
    err = connect_fails(a, kB);
    EXPECT_EQ(err.stage, ConnStage::transport);
    EXPECT_EQ(err.message, "--transport rdma: " + kNoDeviceMessage);
    try {
        (void)a.connect(kB);
        ADD_FAILURE() << "connect without a device returned";
    } catch (const Error& e) {
        EXPECT_EQ(e.stage(), ConnStage::transport);
        EXPECT_EQ(std::string(e.what()), "stage transport: --transport rdma: " + kNoDeviceMessage);
    }
    EXPECT_EQ(gw.seen(MsgType::resolve), 0);
}

TEST(EndpointTransport, AutomaticWithoutADeviceSaysSoOnceAndCountsTcpFallbacks) {
    RelayGateway gw;
    Logs logs;
    fedgate::testing::FakeVerbs none({});
    VerbsProvider rdma(none, RdmaOptions{});
    Endpoint a(options(gw, kA, TransportChoice::automatic, &logs), &rdma);
    Endpoint b(options(gw, kB, TransportChoice::tcp));
    ASSERT_EQ(logs.lines.size(), 1u);
    EXPECT_EQ(logs.lines[0], "endpoint 1.7.42: " + kNoDeviceMessage + "; using tcp");
    ConnectError err;
    ASSERT_TRUE(listen_or(b, err));
    auto out = connect_or(a, kB, err);
    ASSERT_NE(out, nullptr) << err.message;
    EXPECT_EQ(out->transport(), Transport::tcp);
    EXPECT_EQ(a.stats().tcp_fallbacks, 1u);
    EXPECT_EQ(logs.lines.size(), 1u);
}
#endif  // FEDGATE_VERBS

TEST(EndpointTransport, FakeRdmaConnectsWithNegotiatedMtuAndCrossedPsns) {
    RelayGateway gw;
    FakeFabric fabric;
    FakeRdma rdma_a(fabric, 4096), rdma_b(fabric, 1024);
    Endpoint a(options(gw, kA, TransportChoice::automatic), &rdma_a);
    Endpoint b(options(gw, kB, TransportChoice::rdma), &rdma_b);
    ASSERT_TRUE(a.rdma_available());
    ConnectError err;
    ASSERT_TRUE(listen_or(b, err));
    auto out = connect_or(a, kB, err);
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
    ASSERT_TRUE(listen_or(b, err));
    err = connect_fails(a, kB);
    EXPECT_EQ(err.stage, ConnStage::rtr);
    EXPECT_EQ(err.message, "ibv_modify_qp(RTR): Invalid argument (fake)");
    EXPECT_EQ(a.stats().connects_failed[static_cast<size_t>(ConnStage::rtr)], 1u);
    EXPECT_EQ(gw.seen(MsgType::conn_rtu), 0);  // no RTU for a QP that never came up
}

#if FEDGATE_VERBS
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
    ASSERT_TRUE(listen_or(b, err));
    auto out = connect_or(a, kB, err);
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
    try {
        rdma.open();
        ADD_FAILURE() << "open() without a device returned";
    } catch (const Error& e) {
        EXPECT_EQ(e.stage(), ConnStage::transport);
        EXPECT_NE(e.why().find("no RDMA device"), std::string::npos) << e.what();
    }
    RemoteQp r = remote_qp(RdmaPath{RdmaQpParams{0x11, 0x22, 1024, {}, 5, 6, 7}, 0x33, 0x44, 512});
    EXPECT_EQ(r.qpn, 0x11u);
    EXPECT_EQ(r.psn, 0x33u) << "RTR takes the peer's PSN";
    EXPECT_EQ(r.mtu, 512);
    EXPECT_EQ(r.rkey, 5u);
}
#endif  // FEDGATE_VERBS

TEST(EndpointTransport, TcpOnlyTargetAndRdmaOnlyInitiatorFailAtStageTransport) {
    RelayGateway gw;
    FakeFabric fabric;
    FakeRdma rdma(fabric, 1024);
    Endpoint a(options(gw, kA, TransportChoice::rdma), &rdma);
    Endpoint b(options(gw, kB, TransportChoice::tcp));
    ConnectError err;
    ASSERT_TRUE(listen_or(b, err));
    err = connect_fails(a, kB);
    EXPECT_EQ(err.stage, ConnStage::transport);
    EXPECT_TRUE(err.message.starts_with("transport_mismatch")) << err.message;
}

// ---- the registered record -------------------------------------------------------------------

TEST(EndpointRecord, RdmaRegistersTheProvidersGidQpnAndMtu) {
    RelayGateway gw;
    FakeFabric fabric;
    FakeRdma rdma(fabric, 2048);
    Endpoint a(options(gw, kA, TransportChoice::automatic), &rdma);
    const auto rec = gw.record_of(kA);
    ASSERT_TRUE(rec);
    EXPECT_EQ(rec->transport, Transport::roce_v2);
    EXPECT_EQ(rec->gid, gid_of("::ffff:198.18.0.9"));
    EXPECT_EQ(rec->qpn, kFakeDeviceQpn);
    EXPECT_EQ(rec->mtu, 2048);
    EXPECT_EQ(rec->ipv4, kLoopback);
    EXPECT_NE(rec->port, 0) << "auto also offers tcp";
}

TEST(EndpointRecord, TcpRegistersNoRdmaValuesEvenWithAProvider) {
    RelayGateway gw;
    FakeFabric fabric;
    FakeRdma rdma(fabric, 2048);
    Endpoint a(options(gw, kA, TransportChoice::tcp), &rdma);
    const auto rec = gw.record_of(kA);
    ASSERT_TRUE(rec);
    EXPECT_EQ(rec->transport, Transport::tcp);
    EXPECT_EQ(rec->gid, (std::array<uint8_t, 16>{}));
    EXPECT_EQ(rec->qpn, 0u);
    EXPECT_EQ(rec->mtu, 0);
    EXPECT_EQ(rec->port, a.tcp_port());
}

#if FEDGATE_VERBS
// The verbs provider registers the GID it chose, the port's active MTU and the QPN of the QP its
// first connection then uses: the record and the connection agree.
TEST(EndpointRecord, VerbsRecordCarriesTheQpTheFirstConnectionUses) {
    RelayGateway gw;
    fedgate::testing::FakeVerbs verbs({fedgate::testing::default_fake_device()});
    VerbsProvider rdma_a(verbs, RdmaOptions{}), rdma_b(verbs, RdmaOptions{});
    Endpoint a(options(gw, kA, TransportChoice::rdma), &rdma_a);
    Endpoint b(options(gw, kB, TransportChoice::rdma), &rdma_b);
    const auto rec_a = gw.record_of(kA), rec_b = gw.record_of(kB);
    ASSERT_TRUE(rec_a && rec_b);
    EXPECT_EQ(rec_a->transport, Transport::roce_v2);
    EXPECT_EQ(rec_a->gid, gid_of("::ffff:198.18.0.1")) << "the default fake device's RoCE v2 GID";
    EXPECT_EQ(rec_a->mtu, 1024) << "the fake port's active MTU";
    EXPECT_EQ(rdma_a.device_params(), (RdmaDeviceParams{rec_a->gid, rec_a->qpn, rec_a->mtu}));
    EXPECT_NE(rec_a->qpn, rec_b->qpn);
    EXPECT_EQ(verbs.qp_state(rec_a->qpn), IBV_QPS_INIT) << "open() prepared it";

    ConnectError err;
    ASSERT_TRUE(listen_or(b, err));
    auto out = connect_or(a, kB, err);
    ASSERT_NE(out, nullptr) << conn_stage_name(err.stage) << ": " << err.message;
    auto in = b.accept(kWaitLimit);
    ASSERT_NE(in, nullptr);
    ASSERT_TRUE(out->rdma_path() && in->rdma_path());
    EXPECT_EQ(out->rdma_path()->remote.qpn, rec_b->qpn);
    EXPECT_EQ(in->rdma_path()->remote.qpn, rec_a->qpn);
    EXPECT_EQ(out->rdma_path()->remote.gid, rec_b->gid);
    EXPECT_EQ(out->rdma_path()->mtu, 1024);
    EXPECT_EQ(verbs.qp_state(rec_a->qpn), IBV_QPS_RTS);
    EXPECT_EQ(verbs.qp_state(rec_b->qpn), IBV_QPS_RTS);
    expect_stream(*out, *in, 1 << 16);
}
#endif  // FEDGATE_VERBS

// ---- handshake-only --------------------------------------------------------------------------

RdmaQpParams qp_values(uint32_t qpn, uint32_t psn, uint16_t mtu, const char* gid) {
    RdmaQpParams q;
    q.qpn = qpn;
    q.psn = psn;
    q.mtu = mtu;
    q.gid = gid_of(gid);
    return q;
}

TEST(HandshakeOnly, BothSidesGetEachOthersQpnPsnGidAndTheLowerMtu) {
    RelayGateway gw;
    const RdmaQpParams qa = qp_values(0x1234, 0x42, 4096, "::ffff:198.18.1.20");
    const RdmaQpParams qb = qp_values(0x5678, 0x99, 1024, "::ffff:198.18.2.10");
    HandshakeOnlyProvider rdma_a(qa), rdma_b(qb);
    Endpoint a(options(gw, kA, TransportChoice::rdma), &rdma_a);
    Endpoint b(options(gw, kB, TransportChoice::rdma), &rdma_b);
    ASSERT_TRUE(a.rdma_available());
    ConnectError err;
    ASSERT_TRUE(listen_or(b, err));
    auto out = connect_or(a, kB, err);
    ASSERT_NE(out, nullptr) << conn_stage_name(err.stage) << ": " << err.message;
    auto in = b.accept(kWaitLimit);
    ASSERT_NE(in, nullptr);
    EXPECT_EQ(out->transport(), Transport::roce_v2);
    EXPECT_EQ(in->conn_id(), out->conn_id());
    EXPECT_EQ(in->peer_pid(), kA);
    EXPECT_EQ(out->rdma_path(), (RdmaPath{qb, 0x99, 0x42, 1024}));
    EXPECT_EQ(in->rdma_path(), (RdmaPath{qa, 0x42, 0x99, 1024}));
    EXPECT_EQ(dynamic_cast<const HandshakeOnlyConnection&>(*in).local(), qb);
}

TEST(HandshakeOnly, TheRecordCarriesTheGivenQpnGidAndMtu) {
    RelayGateway gw;
    HandshakeOnlyProvider rdma(qp_values(0x1234, 0x42, 2048, "fe80::7"));
    Endpoint a(options(gw, kA, TransportChoice::rdma), &rdma);
    const auto rec = gw.record_of(kA);
    ASSERT_TRUE(rec);
    EXPECT_EQ(rec->transport, Transport::roce_v2);
    EXPECT_EQ(rec->qpn, 0x1234u);
    EXPECT_EQ(rec->gid, gid_of("fe80::7"));
    EXPECT_EQ(rec->mtu, 2048);
    EXPECT_EQ(rec->port, 0) << "rdma only: no tcp port";
}

TEST(HandshakeOnly, DataCallsFailSayingThereIsNoDataPath) {
    const RdmaQpParams q = qp_values(0x1234, 0x42, 1024, "::ffff:198.18.1.20");
    HandshakeOnlyConnection c(q, RdmaPath{q, 1, 2, 1024}, 7, kA, kB);
    const Bytes data(4);
    Bytes buf(4);
    const std::vector<std::function<void()>> calls = {
        [&] { c.send_all(data); }, [&] { (void)c.recv_some(buf); }, [&] { c.shutdown_send(); }};
    for (const auto& call : calls) {
        try {
            call();
            ADD_FAILURE() << "a handshake-only data call returned";
        } catch (const ConnectionError& e) {
            EXPECT_EQ(e.stage(), ConnStage::data);
            EXPECT_EQ(e.why(), "handshake-only: no data path");
        }
    }
    EXPECT_EQ(std::unique_ptr<Connection>(std::make_unique<TcpConnection>(-1, 1, kA, kB))->rdma_path(), std::nullopt)
        << "tcp has no RDMA path";
}

TEST(HandshakeOnly, OpenRefusesValuesNoQpCouldHave) {
    const std::pair<RdmaQpParams, std::string> cases[] = {
        {qp_values(1, 0, 1024, "::1"), "handshake-only: QP number 1 is not in 2..16777215"},
        {qp_values(0x1000000, 0, 1024, "::1"), "handshake-only: QP number 16777216 is not in 2..16777215"},
        {qp_values(2, 0x1000000, 1024, "::1"), "handshake-only: PSN 16777216 is over 24 bits"},
        {qp_values(2, 0, 1500, "::1"),
         "handshake-only: MTU 1500 is not an RDMA path MTU (256, 512, 1024, 2048, 4096)"},
        {qp_values(2, 0, 1024, "::"), "handshake-only: the GID is zero"},
    };
    for (const auto& [q, message] : cases) {
        HandshakeOnlyProvider p(q);
        try {
            p.open();
            ADD_FAILURE() << "accepted: " << message;
        } catch (const Error& e) {
            EXPECT_EQ(e.stage(), ConnStage::transport);
            EXPECT_EQ(e.why(), message);
        }
    }
    HandshakeOnlyProvider fine(qp_values(0xffffff, 0xffffff, 256, "::1"));
    EXPECT_NO_THROW(fine.open());
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
    EXPECT_NE(first_line(c.out).find("connect --pid ID --to ID (--bytes N | --handshake-only --qpn N --psn N "
                                     "[--gid GID] [--mtu N])"),
              std::string::npos)
        << c.out;
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
#if FEDGATE_VERBS
std::string real_device_error() {
    std::string error;
    return RdmaDevice::open(real_verbs(), RdmaOptions{}, error) ? std::string() : error;
}
constexpr const char* kNoRealDevice = "no RDMA device: ibv_get_device_list found none (is an RDMA NIC or rxe configured?)";
#else
// Built without rdma-core: the library's backend is the stand-in (drivers/verbs_off.cpp), which says so.
std::string real_device_error() {
    try {
        make_verbs_provider(kLoopback)->open();
        return std::string();
    } catch (const Error& e) {
        return e.why();
    }
}
constexpr const char* kNoRealDevice = "no RDMA device: this library was not built with RDMA (FEDGATE_VERBS=OFF)";
#endif

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

// ---- fedgate-node --handshake-only ---------------------------------------------------------------

TEST_F(NodeCliArgs, HandshakeOnlyBadValuesExitTwoNamingTheOptionAndValue) {
    const std::vector<std::string> listen = {"--gateway", "127.0.0.1:1", "--bind", "127.0.0.1",
                                             "listen",    "--pid",       "1.8.43"};
    const std::vector<std::string> connect = {"--gateway", "127.0.0.1:1", "--bind", "127.0.0.1", "connect",
                                              "--pid",     "1.7.42",      "--to",   "1.8.43"};
    const std::vector<std::string> ok = {"--transport", "rdma", "--handshake-only", "--qpn", "0x5678", "--psn", "0x99"};
    const std::string qpn_range = "must be an integer 2..16777215 (decimal, or 0x and hex digits), got ";
    const std::string psn_range = "must be an integer 0..16777215 (decimal, or 0x and hex digits), got ";
    struct Case {
        std::vector<std::string> head, tail;
        std::string message;
    };
    const Case cases[] = {
        {listen, {"--handshake-only", "--qpn", "2", "--psn", "0"},
         "listen: --handshake-only needs --transport rdma, got no --transport (auto)"},
        {listen, {"--transport", "tcp", "--handshake-only", "--qpn", "2", "--psn", "0"},
         "listen: --handshake-only needs --transport rdma, got --transport tcp"},
        {listen, {"--transport", "rdma", "--handshake-only", "--psn", "0"},
         "listen: missing --qpn (--handshake-only: this side's QP number, such as 0x1234)"},
        {listen, {"--transport", "rdma", "--handshake-only", "--qpn", "2"},
         "listen: missing --psn (--handshake-only: this side's starting PSN, such as 0x42)"},
        {listen, {"--transport", "rdma", "--handshake-only", "--qpn", "1", "--psn", "0"},
         "listen: --qpn " + qpn_range + "'1'"},
        {listen, {"--transport", "rdma", "--handshake-only", "--qpn", "0x1000000", "--psn", "0"},
         "listen: --qpn " + qpn_range + "'0x1000000'"},
        {listen, {"--transport", "rdma", "--handshake-only", "--qpn", "2", "--psn", "16777216"},
         "listen: --psn " + psn_range + "'16777216'"},
        {listen, {"--gid", "198.18.1.20"},
         "listen: --gid must be a GID in IPv6 form such as fe80::1 or ::ffff:198.18.1.20, got '198.18.1.20'"},
        {listen, {"--gid", "::"}, "listen: --gid must not be the zero GID, got '::'"},
        {listen, {"--mtu", "1500"}, "listen: --mtu must be 256, 512, 1024, 2048 or 4096, got '1500'"},
        {listen, {"--transport", "rdma", "--qpn", "0x10"},
         "listen: --qpn is only for --handshake-only (with a device, the device gives the QP its values)"},
        {connect, {"--bytes", "10"}, "connect: --bytes is not for --handshake-only: it moves no data"},
        {connect, {"--transport", "rdma", "--handshake-only", "--qpn", "2", "--psn", "-1"},
         "connect: --psn " + psn_range + "'-1'"},
        {connect, {"--mtu", "4097"}, "connect: --mtu must be 256, 512, 1024, 2048 or 4096, got '4097'"},
    };
    for (const Case& c : cases) {
        std::vector<std::string> args = c.head;
        // Cases that start with an option of `ok` replace it; the others add to a good command line.
        const bool whole = !c.tail.empty() && (c.tail[0] == "--handshake-only" || c.tail[0] == "--transport");
        if (!whole) args.insert(args.end(), ok.begin(), ok.end());
        args.insert(args.end(), c.tail.begin(), c.tail.end());
        const CliResult r = node_cli(args);
        EXPECT_EQ(r.status, 2) << c.message;
        EXPECT_EQ(first_line(r.err), "fedgate-node: " + c.message);
        EXPECT_NE(r.err.find("usage: fedgate-node"), std::string::npos) << r.err;
        EXPECT_EQ(r.out, "");
    }
}

TEST_F(NodeCliArgs, HelpTeachesHandshakeOnly) {
    const CliResult listen = node_cli({"listen", "--help"});
    EXPECT_EQ(listen.status, 0);
    EXPECT_NE(first_line(listen.out).find("[--json] [--handshake-only --qpn N --psn N [--gid GID] [--mtu N]]"),
              std::string::npos)
        << listen.out;
    for (const char* want : {"--handshake-only ", "--qpn N ", "--psn N ", "--gid GID ", "--mtu N ", "--json ",
                             "256|512|1024|2048|4096 (default 1024)", "peer_qpn, peer_psn, peer_gid", "mtu (connect",
                             "listen --pid 2.7.42 --transport rdma --handshake-only --qpn 0x5678 --psn 0x99 --json"})
        EXPECT_NE(listen.out.find(want), std::string::npos) << want;
    const CliResult all = node_cli({"--help"});
    EXPECT_EQ(all.status, 0);
    EXPECT_NE(all.out.find("connect --pid 1.7.42 --to 2.7.42 --transport rdma --handshake-only --qpn 0x1234 --psn "
                           "0x42 --mtu 4096 --json"),
              std::string::npos)
        << all.out;
}

// connect resolves the listener, so that must be registered first (wait for it on the gateway); its
// listen() follows at once, and a REQ that beats it is refused not_listening: try again.
CliResult connect_when_listening(const std::vector<std::string>& args) {
    CliResult c;
    for (int i = 0; i < 50; ++i) {
        c = node_cli(args);
        if (c.err.find("not_listening") == std::string::npos) break;
    }
    return c;
}

std::vector<std::string> lines_of(const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

const ProcessId kListener = ProcessId::make(1, 8, 43);

std::vector<std::string> handshake_listen(const RelayGateway& gw, std::vector<std::string> extra) {
    std::vector<std::string> args = {"--gateway", gw.address(), "--bind", "127.0.0.1", "listen", "--pid", "1.8.43",
                                     "--transport", "rdma", "--handshake-only", "--qpn", "0x5678", "--psn", "0x99"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

std::vector<std::string> handshake_connect(const RelayGateway& gw, std::vector<std::string> extra) {
    std::vector<std::string> args = {"--gateway", gw.address(), "--bind", "127.0.0.1", "connect", "--pid", "1.7.42",
                                     "--to", "1.8.43", "--transport", "rdma", "--handshake-only", "--qpn", "0x1234",
                                     "--psn", "0x42", "--gid", "::ffff:198.18.1.20", "--mtu", "4096"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

// The listener's object: the connector's QP (its --gid given, MTU 4096) as the listener's default GID
// (::ffff: of --bind) and MTU (1024) meet it.
nlohmann::ordered_json listener_sees(const std::string& conn_id) {
    return {{"conn_id", conn_id},
            {"initiator", "1.7.42"},
            {"target", "1.8.43"},
            {"transport", "roce_v2"},
            {"local_qpn", 0x5678},
            {"local_psn", 0x99},
            {"local_gid", "::ffff:127.0.0.1"},
            {"local_mtu", 1024},
            {"peer_qpn", 0x1234},
            {"peer_psn", 0x42},
            {"peer_gid", "::ffff:198.18.1.20"},
            {"peer_mtu", 4096},
            {"mtu", 1024}};
}

nlohmann::ordered_json connector_sees(const std::string& conn_id) {
    return {{"conn_id", conn_id},
            {"initiator", "1.7.42"},
            {"target", "1.8.43"},
            {"transport", "roce_v2"},
            {"local_qpn", 0x1234},
            {"local_psn", 0x42},
            {"local_gid", "::ffff:198.18.1.20"},
            {"local_mtu", 4096},
            {"peer_qpn", 0x5678},
            {"peer_psn", 0x99},
            {"peer_gid", "::ffff:127.0.0.1"},
            {"peer_mtu", 1024},
            {"mtu", 1024}};
}

const std::regex kConnId("0x[0-9a-f]{16}");

TEST(NodeCliHandshakeOnly, ListenAndConnectPrintEachOthersQpAsJsonLines) {
    RelayGateway gw;
    auto listener =
        std::async(std::launch::async, [&] { return node_cli(handshake_listen(gw, {"--count", "1", "--json"})); });
    ASSERT_TRUE(gw.wait_seen(MsgType::reg, 1));
    const CliResult c = connect_when_listening(handshake_connect(gw, {"--json"}));
    const CliResult l = listener.get();
    ASSERT_EQ(c.status, 0) << c.err;
    ASSERT_EQ(l.status, 0) << l.err;
    EXPECT_EQ(c.err, "");
    EXPECT_TRUE(std::regex_match(l.err, std::regex("fedgate-node: listening 1\\.8\\.43 epoch [0-9]+ rdma "
                                                   "handshake-only qpn 22136 psn 153 gid ::ffff:127\\.0\\.0\\.1 "
                                                   "mtu 1024\n")))
        << l.err;

    const auto c_lines = lines_of(c.out), l_lines = lines_of(l.out);
    ASSERT_EQ(c_lines.size(), 1u) << c.out;
    ASSERT_EQ(l_lines.size(), 1u) << "one JSON object per line, nothing else on stdout: " << l.out;
    auto mine = nlohmann::ordered_json::parse(c_lines[0]);
    const auto theirs = nlohmann::ordered_json::parse(l_lines[0]);
    const std::string conn_id = theirs.value("conn_id", "");
    EXPECT_TRUE(std::regex_match(conn_id, kConnId)) << conn_id;
    EXPECT_EQ(theirs, listener_sees(conn_id));
    ASSERT_TRUE(mine.contains("setup_us"));
    EXPECT_GT(mine["setup_us"].get<double>(), 0);
    mine.erase("setup_us");
    EXPECT_EQ(mine, connector_sees(conn_id)) << "the same conn_id on both sides";
    EXPECT_FALSE(gw.registered(kListener)) << "--count reached: deregistered";
}

TEST(NodeCliHandshakeOnly, WithoutJsonEachSidePrintsOneReadableLine) {
    RelayGateway gw;
    auto listener = std::async(std::launch::async, [&] { return node_cli(handshake_listen(gw, {"--count", "1"})); });
    ASSERT_TRUE(gw.wait_seen(MsgType::reg, 1));
    const CliResult c = connect_when_listening(handshake_connect(gw, {}));
    const CliResult l = listener.get();
    ASSERT_EQ(c.status, 0) << c.err;
    ASSERT_EQ(l.status, 0) << l.err;
    std::smatch lm, cm;
    ASSERT_TRUE(std::regex_match(
        l.out, lm,
        std::regex("listening 1\\.8\\.43 epoch [0-9]+ rdma handshake-only qpn 22136 psn 153 gid ::ffff:127\\.0\\.0\\.1 "
                   "mtu 1024\n"
                   "conn (0x[0-9a-f]{16}) from 1\\.7\\.42 roce_v2 handshake-only: peer qpn 4660 psn 66 gid "
                   "::ffff:198\\.18\\.1\\.20 mtu 4096, local qpn 22136 psn 153 gid ::ffff:127\\.0\\.0\\.1 mtu 1024, "
                   "path mtu 1024\n")))
        << l.out;
    ASSERT_TRUE(std::regex_match(
        c.out, cm,
        std::regex("conn (0x[0-9a-f]{16}) to 1\\.8\\.43 roce_v2 setup [0-9]+ us handshake-only: peer qpn 22136 psn 153 "
                   "gid ::ffff:127\\.0\\.0\\.1 mtu 1024, local qpn 4660 psn 66 gid ::ffff:198\\.18\\.1\\.20 mtu 4096, "
                   "path mtu 1024\n")))
        << c.out;
    EXPECT_EQ(lm[1], cm[1]) << "the same conn_id";
}

// Without --count the listener keeps accepting; SIGINT/SIGTERM (here the stop pipe) ends it with
// exit 0, after it has deregistered.
TEST(NodeCliHandshakeOnly, ListenerKeepsListeningUntilStoppedThenExitsZeroAndDeregisters) {
    RelayGateway gw;
    int stop[2];
    ASSERT_EQ(::pipe2(stop, O_CLOEXEC), 0);
    auto listener = std::async(std::launch::async, [&] { return node_cli(handshake_listen(gw, {"--json"}), stop[0]); });
    ASSERT_TRUE(gw.wait_seen(MsgType::reg, 1));
    const CliResult first = connect_when_listening(handshake_connect(gw, {"--json"}));
    const CliResult more = node_cli(handshake_connect(gw, {"--json", "--parallel", "2"}));
    EXPECT_TRUE(gw.registered(kListener)) << "still listening after three connections";
    (void)!::write(stop[1], "x", 1);
    const CliResult l = listener.get();
    ::close(stop[0]);
    ::close(stop[1]);
    ASSERT_EQ(first.status, 0) << first.err;
    ASSERT_EQ(more.status, 0) << more.err;
    EXPECT_EQ(l.status, 0) << l.err;
    EXPECT_FALSE(gw.registered(kListener));

    std::vector<std::string> connector_lines = lines_of(first.out);
    for (const std::string& line : lines_of(more.out)) connector_lines.push_back(line);
    const auto listener_lines = lines_of(l.out);
    ASSERT_EQ(connector_lines.size(), 3u) << first.out << more.out;
    ASSERT_EQ(listener_lines.size(), 3u) << l.out;
    std::set<std::string> ids;
    for (const std::string& line : listener_lines) {
        const auto j = nlohmann::ordered_json::parse(line);
        const std::string id = j.value("conn_id", "");
        EXPECT_EQ(j, listener_sees(id));
        ids.insert(id);
    }
    for (const std::string& line : connector_lines) {
        auto j = nlohmann::ordered_json::parse(line);
        const std::string id = j.value("conn_id", "");
        j.erase("setup_us");
        EXPECT_EQ(j, connector_sees(id));
        EXPECT_EQ(ids.count(id), 1u) << id << " was not accepted";
    }
    EXPECT_EQ(ids.size(), 3u) << "three connections, three IDs";
}

TEST(NodeCli, ListenJsonPrintsOneObjectPerConnectionAndTheListeningLineOnStderr) {
    RelayGateway gw;
    auto listener = std::async(std::launch::async, [&] {
        return node_cli({"--gateway", gw.address(), "--bind", "127.0.0.1", "listen", "--pid", "1.8.43", "--transport",
                         "tcp", "--count", "1", "--json"});
    });
    ASSERT_TRUE(gw.wait_seen(MsgType::reg, 1));
    const CliResult c = connect_when_listening({"--gateway", gw.address(), "--bind", "127.0.0.1", "connect", "--pid",
                                                "1.7.42", "--to", "1.8.43", "--bytes", "1000", "--transport", "tcp"});
    const CliResult l = listener.get();
    ASSERT_EQ(c.status, 0) << c.err;
    ASSERT_EQ(l.status, 0) << l.err;
    EXPECT_TRUE(
        std::regex_match(l.err, std::regex("fedgate-node: listening 1\\.8\\.43 epoch [0-9]+ tcp port [0-9]+\n")))
        << l.err;
    const auto lines = lines_of(l.out);
    ASSERT_EQ(lines.size(), 1u) << l.out;
    const auto j = nlohmann::ordered_json::parse(lines[0]);
    std::vector<std::string> keys;
    for (const auto& [k, v] : j.items()) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"conn_id", "initiator", "target", "transport", "bytes", "seconds",
                                              "mbit_s", "digest"}));
    EXPECT_TRUE(std::regex_match(j["conn_id"].get<std::string>(), kConnId));
    EXPECT_EQ(j["initiator"], "1.7.42");
    EXPECT_EQ(j["target"], "1.8.43");
    EXPECT_EQ(j["transport"], "tcp");
    EXPECT_EQ(j["bytes"], 1000);
    EXPECT_EQ(j["digest"], "ok");
}

// ---- the C API (fedgate/fedgate.h) over the same fake gateway ------------------------------------

std::string c_gateway(const RelayGateway& gw) { return "127.0.0.1:" + std::to_string(gw.port()); }

TEST(CApi, ListenConnectSendReceiveByProcessIdWithAPollableSocket) {
    RelayGateway gw;
    fedgate_error err{};
    fedgate_endpoint* b = fedgate_open(c_gateway(gw).c_str(), "1.8.43", "127.0.0.1", "tcp", &err);
    ASSERT_NE(b, nullptr) << err.message;
    fedgate_endpoint* a = fedgate_open(c_gateway(gw).c_str(), "1.7.42", "127.0.0.1", nullptr, &err);
    ASSERT_NE(a, nullptr) << err.message;
    ASSERT_EQ(fedgate_listen(b, &err), 0) << err.message;
    fedgate_conn* out = fedgate_connect(a, "1.8.43", &err);
    ASSERT_NE(out, nullptr) << err.message;
    fedgate_conn* in = fedgate_accept(b, 20000, &err);
    ASSERT_NE(in, nullptr) << err.message;
    EXPECT_STREQ(fedgate_conn_transport(out), "tcp");
    EXPECT_STREQ(fedgate_conn_peer(out), "1.8.43");
    EXPECT_STREQ(fedgate_conn_peer(in), "1.7.42");
    // An event loop polls the socket, then reads through the library.
    const int fd = fedgate_conn_fd(in);
    ASSERT_GE(fd, 0);
    const std::string msg(1 << 20, 'x');
    ASSERT_EQ(fedgate_send(out, msg.data(), msg.size(), &err), static_cast<ssize_t>(msg.size())) << err.message;
    ASSERT_EQ(fedgate_shutdown(out, &err), 0);
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 20000), 1);
    std::string got;
    char buf[65536];
    for (;;) {
        const ssize_t n = fedgate_recv(in, buf, sizeof buf, &err);
        ASSERT_GE(n, 0) << err.message;
        if (n == 0) break;
        got.append(buf, static_cast<std::size_t>(n));
    }
    EXPECT_EQ(got, msg);
    fedgate_close(in);
    fedgate_close(out);
    fedgate_endpoint_close(a);
    fedgate_endpoint_close(b);
}

TEST(CApi, FailuresNameTheirStage) {
    RelayGateway gw;
    fedgate_error err{};
    EXPECT_EQ(fedgate_open("198.18.1.1:99999", "1.7.42", "127.0.0.1", "tcp", &err), nullptr);
    EXPECT_EQ(err.stage, FEDGATE_STAGE_OPEN);
    EXPECT_NE(std::string(err.message).find("stage open: gateway '198.18.1.1:99999'"), std::string::npos) << err.message;
    EXPECT_EQ(fedgate_open(c_gateway(gw).c_str(), "1.7", "127.0.0.1", "tcp", &err), nullptr);
    EXPECT_NE(std::string(err.message).find("pid '1.7'"), std::string::npos) << err.message;
    EXPECT_EQ(fedgate_open(c_gateway(gw).c_str(), "1.7.42", "127.0.0.1", "carrier-pigeon", &err), nullptr);
    EXPECT_NE(std::string(err.message).find("transport 'carrier-pigeon'"), std::string::npos) << err.message;

    fedgate_endpoint* a = fedgate_open(c_gateway(gw).c_str(), "1.7.42", "127.0.0.1", "tcp", &err);
    ASSERT_NE(a, nullptr) << err.message;
    EXPECT_EQ(fedgate_connect(a, "1.9.9", &err), nullptr);  // nobody registered it
    EXPECT_EQ(err.stage, FEDGATE_STAGE_RESOLVE);
    EXPECT_STREQ(fedgate_stage_name(err.stage), "resolve");
    EXPECT_EQ(std::string(err.message).rfind("stage resolve: ", 0), 0u) << err.message;
    EXPECT_EQ(fedgate_accept(a, 10, &err), nullptr);
    EXPECT_EQ(err.stage, FEDGATE_STAGE_TIMEOUT);
    fedgate_endpoint* r = fedgate_open(c_gateway(gw).c_str(), "1.7.44", "127.0.0.1", "rdma", &err);
    ASSERT_NE(r, nullptr) << err.message;
    EXPECT_EQ(fedgate_listen(r, &err), -1);  // no RDMA device in this library
    EXPECT_EQ(err.stage, FEDGATE_STAGE_TRANSPORT);
    fedgate_endpoint_close(r);
    fedgate_endpoint_close(a);
}

TEST(CApi, ResolveFillsTheRecord) {
    RelayGateway gw;
    fedgate_error err{};
    fedgate_endpoint* b = fedgate_open(c_gateway(gw).c_str(), "1.8.43", "127.0.0.1", "tcp", &err);
    ASSERT_NE(b, nullptr) << err.message;
    fedgate_record rec{};
    ASSERT_EQ(fedgate_resolve(c_gateway(gw).c_str(), "1.8.43", "127.0.0.1", 2000, &rec, &err), 0) << err.message;
    EXPECT_STREQ(rec.pid, "1.8.43");
    EXPECT_STREQ(rec.transport, "tcp");
    EXPECT_STREQ(rec.ipv4, "127.0.0.1");
    EXPECT_NE(rec.port, 0);
    EXPECT_EQ(fedgate_resolve(c_gateway(gw).c_str(), "1.9.9", "127.0.0.1", 2000, &rec, &err), -1);
    EXPECT_EQ(err.stage, FEDGATE_STAGE_RESOLVE);
    fedgate_endpoint_close(b);
}

}  // namespace
}  // namespace fedgate
