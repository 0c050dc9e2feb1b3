// fedgatectl's command line and output, end to end against a fake fedgated on a temporary Unix socket.
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/fedgatectl_cli.hpp"
#include "tools/mgmt_client.hpp"

namespace {

using namespace std::chrono_literals;

struct CtlResult {
    int status;
    std::string out;
    std::string err;
};

CtlResult ctl(std::vector<std::string> args) {
    args.insert(args.begin(), "fedgatectl");
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    std::ostringstream out, err;
    const int status = fedgate::run_fedgatectl(static_cast<int>(args.size()), argv.data(), out, err);
    return {status, out.str(), err.str()};
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

size_t line_count(const std::string& s) {
    size_t n = 0;
    for (char c : s)
        n += c == '\n';
    return n;
}

// A private directory for sockets, removed with everything in it.
class TempDir {
public:
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "fedgatectl-test-XXXXXX").string();
        if (!::mkdtemp(tmpl.data()))
            throw std::runtime_error("mkdtemp failed");
        path_ = tmpl;
    }
    ~TempDir() { std::filesystem::remove_all(path_); }
    std::string path(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

// Stands in for fedgated: answers the next connection with one canned line, in a thread, and keeps
// the request line it got. Every wait is bounded so a failing test cannot hang.
class FakeDaemon {
public:
    FakeDaemon() : path_(dir_.path("fedgated.sock")) {
        fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strncpy(addr.sun_path, path_.c_str(), sizeof addr.sun_path - 1);
        if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 4) != 0)
            throw std::runtime_error("fake daemon: cannot listen on " + path_);
    }
    ~FakeDaemon() {
        if (thread_.joinable())
            thread_.join();
        ::close(fd_);
    }
    const std::string& path() const { return path_; }

    // `reply` is sent as is plus "\n"; an empty reply means stay silent until the client leaves.
    // Canned replies are written across lines for reading; the wire carries one line.
    void answer(std::string reply) {
        std::erase(reply, '\n');
        thread_ = std::thread([this, reply = std::move(reply)] { serve(reply); });
    }
    // A Unix connect completes into the listen backlog at once, so no wait is needed here.
    bool has_pending_connection() const {
        pollfd p{fd_, POLLIN, 0};
        return ::poll(&p, 1, 0) == 1;
    }
    std::string request() {
        if (thread_.joinable())
            thread_.join();
        return request_;
    }

private:
    static bool readable(int fd) {
        pollfd p{fd, POLLIN, 0};
        return ::poll(&p, 1, 5000) == 1;
    }
    void serve(const std::string& reply) {
        if (!readable(fd_))
            return;
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0)
            return;
        char buf[4096];
        while (request_.find('\n') == std::string::npos && readable(c)) {
            ssize_t n = ::read(c, buf, sizeof buf);
            if (n <= 0)
                break;
            request_.append(buf, static_cast<size_t>(n));
        }
        if (reply.empty()) {
            while (readable(c) && ::read(c, buf, sizeof buf) > 0) {
            }
        } else {
            const std::string line = reply + "\n";
            (void)!::write(c, line.data(), line.size());
        }
        ::close(c);
    }

    TempDir dir_;
    std::string path_;
    int fd_ = -1;
    std::thread thread_;
    std::string request_;
};

constexpr const char* kStatusReply = R"({"ok":true,"result":{"party":"alpha","party_id":1,"version":"0.1.0",
"pid":123,"uptime_s":12.5,"dataplane_lcores":[0],"idle":"backoff","ports":[
{"name":"internal","role":"internal","port_id":0,"device":"net_af_packet0,iface=veth-a-in","driver":"net_af_packet",
 "address":"198.18.1.1/24","next_hop":null,"mac":"02:00:00:00:01:01","link":{"up":true,"speed_mbps":10000,"duplex":"full"},
 "neighbours":2},
{"name":"external","role":"external","port_id":1,"device":"net_af_packet1,iface=veth-a-ex","driver":"net_af_packet",
 "address":"198.19.0.1/24","next_hop":"198.19.0.254","mac":"02:00:00:00:02:01","link":{"up":false,"speed_mbps":0,"duplex":"half"},
 "neighbours":0}],
"peers":[{"party":"beta","party_id":2,"address":"198.19.0.2"},{"party":"gamma","party_id":3,"address":"198.19.0.3"}]}})";

constexpr const char* kStatsReply = R"({"ok":true,"result":{"ports":[
{"name":"internal","rx_packets":1200,"rx_bytes":98000,"tx_packets":1100,"tx_bytes":87000,"drops":7,
 "drops_by_reason":{"l2_not_for_us":5,"ipv4_bad_checksum":2,"arp_malformed":0},
 "hw":{"ipackets":1207,"opackets":1100,"imissed":0}},
{"name":"external","rx_packets":3,"rx_bytes":180,"tx_packets":3,"tx_bytes":180,"drops":0,
 "drops_by_reason":{"l2_not_for_us":0},
 "hw":{"ipackets":3,"opackets":3,"imissed":0}}],
"drops_by_reason":{"l2_not_for_us":5,"ipv4_bad_checksum":2,"arp_malformed":0},
"arp":{"requests_sent":1,"requests_received":4},
"icmp":{"echo_requests_received":3,"echo_replies_sent":3},
"loop":{"polls":123456789,"busy_polls":1000},
"future_section":{"widgets":9}}})";

constexpr const char* kPingReply =
    R"({"ok":true,"result":{"dst":"198.19.0.2","src":"198.19.0.1","port":"external","sent":3,"received":2,"rtt_ms":[0.31,null,0.125]}})";

// ---- command line, nothing sent ---------------------------------------------------------------

TEST(FedgatectlArgs, UnknownCommandExitsTwoWithOneLineThenUsage) {
    CtlResult r = ctl({"--socket", "/nonexistent/s.sock", "frobnicate"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err), "fedgatectl: unknown command 'frobnicate'");
    EXPECT_NE(r.err.find("usage: fedgatectl"), std::string::npos);
    EXPECT_EQ(r.out, "");
}

TEST(FedgatectlArgs, NoCommandExitsTwo) {
    CtlResult r = ctl({});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err), "fedgatectl: no command given");
}

TEST(FedgatectlArgs, UnknownOptionExitsTwoNamingIt) {
    CtlResult r = ctl({"status", "--verbose"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err), "fedgatectl: status: unrecognised option '--verbose'");
}

TEST(FedgatectlArgs, ExtraArgumentExitsTwoNamingIt) {
    CtlResult r = ctl({"stats", "now"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err), "fedgatectl: stats: unexpected argument 'now'");
}

TEST(FedgatectlArgs, PingCountOutOfRangeExitsTwoNamingCount) {
    for (const char* count : {"0", "101", "-5"}) {
        CtlResult r = ctl({"ping", "198.19.0.2", std::string("--count=") + count});
        EXPECT_EQ(r.status, 2) << count;
        EXPECT_EQ(first_line(r.err), std::string("fedgatectl: ping: --count must be 1..100, got ") + count);
        EXPECT_NE(r.err.find("usage: fedgatectl [--socket PATH] [--json] ping ADDR"), std::string::npos);
    }
}

TEST(FedgatectlArgs, PingCountNotANumberExitsTwoNamingCount) {
    CtlResult r = ctl({"ping", "198.19.0.2", "--count", "many"});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(first_line(r.err).find("'--count'"), std::string::npos) << r.err;
}

TEST(FedgatectlArgs, PingTimeoutOutOfRangeExitsTwo) {
    CtlResult r = ctl({"ping", "198.19.0.2", "--timeout-ms", "0"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err), "fedgatectl: ping: --timeout-ms must be 1..60000, got 0");
}

TEST(FedgatectlArgs, PingAddressNotDottedQuadExitsTwoNamingAddress) {
    for (const char* addr : {"198.19.0", "198.19.0.256", "gateway-b", "::1", "198.19.0.2/24"}) {
        CtlResult r = ctl({"ping", addr});
        EXPECT_EQ(r.status, 2) << addr;
        EXPECT_EQ(first_line(r.err), std::string("fedgatectl: ping: '") + addr +
                                         "' is not an IPv4 address (want a dotted quad such as 198.19.0.2)");
    }
}

TEST(FedgatectlArgs, PingWithoutAddressExitsTwo) {
    CtlResult r = ctl({"ping", "--count", "2"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err), "fedgatectl: ping: missing ADDR (the IPv4 address to ping)");
}

TEST(FedgatectlArgs, BadArgumentsAreRejectedBeforeConnecting) {
    FakeDaemon daemon;
    CtlResult r = ctl({"--socket", daemon.path(), "ping", "not-an-address"});
    EXPECT_EQ(r.status, 2);
    EXPECT_FALSE(daemon.has_pending_connection());
}

// ---- help ----------------------------------------------------------------------------------

TEST(FedgatectlHelp, HelpExitsZeroAndMentionsEveryCommand) {
    for (const auto& args : {std::vector<std::string>{"help"}, std::vector<std::string>{"--help"},
                             std::vector<std::string>{"-h"}}) {
        CtlResult r = ctl(args);
        EXPECT_EQ(r.status, 0);
        EXPECT_EQ(r.err, "");
        EXPECT_NE(r.out.find("usage: fedgatectl [--socket PATH] [--json] COMMAND [ARGS]"), std::string::npos);
        for (const char* line : {"  status  ", "  stats  ", "  ping ADDR  ", "  help [COMMAND]  ",
                                 "  fedgatectl ping 198.19.0.2 --count 5\n", "$FEDGATE_SOCKET"})
            EXPECT_NE(r.out.find(line), std::string::npos) << line;
    }
}

TEST(FedgatectlHelp, CommandHelpShowsItsOptionsAndExample) {
    for (const auto& args : {std::vector<std::string>{"help", "ping"}, std::vector<std::string>{"ping", "--help"}}) {
        CtlResult r = ctl(args);
        EXPECT_EQ(r.status, 0);
        EXPECT_EQ(first_line(r.out), "usage: fedgatectl [--socket PATH] [--json] ping ADDR [--count N] [--timeout-ms MS]");
        EXPECT_NE(r.out.find("--count N (=3)"), std::string::npos);
        EXPECT_NE(r.out.find("--timeout-ms MS (=1000)"), std::string::npos);
        EXPECT_NE(r.out.find("example:\n  fedgatectl ping 198.19.0.2 --count 5\n"), std::string::npos);
    }
}

TEST(FedgatectlHelp, HelpForUnknownCommandExitsTwo) {
    CtlResult r = ctl({"help", "frobnicate"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err), "fedgatectl: help: unknown command 'frobnicate'");
}

// ---- reaching the daemon --------------------------------------------------------------------

TEST(FedgatectlSocket, MissingSocketExitsOneWithOneLineNamingIt) {
    TempDir dir;
    const std::string sock = dir.path("fedgated.sock");
    CtlResult r = ctl({"--socket", sock, "status"});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "fedgatectl: cannot reach fedgated at " + sock + ": No such file or directory\n");
    EXPECT_EQ(r.out, "");
}

TEST(FedgatectlSocket, StaleSocketExitsOneWithConnectionRefused) {
    TempDir dir;
    const std::string sock = dir.path("stale.sock");
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);  // bound, never listened: what a crashed daemon leaves behind
    CtlResult r = ctl({"stats", "--socket", sock});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "fedgatectl: cannot reach fedgated at " + sock + ": Connection refused\n");
}

TEST(FedgatectlSocket, SocketDefaultsToEnvironment) {
    TempDir dir;
    const std::string sock = dir.path("from-env.sock");
    ::setenv("FEDGATE_SOCKET", sock.c_str(), 1);
    CtlResult r = ctl({"status"});
    ::unsetenv("FEDGATE_SOCKET");
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "fedgatectl: cannot reach fedgated at " + sock + ": No such file or directory\n");
}

TEST(FedgatectlSocket, DaemonRefusalExitsOneWithItsMessage) {
    FakeDaemon daemon;
    daemon.answer(R"({"ok":false,"error":"dst: 198.18.9.9 is on no port's subnet"})");
    CtlResult r = ctl({"--socket", daemon.path(), "ping", "198.18.9.9"});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.err, "fedgatectl: dst: 198.18.9.9 is on no port's subnet\n");
    EXPECT_EQ(r.out, "");
}

TEST(FedgatectlSocket, MalformedReplyExitsOne) {
    for (const char* reply : {"not json at all", R"({"result":{}})", "[1,2]", R"({"ok":true})"}) {
        FakeDaemon daemon;
        daemon.answer(reply);
        CtlResult r = ctl({"--socket", daemon.path(), "status"});
        EXPECT_EQ(r.status, 1) << reply;
        EXPECT_EQ(line_count(r.err), 1u) << r.err;
        EXPECT_NE(r.err.find("fedgated at " + daemon.path()), std::string::npos) << r.err;
    }
}

TEST(MgmtCall, SilentDaemonTimesOut) {
    FakeDaemon daemon;
    daemon.answer("");
    const auto start = std::chrono::steady_clock::now();
    try {
        fedgate::mgmt_call(daemon.path(), {{"cmd", "status"}}, 200ms);
        FAIL() << "no timeout";
    } catch (const fedgate::MgmtCallError& e) {
        EXPECT_EQ(e.kind(), fedgate::MgmtCallError::Kind::timeout);
        EXPECT_EQ(std::string(e.what()), "fedgated at " + daemon.path() + " did not reply within 0.2 s");
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(MgmtCall, SendsOneJsonLineAndKeepsReplyOrder) {
    FakeDaemon daemon;
    daemon.answer(R"({"ok":true,"result":{"zeta":1,"alpha":2}})");
    auto reply = fedgate::mgmt_call(daemon.path(), {{"cmd", "stats"}}, 2s);
    EXPECT_TRUE(reply.ok);
    EXPECT_EQ(reply.result.dump(), R"({"zeta":1,"alpha":2})");
    EXPECT_EQ(daemon.request(), "{\"cmd\":\"stats\"}\n");
}

// ---- output --------------------------------------------------------------------------------

TEST(FedgatectlOutput, StatusPrintsHeaderPortsAndPeers) {
    FakeDaemon daemon;
    daemon.answer(kStatusReply);
    CtlResult r = ctl({"--socket", daemon.path(), "status"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(daemon.request(), "{\"cmd\":\"status\"}\n");
    EXPECT_EQ(r.out,
              "party alpha (id 1)  version 0.1.0  pid 123  up 12s  dataplane lcores 0  idle backoff\n"
              "internal  internal  198.18.1.1/24  02:00:00:00:01:01  link up 10000Mb/s full  net_af_packet0,iface=veth-a-in\n"
              "    port 0  driver net_af_packet  next hop none  neighbours 2\n"
              "external  external  198.19.0.1/24  02:00:00:00:02:01  link down               net_af_packet1,iface=veth-a-ex\n"
              "    port 1  driver net_af_packet  next hop 198.19.0.254  neighbours 0\n"
              "peer  beta   id 2  198.19.0.2\n"
              "peer  gamma  id 3  198.19.0.3\n");
    EXPECT_EQ(r.err, "");
}

TEST(FedgatectlOutput, StatusJsonPrintsResultWithTwoSpaceIndent) {
    const std::string expected = nlohmann::ordered_json::parse(kStatusReply)["result"].dump(2) + "\n";
    for (const auto& where : {"before", "after"}) {
        FakeDaemon daemon;
        daemon.answer(kStatusReply);
        CtlResult r = std::string(where) == "before" ? ctl({"--json", "--socket", daemon.path(), "status"})
                                               : ctl({"status", "--socket", daemon.path(), "--json"});
        EXPECT_EQ(r.status, 0) << where;
        EXPECT_EQ(r.out, expected) << where;
    }
    EXPECT_TRUE(expected.starts_with("{\n  \"party\": \"alpha\",\n  \"party_id\": 1,\n  \"version\"")) << expected;
}

TEST(FedgatectlOutput, StatsPrintsPortTablesDropReasonsAndEverySection) {
    FakeDaemon daemon;
    daemon.answer(kStatsReply);
    CtlResult r = ctl({"--socket", daemon.path(), "stats"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out,
              "port      rx pkts  rx bytes  tx pkts  tx bytes  drops\n"
              "internal     1200     98000     1100     87000      7\n"
              "external        3       180        3       180      0\n"
              "\n"
              "port (hw)  ipackets  opackets  imissed\n"
              "internal       1207      1100        0\n"
              "external          3         3        0\n"
              "\n"
              "drops by reason    total  internal  external\n"
              "l2_not_for_us          5         5         0\n"
              "ipv4_bad_checksum      2         2         0\n"
              "\n"
              "arp\n"
              "  requests_sent      1\n"
              "  requests_received  4\n"
              "\n"
              "icmp\n"
              "  echo_requests_received  3\n"
              "  echo_replies_sent       3\n"
              "\n"
              "loop\n"
              "  polls       123456789\n"
              "  busy_polls       1000\n"
              "\n"
              "future_section\n"
              "  widgets  9\n");
}

TEST(FedgatectlOutput, StatsWithNoDropsSaysNone) {
    FakeDaemon daemon;
    daemon.answer(R"({"ok":true,"result":{"ports":[],"drops_by_reason":{"l2_not_for_us":0}}})");
    CtlResult r = ctl({"--socket", daemon.path(), "stats"});
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, "port  rx pkts  rx bytes  tx pkts  tx bytes  drops\n\ndrops by reason  none\n");
}

TEST(FedgatectlOutput, StatsJsonPrintsResultWithTwoSpaceIndent) {
    FakeDaemon daemon;
    daemon.answer(kStatsReply);
    CtlResult r = ctl({"stats", "--json", "--socket", daemon.path()});
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, nlohmann::ordered_json::parse(kStatsReply)["result"].dump(2) + "\n");
}

TEST(FedgatectlOutput, PingSendsItsArgumentsAndPrintsEachReply) {
    FakeDaemon daemon;
    daemon.answer(kPingReply);
    CtlResult r = ctl({"--socket", daemon.path(), "ping", "198.19.0.2", "--timeout-ms", "250"});
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(daemon.request(), "{\"cmd\":\"ping\",\"dst\":\"198.19.0.2\",\"count\":3,\"timeout_ms\":250}\n");
    EXPECT_EQ(r.out,
              "ping 198.19.0.2 from 198.19.0.1 port external\n"
              "reply from 198.19.0.2: seq=1 time=0.310 ms\n"
              "no reply: seq=2\n"
              "reply from 198.19.0.2: seq=3 time=0.125 ms\n"
              "3 sent, 2 received, 33% loss\n"
              "rtt min/avg/max 0.125/0.217/0.310 ms\n");
}

TEST(FedgatectlOutput, PingWithNoReplyExitsOne) {
    FakeDaemon daemon;
    daemon.answer(
        R"({"ok":true,"result":{"dst":"198.19.0.9","src":"198.19.0.1","port":"external","sent":2,"received":0,"rtt_ms":[null,null]}})");
    CtlResult r = ctl({"--socket", daemon.path(), "ping", "198.19.0.9", "--count", "2"});
    EXPECT_EQ(r.status, 1);
    EXPECT_EQ(r.out,
              "ping 198.19.0.9 from 198.19.0.1 port external\n"
              "no reply: seq=1\n"
              "no reply: seq=2\n"
              "2 sent, 0 received, 100% loss\n");
}

}  // namespace
