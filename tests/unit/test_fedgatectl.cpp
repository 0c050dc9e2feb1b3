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
 "address":"198.18.1.1/24","next_hop":null,"mac":"02:00:00:00:01:01",
 "offloads":{"rss":true,"rx_checksum":false,"tx_checksum":true},"link":{"up":true,"speed_mbps":10000,"duplex":"full"},
 "neighbours":2},
{"name":"external","role":"external","port_id":1,"device":"net_af_packet1,iface=veth-a-ex","driver":"net_af_packet",
 "address":"198.19.0.1/24","next_hop":"198.19.0.254","mac":"02:00:00:00:02:01",
 "offloads":{"rss":false,"rx_checksum":false,"tx_checksum":false},"link":{"up":false,"speed_mbps":0,"duplex":"half"},
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

TEST(FedgatectlArgs, VersionPrintsTheVersionWithoutADaemon) {
    CtlResult r = ctl({"--version"});
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, std::string("fedgatectl ") + FEDGATE_VERSION + "\n");
    EXPECT_EQ(r.err, "");
    EXPECT_NE(ctl({"--help"}).out.find("--version"), std::string::npos);
}

TEST(FedgatectlArgs, DashJIsTheShortFormOfJson) {
    for (const char* flag : {"-j", "--json"}) {
        FakeDaemon daemon;
        daemon.answer(R"({"ok":true,"result":{"party":"alpha","n":1}})");
        CtlResult r = ctl({"--socket", daemon.path(), flag, "stats"});
        EXPECT_EQ(r.status, 0) << flag << ": " << r.err;
        EXPECT_EQ(nlohmann::json::parse(r.out), nlohmann::json::parse(R"({"party":"alpha","n":1})")) << flag;
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
              "    port 0  driver net_af_packet  next hop none  neighbours 2  offloads rss,tx_checksum\n"
              "external  external  198.19.0.1/24  02:00:00:00:02:01  link down               net_af_packet1,iface=veth-a-ex\n"
              "    port 1  driver net_af_packet  next hop 198.19.0.254  neighbours 0  offloads none\n"
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

TEST(FedgatectlOutput, AnotherNumberOfAPortIsAColumnOfItsOwn) {
    FakeDaemon daemon;
    daemon.answer(R"({"ok":true,"result":{"ports":[{"name":"internal","rx_packets":1,"rx_bytes":2,"tx_packets":3,)"
                  R"("tx_bytes":4,"drops":0,"handed_off":7}],"drops_by_reason":{}}})");
    CtlResult r = ctl({"--socket", daemon.path(), "stats"});
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out,
              "port      rx pkts  rx bytes  tx pkts  tx bytes  drops  handed_off\n"
              "internal        1         2        3         4      0           7\n"
              "\n"
              "drops by reason  none\n");
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

// ---- map and session ----------------------------------------------------------------------

constexpr const char* kImport =
    R"({"kind":"import","cluster":"c1","proto":"tcp","port":8080,"peer":"beta","peer_id":2,"peer_port":9000,)"
    R"("allow":["198.18.1.0/24"],"source":"cli"})";
constexpr const char* kExport =
    R"({"kind":"export","cluster":"c1","proto":"tcp","port":9000,"node":"198.18.2.10:80","allow_parties":["alpha"],)"
    R"("source":"cli"})";

std::string ok(const std::string& result) { return R"({"ok":true,"result":)" + result + "}"; }

constexpr const char* kMapListReply = R"({"ok":true,"result":{"imports":[
{"kind":"import","cluster":"c1","proto":"tcp","port":8080,"peer":"beta","peer_id":2,"peer_port":9000,
 "allow":["198.18.1.0/24"],"source":"config"},
{"kind":"import","cluster":"cluster-two","proto":"udp","port":53,"peer":"gamma","peer_id":3,"peer_port":10053,
 "allow":[],"source":"cli"},
{"kind":"import","cluster":"c1","proto":"tcp","port":8081,"peer":"beta","peer_id":2,"peer_port":9001,
 "allow":["198.18.1.0/25","198.18.1.128/25"],"source":"auto"}],
"exports":[{"kind":"export","cluster":"c1","proto":"tcp","port":9000,"node":"198.18.2.10:80",
 "allow_parties":["alpha"],"source":"cli"},
{"kind":"export","cluster":"c2","proto":"udp","port":9001,"node":"198.18.2.11:5001",
 "allow_parties":["alpha","gamma"],"source":"config"},
{"kind":"export","cluster":"c2","proto":"tcp","port":19002,"node":"198.18.2.12:8443",
 "allow_parties":[],"source":"auto"}]}})";

constexpr const char* kSessionListReply = R"({"ok":true,"result":{"sessions":[
{"kind":"import","proto":"tcp","state":"established","in":{"src":"198.18.1.10:40000","dst":"198.18.1.1:8080"},
 "out":{"src":"198.19.0.1:61000","dst":"198.19.0.2:9000"},"idle_s":1.5,"timeout_s":7440},
{"kind":"export","proto":"udp","state":"open","in":{"src":"198.19.0.3:61001","dst":"198.19.0.1:9001"},
 "out":{"src":"198.18.2.1:50000","dst":"198.18.2.11:5001"},"idle_s":0,"timeout_s":300}],
"total":17,"truncated":true}})";

// Runs fedgatectl against a fake daemon that answers `reply`; returns what it printed and the
// request line the daemon got.
struct Exchange {
    CtlResult r;
    std::string request;
};

Exchange exchange(const std::string& reply, std::vector<std::string> args) {
    FakeDaemon daemon;
    daemon.answer(reply);
    args.insert(args.begin(), {"--socket", daemon.path()});
    CtlResult r = ctl(args);
    return {r, daemon.request()};
}

std::string pretty(const std::string& reply) { return nlohmann::ordered_json::parse(reply)["result"].dump(2) + "\n"; }

TEST(FedgatectlMap, AddImportSendsEveryFieldAndPrintsOneLine) {
    Exchange x = exchange(ok(kImport), {"map", "add", "import", "--cluster", "c1", "--proto", "tcp", "--port", "8080",
                                        "--peer", "beta", "--peer-port", "9000", "--allow", "198.18.1.0/24",
                                        "--allow=198.18.3.0/24"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.request,
              R"({"cmd":"map_add","kind":"import","cluster":"c1","proto":"tcp","port":8080,"peer":"beta",)"
              R"("peer_port":9000,"allow":["198.18.1.0/24","198.18.3.0/24"]})"
              "\n");
    EXPECT_EQ(x.r.out, "added import c1 tcp/8080 -> beta:9000\n");
    EXPECT_EQ(x.r.err, "");
}

TEST(FedgatectlMap, AddImportWithoutAllowSendsAnEmptyList) {
    Exchange x = exchange(ok(kImport), {"map", "add", "import", "--peer-port=9000", "--peer=beta", "--port=53",
                                        "--proto=udp", "--cluster=A_b-9"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.request,
              R"({"cmd":"map_add","kind":"import","cluster":"A_b-9","proto":"udp","port":53,"peer":"beta",)"
              R"("peer_port":9000,"allow":[]})"
              "\n");
}

TEST(FedgatectlMap, AddExportSendsEveryFieldAndPrintsOneLine) {
    Exchange x = exchange(ok(kExport), {"map", "add", "export", "--cluster", "c1", "--proto", "tcp", "--port", "9000",
                                        "--node", "198.18.2.10:80", "--allow-party", "alpha", "--allow-party",
                                        "gamma"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.request,
              R"({"cmd":"map_add","kind":"export","cluster":"c1","proto":"tcp","port":9000,)"
              R"("node":"198.18.2.10:80","allow_parties":["alpha","gamma"]})"
              "\n");
    EXPECT_EQ(x.r.out, "added export c1 tcp/9000 -> 198.18.2.10:80\n");
}

TEST(FedgatectlMap, AddExportWithoutAllowPartySendsAnEmptyList) {
    Exchange x = exchange(ok(kExport), {"map", "add", "export", "--cluster", "c1", "--proto", "udp", "--port", "65535",
                                        "--node", "198.18.2.10:1"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.request,
              R"({"cmd":"map_add","kind":"export","cluster":"c1","proto":"udp","port":65535,)"
              R"("node":"198.18.2.10:1","allow_parties":[]})"
              "\n");
}

TEST(FedgatectlMap, AddJsonPrintsTheStoredMapping) {
    const std::vector<std::string> add{"map", "add", "export", "--cluster", "c1", "--proto", "tcp",
                                       "--port", "9000", "--node", "198.18.2.10:80"};
    auto before = add;
    before.insert(before.begin(), "--json");
    auto after = add;
    after.push_back("--json");
    for (const auto& args : {before, after}) {
        Exchange x = exchange(ok(kExport), args);
        EXPECT_EQ(x.r.status, 0) << x.r.err;
        EXPECT_EQ(x.r.out, pretty(ok(kExport)));
    }
}

TEST(FedgatectlMap, DaemonRefusalExitsOneWithItsMessage) {
    Exchange x = exchange(R"({"ok":false,"error":"port: 8080/tcp is already mapped"})",
                          {"map", "add", "import", "--cluster", "c1", "--proto", "tcp", "--port", "8080", "--peer",
                           "beta", "--peer-port", "9000"});
    EXPECT_EQ(x.r.status, 1);
    EXPECT_EQ(x.r.err, "fedgatectl: port: 8080/tcp is already mapped\n");
    EXPECT_EQ(x.r.out, "");
}

TEST(FedgatectlMap, DelByPortSendsKindProtoPort) {
    Exchange x = exchange(ok(std::string(R"({"deleted":[)") + kImport + "]}"),
                          {"map", "del", "import", "--proto", "tcp", "--port", "8080"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.request, "{\"cmd\":\"map_del\",\"kind\":\"import\",\"proto\":\"tcp\",\"port\":8080}\n");
    EXPECT_EQ(x.r.out, "deleted 1 mapping\n  import c1 tcp/8080 -> beta:9000\n");
}

TEST(FedgatectlMap, DelByClusterSendsClusterAndOptionalKind) {
    const std::string reply = ok(std::string(R"({"deleted":[)") + kImport + "," + kExport + "]}");
    Exchange all = exchange(reply, {"map", "del", "--cluster", "c1"});
    EXPECT_EQ(all.r.status, 0) << all.r.err;
    EXPECT_EQ(all.request, "{\"cmd\":\"map_del\",\"cluster\":\"c1\"}\n");
    EXPECT_EQ(all.r.out,
              "deleted 2 mappings\n"
              "  import c1 tcp/8080 -> beta:9000\n"
              "  export c1 tcp/9000 -> 198.18.2.10:80\n");

    Exchange one_kind = exchange(ok(R"({"deleted":[]})"), {"map", "del", "--cluster", "c1", "export"});
    EXPECT_EQ(one_kind.r.status, 0) << one_kind.r.err;
    EXPECT_EQ(one_kind.request, "{\"cmd\":\"map_del\",\"cluster\":\"c1\",\"kind\":\"export\"}\n");
    EXPECT_EQ(one_kind.r.out, "deleted 0 mappings\n");

    Exchange kind_first = exchange(ok(R"({"deleted":[]})"), {"map", "del", "import", "--cluster", "c1"});
    EXPECT_EQ(kind_first.request, "{\"cmd\":\"map_del\",\"cluster\":\"c1\",\"kind\":\"import\"}\n");
}

TEST(FedgatectlMap, DelJsonPrintsTheResult) {
    const std::string reply = ok(std::string(R"({"deleted":[)") + kExport + "]}");
    Exchange x = exchange(reply, {"map", "del", "export", "--proto", "tcp", "--port", "9000", "--json"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out, pretty(reply));
}

TEST(FedgatectlMap, ListSendsClusterOnlyWhenGiven) {
    Exchange all = exchange(kMapListReply, {"map", "list"});
    EXPECT_EQ(all.request, "{\"cmd\":\"map_list\"}\n");
    Exchange one = exchange(kMapListReply, {"map", "list", "--cluster", "c1"});
    EXPECT_EQ(one.request, "{\"cmd\":\"map_list\",\"cluster\":\"c1\"}\n");
}

TEST(FedgatectlMap, ListPrintsTwoAlignedTables) {
    Exchange x = exchange(kMapListReply, {"map", "list"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out,
              "imports\n"
              "  cluster      proto  port      peer:port    allow                          source\n"
              "  c1           tcp    8080  ->  beta:9000    198.18.1.0/24                  config\n"
              "  cluster-two  udp      53  ->  gamma:10053  any                            cli\n"
              "  c1           tcp    8081  ->  beta:9001    198.18.1.0/25,198.18.1.128/25  auto\n"
              "\n"
              "exports\n"
              "  cluster  proto   port      node              allow parties  source\n"
              "  c1       tcp     9000  ->  198.18.2.10:80    alpha          cli\n"
              "  c2       udp     9001  ->  198.18.2.11:5001  alpha,gamma    config\n"
              "  c2       tcp    19002  ->  198.18.2.12:8443  any            auto\n");
}

TEST(FedgatectlMap, ListWithNoMappingsSaysNone) {
    Exchange x = exchange(ok(R"({"imports":[],"exports":[]})"), {"map", "list"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out, "imports\n  none\n\nexports\n  none\n");
}

TEST(FedgatectlMap, ListJsonPrintsTheResult) {
    Exchange x = exchange(kMapListReply, {"--json", "map", "list"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out, pretty(kMapListReply));
}

TEST(FedgatectlSession, ListSendsTheLimit) {
    Exchange dflt = exchange(kSessionListReply, {"session", "list"});
    EXPECT_EQ(dflt.request, "{\"cmd\":\"session_list\",\"limit\":1000}\n");
    Exchange lim = exchange(kSessionListReply, {"session", "list", "--limit", "100000"});
    EXPECT_EQ(lim.request, "{\"cmd\":\"session_list\",\"limit\":100000}\n");
    Exchange one = exchange(kSessionListReply, {"session", "list", "--limit=1"});
    EXPECT_EQ(one.request, "{\"cmd\":\"session_list\",\"limit\":1}\n");
}

TEST(FedgatectlSession, ListPrintsOneAlignedRowPerSession) {
    Exchange x = exchange(kSessionListReply, {"session", "list"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out,
              "kind    proto  state        in src             in dst               out src           out dst           idle/timeout\n"
              "import  tcp    established  198.18.1.10:40000  198.18.1.1:8080  ->  198.19.0.1:61000  198.19.0.2:9000   1.5s/7440s\n"
              "export  udp    open         198.19.0.3:61001   198.19.0.1:9001  ->  198.18.2.1:50000  198.18.2.11:5001  0s/300s\n"
              "2 sessions shown of 17 (raise --limit to see more)\n");
}

TEST(FedgatectlSession, UntruncatedListHasNoHint) {
    Exchange x = exchange(ok(R"({"sessions":[{"kind":"import","proto":"udp","state":"open",
        "in":{"src":"198.18.1.10:5000","dst":"198.18.1.1:53"},"out":{"src":"198.19.0.1:61002","dst":"198.19.0.2:10053"},
        "idle_s":12.25,"timeout_s":30}],"total":1,"truncated":false})"),
                          {"session", "list", "--limit", "5"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out,
              "kind    proto  state  in src            in dst             out src           out dst           idle/timeout\n"
              "import  udp    open   198.18.1.10:5000  198.18.1.1:53  ->  198.19.0.1:61002  198.19.0.2:10053  12.2s/30s\n"
              "1 session shown of 1\n");
}

TEST(FedgatectlSession, ListWithNoSessions) {
    Exchange x = exchange(ok(R"({"sessions":[],"total":0,"truncated":false})"), {"session", "list"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out, "0 sessions shown of 0\n");
}

TEST(FedgatectlSession, ListJsonPrintsTheResult) {
    Exchange x = exchange(kSessionListReply, {"session", "list", "--json"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out, pretty(kSessionListReply));
}

// Each bad command line exits 2 with one line naming the option (or operand), then the command's
// usage, and never connects.
TEST(FedgatectlMapArgs, BadValuesExitTwoNamingTheOption) {
    const std::vector<std::string> imp{"map", "add", "import"};
    const std::vector<std::string> exp{"map", "add", "export"};
    auto with = [](std::vector<std::string> head, std::initializer_list<std::string> tail) {
        head.insert(head.end(), tail);
        return head;
    };
    const auto import_ok = [&](std::initializer_list<std::string> tail) {
        return with(with(imp, {"--cluster", "c1", "--proto", "tcp", "--port", "8080", "--peer", "beta",
                               "--peer-port", "9000"}),
                    tail);
    };
    const auto export_ok = [&](std::initializer_list<std::string> tail) {
        return with(with(exp, {"--cluster", "c1", "--proto", "tcp", "--port", "9000", "--node", "198.18.2.10:80"}),
                    tail);
    };
    struct Case {
        std::vector<std::string> args;
        std::string first_line;
        std::string usage;  // start of the usage line that follows
    };
    const std::string ui = "usage: fedgatectl [--socket PATH] [--json] map add import --cluster C";
    const std::string ue = "usage: fedgatectl [--socket PATH] [--json] map add export --cluster C";
    const std::string ud = "usage: fedgatectl [--socket PATH] [--json] map del [import|export]";
    const std::string ul = "usage: fedgatectl [--socket PATH] [--json] map list";
    const std::string us = "usage: fedgatectl [--socket PATH] [--json] session list";
    const std::string port_msg = "must be an integer 1..65535, got ";
    const std::string name_msg = "must be 1-32 characters of A-Z a-z 0-9 _ -, got ";
    const std::string cidr_msg = "must be an IPv4 prefix A.B.C.D/1..32 such as 198.18.1.0/24, got ";
    const std::string node_msg = "must be IP:PORT (port 1..65535) such as 198.18.2.10:80, got ";
    const std::vector<Case> cases{
        {with(imp, {"--proto", "tcp", "--port", "1", "--peer", "b", "--peer-port", "2"}),
         "map add import: missing --cluster (the cluster ID)", ui},
        {with(imp, {"--cluster", "c1", "--port", "1", "--peer", "b", "--peer-port", "2"}),
         "map add import: missing --proto (tcp or udp)", ui},
        {with(imp, {"--cluster", "c1", "--proto", "tcp", "--peer", "b", "--peer-port", "2"}),
         "map add import: missing --port (the mapped port)", ui},
        {with(imp, {"--cluster", "c1", "--proto", "tcp", "--port", "1", "--peer-port", "2"}),
         "map add import: missing --peer (the peer party)", ui},
        {with(imp, {"--cluster", "c1", "--proto", "tcp", "--port", "1", "--peer", "b"}),
         "map add import: missing --peer-port (the peer's exported port)", ui},
        {with(imp, {"--cluster", "c1", "--proto", "icmp", "--port", "1", "--peer", "b", "--peer-port", "2"}),
         "map add import: --proto must be tcp or udp, got 'icmp'", ui},
        {with(imp, {"--cluster", "c1", "--proto", "TCP", "--port", "1", "--peer", "b", "--peer-port", "2"}),
         "map add import: --proto must be tcp or udp, got 'TCP'", ui},
        {with(imp, {"--cluster", "c1", "--proto", "tcp", "--port", "0", "--peer", "b", "--peer-port", "2"}),
         "map add import: --port " + port_msg + "'0'", ui},
        {with(imp, {"--cluster", "c1", "--proto", "tcp", "--port", "65536", "--peer", "b", "--peer-port", "2"}),
         "map add import: --port " + port_msg + "'65536'", ui},
        {with(imp, {"--cluster", "c1", "--proto", "tcp", "--port", "80.5", "--peer", "b", "--peer-port", "2"}),
         "map add import: --port " + port_msg + "'80.5'", ui},
        {with(imp, {"--cluster", "c1", "--proto", "tcp", "--port=+80", "--peer", "b", "--peer-port", "2"}),
         "map add import: --port " + port_msg + "'+80'", ui},
        {with(imp, {"--cluster", "c1", "--proto", "tcp", "--port=0x50", "--peer", "b", "--peer-port", "2"}),
         "map add import: --port " + port_msg + "'0x50'", ui},
        {with(imp, {"--cluster", "c1", "--proto", "tcp", "--port=99999999999", "--peer", "b", "--peer-port", "2"}),
         "map add import: --port " + port_msg + "'99999999999'", ui},
        {with(imp, {"--cluster", "c1", "--proto", "tcp", "--port", "80", "--peer", "b", "--peer-port", "x"}),
         "map add import: --peer-port " + port_msg + "'x'", ui},
        {with(imp, {"--cluster", "c 1", "--proto", "tcp", "--port", "80", "--peer", "b", "--peer-port", "2"}),
         "map add import: --cluster " + name_msg + "'c 1'", ui},
        {with(imp, {"--cluster", std::string(33, 'c'), "--proto", "tcp", "--port", "80", "--peer", "b",
                    "--peer-port", "2"}),
         "map add import: --cluster " + name_msg + "'" + std::string(33, 'c') + "'", ui},
        {with(imp, {"--cluster=", "--proto", "tcp", "--port", "80", "--peer", "b", "--peer-port", "2"}),
         "map add import: the argument for option '--cluster' should follow immediately after the equal sign", ui},
        {with(imp, {"--cluster", "", "--proto", "tcp", "--port", "80", "--peer", "b", "--peer-port", "2"}),
         "map add import: --cluster " + name_msg + "''", ui},
        {with(imp, {"--cluster", "c1", "--proto", "tcp", "--port", "80", "--peer", "beta.example", "--peer-port", "2"}),
         "map add import: --peer " + name_msg + "'beta.example'", ui},
        {import_ok({"--allow", "198.18.256.0/24"}), "map add import: --allow " + cidr_msg + "'198.18.256.0/24'", ui},
        {import_ok({"--allow", "198.18.1.0"}), "map add import: --allow " + cidr_msg + "'198.18.1.0'", ui},
        {import_ok({"--allow", "198.18.1/24"}), "map add import: --allow " + cidr_msg + "'198.18.1/24'", ui},
        {import_ok({"--allow", "0.0.0.0/0"}), "map add import: --allow " + cidr_msg + "'0.0.0.0/0'", ui},
        {import_ok({"--allow", "198.18.1.1/33"}), "map add import: --allow " + cidr_msg + "'198.18.1.1/33'", ui},
        {import_ok({"--allow", "198.18.1.0/24", "--allow", "198.18.1.0/2x"}),
         "map add import: --allow " + cidr_msg + "'198.18.1.0/2x'", ui},
        {import_ok({"--allow", "198.18.1.5/24"}),
         "map add import: --allow 198.18.1.5/24 has host bits set (the prefix is 198.18.1.0/24)", ui},
        {import_ok({"--node", "198.18.2.10:80"}), "map add import: unrecognised option '--node'", ui},
        {import_ok({"--port", "81"}), "map add import: option '--port' cannot be specified more than once", ui},
        {import_ok({"extra"}), "map add import: unexpected argument 'extra'", ui},
        {with(exp, {"--cluster", "c1", "--proto", "tcp", "--port", "9000"}),
         "map add export: missing --node (the local node as IP:PORT)", ue},
        {with(exp, {"--cluster", "c1", "--proto", "udp", "--port", "-1", "--node", "198.18.2.10:80"}),
         "map add export: --port " + port_msg + "'-1'", ue},
        {with(exp, {"--cluster", "c1", "--proto", "udp", "--node", "198.18.2.10:80", "--port"}),
         "map add export: the required argument for option '--port' is missing", ue},
        {with(exp, {"--cluster", "c1", "--proto", "tcp", "--port", "9000", "--node", "198.18.2.10"}),
         "map add export: --node " + node_msg + "'198.18.2.10'", ue},
        {with(exp, {"--cluster", "c1", "--proto", "tcp", "--port", "9000", "--node", "198.18.2.10:0"}),
         "map add export: --node " + node_msg + "'198.18.2.10:0'", ue},
        {with(exp, {"--cluster", "c1", "--proto", "tcp", "--port", "9000", "--node", "node-b1:80"}),
         "map add export: --node " + node_msg + "'node-b1:80'", ue},
        {with(exp, {"--cluster", "c1", "--proto", "tcp", "--port", "9000", "--node", "198.18.2.300:80"}),
         "map add export: --node " + node_msg + "'198.18.2.300:80'", ue},
        {export_ok({"--allow-party", "alpha", "--allow-party", "al pha"}),
         "map add export: --allow-party " + name_msg + "'al pha'", ue},
        {export_ok({"--peer", "beta"}), "map add export: unrecognised option '--peer'", ue},
        {export_ok({"--allow", "198.18.1.0/24"}), "map add export: unrecognised option '--allow'", ue},
        {{"map", "del"}, "map del: give KIND --proto --port, or --cluster C", ud},
        {{"map", "del", "import"}, "map del: missing --proto (tcp or udp), or give --cluster C", ud},
        {{"map", "del", "import", "--proto", "tcp"}, "map del: missing --port, or give --cluster C", ud},
        {{"map", "del", "--proto", "tcp", "--port", "80"},
         "map del: missing KIND (import or export) before --proto and --port", ud},
        {{"map", "del", "imports", "--proto", "tcp", "--port", "80"},
         "map del: KIND must be import or export, got 'imports'", ud},
        {{"map", "del", "import", "--proto", "sctp", "--port", "80"},
         "map del: --proto must be tcp or udp, got 'sctp'", ud},
        {{"map", "del", "import", "--proto", "tcp", "--port", "65536"}, "map del: --port " + port_msg + "'65536'", ud},
        {{"map", "del", "import", "--proto", "tcp", "--port", "80", "--cluster", "c1"},
         "map del: --proto cannot be combined with --cluster (delete by port or by cluster, not both)", ud},
        {{"map", "del", "--port", "80", "--cluster", "c1"},
         "map del: --port cannot be combined with --cluster (delete by port or by cluster, not both)", ud},
        {{"map", "del", "--cluster", "c/1"}, "map del: --cluster " + name_msg + "'c/1'", ud},
        {{"map", "del", "import", "export", "--cluster", "c1"}, "map del: unexpected argument 'export'", ud},
        {{"map", "list", "--cluster", "c:1"}, "map list: --cluster " + name_msg + "'c:1'", ul},
        {{"map", "list", "c1"}, "map list: unexpected argument 'c1'", ul},
        {{"session", "list", "--limit", "0"}, "session list: --limit must be an integer 1..100000, got '0'", us},
        {{"session", "list", "--limit", "100001"}, "session list: --limit must be an integer 1..100000, got '100001'",
         us},
        {{"session", "list", "--limit", "all"}, "session list: --limit must be an integer 1..100000, got 'all'", us},
        {{"session", "list", "--cluster", "c1"}, "session list: unrecognised option '--cluster'", us},
    };
    for (const auto& c : cases) {
        FakeDaemon daemon;
        auto args = c.args;
        args.insert(args.begin(), {"--socket", daemon.path()});
        CtlResult r = ctl(args);
        const std::string cmdline = ::testing::PrintToString(c.args);
        EXPECT_EQ(r.status, 2) << cmdline;
        EXPECT_EQ(first_line(r.err), "fedgatectl: " + c.first_line) << cmdline;
        const std::string second = r.err.substr(std::min(r.err.size(), r.err.find('\n') + 1));
        EXPECT_TRUE(second.starts_with(c.usage)) << cmdline << "\n" << r.err;
        EXPECT_EQ(r.out, "") << cmdline;
        EXPECT_FALSE(daemon.has_pending_connection()) << cmdline;
    }
}

TEST(FedgatectlMapArgs, GoodEdgeValuesAreAccepted) {
    for (const auto& allow : {"10.0.0.0/8", "198.18.1.7/32", "128.0.0.0/1", "0.0.0.0/1"}) {
        Exchange x = exchange(ok(kImport), {"map", "add", "import", "--cluster", std::string(32, 'Z'), "--proto",
                                            "udp", "--port", "1", "--peer", "_-", "--peer-port", "65535", "--allow",
                                            allow});
        EXPECT_EQ(x.r.status, 0) << allow << ": " << x.r.err;
        EXPECT_NE(x.request.find(std::string(R"("allow":[")") + allow + "\"]"), std::string::npos) << x.request;
    }
}

TEST(FedgatectlMapArgs, IncompleteCommandNamesTheChoices) {
    CtlResult map = ctl({"map"});
    EXPECT_EQ(map.status, 2);
    EXPECT_EQ(first_line(map.err), "fedgatectl: 'map' needs one of: add, del, list, nft");
    CtlResult add = ctl({"map", "add", "--cluster", "c1"});
    EXPECT_EQ(add.status, 2);
    EXPECT_EQ(first_line(add.err), "fedgatectl: 'map add' needs one of: import, export");
    CtlResult bad = ctl({"map", "show"});
    EXPECT_EQ(bad.status, 2);
    EXPECT_EQ(first_line(bad.err), "fedgatectl: unknown command 'map show' ('map' needs one of: add, del, list, nft)");
    CtlResult session = ctl({"session"});
    EXPECT_EQ(first_line(session.err), "fedgatectl: 'session' needs one of: list");
}

TEST(FedgatectlHelp, HelpListsMapAndSessionCommands) {
    CtlResult r = ctl({"--help"});
    EXPECT_EQ(r.status, 0);
    for (const char* line : {"  map add import  ", "  map add export  ", "  map del [import|export]  ",
                             "  map list  ", "  session list  ",
                             "  fedgatectl map del --cluster c1 export\n", "  fedgatectl session list --limit 50\n"})
        EXPECT_NE(r.out.find(line), std::string::npos) << line;
}

TEST(FedgatectlHelp, HelpMapShowsTheWholeGroupWithExamples) {
    for (const auto& args : {std::vector<std::string>{"help", "map"}, std::vector<std::string>{"map", "--help"}}) {
        CtlResult r = ctl(args);
        EXPECT_EQ(r.status, 0);
        EXPECT_EQ(r.err, "");
        EXPECT_TRUE(r.out.starts_with("The port-map tables.")) << r.out;
        for (const char* s :
             {"usage: fedgatectl [--socket PATH] [--json] map add import --cluster C --proto tcp|udp --port P --peer "
              "PARTY --peer-port Q [--allow CIDR]...\n",
              "usage: fedgatectl [--socket PATH] [--json] map add export --cluster C --proto tcp|udp --port Q --node "
              "IP:PORT [--allow-party PARTY]...\n",
              "usage: fedgatectl [--socket PATH] [--json] map del [import|export] (--proto tcp|udp --port P | "
              "--cluster C)\n",
              "usage: fedgatectl [--socket PATH] [--json] map list [--cluster C]\n",
              "example:\n  fedgatectl map add import --cluster c1 --proto tcp --port 8080 --peer beta --peer-port 9000 "
              "--allow 198.18.1.0/24\n",
              "example:\n  fedgatectl map add export --cluster c1 --proto tcp --port 9000 --node 198.18.2.10:80 "
              "--allow-party alpha\n",
              "examples:\n  fedgatectl map del import --proto tcp --port 8080\n  fedgatectl map del --cluster c1 "
              "export\n",
              "--allow CIDR", "--allow-party PARTY", "--node IP:PORT", "--peer-port Q", "$FEDGATE_SOCKET"})
            EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
        EXPECT_EQ(r.out.find("session list"), std::string::npos);
        size_t globals = 0;
        for (size_t at = r.out.find("--socket PATH  "); at != std::string::npos;
             at = r.out.find("--socket PATH  ", at + 1))
            ++globals;
        EXPECT_EQ(globals, 1u) << r.out;  // the global options once, at the end
    }
    CtlResult add = ctl({"help", "map", "add"});
    EXPECT_EQ(add.status, 0);
    EXPECT_NE(add.out.find("map add import"), std::string::npos);
    EXPECT_NE(add.out.find("map add export"), std::string::npos);
    EXPECT_EQ(add.out.find("map del"), std::string::npos);
}

TEST(FedgatectlHelp, SessionListHelpShowsLimitDefault) {
    CtlResult r = ctl({"session", "list", "--help"});
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(first_line(r.out), "usage: fedgatectl [--socket PATH] [--json] session list [--limit N]");
    EXPECT_NE(r.out.find("--limit N (=1000)"), std::string::npos) << r.out;
}

}  // namespace

// ---- process directory and resolution ---------------------------------------------------------

namespace {

constexpr const char* kDirListReply = R"({"ok":true,"result":{"total":2,"shown":2,"entries":[
{"key":"2.7.42","kind":"announced","owner":"beta","expires_in_ms":null,
 "record":{"pid":"2.7.42","epoch":4242,"transport":"tcp","address":"198.18.2.10:5000","gid":"::ffff:198.18.2.10",
 "qpn":0,"mtu":0,"flags":0,"ttl_s":0}},
{"key":"2.7.99","kind":"negative","owner":"","expires_in_ms":1500}]}})";

constexpr const char* kResolveReply = R"({"ok":true,"result":{"target":"0.7.42","status":"ok","source":"broadcast",
"record":{"pid":"2.7.42","epoch":4242,"transport":"roce_v2","address":"198.18.2.10:4791","gid":"::ffff:198.18.2.10",
"qpn":4660,"mtu":4096,"flags":0,"ttl_s":60}}})";

}  // namespace

TEST(FedgatectlDir, ListSendsWhichAndLimit) {
    EXPECT_EQ(exchange(kDirListReply, {"dir", "list"}).request, "{\"cmd\":\"dir_list\",\"which\":\"all\",\"limit\":1000}\n");
    EXPECT_EQ(exchange(kDirListReply, {"dir", "list", "--local"}).request,
              "{\"cmd\":\"dir_list\",\"which\":\"local\",\"limit\":1000}\n");
    EXPECT_EQ(exchange(kDirListReply, {"dir", "list", "--remote", "--limit", "5"}).request,
              "{\"cmd\":\"dir_list\",\"which\":\"remote\",\"limit\":5}\n");
}

TEST(FedgatectlDir, ListPrintsOneAlignedRowPerEntry) {
    Exchange x = exchange(kDirListReply, {"dir", "list"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out,
              "key     kind       owner  epoch  transport  address           gid                 qpn  mtu  expires\n"
              "2.7.42  announced  beta    4242  tcp        198.18.2.10:5000  ::ffff:198.18.2.10    0    0  never\n"
              "2.7.99  negative              -  -          -                 -                     -    -  1.5s\n"
              "2 shown of 2\n");
}

TEST(FedgatectlDir, LocalAndRemoteExcludeEachOther) {
    FakeDaemon daemon;
    CtlResult r = ctl({"--socket", daemon.path(), "dir", "list", "--local", "--remote"});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("--local and --remote exclude each other"), std::string::npos) << r.err;
    EXPECT_FALSE(daemon.has_pending_connection());
}

TEST(FedgatectlDir, BadPidExitsTwoNamingItBeforeConnecting) {
    for (const char* bad : {"1.2", "65536.1.1", "x", "0x", "1.2.3.4"}) {
        FakeDaemon daemon;
        CtlResult r = ctl({"--socket", daemon.path(), "dir", "show", bad});
        EXPECT_EQ(r.status, 2) << bad;
        EXPECT_NE(r.err.find("dir show: PID must be PARTY.NODE.LOCAL"), std::string::npos) << r.err;
        EXPECT_NE(r.err.find(std::string("'") + bad + "'"), std::string::npos) << r.err;
        EXPECT_FALSE(daemon.has_pending_connection());
    }
    FakeDaemon daemon;
    CtlResult r = ctl({"--socket", daemon.path(), "resolve"});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("resolve: missing PID"), std::string::npos) << r.err;
}

TEST(FedgatectlDir, ShowSendsThePid) {
    Exchange x = exchange(ok(R"({"key":"2.7.42","kind":"local","owner":"beta","expires_in_ms":null,
        "record":{"pid":"2.7.42","epoch":1,"transport":"tcp","address":"198.18.2.10:5000","gid":"::","qpn":0,"mtu":0,
        "flags":0,"ttl_s":0},"source":"198.18.2.10","registered_ms_ago":10,"heartbeat_expires_in_ms":4990})"),
                          {"dir", "show", "0x000200070000002a"});
    EXPECT_EQ(x.request, "{\"cmd\":\"dir_show\",\"pid\":\"0x000200070000002a\"}\n");
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_NE(x.r.out.find("heartbeat_expires_in_ms  4990"), std::string::npos) << x.r.out;
}

TEST(FedgatectlResolve, PrintsTheRecordAndItsSource) {
    Exchange x = exchange(kResolveReply, {"resolve", "0.7.42"});
    EXPECT_EQ(x.request, "{\"cmd\":\"resolve\",\"pid\":\"0.7.42\"}\n");
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out, "2.7.42 epoch 4242 roce_v2 198.18.2.10:4791 gid ::ffff:198.18.2.10 qpn 4660 mtu 4096 (broadcast)\n");
}

TEST(FedgatectlResolve, NotFoundExitsOneNamingTheStatus) {
    Exchange x = exchange(ok(R"({"target":"2.7.99","status":"not_found","source":"negative_cache"})"),
                          {"resolve", "2.7.99"});
    EXPECT_EQ(x.r.status, 1);
    EXPECT_EQ(x.r.out, "resolve 2.7.99: not_found (negative_cache)\n");
}

// ---- log level, log list ----

TEST(FedgatectlLog, LevelSendsTypeAndLevelAndPrintsEachChange) {
    Exchange x = exchange(ok(R"({"changed":[{"type":"fedgate.gateway","from":"info","to":"debug"},
        {"type":"fedgate.resolve","from":"warning","to":"debug"}],"global_level":"debug"})"),
                          {"log", "level", "fedgate.*", "debug"});
    EXPECT_EQ(x.request, "{\"cmd\":\"log_level\",\"type\":\"fedgate.*\",\"level\":\"debug\"}\n");
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out, "fedgate.gateway: info -> debug\nfedgate.resolve: warning -> debug\n");
}

TEST(FedgatectlLog, AnUnknownTypeIsTheDaemonsRefusalExitOne) {
    Exchange x = exchange(R"x({"ok":false,"error":"log_level: no registered log type is named 'lib.nope' (log_list shows them)"})x",
                          {"log", "level", "lib.nope", "info"});
    EXPECT_EQ(x.r.status, 1);
    EXPECT_EQ(x.r.err, "fedgatectl: log_level: no registered log type is named 'lib.nope' (log_list shows them)\n");
    EXPECT_EQ(x.r.out, "");
}

TEST(FedgatectlLog, BadLevelOrTypeExitsTwoListingTheValidOnesBeforeConnecting) {
    struct Case {
        std::vector<std::string> args;
        std::string message;
    };
    const std::vector<Case> cases{
        {{"log", "level", "fedgate.mgmt", "verbose"},
         "log level: LEVEL must be one of emerg, alert, crit, err, warning, notice, info, debug, got 'verbose'"},
        {{"log", "level", "fedgate.mgmt", "INFO"},
         "log level: LEVEL must be one of emerg, alert, crit, err, warning, notice, info, debug, got 'INFO'"},
        {{"log", "level", "fedgate mgmt", "info"},
         "log level: TYPE must be a log type name or glob (1-64 of letters, digits, '_', '.', '-', '*', '?', '[]'), "
         "got 'fedgate mgmt'"},
        {{"log", "level", "fedgate.mgmt"},
         "log level: missing LEVEL (emerg, alert, crit, err, warning, notice, info, debug)"},
        {{"log", "level"}, "log level: missing TYPE"},
    };
    for (const Case& c : cases) {
        FakeDaemon daemon;
        std::vector<std::string> args{"--socket", daemon.path()};
        args.insert(args.end(), c.args.begin(), c.args.end());
        CtlResult r = ctl(args);
        EXPECT_EQ(r.status, 2) << c.message;
        EXPECT_TRUE(r.err.starts_with("fedgatectl: " + c.message)) << r.err;
        EXPECT_NE(r.err.find("usage: fedgatectl [--socket PATH] [--json] log level TYPE LEVEL"), std::string::npos)
            << r.err;
        EXPECT_FALSE(daemon.has_pending_connection());
    }
}

TEST(FedgatectlLog, ListPrintsAlignedTypesAndTheGlobalLevel) {
    Exchange x = exchange(ok(R"({"global_level":"debug","types":[{"type":"lib.eal","level":"warning"},
        {"type":"fedgate.gateway","level":"info"}]})"),
                          {"log", "list"});
    EXPECT_EQ(x.request, "{\"cmd\":\"log_list\"}\n");
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out,
              "type             level\n"
              "lib.eal          warning\n"
              "fedgate.gateway  info\n"
              "global level debug (no message above it is logged, whatever its type)\n");
}

TEST(FedgatectlLog, ListJsonPrintsTheResult) {
    const std::string reply = ok(R"({"global_level":"debug","types":[{"type":"lib.eal","level":"warning"}]})");
    Exchange x = exchange(reply, {"log", "list", "--json"});
    EXPECT_EQ(x.r.status, 0);
    EXPECT_EQ(x.r.out, pretty(reply));
}

TEST(FedgatectlLog, HelpListsTheLogCommandsAndTheGroup) {
    CtlResult r = ctl({"help"});
    EXPECT_NE(r.out.find("  log level TYPE LEVEL  "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("  log list  "), std::string::npos);
    CtlResult g = ctl({"help", "log"});
    EXPECT_EQ(g.status, 0);
    EXPECT_TRUE(g.out.starts_with("The daemon's rte_log types")) << g.out;
    EXPECT_NE(g.out.find("fedgatectl log level fedgate.resolve debug\n"), std::string::npos);
}

// ---- reload ----

TEST(FedgatectlReload, SendsReloadAndPrintsEachChangeThenEachDrop) {
    Exchange x = exchange(ok(R"({"config":"/etc/fedgate/a.toml","changes":[
        {"kind":"peer","name":"gamma","change":"added","text":"peer gamma added"},
        {"kind":"import","name":"tcp/8080","change":"added","text":"import tcp/8080 added"},
        {"kind":"log","name":"fedgate.resolve","change":"set to debug","text":"log fedgate.resolve set to debug"}],
        "dropped":["cli mapping import udp/7000 dropped: peer: 'delta' is not a configured peer party"]})"),
                          {"reload"});
    EXPECT_EQ(x.request, "{\"cmd\":\"reload\"}\n");
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out, "peer gamma added\nimport tcp/8080 added\nlog fedgate.resolve set to debug\n"
                       "cli mapping import udp/7000 dropped: peer: 'delta' is not a configured peer party\n");
}

TEST(FedgatectlReload, NothingChangedPrintsNoChanges) {
    Exchange x = exchange(ok(R"({"config":"a.toml","changes":[],"dropped":[]})"), {"reload"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out, "no changes\n");
}

TEST(FedgatectlReload, JsonPrintsTheReplyAsIs) {
    Exchange x = exchange(ok(R"({"config":"a.toml","changes":[],"dropped":[]})"), {"reload", "--json"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.r.out, "{\n  \"config\": \"a.toml\",\n  \"changes\": [],\n  \"dropped\": []\n}\n");
}

TEST(FedgatectlReload, ARefusalExitsOneWithTheDaemonsMessage) {
    Exchange x = exchange(
        R"x({"ok":false,"error":"reload refused, nothing changed: [gateway] party_id: cannot change while running; restart fedgated"})x",
        {"reload"});
    EXPECT_EQ(x.r.status, 1);
    EXPECT_EQ(x.r.err, "fedgatectl: reload refused, nothing changed: [gateway] party_id: cannot change while running; "
                       "restart fedgated\n");
    EXPECT_EQ(x.r.out, "");
}

TEST(FedgatectlReload, AnOperandIsAUsageErrorAndNothingIsSent) {
    FakeDaemon daemon;
    CtlResult r = ctl({"--socket", daemon.path(), "reload", "now"});
    EXPECT_EQ(r.status, 2);
    EXPECT_EQ(first_line(r.err), "fedgatectl: reload: unexpected argument 'now'");
    EXPECT_FALSE(daemon.has_pending_connection());
}

TEST(FedgatectlReload, HelpListsReload) {
    CtlResult r = ctl({"help"});
    EXPECT_NE(r.out.find("  reload  "), std::string::npos) << r.out;
    CtlResult h = ctl({"help", "reload"});
    EXPECT_EQ(h.status, 0);
    EXPECT_NE(h.out.find("fedgatectl reload --json"), std::string::npos) << h.out;
}

// ---- relayed connections and their RoCE v2 translations ---------------------------------------

namespace {

constexpr const char* kConnListReply = R"({"ok":true,"result":{"total":1,"shown":1,"handshakes":[
{"conn_id":"0x00000000000000aa","initiator":"1.3.100","target":"2.7.42","role":"outbound","peer_party":2,
 "stage":"established","status":"ok","transport":"roce_v2","age_ms":1500}],
"translations":[{"conn_id":"0x00000000000000aa","local":"1.3.100","remote":"2.7.42","peer_party":2,
 "node":"198.18.1.10","node_qpn":291,"internal_vqpn":16385,"external_vqpn":16385,"peer":"198.19.0.2",
 "peer_vqpn":1911,"to_peer":{"packets":5,"bytes":640},"from_peer":{"packets":2,"bytes":120},"idle_ms":2000}]}})";

}  // namespace

TEST(FedgatectlConn, ListShowsHandshakesThenTranslationsWithBothQpnsAndTraffic) {
    Exchange x = exchange(kConnListReply, {"conn", "list"});
    EXPECT_EQ(x.r.status, 0) << x.r.err;
    EXPECT_EQ(x.request, "{\"cmd\":\"conn_list\",\"limit\":1000}\n");
    const std::string& out = x.r.out;
    EXPECT_NE(out.find("1 shown of 1\n"), std::string::npos) << out;
    const auto at = out.find("RoCE v2 translations:\n");
    ASSERT_NE(at, std::string::npos) << out;
    const std::string rest = out.substr(at);
    for (const char* want : {"int vqpn", "ext vqpn", "peer vqpn", "198.18.1.10", "291", "16385", "198.19.0.2", "1911",
                             "5 pkts 640 B", "2 pkts 120 B"})
        EXPECT_NE(rest.find(want), std::string::npos) << want << " missing in:\n" << out;
    EXPECT_EQ(exchange(kConnListReply, {"conn", "list", "--json"}).r.out, pretty(kConnListReply));
}
