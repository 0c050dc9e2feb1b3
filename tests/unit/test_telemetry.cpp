// DPDK telemetry: management JSON fitted to rte_tel_data's limits, the /fedgate/ replies built from
// canned management results, and both read back through a real telemetry socket (no EAL: the
// telemetry library runs alone, on a temporary directory).
#include <gtest/gtest.h>
#include <rte_common.h>
#include <rte_telemetry.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "controlplane/telemetry.hpp"

// The EAL starts telemetry with this (lib/telemetry/telemetry_internal.h, an internal symbol of
// librte_telemetry); the tests start it themselves so that no EAL is needed.
extern "C" int32_t rte_telemetry_init(const char* runtime_dir, const char* rte_version, rte_cpuset_t* cpuset,
                                      int (*log_fn)(uint32_t level, uint32_t logtype, const char* format, ...),
                                      uint32_t registered_logtype);

namespace fedgate {
namespace {

using json = nlohmann::ordered_json;

TelemetryFit fit(const json& in, TelemetryLimits l = {}) { return fit_for_telemetry(in, l); }

std::size_t containers_below(const json& v) {
    std::size_t n = 0;
    if (v.is_structured())
        for (const json& x : v)
            if (x.is_structured()) n += 1 + containers_below(x);
    return n;
}

// ---------------------------------------------------------------------------------------------
// Fitting JSON into what rte_tel_data holds.

TEST(TelemetryFit, ScalarsBecomeTelemetryTypes) {
    const json in = {{"u", 7},          {"neg", -3},       {"big_neg", -5'000'000'000LL}, {"yes", true}, {"no", false},
                     {"ratio", 0.5},    {"name", "alpha"}, {"gone", nullptr},             {"max", UINT64_MAX}};
    const TelemetryFit f = fit(in);
    EXPECT_EQ(f.value, json::parse(R"({"u":7,"neg":-3,"big_neg":"-5000000000","yes":1,"no":0,"ratio":"0.5",
                                      "name":"alpha","max":18446744073709551615})"));
    EXPECT_TRUE(f.value["u"].is_number_unsigned());
    EXPECT_TRUE(f.value["yes"].is_number_unsigned());
    EXPECT_FALSE(f.value["neg"].is_number_unsigned());
    EXPECT_FALSE(f.truncated);
    EXPECT_EQ(f.bytes, f.value.dump().size());
}

TEST(TelemetryFit, KeysAreRewrittenIntoTelemetrysAlphabet) {
    const json in = {{"a-b", 1}, {"a_b", 2}, {"x.y z", 3}, {"", 4}, {"ok/1", 5}, {std::string(200, 'k'), 6}};
    const TelemetryFit f = fit(in);
    std::vector<std::string> keys;
    for (const auto& [k, v] : f.value.items()) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"a_b", "a_b_2", "x_y_z", "_", "ok/1", std::string(127, 'k')}));
    EXPECT_EQ(f.value["a_b_2"], 2);
    EXPECT_FALSE(f.truncated);
}

TEST(TelemetryFit, LongStringsAreCutAndTheObjectSaysSo) {
    const json in = {{"s", std::string(200, 'x')}, {"t", "caf\xc3\xa9\n"}};
    const TelemetryFit f = fit(in);
    EXPECT_EQ(f.value, (json{{"s", std::string(127, 'x')}, {"t", "caf???"}, {"truncated", 1}}));
    EXPECT_TRUE(f.truncated);
    EXPECT_EQ(f.bytes, f.value.dump().size());
    // A lone top-level string may be longer: telemetry has a bigger buffer for it.
    EXPECT_EQ(fit(json(std::string(5000, 'y'))).value, json(std::string(5000, 'y')));
    EXPECT_EQ(fit(json(std::string(9000, 'y'))).value, json(std::string(8191, 'y')));
    EXPECT_EQ(fit(json(42)).value, json("42"));  // a reply is never a lone number
}

TEST(TelemetryFit, ArraysOfObjectsOrArraysAreKeyedByIndex) {
    const json in = {{"ports", {{{"name", "internal"}}, {{"name", "external"}}}}, {"m", {{1, 2}, {3}}}};
    EXPECT_EQ(fit(in).value, json::parse(R"({"ports":{"0":{"name":"internal"},"1":{"name":"external"}},
                                            "m":{"0":[1,2],"1":[3]}})"));
    EXPECT_EQ(fit(json::parse(R"([{"a":1},{"b":2}])")).value, json::parse(R"({"0":{"a":1},"1":{"b":2}})"));
}

TEST(TelemetryFit, ScalarArraysTakeOneType) {
    const json in = json::parse(R"({"u":[1,2,true],"i":[-1,2],"mixed":[1,"a",null,false,-7000000000],
                                   "big":[-1,4000000000],"empty":[]})");
    const TelemetryFit f = fit(in);
    EXPECT_EQ(f.value, json::parse(R"({"u":[1,2,1],"i":[-1,2],"mixed":["1","a","null","false","-7000000000"],
                                      "big":["-1","4000000000"],"empty":[]})"));
    EXPECT_TRUE(f.value["u"][2].is_number_unsigned());
    EXPECT_FALSE(f.value["i"][1].is_number_unsigned());  // an int array holds ints only
    EXPECT_EQ(f.bytes, f.value.dump().size());
}

TEST(TelemetryFit, ObjectsStopAt255EntriesAndSayTruncated) {
    json in = json::object();
    for (int i = 0; i < 300; ++i) in["k" + std::to_string(i)] = i;
    const TelemetryFit f = fit(in);
    ASSERT_EQ(f.value.size(), 256U);  // RTE_TEL_MAX_DICT_ENTRIES, "truncated" the last
    EXPECT_EQ(f.value["k254"], 254);
    EXPECT_FALSE(f.value.contains("k255"));
    EXPECT_EQ(f.value["truncated"], 1);
    EXPECT_TRUE(f.truncated);
}

TEST(TelemetryFit, ArraysStopAt512EntriesAndTheirObjectSaysSo) {
    json a = json::array();
    for (int i = 0; i < 600; ++i) a.push_back(i);
    const TelemetryFit f = fit({{"a", a}});
    EXPECT_EQ(f.value["a"].size(), 512U);
    EXPECT_EQ(f.value["a"].back(), 511);
    EXPECT_EQ(f.value["truncated"], 1);
}

json session(std::size_t i) {
    const std::string port = std::to_string(40000 + i);
    return {{"kind", "import"},
            {"proto", "tcp"},
            {"state", "established"},
            {"in", {{"src", "198.18.1.10:" + port}, {"dst", "198.18.1.1:8080"}}},
            {"out", {{"src", "198.19.0.1:" + port}, {"dst", "198.19.0.2:9000"}}},
            {"idle_s", 0.25},
            {"timeout_s", 7440}};
}

json many_sessions(std::size_t n) {
    json a = json::array();
    for (std::size_t i = 0; i < n; ++i) a.push_back(session(i));
    return {{"total", n}, {"sessions", a}};
}

TEST(TelemetryFit, RepliesStayWithinTheByteBudgetAndSaySoAllTheWayDown) {
    // Containers uncapped, so that bytes run out first.
    const TelemetryFit f = fit(many_sessions(1000), TelemetryLimits{kTelemetryReplyBudget, 100'000});
    EXPECT_TRUE(f.truncated);
    EXPECT_LE(f.bytes, kTelemetryReplyBudget);
    EXPECT_GT(f.bytes, kTelemetryReplyBudget - 400);  // full, short of one entry
    EXPECT_EQ(f.bytes, f.value.dump().size());
    EXPECT_EQ(f.value["total"], 1000);
    EXPECT_EQ(f.value["truncated"], 1);
    const json& s = f.value["sessions"];
    EXPECT_EQ(s["truncated"], 1);
    // Whole entries from "0" on, then at most one cut short (which says so).
    std::size_t n = 0;
    for (const auto& [k, v] : s.items())
        if (k != "truncated") {
            EXPECT_EQ(k, std::to_string(n++));
        }
    for (std::size_t i = 0; i + 1 < n; ++i) EXPECT_EQ(s[std::to_string(i)], fit(session(i)).value);
    // With the container cap, a session being three containers, fewer fit.
    const TelemetryFit capped = fit(many_sessions(1000));
    EXPECT_LE(containers_below(capped.value), kTelemetryMaxContainers);
    EXPECT_GE(capped.value["sessions"].size(), kTelemetryPage + 1);  // a page of them, at least

    const TelemetryFit small = fit(many_sessions(10), TelemetryLimits{300, kTelemetryMaxContainers});
    EXPECT_LE(small.bytes, 300U);
    EXPECT_EQ(small.bytes, small.value.dump().size());
    EXPECT_TRUE(small.truncated);
}

TEST(TelemetryFit, NestedContainersAreCapped) {
    const TelemetryFit f = fit(many_sessions(1000), TelemetryLimits{1'000'000, 40});
    EXPECT_LE(containers_below(f.value), 40U);
    EXPECT_GE(containers_below(f.value), 38U);
    EXPECT_TRUE(f.truncated);
    EXPECT_EQ(f.value["truncated"], 1);
}

TEST(TelemetryFit, TheSourcesOwnTruncatedFlagIsKeptAndRaised) {
    EXPECT_EQ(fit({{"list", {1, 2}}, {"truncated", false}}).value, json::parse(R"({"list":[1,2],"truncated":0})"));
    EXPECT_EQ(fit({{"truncated", true}, {"n", 1}}).value, json::parse(R"({"n":1,"truncated":1})"));
    EXPECT_EQ(fit({{"s", std::string(130, 'z')}, {"truncated", false}}).value["truncated"], 1);
}

TEST(TelemetryFit, BytesCountTheEscapesTelemetryWrites) {
    const TelemetryFit f = fit({{"q", "say \"hi\" \\ now"}, {"a", {"x\"y"}}});
    EXPECT_EQ(f.bytes, f.value.dump().size());
    EXPECT_EQ(f.value["q"], "say \"hi\" \\ now");
}

TEST(TelemetryFit, FittingWhatWasFittedChangesNothing) {
    json wide = json::object();
    for (int i = 0; i < 300; ++i) wide["k" + std::to_string(i)] = i;
    const json inputs[] = {many_sessions(1000), many_sessions(3), wide, json{{"s", std::string(200, 'x')}},
                           json::parse(R"({"mixed":[1,"a",null],"i":[-1,2],"t":{"truncated":true}})")};
    for (const json& in : inputs) {
        const TelemetryFit once = fit(in);
        const TelemetryFit twice = fit(once.value);
        EXPECT_EQ(twice.value, once.value);
        EXPECT_EQ(twice.bytes, once.bytes);
        EXPECT_FALSE(twice.truncated);
    }
}

TEST(TelemetryData, FittedJsonIsWrittenIntoPlainMemory) {
    rte_tel_data* d = rte_tel_data_alloc();
    ASSERT_NE(d, nullptr);
    std::vector<rte_tel_data*> owned;
    const json in = many_sessions(1000);
    EXPECT_EQ(to_tel_data(in, d, &owned), 0);
    EXPECT_EQ(owned.size(), containers_below(fit(in).value));
    for (rte_tel_data* c : owned) rte_tel_data_free(c);
    owned.clear();
    EXPECT_EQ(to_tel_data(json::parse(R"([1,2,3])"), d, &owned), 0);
    EXPECT_EQ(to_tel_data(json("a string"), d, &owned), 0);
    EXPECT_TRUE(owned.empty());
    rte_tel_data_free(d);
}

// ---------------------------------------------------------------------------------------------
// The /fedgate/ replies, from canned management results.

// Answers the management requests the replies make, as Commands::handle would, and records them.
struct FakeGateway {
    std::size_t sessions = 70, dir_entries = 40;
    std::vector<json> requests;
    bool fail = false;

    json operator()(const json& req) {
        requests.push_back(req);
        if (fail) throw std::runtime_error("the data plane did not answer in time");
        const std::string cmd = req.at("cmd");
        const std::size_t limit = req.value("limit", std::size_t{1000});
        if (cmd == "status")
            return json::parse(R"({"party":"alpha","party_id":1,"uptime_s":12.5,"ports":[
                {"name":"internal","role":"internal","port_id":0,"address":"198.18.1.1/24","next_hop":null,
                 "mac":"02:00:00:00:00:01","link":{"up":true,"speed_mbps":10000,"duplex":"full"},"neighbours":1},
                {"name":"external","role":"external","port_id":1,"address":"198.19.0.1/24","next_hop":"198.19.0.254",
                 "mac":"02:00:00:00:00:02","link":{"up":true,"speed_mbps":10000,"duplex":"full"},"neighbours":2}]})");
        if (cmd == "stats")
            return json::parse(R"({"ports":[
                {"name":"internal","rx_packets":10,"tx_packets":9,"drops":1,"drops_by_reason":{"l4_unhandled":1},"hw":{"ipackets":10}},
                {"name":"external","rx_packets":20,"tx_packets":19,"drops":0,"drops_by_reason":{},"hw":{"ipackets":20}}],
                "drops_by_reason":{"l4_unhandled":1,"no_route":0},
                "icmp":{"echo_requests_received":5,"echo_replies_sent":5},
                "control":{"punted":6,"injected":3,"wakeups":4,"unmatched_echo_replies":0},
                "nat":{"sessions":70,"created":80,"expired":10,"refused_full":0,"port_alloc_miss":0,"max_sessions":262144},
                "resolution":{"cache":{"entries":40,"capacity":262144,"local":10,"announced":25,"answered":3,"negative":2}}})");
        if (cmd == "map_list")
            return json::parse(R"({"imports":[
                {"kind":"import","cluster":"c1","proto":"tcp","port":8080,"peer":"beta","peer_id":2,"peer_port":9000,"allow":["198.18.1.0/24"],"source":"cli"},
                {"kind":"import","cluster":"c2","proto":"udp","port":5201,"peer":"beta","peer_id":2,"peer_port":15201,"allow":[],"source":"config"}],
                "exports":[{"kind":"export","cluster":"c1","proto":"tcp","port":9001,"node":"198.18.1.20:50051","allow_parties":["beta"],"source":"config"}]})");
        if (cmd == "session_list") {
            json list = json::array();
            for (std::size_t i = 0; i < std::min(limit, sessions); ++i) list.push_back(session(i));
            return {{"sessions", list}, {"total", sessions}, {"truncated", sessions > list.size()}};
        }
        if (cmd == "dir_list") {
            json list = json::array();
            for (std::size_t i = 0; i < std::min(limit, dir_entries); ++i)
                list.push_back({{"key", "2.7." + std::to_string(i)},
                                {"kind", "announced"},
                                {"owner", "beta"},
                                {"expires_in_ms", nullptr},
                                {"record",
                                 {{"pid", "2.7." + std::to_string(i)},
                                  {"epoch", 4242},
                                  {"transport", "tcp"},
                                  {"address", "198.18.2.10:5000"},
                                  {"gid", "::"},
                                  {"qpn", 0},
                                  {"mtu", 1024},
                                  {"flags", 0},
                                  {"ttl_s", 0}}}});
            return {{"total", dir_entries}, {"shown", list.size()}, {"entries", list}};
        }
        throw std::runtime_error("unknown cmd '" + cmd + "'");
    }
};

json reply(FakeGateway& g, std::string_view cmd, std::string_view params = "") {
    return telemetry_reply(cmd, params, [&g](const json& r) { return g(r); });
}

std::vector<std::string> page_keys(const json& page) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : page.items()) keys.push_back(k);
    return keys;
}

std::vector<std::string> index_keys(std::size_t from, std::size_t to) {
    std::vector<std::string> keys;
    for (std::size_t i = from; i < to; ++i) keys.push_back(std::to_string(i));
    return keys;
}

TEST(TelemetryReply, StatsIsFedgatectlStatsFittedOrOneSection) {
    FakeGateway g;
    EXPECT_EQ(reply(g, "/fedgate/stats"), fit(g({{"cmd", "stats"}})).value);
    EXPECT_EQ(reply(g, "/fedgate/stats", "icmp"), json::parse(R"({"echo_requests_received":5,"echo_replies_sent":5})"));
    EXPECT_EQ(reply(g, "/fedgate/stats", "ports")["1"]["name"], "external");
    EXPECT_EQ(reply(g, "/fedgate/stats", "control"),
              json::parse(R"({"punted":6,"injected":3,"wakeups":4,"unmatched_echo_replies":0})"));
    EXPECT_EQ(reply(g, "/fedgate/stats", "bogus")["error"],
              "no stats section 'bogus' (ports, drops_by_reason, icmp, control, nat, resolution)");
}

TEST(TelemetryReply, PortsJoinStatusAndCountersAndOnePortHasThemAll) {
    FakeGateway g;
    const json r = reply(g, "/fedgate/ports");
    EXPECT_EQ(r["party"], "alpha");
    EXPECT_EQ(r["count"], 2);
    EXPECT_EQ(r["ports"]["0"]["name"], "internal");
    EXPECT_EQ(r["ports"]["1"]["name"], "external");
    EXPECT_EQ(r["ports"]["1"]["rx_packets"], 20);
    EXPECT_EQ(r["ports"]["1"]["link"]["up"], 1);
    EXPECT_FALSE(r["ports"]["0"].contains("next_hop"));  // null: telemetry has no null
    EXPECT_FALSE(r["ports"]["0"].contains("drops_by_reason"));
    const json one = reply(g, "/fedgate/ports", "internal");
    EXPECT_EQ(one["drops_by_reason"]["l4_unhandled"], 1);
    EXPECT_EQ(one["hw"]["ipackets"], 10);
    EXPECT_EQ(one["address"], "198.18.1.1/24");
    EXPECT_EQ(reply(g, "/fedgate/ports", "nope")["error"], "no port named 'nope' (internal, external)");
}

TEST(TelemetryReply, SessionsComeInPagesFromOffset) {
    FakeGateway g;
    const json first = reply(g, "/fedgate/sessions");
    EXPECT_EQ(g.requests.front(), json::parse(R"({"cmd":"session_list","limit":32})"));
    EXPECT_EQ(first["total"], 70);
    EXPECT_EQ(first["created"], 80);
    EXPECT_EQ(first["max_sessions"], 262144);
    EXPECT_EQ(first["offset"], 0);
    EXPECT_EQ(first["shown"], 32);
    EXPECT_EQ(first["next_offset"], 32);
    EXPECT_FALSE(first.contains("truncated"));
    EXPECT_EQ(page_keys(first["sessions"]), index_keys(0, 32));
    EXPECT_EQ(first["sessions"]["5"], fit(session(5)).value);
    EXPECT_LE(first.dump().size(), kTelemetryReplyBudget);

    g.requests.clear();
    const json last = reply(g, "/fedgate/sessions", "64");
    EXPECT_EQ(g.requests.front()["limit"], 96);
    EXPECT_EQ(last["shown"], 6);
    EXPECT_FALSE(last.contains("next_offset"));
    EXPECT_EQ(page_keys(last["sessions"]), index_keys(64, 70));
    EXPECT_EQ(last["sessions"]["69"], fit(session(69)).value);

    const json past = reply(g, "/fedgate/sessions", "500");
    EXPECT_EQ(past["shown"], 0);
    EXPECT_TRUE(past["sessions"].empty());
}

TEST(TelemetryReply, APageHoldsOnlyWholeEntries) {
    // Directory entries are bigger than sessions: as many as fit whole, and the next page starts
    // at the first one left out.
    FakeGateway g;
    g.dir_entries = 1000;
    const json r = reply(g, "/fedgate/dir", "100");
    const std::size_t shown = r["shown"];
    EXPECT_GT(shown, 10U);
    EXPECT_LE(shown, kTelemetryPage);
    EXPECT_EQ(r["next_offset"], 100 + shown);
    EXPECT_FALSE(r.contains("truncated"));
    EXPECT_EQ(page_keys(r["entries"]), index_keys(100, 100 + shown));
    EXPECT_LE(r.dump().size(), kTelemetryReplyBudget);
}

TEST(TelemetryReply, DirCountsByKindAndPages) {
    FakeGateway g;
    const json r = reply(g, "/fedgate/dir");
    EXPECT_EQ(r["total"], 40);
    EXPECT_EQ(r["local"], 10);
    EXPECT_EQ(r["announced"], 25);
    EXPECT_EQ(r["answered"], 3);
    EXPECT_EQ(r["negative"], 2);
    EXPECT_EQ(r["entries"]["0"]["key"], "2.7.0");
    EXPECT_EQ(r["entries"]["0"]["record"]["address"], "198.18.2.10:5000");
    EXPECT_FALSE(r["entries"]["0"].contains("expires_in_ms"));
    EXPECT_EQ(g.requests.front(), json::parse(R"({"cmd":"dir_list","limit":32})"));
}

TEST(TelemetryReply, MapsListImportsThenExports) {
    FakeGateway g;
    const json r = reply(g, "/fedgate/maps");
    EXPECT_EQ(r["imports"], 2);
    EXPECT_EQ(r["exports"], 1);
    EXPECT_EQ(r["total"], 3);
    EXPECT_EQ(r["shown"], 3);
    EXPECT_FALSE(r.contains("next_offset"));
    EXPECT_EQ(r["mappings"]["0"]["port"], 8080);
    EXPECT_EQ(r["mappings"]["0"]["allow"], json::parse(R"(["198.18.1.0/24"])"));
    EXPECT_EQ(r["mappings"]["2"]["kind"], "export");
    EXPECT_EQ(r["mappings"]["2"]["node"], "198.18.1.20:50051");
    const json second = reply(g, "/fedgate/maps", "2");
    EXPECT_EQ(page_keys(second["mappings"]), index_keys(2, 3));
}

TEST(TelemetryReply, BadOffsetsAndFailuresAreErrorReplies) {
    FakeGateway g;
    for (const char* bad : {"abc", "-1", "100000", "1x"})
        EXPECT_EQ(reply(g, "/fedgate/sessions", bad)["error"],
                  "OFFSET must be an integer 0..99999, not '" + std::string(bad) + "'")
            << bad;
    EXPECT_TRUE(g.requests.empty());
    EXPECT_EQ(reply(g, "/fedgate/dir", " 5 ")["offset"], 5);
    g.fail = true;
    EXPECT_EQ(reply(g, "/fedgate/stats"), json::parse(R"({"error":"the data plane did not answer in time"})"));
    EXPECT_EQ(reply(g, "/fedgate/other")["error"], "unknown command '/fedgate/other'");
}

// ---------------------------------------------------------------------------------------------
// Through a real telemetry socket.

int quiet_log(uint32_t, uint32_t, const char*, ...) { return 0; }

json g_echo;  // what /fgtest/echo answers with

int echo_command(const char*, const char*, rte_tel_data* d) { return to_tel_data(g_echo, d); }

// Starts telemetry once per process, in a directory removed at exit.
const std::string& telemetry_socket() {
    static const std::string path = [] {
        static const std::filesystem::path dir =
            std::filesystem::temp_directory_path() / ("fgtel" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir);
        std::atexit([] { std::filesystem::remove_all(dir); });  // after telemetry's own atexit
        static rte_cpuset_t cpus;
        sched_getaffinity(0, sizeof cpus, &cpus);
        static const std::string dir_str = dir.string();
        if (rte_telemetry_init(dir_str.c_str(), "fedgate-test", &cpus, quiet_log, 0) != 0)
            throw std::runtime_error("rte_telemetry_init failed");
        rte_telemetry_register_cmd("/fgtest/echo", echo_command, "test");
        return (dir / "dpdk_telemetry.v2").string();
    }();
    return path;
}

// One command over SOCK_SEQPACKET, as dpdk-telemetry.py sends it; returns the reply's value.
json ask(const std::string& command) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, telemetry_socket().c_str(), sizeof a.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(fd);
        throw std::runtime_error("connect: " + std::string(std::strerror(errno)));
    }
    std::string buf(64 * 1024, '\0');
    const json info = json::parse(buf.substr(0, std::max<ssize_t>(0, ::recv(fd, buf.data(), buf.size(), 0))));
    EXPECT_EQ(info["max_output_len"], kTelemetryMaxOutput);
    ::send(fd, command.data(), command.size(), 0);
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    ::close(fd);
    const json r = json::parse(buf.substr(0, std::max<ssize_t>(0, n)));
    const std::string name = command.substr(0, command.find(','));
    return r.at(name);
}

TEST(TelemetrySocket, TheReplyIsExactlyTheFittedJson) {
    g_echo = json::parse(R"({"u":7,"neg":-3,"flag":true,"name":"say \"hi\"","none":null,
        "nested":{"deeper":{"deepest":{"n":1,"list":[1,2,3]}},"ints":[-1,5],"strings":["a","b\\c"]},
        "ports":[{"name":"internal"},{"name":"external"}],"empty":{},"none_list":[]})");
    EXPECT_EQ(ask("/fgtest/echo"), fit(g_echo).value);
    g_echo = json::parse("[1,2,3]");
    EXPECT_EQ(ask("/fgtest/echo"), g_echo);
    g_echo = "a lone string";
    EXPECT_EQ(ask("/fgtest/echo"), g_echo);
}

TEST(TelemetrySocket, AFullReplyArrivesWhole) {
    // Telemetry drops what overflows its 16 KB silently; a reply fitted to the budget loses nothing.
    g_echo = many_sessions(1000);
    const TelemetryFit f = fit(g_echo);
    EXPECT_TRUE(f.truncated);
    EXPECT_EQ(ask("/fgtest/echo"), f.value);
    json wide = json::object();
    for (int i = 0; i < 300; ++i) wide["counter_" + std::to_string(i)] = UINT64_MAX - i;
    g_echo = wide;
    EXPECT_EQ(ask("/fgtest/echo"), fit(wide).value);
    // Up to the last bytes of the budget: long strings, with quotes telemetry escapes.
    json strings = json::object();
    for (int i = 0; i < 250; ++i) strings["s" + std::to_string(i)] = std::string(100, 'x') + "\"quoted\"";
    const TelemetryFit full = fit(strings);
    EXPECT_TRUE(full.truncated);
    EXPECT_GT(full.bytes, kTelemetryReplyBudget - 150);
    g_echo = strings;
    EXPECT_EQ(ask("/fgtest/echo"), full.value);
}

TEST(TelemetrySocket, FedgateCommandsAnswerWhileAttachedAndNullAfter) {
    FakeGateway g;
    telemetry_attach([&g](const json& r) { return g(r); });
    const json all = ask("/");
    for (std::string_view c : kTelemetryCommands)
        EXPECT_NE(std::find(all.begin(), all.end(), std::string(c)), all.end()) << c;
    EXPECT_EQ(ask("/fedgate/sessions,32"), reply(g, "/fedgate/sessions", "32"));
    EXPECT_EQ(ask("/fedgate/stats"), reply(g, "/fedgate/stats"));
    EXPECT_EQ(ask("/fedgate/ports"), reply(g, "/fedgate/ports"));
    EXPECT_EQ(ask("/fedgate/maps"), reply(g, "/fedgate/maps"));
    EXPECT_EQ(ask("/fedgate/dir,8"), reply(g, "/fedgate/dir", "8"));
    const json help = ask("/help,/fedgate/dir");
    EXPECT_NE(help["/fedgate/dir"].get<std::string>().find("OFFSET"), std::string::npos);
    telemetry_detach();
    g.requests.clear();
    EXPECT_TRUE(ask("/fedgate/stats").is_null());
    EXPECT_TRUE(g.requests.empty());
    telemetry_detach();  // idempotent
}

}  // namespace
}  // namespace fedgate
