// The node client library and the fedgate-node command line, end to end against a fake gateway: a
// UDP socket on 127.0.0.1 served by a thread that records every request and answers from a script.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "proto/resolve_wire.hpp"
#include "fedgate/node_client.hpp"
#include "tools/fedgate_node_cli.hpp"

namespace fedgate {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

constexpr uint32_t kLoopback = 0x7f000001;  // 127.0.0.1, host order
// Every wait for the other side is bounded so that a failing test fails instead of hanging.
constexpr auto kWaitLimit = 10s;

// ---- one builder for messages ----------------------------------------------------------------

template <typename Body>
Bytes message(MsgType type, uint64_t seq, const Body& body) {
    Bytes out(sizeof(MsgHeader) + sizeof body);
    MsgHeader h;
    encode(Header{type, 0, static_cast<uint16_t>(sizeof body), seq, 0}, h);
    std::memcpy(out.data(), &h, sizeof h);
    std::memcpy(out.data() + sizeof h, &body, sizeof body);
    return out;
}

Bytes reg_reply(uint64_t seq, RegStatus status, ProcessId pid = {}, uint32_t epoch = 0, uint32_t heartbeat_ms = 0) {
    RegReplyBody b{};
    b.status = static_cast<uint8_t>(status);
    store_be64(b.pid, pid.value);
    store_be32(b.epoch, epoch);
    store_be32(b.heartbeat_ms, heartbeat_ms);
    return message(MsgType::reg_reply, seq, b);
}

Bytes resolve_reply(uint64_t seq, ResolveStatus status, AnswerSource source, ProcessId target,
                    const std::optional<DmaAddress>& record = std::nullopt) {
    ResolveReplyBody b{};
    b.status = static_cast<uint8_t>(status);
    b.source = static_cast<uint8_t>(source);
    store_be64(b.target, target.value);
    if (record)
        encode(*record, b.record);
    return message(MsgType::resolve_reply, seq, b);
}

// A record with every field distinct from its default.
DmaAddress full_record() {
    DmaAddress a;
    a.pid = ProcessId::make(2, 7, 42);
    a.epoch = 0xdeadbeef;
    a.transport = Transport::roce_v2;
    a.flags = 0x5a;
    for (uint8_t i = 0; i < 16; ++i)
        a.gid[i] = static_cast<uint8_t>(0xf0 + i);
    a.qpn = 0xabcdef;
    a.mtu = 4096;
    a.ipv4 = 0xc6120114;  // 198.18.1.20
    a.port = 4791;
    a.ttl_s = 600;
    return a;
}

// ---- the fake gateway ------------------------------------------------------------------------

struct Request {
    Bytes bytes;
    sockaddr_in from{};

    // The parsed header and body; fails the test if the client sent something malformed.
    ParsedMsg parsed() const {
        ParsedMsg m;
        EXPECT_EQ(parse_message(bytes, m), WireError::ok);
        return m;
    }
    uint64_t id() const { return parsed().header.seq; }
    MsgType type() const { return parsed().header.type; }
};

struct Reply {
    Bytes bytes;
    bool from_stranger = false;  // sent from another socket (another port) of the same host
};

// Answers every datagram on 127.0.0.1:PORT with what the script returns for it (nothing: the reply
// is lost). The script runs on the fake's thread and gets the request and its index.
class FakeGateway {
public:
    using Script = std::function<std::vector<Reply>(const Request&, size_t index)>;

    explicit FakeGateway(Script script) : script_(std::move(script)) {
        fd_ = open_udp();
        stranger_fd_ = open_udp();
        if (::pipe2(stop_, O_CLOEXEC) != 0)
            throw std::runtime_error("fake gateway: pipe failed");
        sockaddr_in a{};
        socklen_t len = sizeof a;
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { serve(); });
    }
    ~FakeGateway() {
        (void)!::write(stop_[1], "x", 1);
        thread_.join();
        for (int fd : {fd_, stranger_fd_, stop_[0], stop_[1]})
            ::close(fd);
    }

    uint16_t port() const { return port_; }
    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

    bool wait_for_requests(size_t n) {
        std::unique_lock lock(mutex_);
        return seen_.wait_for(lock, kWaitLimit, [&] { return requests_.size() >= n; });
    }
    std::vector<Request> requests() {
        std::lock_guard lock(mutex_);
        return requests_;
    }

private:
    static int open_udp() {
        const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(kLoopback);
        if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
            throw std::runtime_error("fake gateway: cannot bind a UDP socket on 127.0.0.1");
        return fd;
    }

    void serve() {
        for (;;) {
            pollfd p[2] = {{fd_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
            if (::poll(p, 2, -1) < 0 || p[1].revents)
                return;
            Request r;
            r.bytes.resize(4096);
            socklen_t len = sizeof r.from;
            const ssize_t n = ::recvfrom(fd_, r.bytes.data(), r.bytes.size(), 0,
                                         reinterpret_cast<sockaddr*>(&r.from), &len);
            if (n < 0)
                continue;
            r.bytes.resize(static_cast<size_t>(n));
            size_t index;
            {
                std::lock_guard lock(mutex_);
                index = requests_.size();
                requests_.push_back(r);
            }
            // Replies go out before the request is announced, so a test that saw N requests knows
            // the answers to them are on their way.
            for (const Reply& reply : script_(r, index))
                ::sendto(reply.from_stranger ? stranger_fd_ : fd_, reply.bytes.data(), reply.bytes.size(), 0,
                         reinterpret_cast<const sockaddr*>(&r.from), sizeof r.from);
            seen_.notify_all();
        }
    }

    Script script_;
    int fd_ = -1;
    int stranger_fd_ = -1;
    int stop_[2] = {-1, -1};
    uint16_t port_ = 0;
    std::mutex mutex_;
    std::condition_variable seen_;
    std::vector<Request> requests_;
    std::thread thread_;
};

// Answers every register/heartbeat/deregister with `status`.
FakeGateway::Script always(RegStatus status, uint32_t heartbeat_ms = 0) {
    return [=](const Request& r, size_t) {
        const ParsedMsg m = r.parsed();
        ProcessRefBody ref{};  // a record starts with pid and epoch, as ProcessRefBody does
        std::memcpy(&ref, m.body.data(), sizeof ref);
        return std::vector<Reply>{
            {reg_reply(m.header.seq, status, ProcessId{load_be64(ref.pid)}, load_be32(ref.epoch), heartbeat_ms)}};
    };
}

FakeGateway::Script silent() {
    return [](const Request&, size_t) { return std::vector<Reply>{}; };
}

NodeClientOptions fast(int tries = 4, std::chrono::milliseconds timeout = 200ms) {
    NodeClientOptions o;
    o.tries = tries;
    o.timeout = timeout;
    return o;
}

// ---- NodeClient ------------------------------------------------------------------------------

TEST(NodeClient, RegisterSendsTheRecordWithEveryField) {
    FakeGateway gw(always(RegStatus::ok, 250));
    NodeClient client(kLoopback, gw.port(), fast());
    const DmaAddress rec = full_record();
    const RegResult r = client.register_process(rec);

    ASSERT_TRUE(r.replied()) << r.error;
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.heartbeat_ms, 250u);
    EXPECT_EQ(r.pid, rec.pid);
    EXPECT_EQ(r.epoch, rec.epoch);
    EXPECT_EQ(r.error, "");

    const auto reqs = gw.requests();
    ASSERT_EQ(reqs.size(), 1u);
    // The exact datagram: header (type reg, party 0, channel 0, the ID) + the encoded record.
    RegisterBody body;
    encode(rec, body.record);
    EXPECT_EQ(reqs[0].bytes, message(MsgType::reg, reqs[0].id(), body));
    const ParsedMsg m = reqs[0].parsed();
    EXPECT_EQ(m.header.sender_party, 0);
    EXPECT_EQ(m.header.channel, 0);
    DmaAddressWire w;
    std::memcpy(&w, m.body.data(), sizeof w);
    EXPECT_EQ(decode(w), rec);
    EXPECT_EQ(ntohs(reqs[0].from.sin_port), client.local_port());
    EXPECT_EQ(client.stats().requests_sent, 1u);
    EXPECT_EQ(client.stats().replies, 1u);
    EXPECT_EQ(client.stats().ignored_replies, 0u);
}

TEST(NodeClient, RegisterReplyStatusesSurface) {
    for (RegStatus s : {RegStatus::ok, RegStatus::wrong_party, RegStatus::address_mismatch, RegStatus::unknown,
                        RegStatus::stale_epoch, RegStatus::bad_record, RegStatus::full}) {
        FakeGateway gw(always(s));
        NodeClient client(kLoopback, gw.port(), fast());
        const RegResult r = client.register_process(full_record());
        ASSERT_TRUE(r.replied()) << reg_status_name(s) << ": " << r.error;
        EXPECT_EQ(r.status, s) << reg_status_name(s);
        EXPECT_EQ(r.ok(), s == RegStatus::ok);
    }
}

TEST(NodeClient, HeartbeatAndDeregisterSendThePidAndEpoch) {
    FakeGateway gw(always(RegStatus::ok, 1500));
    NodeClient client(kLoopback, gw.port(), fast());
    const ProcessId pid = ProcessId::make(2, 7, 42);
    const RegResult hb = client.heartbeat(pid, 77);
    const RegResult dereg = client.deregister(pid, 78);
    EXPECT_TRUE(hb.ok()) << hb.error;
    EXPECT_EQ(hb.heartbeat_ms, 1500u);
    EXPECT_TRUE(dereg.ok()) << dereg.error;

    const auto reqs = gw.requests();
    ASSERT_EQ(reqs.size(), 2u);
    ProcessRefBody b1{}, b2{};
    store_be64(b1.pid, pid.value);
    store_be32(b1.epoch, 77);
    store_be64(b2.pid, pid.value);
    store_be32(b2.epoch, 78);
    EXPECT_EQ(reqs[0].bytes, message(MsgType::heartbeat, reqs[0].id(), b1));
    EXPECT_EQ(reqs[1].bytes, message(MsgType::deregister, reqs[1].id(), b2));
    EXPECT_NE(reqs[0].id(), reqs[1].id()) << "every call takes a fresh request ID";
}

TEST(NodeClient, RegisterRetriesWithSameRequestIdWhenReplyIsLost) {
    FakeGateway gw([](const Request& r, size_t index) {
        if (index == 0)
            return std::vector<Reply>{};  // the first reply is lost
        return std::vector<Reply>{{reg_reply(r.id(), RegStatus::ok)}};
    });
    NodeClient client(kLoopback, gw.port(), fast(4, 50ms));
    const RegResult r = client.register_process(full_record());
    ASSERT_TRUE(r.ok()) << r.error;

    const auto reqs = gw.requests();
    ASSERT_GE(reqs.size(), 2u);
    for (const Request& q : reqs)
        EXPECT_EQ(q.bytes, reqs[0].bytes) << "a retry repeats the request byte for byte, ID included";
    EXPECT_GE(client.stats().retries, 1u);
    EXPECT_EQ(client.stats().requests_sent, reqs.size());
    EXPECT_EQ(client.stats().replies, 1u);
}

TEST(NodeClient, RepliesWithWrongIdOrMalformedBytesAreIgnoredAndCounted) {
    FakeGateway gw([](const Request& r, size_t) {
        const uint64_t id = r.id();
        Bytes truncated = reg_reply(id, RegStatus::ok);
        truncated.pop_back();
        Bytes bad_magic = reg_reply(id, RegStatus::ok);
        bad_magic[0] ^= 0xff;
        Bytes bad_status = reg_reply(id, RegStatus::ok);
        bad_status[sizeof(MsgHeader)] = 0x7f;
        return std::vector<Reply>{
            {reg_reply(id + 1, RegStatus::full)},                                               // wrong ID
            {resolve_reply(id, ResolveStatus::ok, AnswerSource::cache, ProcessId{1}, full_record())},  // wrong type
            {Bytes{0x01, 0x02, 0x03}},                                                           // garbage
            {truncated},
            {bad_magic},
            {bad_status},                                                                        // unknown status
            {reg_reply(id, RegStatus::stale_epoch, {}, 0, 0), true},                             // wrong source
            {reg_reply(id, RegStatus::ok, {}, 0, 700)},                                          // the one
        };
    });
    NodeClient client(kLoopback, gw.port(), fast());
    const RegResult r = client.register_process(full_record());
    ASSERT_TRUE(r.replied()) << r.error;
    EXPECT_EQ(r.status, RegStatus::ok);
    EXPECT_EQ(r.heartbeat_ms, 700u);
    EXPECT_EQ(client.stats().ignored_replies, 7u);
    EXPECT_EQ(client.stats().replies, 1u);
    EXPECT_EQ(gw.requests().size(), 1u) << "the right reply came in the first try's window";
}

TEST(NodeClient, NoReplyIsATransportErrorNamingTheGatewayAfterExactlyTriesRequests) {
    FakeGateway gw(silent());
    NodeClient client(kLoopback, gw.port(), fast(3, 10ms));
    const RegResult r = client.register_process(full_record());
    EXPECT_FALSE(r.replied());
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.error, "no reply from gateway " + gw.address() + " after 3 tries");

    ASSERT_TRUE(gw.wait_for_requests(3));
    const auto reqs = gw.requests();
    EXPECT_EQ(reqs.size(), 3u);  // the client has returned: nothing more is coming
    for (const Request& q : reqs)
        EXPECT_EQ(q.id(), reqs[0].id());
    EXPECT_EQ(client.stats().requests_sent, 3u);
    EXPECT_EQ(client.stats().retries, 2u);
    EXPECT_EQ(client.stats().no_reply, 1u);
}

TEST(NodeClient, OneTryGivesUpAfterOneRequest) {
    FakeGateway gw(silent());
    NodeClient client(kLoopback, gw.port(), fast(1, 10ms));
    const ResolveResult r = client.resolve(ProcessId::make(2, 7, 42));
    EXPECT_FALSE(r.replied());
    EXPECT_EQ(r.error, "no reply from gateway " + gw.address() + " after 1 try");
    ASSERT_TRUE(gw.wait_for_requests(1));
    EXPECT_EQ(gw.requests().size(), 1u);
}

TEST(NodeClient, ResolveDecodesEveryFieldOfTheRecordAndTheSource) {
    const DmaAddress rec = full_record();
    const ProcessId asked = rec.pid.with_party(0);
    FakeGateway gw([&](const Request& r, size_t) {
        return std::vector<Reply>{{resolve_reply(r.id(), ResolveStatus::ok, AnswerSource::broadcast, asked, rec)}};
    });
    NodeClient client(kLoopback, gw.port(), fast());
    const ResolveResult r = client.resolve(asked);
    ASSERT_TRUE(r.replied()) << r.error;
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.source, AnswerSource::broadcast);
    EXPECT_EQ(r.target, asked);
    EXPECT_EQ(r.record, rec);
    EXPECT_EQ(r.record.pid, ProcessId::make(2, 7, 42));
    EXPECT_EQ(r.record.epoch, 0xdeadbeefu);
    EXPECT_EQ(r.record.transport, Transport::roce_v2);
    EXPECT_EQ(r.record.flags, 0x5a);
    EXPECT_EQ(r.record.gid[0], 0xf0);
    EXPECT_EQ(r.record.gid[15], 0xff);
    EXPECT_EQ(r.record.qpn, 0xabcdefu);
    EXPECT_EQ(r.record.mtu, 4096);
    EXPECT_EQ(r.record.ipv4, 0xc6120114u);
    EXPECT_EQ(r.record.port, 4791);
    EXPECT_EQ(r.record.ttl_s, 600u);

    const auto reqs = gw.requests();
    ASSERT_EQ(reqs.size(), 1u);
    ResolveBody b{};
    store_be64(b.target, asked.value);
    EXPECT_EQ(reqs[0].bytes, message(MsgType::resolve, reqs[0].id(), b));
}

TEST(NodeClient, ResolveNegativeAnswersSurfaceWithTheirSource) {
    const std::pair<ResolveStatus, AnswerSource> cases[] = {
        {ResolveStatus::not_found, AnswerSource::negative_cache}, {ResolveStatus::not_found, AnswerSource::directed},
        {ResolveStatus::unreachable, AnswerSource::broadcast},    {ResolveStatus::rate_limited, AnswerSource::cache},
        {ResolveStatus::bad_request, AnswerSource::local},        {ResolveStatus::busy, AnswerSource::cache},
    };
    for (const auto& [status, source] : cases) {
        FakeGateway gw([&](const Request& r, size_t) {
            return std::vector<Reply>{{resolve_reply(r.id(), status, source, ProcessId{9})}};
        });
        NodeClient client(kLoopback, gw.port(), fast());
        const ResolveResult r = client.resolve(ProcessId{9});
        ASSERT_TRUE(r.replied()) << r.error;
        EXPECT_EQ(r.status, status) << resolve_status_name(status);
        EXPECT_EQ(r.source, source) << answer_source_name(source);
        EXPECT_FALSE(r.ok());
    }
}

TEST(NodeClient, ResolveIgnoresAnOkReplyWhoseRecordDoesNotDecode) {
    const DmaAddress rec = full_record();
    FakeGateway gw([&](const Request& r, size_t) {
        Bytes broken = resolve_reply(r.id(), ResolveStatus::ok, AnswerSource::cache, rec.pid, rec);
        // The record's transport byte: header, status/source/reserved, target, then pid and epoch.
        broken[sizeof(MsgHeader) + 4 + 8 + 12] = 0;
        return std::vector<Reply>{{broken},
                                  {resolve_reply(r.id(), ResolveStatus::ok, AnswerSource::local, rec.pid, rec)}};
    });
    NodeClient client(kLoopback, gw.port(), fast());
    const ResolveResult r = client.resolve(rec.pid);
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.source, AnswerSource::local);
    EXPECT_EQ(r.record, rec);
    EXPECT_EQ(client.stats().ignored_replies, 1u);
}

TEST(NodeClient, ARejectedSetupThrowsAndBadOptionsAreRefused) {
    NodeClientOptions elsewhere;
    elsewhere.bind_ipv4 = 0xc0000201;  // 192.0.2.1 (TEST-NET-1): not an address of this host
    EXPECT_THROW(NodeClient(kLoopback, 7410, elsewhere), std::system_error);
    EXPECT_THROW(NodeClient(kLoopback, 7410, fast(0)), std::invalid_argument);
    EXPECT_THROW(NodeClient(kLoopback, 7410, fast(1, 0ms)), std::invalid_argument);
    EXPECT_THROW(NodeClient(kLoopback, 0), std::invalid_argument);
}

TEST(NodeClient, BindsToTheLocalAddressItIsGiven) {
    FakeGateway gw(always(RegStatus::ok));
    NodeClientOptions o = fast();
    o.bind_ipv4 = kLoopback;
    NodeClient client(kLoopback, gw.port(), o);
    EXPECT_EQ(client.gateway(), gw.address());
    ASSERT_TRUE(client.heartbeat(ProcessId{5}, 1).ok());
    EXPECT_EQ(ntohl(gw.requests().at(0).from.sin_addr.s_addr), kLoopback);
}

// ---- fedgate-node ----------------------------------------------------------------------------

struct CliResult {
    int status;
    std::string out;
    std::string err;
};

CliResult node_cli(std::vector<std::string> args, int stop_fd = -1) {
    args.insert(args.begin(), "fedgate-node");
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    std::ostringstream out, err;
    const int status = run_fedgate_node(static_cast<int>(args.size()), argv.data(), out, err, stop_fd);
    return {status, out.str(), err.str()};
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// A pipe whose read end tells the CLI to stop, as SIGINT/SIGTERM do in main().
struct StopPipe {
    int fds[2] = {-1, -1};
    StopPipe() {
        if (::pipe2(fds, O_CLOEXEC) != 0)
            throw std::runtime_error("pipe failed");
    }
    ~StopPipe() {
        ::close(fds[0]);
        ::close(fds[1]);
    }
    void stop() const { (void)!::write(fds[1], "x", 1); }
};

class FedgateNodeArgs : public ::testing::Test {
protected:
    void SetUp() override { ::unsetenv("FEDGATE_GATEWAY"); }
};

const std::vector<std::string> kRegisterOk = {"--gateway", "127.0.0.1:1", "register", "--pid", "2.7.42",
                                              "--transport", "tcp", "--listen", "127.0.0.1:5000", "--once"};

TEST_F(FedgateNodeArgs, BadPidExitsTwoNamingPid) {
    for (const char* bad : {"2.7", "x", "70000.1.1", "0.0.0"}) {
        auto args = kRegisterOk;
        args[4] = bad;
        const CliResult r = node_cli(args);
        EXPECT_EQ(r.status, 2) << bad;
        EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: register: --pid must ")) << r.err;
        EXPECT_NE(r.err.find("usage: fedgate-node"), std::string::npos);
        EXPECT_EQ(r.out, "");
    }
}

TEST_F(FedgateNodeArgs, BadTransportExitsTwoNamingTransport) {
    auto args = kRegisterOk;
    args[6] = "rdma";
    const CliResult r = node_cli(args);
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err), "fedgate-node: register: --transport must be tcp or roce_v2, got 'rdma'");
}

TEST_F(FedgateNodeArgs, MissingListenExitsTwoNamingListen) {
    const CliResult r =
        node_cli({"--gateway", "127.0.0.1", "register", "--pid", "2.7.42", "--transport", "tcp", "--once"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err),
              "fedgate-node: register: missing --listen (the IP:PORT this process accepts connections on)");
}

TEST_F(FedgateNodeArgs, BadListenExitsTwoNamingListen) {
    for (const char* bad : {"127.0.0.1", "127.0.0.1:0", "0.0.0.0:5000", "host:5000"}) {
        auto args = kRegisterOk;
        args[8] = bad;
        const CliResult r = node_cli(args);
        EXPECT_EQ(r.status, 2) << bad;
        EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: register: --listen ")) << r.err;
    }
}

TEST_F(FedgateNodeArgs, BadGatewayExitsTwoNamingGateway) {
    for (const char* bad : {"127.0.0", "127.0.0.1:0", "127.0.0.1:70000", "gateway.local", "127.0.0.1:"}) {
        auto args = kRegisterOk;
        args[1] = bad;
        const CliResult r = node_cli(args);
        EXPECT_EQ(r.status, 2) << bad;
        EXPECT_EQ(first_line(r.err), std::string("fedgate-node: --gateway must be IP or IP:PORT (port 1..65535) such "
                                                 "as 198.18.1.1 or 198.18.1.1:7410, got '") +
                                         bad + "'");
    }
}

TEST_F(FedgateNodeArgs, MissingGatewayExitsTwoUnlessTheEnvironmentNamesIt) {
    const CliResult r = node_cli({"resolve", "2.7.42"});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: missing --gateway")) << r.err;

    ::setenv("FEDGATE_GATEWAY", "bogus", 1);
    const CliResult env = node_cli({"resolve", "2.7.42"});
    ::unsetenv("FEDGATE_GATEWAY");
    EXPECT_EQ(env.status, 2);
    EXPECT_NE(first_line(env.err).find("got 'bogus'"), std::string::npos) << env.err;
}

TEST_F(FedgateNodeArgs, BadNumbersExitTwoNamingTheOption) {
    const std::pair<std::vector<std::string>, std::string> cases[] = {
        {{"--epoch", "-1"}, "fedgate-node: register: --epoch must be an integer 0..4294967295, got '-1'"},
        {{"--qpn", "0x1000000"},
         "fedgate-node: register: --qpn must be an integer 0..16777215 (decimal, or 0x and hex digits), got "
         "'0x1000000'"},
        {{"--heartbeat-ms", "0"}, "fedgate-node: register: --heartbeat-ms must be an integer 1..3600000, got '0'"},
        {{"--gid", "fe80::zz"},
         "fedgate-node: register: --gid must be a GID in IPv6 form such as fe80::1 or ::ffff:198.18.1.20, got "
         "'fe80::zz'"},
        {{"--tries", "0"}, "fedgate-node: --tries must be an integer 1..10, got '0'"},
        {{"--timeout-ms", "1.5"}, "fedgate-node: --timeout-ms must be an integer 1..60000, got '1.5'"},
    };
    for (const auto& [extra, message] : cases) {
        auto args = kRegisterOk;
        args.insert(args.end(), extra.begin(), extra.end());
        const CliResult r = node_cli(args);
        EXPECT_EQ(r.status, 2) << message;
        EXPECT_EQ(first_line(r.err), message);
    }
}

TEST_F(FedgateNodeArgs, RoceMtuMustBeAnInfinibandMtu) {
    const CliResult r = node_cli({"--gateway", "127.0.0.1", "register", "--pid", "2.7.42", "--transport", "roce_v2",
                                  "--listen", "127.0.0.1:4791", "--mtu", "1500", "--once"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err),
              "fedgate-node: register: --mtu for roce_v2 must be 256, 512, 1024, 2048 or 4096, got '1500'");
}

TEST_F(FedgateNodeArgs, ResolveBadIdExitsTwoNamingTheId) {
    const CliResult r = node_cli({"--gateway", "127.0.0.1", "resolve", "2-7-42"});
    EXPECT_EQ(r.status, 2);
    EXPECT_TRUE(first_line(r.err).starts_with("fedgate-node: resolve: ID must be a process ID")) << r.err;
    const CliResult missing = node_cli({"--gateway", "127.0.0.1", "resolve"});
    EXPECT_EQ(missing.status, 2);
    EXPECT_TRUE(first_line(missing.err).starts_with("fedgate-node: resolve: missing ID")) << missing.err;
}

TEST_F(FedgateNodeArgs, UnknownCommandAndOptionExitTwo) {
    const CliResult cmd = node_cli({"--gateway", "127.0.0.1", "lookup", "2.7.42"});
    EXPECT_EQ(cmd.status, 2);
    EXPECT_EQ(first_line(cmd.err), "fedgate-node: unknown command 'lookup'");
    const CliResult opt = node_cli({"--gateway", "127.0.0.1", "resolve", "2.7.42", "--verbose"});
    EXPECT_EQ(opt.status, 2);
    EXPECT_EQ(first_line(opt.err), "fedgate-node: resolve: unrecognised option '--verbose'");
    const CliResult none = node_cli({});
    EXPECT_EQ(none.status, 2);
    EXPECT_EQ(first_line(none.err), "fedgate-node: no command given");
}

TEST_F(FedgateNodeArgs, HelpTeachesWithExamplesAndVersionPrintsIt) {
    const CliResult help = node_cli({"--help"});
    EXPECT_EQ(help.status, 0);
    for (const char* want : {"usage: fedgate-node --gateway IP[:PORT]", "register", "deregister", "resolve ID",
                             "examples:", "PARTY.NODE.LOCAL", "Exit status"})
        EXPECT_NE(help.out.find(want), std::string::npos) << want;
    const CliResult reg = node_cli({"register", "--help"});
    EXPECT_EQ(reg.status, 0);
    EXPECT_NE(reg.out.find("--heartbeat-ms"), std::string::npos);
    EXPECT_NE(reg.out.find("example"), std::string::npos);
    const CliResult topic = node_cli({"help", "resolve"});
    EXPECT_EQ(topic.status, 0);
    EXPECT_NE(topic.out.find("--json"), std::string::npos);
    const CliResult version = node_cli({"--version"});
    EXPECT_EQ(version.status, 0);
    EXPECT_TRUE(version.out.starts_with("fedgate-node ")) << version.out;
}

TEST(FedgateNode, RegisterOncePrintsOneLineAndSendsTheRecord) {
    FakeGateway gw(always(RegStatus::ok));
    const CliResult r =
        node_cli({"--gateway", gw.address(), "register", "--pid", "2.7.42", "--transport", "roce_v2", "--listen",
                  "127.0.0.1:4791", "--epoch", "9", "--qpn", "0x1234", "--ttl-s", "30", "--once"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "registered 2.7.42 epoch 9\n");
    EXPECT_EQ(r.err, "");

    const auto reqs = gw.requests();
    ASSERT_EQ(reqs.size(), 1u) << "--once neither heartbeats nor deregisters";
    DmaAddress want;
    want.pid = ProcessId::make(2, 7, 42);
    want.epoch = 9;
    want.transport = Transport::roce_v2;
    want.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};  // ::ffff:127.0.0.1
    want.qpn = 0x1234;
    want.mtu = 1024;  // roce_v2's default
    want.ipv4 = kLoopback;
    want.port = 4791;
    want.ttl_s = 30;
    RegisterBody body;
    encode(want, body.record);
    EXPECT_EQ(reqs[0].bytes, message(MsgType::reg, reqs[0].id(), body));
}

TEST(FedgateNode, RegisterDefaultsToARandomNonZeroEpochAndTcpMtuZero) {
    FakeGateway gw(always(RegStatus::ok));
    const CliResult r = node_cli({"--gateway", gw.address(), "register", "--pid", "0x2a", "--transport", "tcp",
                                  "--listen", "127.0.0.1:50051", "--gid", "fe80::1", "--once"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto reqs = gw.requests();
    ASSERT_EQ(reqs.size(), 1u);
    DmaAddressWire w;
    std::memcpy(&w, reqs[0].parsed().body.data(), sizeof w);
    const DmaAddress got = *decode(w);
    EXPECT_NE(got.epoch, 0u);
    EXPECT_EQ(r.out, "registered 0.0.42 epoch " + std::to_string(got.epoch) + "\n");
    EXPECT_EQ(got.mtu, 0);
    EXPECT_EQ(got.transport, Transport::tcp);
    const std::array<uint8_t, 16> fe80_1{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    EXPECT_EQ(got.gid, fe80_1);
}

TEST(FedgateNode, RegisterRefusalExitsOneNamingTheStatus) {
    FakeGateway gw(always(RegStatus::address_mismatch));
    auto args = kRegisterOk;
    args[1] = gw.address();
    const CliResult r = node_cli(args);
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "fedgate-node: register refused: address_mismatch\n");
    EXPECT_EQ(r.out, "");
}

TEST(FedgateNode, NoReplyExitsOneNamingTheGateway) {
    FakeGateway gw(silent());
    const CliResult r =
        node_cli({"--gateway", gw.address(), "--tries", "2", "--timeout-ms", "10", "resolve", "2.7.42"});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "fedgate-node: resolve 2.7.42: no reply from gateway " + gw.address() + " after 2 tries\n");
    ASSERT_TRUE(gw.wait_for_requests(2));
    EXPECT_EQ(gw.requests().size(), 2u);
}

TEST(FedgateNode, RegisterHeartbeatsAtTheGatewaysIntervalUntilStoppedThenDeregisters) {
    FakeGateway gw(always(RegStatus::ok, 5));  // the gateway asks for a heartbeat every 5 ms
    StopPipe stop;
    CliResult r{};
    std::thread cli([&] {
        r = node_cli({"--gateway", gw.address(), "register", "--pid", "2.7.42", "--transport", "tcp", "--listen",
                      "127.0.0.1:5000", "--epoch", "31"},
                     stop.fds[0]);
    });
    const bool heartbeating = gw.wait_for_requests(3);  // the registration and two heartbeats
    stop.stop();
    cli.join();
    ASSERT_TRUE(heartbeating);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "registered 2.7.42 epoch 31\n");

    const auto reqs = gw.requests();
    ASSERT_GE(reqs.size(), 4u);
    EXPECT_EQ(reqs.front().type(), MsgType::reg);
    for (size_t i = 1; i + 1 < reqs.size(); ++i)
        EXPECT_EQ(reqs[i].type(), MsgType::heartbeat) << i;
    ProcessRefBody ref{};
    store_be64(ref.pid, ProcessId::make(2, 7, 42).value);
    store_be32(ref.epoch, 31);
    EXPECT_EQ(reqs[1].bytes, message(MsgType::heartbeat, reqs[1].id(), ref));
    EXPECT_EQ(reqs.back().bytes, message(MsgType::deregister, reqs.back().id(), ref));
}

TEST(FedgateNode, RegistersAgainWhenAHeartbeatSaysUnknown) {
    FakeGateway gw([](const Request& q, size_t index) {
        // Request 1 is the first heartbeat: the gateway has forgotten the process.
        const RegStatus s = index == 1 ? RegStatus::unknown : RegStatus::ok;
        return std::vector<Reply>{{reg_reply(q.id(), s)}};
    });
    StopPipe stop;
    CliResult r{};
    std::thread cli([&] {
        r = node_cli({"--gateway", gw.address(), "register", "--pid", "2.7.42", "--transport", "tcp", "--listen",
                      "127.0.0.1:5000", "--epoch", "31", "--heartbeat-ms", "5"},
                     stop.fds[0]);
    });
    const bool enough = gw.wait_for_requests(4);  // reg, heartbeat (unknown), reg, heartbeat
    stop.stop();
    cli.join();
    ASSERT_TRUE(enough);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "registered 2.7.42 epoch 31\n") << "stdout keeps its one line";
    EXPECT_NE(r.err.find("registered again"), std::string::npos) << r.err;

    const auto reqs = gw.requests();
    ASSERT_GE(reqs.size(), 5u);
    EXPECT_EQ(reqs[0].type(), MsgType::reg);
    EXPECT_EQ(reqs[1].type(), MsgType::heartbeat);
    EXPECT_EQ(reqs[2].type(), MsgType::reg);
    EXPECT_EQ(reqs[2].parsed().body.size(), sizeof(RegisterBody));
    EXPECT_TRUE(std::equal(reqs[2].parsed().body.begin(), reqs[2].parsed().body.end(),
                           reqs[0].parsed().body.begin()))
        << "the same record, epoch included";
    EXPECT_EQ(reqs[3].type(), MsgType::heartbeat);
    EXPECT_EQ(reqs.back().type(), MsgType::deregister);
}

TEST(FedgateNode, HeartbeatRefusalOtherThanUnknownExitsOne) {
    FakeGateway gw([](const Request& q, size_t index) {
        return std::vector<Reply>{{reg_reply(q.id(), index == 0 ? RegStatus::ok : RegStatus::stale_epoch)}};
    });
    const CliResult r = node_cli({"--gateway", gw.address(), "register", "--pid", "2.7.42", "--transport", "tcp",
                                  "--listen", "127.0.0.1:5000", "--heartbeat-ms", "1"});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "fedgate-node: heartbeat refused: stale_epoch\n");
    EXPECT_EQ(gw.requests().size(), 2u) << "no deregister for a registration that is not ours any more";
}

TEST(FedgateNode, DeregisterSendsPidAndEpochAndPrintsOneLine) {
    FakeGateway gw(always(RegStatus::ok));
    const CliResult r = node_cli({"--gateway", gw.address(), "deregister", "--pid", "2.7.42", "--epoch", "31"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "deregistered 2.7.42 epoch 31\n");
    const auto reqs = gw.requests();
    ASSERT_EQ(reqs.size(), 1u);
    ProcessRefBody ref{};
    store_be64(ref.pid, ProcessId::make(2, 7, 42).value);
    store_be32(ref.epoch, 31);
    EXPECT_EQ(reqs[0].bytes, message(MsgType::deregister, reqs[0].id(), ref));

    FakeGateway unknown(always(RegStatus::unknown));
    const CliResult u = node_cli({"--gateway", unknown.address(), "deregister", "--pid", "2.7.42", "--epoch", "31"});
    EXPECT_EQ(u.status, 1);
    EXPECT_EQ(u.err, "fedgate-node: deregister refused: unknown\n");
}

DmaAddress resolved_record() {
    DmaAddress a;
    a.pid = ProcessId::make(2, 3, 99);
    a.epoch = 5;
    a.transport = Transport::roce_v2;
    a.gid = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x1};
    a.qpn = 0x1234;
    a.mtu = 2048;
    a.ipv4 = 0xc6120214;  // 198.18.2.20
    a.port = 4791;
    a.ttl_s = 60;
    return a;
}

TEST(FedgateNode, ResolveJsonHasEveryFieldInOrder) {
    FakeGateway gw([](const Request& q, size_t) {
        return std::vector<Reply>{{resolve_reply(q.id(), ResolveStatus::ok, AnswerSource::directed,
                                                 ProcessId::make(0, 3, 99), resolved_record())}};
    });
    const CliResult r = node_cli({"--gateway", gw.address(), "resolve", "0.3.99", "--json", "--timeout-ms", "500"});
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::ordered_json::parse(r.out);
    const nlohmann::ordered_json want = {
        {"status", "ok"},          {"source", "directed"}, {"target", "0.3.99"}, {"pid", "2.3.99"},
        {"epoch", 5},              {"transport", "roce_v2"}, {"address", "198.18.2.20:4791"},
        {"gid", "fe80::1"},        {"qpn", 4660},          {"mtu", 2048},        {"ttl_s", 60},
    };
    EXPECT_EQ(j.dump(), want.dump());

    const auto reqs = gw.requests();
    ASSERT_EQ(reqs.size(), 1u);
    ResolveBody b{};
    store_be64(b.target, ProcessId::make(0, 3, 99).value);
    EXPECT_EQ(reqs[0].bytes, message(MsgType::resolve, reqs[0].id(), b));
}

TEST(FedgateNode, ResolvePrintsOneHumanLine) {
    FakeGateway gw([](const Request& q, size_t) {
        return std::vector<Reply>{{resolve_reply(q.id(), ResolveStatus::ok, AnswerSource::cache,
                                                 ProcessId::make(2, 3, 99), resolved_record())}};
    });
    const CliResult r = node_cli({"--gateway", gw.address(), "resolve", "2.3.99"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "2.3.99 epoch 5 roce_v2 198.18.2.20:4791 gid fe80::1 qpn 4660 mtu 2048 source cache\n");
}

TEST(FedgateNode, ResolveNegativeAnswerExitsOneNamingTheStatus) {
    FakeGateway gw([](const Request& q, size_t) {
        return std::vector<Reply>{
            {resolve_reply(q.id(), ResolveStatus::not_found, AnswerSource::negative_cache, ProcessId::make(2, 3, 99))}};
    });
    const CliResult r = node_cli({"--gateway", gw.address(), "resolve", "2.3.99"});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "fedgate-node: resolve 2.3.99: not_found\n");
    EXPECT_EQ(r.out, "");

    const CliResult j = node_cli({"--gateway", gw.address(), "resolve", "2.3.99", "--json"});
    EXPECT_EQ(j.status, 1);
    EXPECT_EQ(nlohmann::ordered_json::parse(j.out).dump(), R"({"status":"not_found","target":"2.3.99"})");
}

}  // namespace
}  // namespace fedgate
