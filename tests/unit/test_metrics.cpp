// The Prometheus endpoint (the renderer on a fixed stats reply, checked line by line and against the
// exposition grammar; the HTTP server on 127.0.0.1) and log levels by name (rte_log, no EAL).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "controlplane/log.hpp"
#include "controlplane/metrics.hpp"

namespace fedgate {
namespace {

using json = nlohmann::ordered_json;

// A stats reply as Commands::stats() shapes it, cut down; port "inside" has a name that needs escaping
// in its twin "we\"ird\\port\n".
const json kStats = json::parse(R"({
  "ports": [
    {"name": "inside", "rx_packets": 120, "rx_bytes": 9000, "tx_packets": 80, "tx_bytes": 7000, "drops": 3,
     "drops_by_reason": {"bad_checksum": 2, "no_route": 1},
     "hw": {"ipackets": 121, "opackets": 80, "ibytes": 9100, "obytes": 7000, "imissed": 0, "ierrors": 0,
            "oerrors": 0, "rx_nombuf": 0}},
    {"name": "we\"ird\\port\n", "rx_packets": 5, "rx_bytes": 300, "tx_packets": 0, "tx_bytes": 0, "drops": 0,
     "drops_by_reason": {}, "hw": {"ipackets": 5}}
  ],
  "drops_by_reason": {"bad_checksum": 2, "no_route": 1, "ttl_exceeded": 0},
  "arp": {"requests_sent": 1, "requests_received": 2, "replies_sent": 2, "replies_received": 1},
  "icmp": {"echo_requests_received": 5, "echo_replies_sent": 5},
  "neighbour": {"entries": 2, "learned": 2, "expired": 0, "failed": 0, "unresolved_drops": 0},
  "loop": {"polls": 1000, "busy_polls": 10, "idle_sleeps": 900},
  "nat": {"sessions": 4, "created": 9, "expired": 5, "refused_full": 0, "port_alloc_miss": 0, "translated": 77,
          "icmp_errors_translated": 0, "mss_clamped": 1, "max_sessions": 262144,
          "port_pools": {"external_tcp": {"used": 3, "free": 39997}, "internal_udp": {"used": 1, "free": 39999}}},
  "maps": {"imports": 2, "exports": 1},
  "control": {"punted": 6, "injected": 3, "wakeups": 4, "unmatched_echo_replies": 0},
  "resolution": {
    "directory": {"local": 3, "registered": 4, "refreshed": 0, "replaced": 0, "deregistered": 1, "expired": 0,
                  "heartbeats": 40, "refused_wrong_party": 1, "refused_full": 0},
    "cache": {"entries": 6, "capacity": 262144, "local": 3, "announced": 2, "answered": 1, "negative": 0,
              "full": 0, "expired": 0, "learned": 1, "learned_negative": 0},
    "exchange": {"peer_msgs_sent": 12, "records_applied": 2, "records_withdrawn": 0, "refused_foreign_records": 0,
                 "snapshots_received": 1, "stream_resets_sent": 0, "stream_gaps": 0, "reg_replies_sent": 4,
                 "malformed": 0,
                 "peers": [{"party": "beta", "out_stream_acked": 7, "out_stream_last_seq": 7, "out_unacked": 0,
                            "out_messages": 7, "out_retransmits": 1, "out_restarts": 0, "records_announced": 3,
                            "records_withdrawn": 0, "in_applied": 5}]},
    "handshakes": {"in_table": 1, "in_flight": 0, "req_relayed": 2, "rep_relayed": 1, "rtu_relayed": 1,
                   "established": 1, "duplicates": 0, "timed_out": 0, "unknown_handshake": 0, "wrong_sender": 0,
                   "refused": {"unknown_target": 1, "no_route": 0}, "malformed": 0},
    "auto_mappings": {"exports": 1, "imports": 0, "exports_made": 2, "exports_removed": 1, "imports_made": 0,
                      "imports_removed": 0, "ports_exhausted": 0, "refused": 0},
    "roce": {"connections": 2, "capacity": 16384, "free_internal": 16382, "free_external": 16382, "reserved": 5,
             "released": 1, "installed": 3, "exhausted": 4, "install_failed": 0, "removed_process": 1,
             "removed_peer": 0, "removed_idle": 0},
    "resolve": {"requests": 10, "hits": 7, "misses": 3, "folded": 0, "directed": 2, "broadcast": 1, "answered": 2,
                "not_found": 1, "timed_out": 0, "negative": 0, "refused": 4, "refused_rate": 1, "refused_busy": 0,
                "bad_requests": 3, "pending": 0, "answers_unmatched": 0}
  }
})");

const json kStatus = json::parse(R"({
  "party": "alpha", "party_id": 1, "version": "0.1.0", "pid": 42, "uptime_s": 12.5,
  "ports": [{"name": "inside", "link": {"up": true, "speed_mbps": 10000, "duplex": "full"}, "neighbours": 1}],
  "peers": [{"party": "beta", "party_id": 2, "address": "198.19.0.2"}]
})");

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

bool has_line(const std::string& text, const std::string& line) {
    const auto ls = lines_of(text);
    return std::find(ls.begin(), ls.end(), line) != ls.end();
}

// Text exposition format 0.0.4, as far as this endpoint uses it: comment lines are HELP or TYPE
// (counter or gauge), TYPE before its samples and once; every other line is
// name{label="value",...} value, the name of the family last typed (a counter's samples may carry
// no suffix other than its own name), label values with only \\ \" \n escapes.
::testing::AssertionResult valid_exposition(const std::string& text) {
    static const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .*$)");
    static const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge)$)");
    static const std::regex sample(
        R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")"
        R"((?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*\})? (-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)$)");
    if (text.empty() || text.back() != '\n') return ::testing::AssertionFailure() << "must end with a newline";
    std::set<std::string> typed, helped;
    std::string current;
    int n = 0;
    for (const std::string& l : lines_of(text)) {
        ++n;
        std::smatch m;
        if (std::regex_match(l, m, help)) {
            if (!helped.insert(m[1]).second) return ::testing::AssertionFailure() << "line " << n << ": second HELP";
        } else if (std::regex_match(l, m, type)) {
            if (!typed.insert(m[1]).second) return ::testing::AssertionFailure() << "line " << n << ": second TYPE";
            current = m[1];
        } else if (std::regex_match(l, m, sample)) {
            if (m[1] != current)
                return ::testing::AssertionFailure() << "line " << n << ": sample of " << m[1] << " under TYPE " << current;
        } else {
            return ::testing::AssertionFailure() << "line " << n << " is not exposition format: " << l;
        }
    }
    if (typed != helped) return ::testing::AssertionFailure() << "a family has TYPE without HELP or the reverse";
    return ::testing::AssertionSuccess();
}

TEST(MetricsRender, PortCountersCarryThePortLabel) {
    const std::string t = render_prometheus(kStats, kStatus);
    EXPECT_TRUE(has_line(t, R"(fedgate_port_rx_packets_total{port="inside"} 120)")) << t;
    EXPECT_TRUE(has_line(t, R"(fedgate_port_tx_bytes_total{port="inside"} 7000)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_port_hw_rx_packets_total{port="inside"} 121)"));
    EXPECT_TRUE(has_line(t, "# TYPE fedgate_port_rx_packets_total counter"));
    EXPECT_TRUE(has_line(t, "# HELP fedgate_port_rx_packets_total Packets the data plane received on the port"));
}

TEST(MetricsRender, DropsHaveEveryReasonForEveryPortZerosIncluded) {
    const std::string t = render_prometheus(kStats, kStatus);
    EXPECT_TRUE(has_line(t, R"(fedgate_drops_total{port="inside",reason="bad_checksum"} 2)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_drops_total{port="inside",reason="no_route"} 1)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_drops_total{port="inside",reason="ttl_exceeded"} 0)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_drops_total{port="we\"ird\\port\n",reason="bad_checksum"} 0)")) << t;
}

TEST(MetricsRender, GaugesForSessionsMappingsAndPools) {
    const std::string t = render_prometheus(kStats, kStatus);
    EXPECT_TRUE(has_line(t, "# TYPE fedgate_sessions gauge"));
    EXPECT_TRUE(has_line(t, "fedgate_sessions 4"));
    EXPECT_TRUE(has_line(t, "fedgate_sessions_max 262144"));
    EXPECT_TRUE(has_line(t, R"(fedgate_mappings{kind="import"} 2)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_mappings{kind="export"} 1)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_nat_pool_ports{pool="external",proto="tcp",state="free"} 39997)"));
    EXPECT_TRUE(has_line(t, "fedgate_nat_translated_packets_total 77"));
}

TEST(MetricsRender, ControlCountersIncludeTheWakeupsOfThePuntThread) {
    const std::string t = render_prometheus(kStats, kStatus);
    EXPECT_TRUE(has_line(t, "fedgate_control_punted_total 6"));
    EXPECT_TRUE(has_line(t, "fedgate_control_wakeups_total 4")) << t;
    EXPECT_TRUE(has_line(t, "# TYPE fedgate_control_wakeups_total counter"));
    // A stats reply from before the counter existed leaves the family out rather than showing null.
    json old = kStats;
    old["control"].erase("wakeups");
    const std::string o = render_prometheus(old, kStatus);
    EXPECT_EQ(o.find("fedgate_control_wakeups"), std::string::npos);
    EXPECT_TRUE(valid_exposition(o));
}

TEST(MetricsRender, ResolutionHandshakesAndPeers) {
    const std::string t = render_prometheus(kStats, kStatus);
    EXPECT_TRUE(has_line(t, "fedgate_resolve_hits_total 7"));
    EXPECT_TRUE(has_line(t, R"(fedgate_resolve_refused_total{reason="bad_request"} 3)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_resolve_cache_entries{kind="announced"} 2)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_directory_refused_total{reason="wrong_party"} 1)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_peer_stream_messages_sent_total{peer="beta"} 7)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_peer_stream_applied_seq{peer="beta"} 5)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_handshakes_relayed_total{msg="req"} 2)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_handshakes_relayed_total{msg="rtu"} 1)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_handshakes_refused_total{status="unknown_target"} 1)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_auto_mappings_made_total{kind="export"} 2)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_auto_mappings{kind="export"} 1)"));
    EXPECT_TRUE(has_line(t, "fedgate_roce_connections 2"));
    EXPECT_TRUE(has_line(t, "fedgate_roce_exhausted_total 4"));
    EXPECT_TRUE(has_line(t, R"(fedgate_roce_removed_total{why="process"} 1)"));
    // The sum of the refusals is not a family of its own.
    EXPECT_EQ(t.find("fedgate_resolve_refused_total 4"), std::string::npos);
}

TEST(MetricsRender, StatusGivesInfoUptimeAndLinks) {
    const std::string t = render_prometheus(kStats, kStatus);
    EXPECT_TRUE(has_line(t, R"(fedgate_info{party="alpha",party_id="1",version="0.1.0"} 1)"));
    EXPECT_TRUE(has_line(t, "fedgate_uptime_seconds 12.5"));
    EXPECT_TRUE(has_line(t, R"(fedgate_port_link_up{port="inside"} 1)"));
    EXPECT_TRUE(has_line(t, R"(fedgate_peer_info{peer="beta",party_id="2",address="198.19.0.2"} 1)"));
}

TEST(MetricsRender, EveryFamilyHasHelpAndTypeOnceAndCountersEndInTotal) {
    const std::string t = render_prometheus(kStats, kStatus);
    std::map<std::string, int> help, type;
    std::map<std::string, std::string> kind;
    for (const std::string& l : lines_of(t)) {
        std::istringstream in(l);
        std::string hash, what, name, k;
        in >> hash >> what >> name >> k;
        if (hash != "#") continue;
        (what == "HELP" ? help : type)[name]++;
        if (what == "TYPE") kind[name] = k;
    }
    EXPECT_GT(type.size(), 80u);
    for (const auto& [name, n] : type) {
        EXPECT_EQ(n, 1) << name;
        EXPECT_EQ(help[name], 1) << name;
        EXPECT_EQ(kind[name] == "counter", name.ends_with("_total")) << name << " is a " << kind[name];
    }
    EXPECT_EQ(help.size(), type.size());
}

TEST(MetricsRender, OutputMatchesTheExpositionGrammar) {
    EXPECT_TRUE(valid_exposition(render_prometheus(kStats, kStatus)));
    // The validator itself refuses what is not the format.
    EXPECT_FALSE(valid_exposition("# TYPE a counter\n# HELP a x\na{l=\"unclosed} 1\n"));
    EXPECT_FALSE(valid_exposition("# HELP a x\n# TYPE a counter\nb 1\n"));
    EXPECT_FALSE(valid_exposition("# HELP a x\n# TYPE a counter\na one\n"));
}

TEST(MetricsRender, MissingSectionsAreLeftOutNotErrors) {
    const std::string t = render_prometheus(json::object(), json::object());
    EXPECT_EQ(t, "");
    const std::string only_ports = render_prometheus(json{{"ports", kStats["ports"]}}, json());
    EXPECT_TRUE(valid_exposition(only_ports));
    EXPECT_EQ(only_ports.find("fedgate_sessions"), std::string::npos);
}

TEST(MetricsRender, LabelValuesAreEscaped) {
    EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    EXPECT_EQ(escape_label_value("plain"), "plain");
}

// ---- HTTP ----

std::string metrics_body() { return "# HELP x y\n# TYPE x gauge\nx 1\n"; }

TEST(MetricsHttp, GetMetricsIsTheExposition) {
    const std::string r = http_reply("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", metrics_body);
    EXPECT_TRUE(r.starts_with("HTTP/1.1 200 OK\r\n")) << r;
    EXPECT_NE(r.find("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), std::string::npos);
    EXPECT_NE(r.find("\r\nContent-Length: 30\r\n"), std::string::npos);
    EXPECT_NE(r.find("\r\nConnection: close\r\n"), std::string::npos);
    EXPECT_TRUE(r.ends_with("\r\n\r\n" + metrics_body()));
    EXPECT_TRUE(http_reply("GET /metrics?x=1 HTTP/1.0\n\n", metrics_body).starts_with("HTTP/1.1 200 OK\r\n"));
}

TEST(MetricsHttp, HeadHasHeadersButNoBody) {
    const std::string r = http_reply("HEAD /metrics HTTP/1.1\r\n\r\n", metrics_body);
    EXPECT_TRUE(r.starts_with("HTTP/1.1 200 OK\r\n"));
    EXPECT_NE(r.find("Content-Length: 30\r\n"), std::string::npos);
    EXPECT_TRUE(r.ends_with("\r\n\r\n"));
}

TEST(MetricsHttp, OtherPathsMethodsAndGarbage) {
    EXPECT_TRUE(http_reply("GET / HTTP/1.1\r\n\r\n", metrics_body).starts_with("HTTP/1.1 404 Not Found\r\n"));
    EXPECT_TRUE(http_reply("GET /metricsx HTTP/1.1\r\n\r\n", metrics_body).starts_with("HTTP/1.1 404 "));
    const std::string post = http_reply("POST /metrics HTTP/1.1\r\n\r\n", metrics_body);
    EXPECT_TRUE(post.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"));
    EXPECT_NE(post.find("\r\nAllow: GET, HEAD\r\n"), std::string::npos);
    for (const char* bad : {"hello\r\n\r\n", "GET /metrics\r\n\r\n", "GET /metrics HTTP/2.0\r\n\r\n",
                            "GET metrics HTTP/1.1\r\n\r\n", "GET  /metrics HTTP/1.1\r\n\r\n", "\x01\x02\x03\n",
                            "no newline at all"})
        EXPECT_TRUE(http_reply(bad, metrics_body).starts_with("HTTP/1.1 400 Bad Request\r\n")) << bad;
    EXPECT_TRUE(http_reply(std::string(kMaxHttpRequestBytes + 1, 'a'), metrics_body).starts_with("HTTP/1.1 431 "));
}

TEST(MetricsHttp, ARendererThatThrowsIsA500NamingWhy) {
    const std::string r = http_reply("GET /metrics HTTP/1.1\r\n\r\n", []() -> std::string {
        throw std::runtime_error("stats unavailable");
    });
    EXPECT_TRUE(r.starts_with("HTTP/1.1 500 "));
    EXPECT_NE(r.find("stats unavailable"), std::string::npos);
}

// One request on a fresh connection to 127.0.0.1:port; returns what came back until the server closed.
std::string exchange(uint16_t port, const std::string& request) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        return "connect failed";
    }
    (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    std::string out;
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, 5000) == 1) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return out;
}

TEST(MetricsServer, AnswersOnLoopbackAndClosesEachConnection) {
    int renders = 0;
    MetricsServer s(INADDR_LOOPBACK, 0, [&] {
        ++renders;
        return render_prometheus(kStats, kStatus);
    });
    ASSERT_NE(s.port(), 0);
    EXPECT_EQ(s.address(), "127.0.0.1:" + std::to_string(s.port()));
    s.start();
    const std::string ok = exchange(s.port(), "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    ASSERT_TRUE(ok.starts_with("HTTP/1.1 200 OK\r\n")) << ok;
    const std::string body = ok.substr(ok.find("\r\n\r\n") + 4);
    EXPECT_TRUE(valid_exposition(body));
    EXPECT_TRUE(has_line(body, R"(fedgate_port_rx_packets_total{port="inside"} 120)"));
    EXPECT_TRUE(exchange(s.port(), "GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
    EXPECT_TRUE(exchange(s.port(), "DELETE /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
    EXPECT_TRUE(exchange(s.port(), "\x16\x03\x01 garbage\r\n\r\n").starts_with("HTTP/1.1 400 "));
    EXPECT_TRUE(exchange(s.port(), std::string(kMaxHttpRequestBytes + 100, 'x')).starts_with("HTTP/1.1 431 "));
    s.stop();
    EXPECT_EQ(renders, 1);  // only the good request rendered
    EXPECT_EQ(exchange(s.port(), "GET /metrics HTTP/1.1\r\n\r\n"), "connect failed");
}

TEST(MetricsServer, ATakenPortFailsNamingTheAddress) {
    MetricsServer first(INADDR_LOOPBACK, 0, metrics_body);
    try {
        MetricsServer second(INADDR_LOOPBACK, first.port(), metrics_body);
        FAIL() << "bound a taken port";
    } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()),
                  "metrics.listen 127.0.0.1:" + std::to_string(first.port()) + ": cannot listen: Address already in use");
    }
}

TEST(MetricsServer, AnAddressNotOfThisHostFailsSayingWhy) {
    // 198.18.1.1: a data-plane address in the topology, and no kernel address here.
    try {
        MetricsServer s(0xc6120101, 0, metrics_body);
        FAIL() << "bound 198.18.1.1";
    } catch (const std::runtime_error& e) {
        EXPECT_TRUE(std::string(e.what()).starts_with("metrics.listen 198.18.1.1:0: cannot listen: Cannot assign "
                                                      "requested address (not an address of the gateway's network "
                                                      "namespace"))
            << e.what();
    }
}

// ---- log levels (rte_log works before the EAL) ----

uint32_t level_of(const std::string& type) {
    for (const LogTypeLevel& t : log_type_levels())
        if (t.type == type) return t.level;
    return 0;
}

TEST(LogLevels, NamesAndNumbersFollowRteLog) {
    EXPECT_EQ(parse_log_level("emerg"), 1u);
    EXPECT_EQ(parse_log_level("warning"), static_cast<uint32_t>(RTE_LOG_WARNING));
    EXPECT_EQ(parse_log_level("debug"), static_cast<uint32_t>(RTE_LOG_DEBUG));
    EXPECT_FALSE(parse_log_level("warn"));
    EXPECT_FALSE(parse_log_level("DEBUG"));
    EXPECT_EQ(log_level_name(RTE_LOG_INFO), "info");
    EXPECT_EQ(log_level_list(), "emerg, alert, crit, err, warning, notice, info, debug");
}

TEST(LogLevels, ListHasFedgateAndDpdkTypesWithTheirLevels) {
    log_types();
    const uint32_t eal = level_of("lib.eal");
    EXPECT_GE(eal, 1u);
    for (std::string_view t : kFedgateLogTypes) EXPECT_GE(level_of(std::string(t)), 1u) << t;
}

TEST(LogLevels, SetByNameChangesThatTypeOnly) {
    log_types();
    const uint32_t mgmt = level_of("fedgate.mgmt");
    const auto changed = set_log_level("fedgate.resolve", RTE_LOG_DEBUG);
    ASSERT_EQ(changed.size(), 1u);
    EXPECT_EQ(changed[0].type, "fedgate.resolve");
    EXPECT_EQ(level_of("fedgate.resolve"), static_cast<uint32_t>(RTE_LOG_DEBUG));
    EXPECT_EQ(level_of("fedgate.mgmt"), mgmt);
    set_log_level("fedgate.resolve", changed[0].level);
}

TEST(LogLevels, SetByGlobChangesEveryMatchAndReportsTheOldLevels) {
    log_types();
    const auto before = set_log_level("fedgate.*", RTE_LOG_ERR);
    EXPECT_EQ(before.size(), kFedgateLogTypes.size());
    for (std::string_view t : kFedgateLogTypes) EXPECT_EQ(level_of(std::string(t)), static_cast<uint32_t>(RTE_LOG_ERR));
    for (const LogTypeLevel& t : before) set_log_level(t.type, t.level);
}

TEST(LogLevels, AnUnknownTypeChangesNothing) {
    log_types();
    const auto all = log_type_levels();
    EXPECT_TRUE(set_log_level("fedgate.nope", RTE_LOG_DEBUG).empty());
    EXPECT_TRUE(set_log_level("nothing.*", RTE_LOG_DEBUG).empty());
    EXPECT_TRUE(set_log_level("fedgate.resolve", 9).empty());
    const auto after = log_type_levels();
    ASSERT_EQ(after.size(), all.size());  // nothing registered on the way
    for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(after[i].level, all[i].level) << all[i].type;
}

TEST(LogLevels, PatternsAreCheckedForShape) {
    EXPECT_TRUE(valid_log_pattern("fedgate.*"));
    EXPECT_TRUE(valid_log_pattern("pmd.net.af_packet"));
    EXPECT_FALSE(valid_log_pattern(""));
    EXPECT_FALSE(valid_log_pattern("fedgate resolve"));
    EXPECT_FALSE(valid_log_pattern(std::string(65, 'a')));
    EXPECT_TRUE(is_glob("lib.*"));
    EXPECT_FALSE(is_glob("lib.eal"));
}

}  // namespace
}  // namespace fedgate
