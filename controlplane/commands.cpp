// The management commands: the dispatch by name, and the replies the gateway's parts do not make
// themselves.
#include "controlplane/commands.hpp"

#include <rte_byteorder.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_log.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "controlplane/capture.hpp"
#include "controlplane/cluster.hpp"
#include "controlplane/counter_table.hpp"
#include "controlplane/live_config.hpp"
#include "controlplane/log.hpp"
#include "controlplane/mgmt_server.hpp"
#include "controlplane/pinger.hpp"
#include "controlplane/portmap_table.hpp"
#include "controlplane/resolution.hpp"

namespace fedgate {
namespace {

constexpr uint32_t kMaxPingCount = 100;
constexpr uint32_t kMaxPingTimeoutMs = 60'000;

// A listing's "limit": 1..kMaxListed, 1000 when absent.
uint32_t limit_arg(const nlohmann::ordered_json& req) {
    if (!req.contains("limit")) return 1000;
    const auto& v = req["limit"];
    if (!v.is_number_unsigned() || v.get<uint64_t>() < 1 || v.get<uint64_t>() > kMaxListed)
        throw MgmtError("limit: must be an integer 1.." + std::to_string(kMaxListed));
    return v.get<uint32_t>();
}

ProcessId pid_arg(const nlohmann::ordered_json& req, const char* cmd) {
    if (!req.contains("pid") || !req["pid"].is_string())
        throw MgmtError(std::string(cmd) + ": \"pid\" must be a process ID string (PARTY.NODE.LOCAL or 0xHEX)");
    const std::string s = req["pid"].get<std::string>();
    const auto pid = parse_process_id(s);
    if (!pid || pid->value == 0)
        throw MgmtError(std::string(cmd) + ": pid '" + s + "' is not a process ID (PARTY.NODE.LOCAL or 0xHEX, not 0)");
    return *pid;
}

}  // namespace

std::string mac_str(const rte_ether_addr& a) {
    char buf[RTE_ETHER_ADDR_FMT_SIZE];
    rte_ether_format_addr(buf, sizeof buf, &a);
    return buf;
}

Commands::Commands(Parts parts) : p_(std::move(parts)) {}

nlohmann::ordered_json Commands::handle(const nlohmann::ordered_json& req) {
    const std::string cmd = req.at("cmd").get<std::string>();
    if (cmd == "status") return status();
    if (cmd == "stats") return stats();
    if (cmd == "ping") return ping(req);
    if (cmd == "map_add" || cmd == "map_del" || cmd == "map_list" || cmd == "map_nft") return p_.table->handle(req);
    if (cmd == "session_list") return session_list(req);
    if (cmd == "resolve") return resolve(req);
    if (cmd == "dir_list" || cmd == "dir_show") return dir(req);
    if (cmd == "conn_list") return conn_list(req);
    if (cmd == "capture_start" || cmd == "capture_status" || cmd == "capture_stop") return p_.capture->handle(req);
    if (cmd == "log_level") return log_level(req);
    if (cmd == "reload") return p_.live.reload();
    if (cmd == "cluster_status") {
        if (!p_.cluster) throw MgmtError("this gateway is alone: no [cluster] in " + p_.cfg.source);
        return p_.cluster->status();
    }
    if (cmd == "log_list") {
        nlohmann::ordered_json types = nlohmann::ordered_json::array();
        for (const LogTypeLevel& t : log_type_levels()) types.push_back({{"type", t.type}, {"level", log_level_name(t.level)}});
        return {{"global_level", log_level_name(rte_log_get_global_level())}, {"types", types}};
    }
    throw MgmtError("unknown cmd '" + cmd +
                    "' (status, stats, ping, map_add, map_del, map_list, map_nft, session_list, dir_list, dir_show, "
                    "resolve, conn_list, log_level, log_list, reload, capture_start, capture_status, capture_stop, cluster_status)");
}

nlohmann::ordered_json Commands::status() const {
    nlohmann::ordered_json ports = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < p_.ports.size(); ++i) {
        const PortConfig& pc = p_.cfg.ports[i];
        const PortHandle& port = p_.ports[i];
        const LinkState link = link_state(port.port_id);
        ports.push_back({
            {"name", pc.name},
            {"role", pc.role == PortRoleCfg::external ? "external" : "internal"},
            {"port_id", port.port_id},
            {"device", pc.device},
            {"driver", port.driver},
            {"address", pc.address.str()},
            {"next_hop", pc.next_hop ? nlohmann::ordered_json(format_ipv4(*pc.next_hop)) : nlohmann::ordered_json(nullptr)},
            {"mac", mac_str(port.mac)},
            {"offloads", {{"rss", port.rss}, {"rx_checksum", port.rx_cksum}, {"tx_checksum", port.tx_cksum}}},
            {"link", {{"up", link.up}, {"speed_mbps", link.speed_mbps}, {"duplex", link.full_duplex ? "full" : "half"}}},
        });
    }
    // Each peer's keys by ID and fingerprint (never the key), and which one its messages come under.
    nlohmann::ordered_json peers = nlohmann::ordered_json::array();
    const std::map<uint16_t, uint8_t> last_key = p_.resolution->last_key_ids();
    for (const PeerConfig& p : p_.live.snapshot()->peers) {
        nlohmann::ordered_json keys = nlohmann::ordered_json::array();
        keys.push_back({{"role", "current"}, {"id", p.key_id}, {"fingerprint", key_fingerprint(p.key)}});
        if (!p.next_key.empty())
            keys.push_back({{"role", "next"}, {"id", p.next_key_id}, {"fingerprint", key_fingerprint(p.next_key)}});
        const auto seen = last_key.find(p.party_id);
        peers.push_back({{"party", p.party},
                         {"party_id", p.party_id},
                         {"address", format_ipv4(p.address)},
                         {"keys", std::move(keys)},
                         {"last_key_id", seen != last_key.end() && seen->second != 0 ? nlohmann::ordered_json(seen->second)
                                                                                     : nlohmann::ordered_json(nullptr)}});
    }
    // Each port's counters ("neighbours") from the counter table.
    nlohmann::ordered_json counted = {{"ports", std::move(ports)}};
    write_counters(counted, Reply::status, sum_workers(p_.workers), GatewayReadings{});
    const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - p_.started).count();
    return {
        {"party", p_.cfg.party},
        {"party_id", p_.cfg.party_id},
        {"version", FEDGATE_VERSION},
        {"pid", ::getpid()},
        {"uptime_s", uptime},
        {"dataplane_lcores", p_.dp_lcores},
        {"workers", p_.workers.size()},
        {"idle", p_.cfg.dataplane.idle_spin ? "spin" : "backoff"},
        {"ports", std::move(counted["ports"])},
        {"peers", peers},
    };
}

// Every counter comes from the counter table (counter_table.hpp): the workers summed there, the
// gateway's own readings here, the control threads' sections as their services report them.
nlohmann::ordered_json Commands::stats() const {
    const CounterSnapshot sum = sum_workers(p_.workers);
    GatewayReadings g;
    nlohmann::ordered_json ports = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < p_.ports.size(); ++i) {
        rte_eth_stats hw{};
        rte_eth_stats_get(p_.ports[i].port_id, &hw);
        g.devices.push_back({hw.ipackets, hw.opackets, hw.ibytes, hw.obytes, hw.imissed, hw.ierrors, hw.oerrors, hw.rx_nombuf});
        ports.push_back({{"name", p_.cfg.ports[i].name}});
    }
    g.imports = p_.table->import_count();
    g.exports = p_.table->export_count();
    g.unmatched_echo_replies = p_.pinger->unmatched_replies();
    g.max_sessions = p_.cfg.nat.max_sessions;
    if (p_.cluster) {
        const ClusterCounters c = p_.cluster->counters();
        g.cluster_member = 1;
        g.cluster_active = p_.cluster->active() ? 1 : 0;
        g.store_healthy = p_.cluster->store_healthy() ? 1 : 0;
        g.became_active = c.became_active;
        g.stepped_down = c.stepped_down;
        g.lease_renewals = c.lease_renewals;
        g.store_errors = c.store_errors;
        g.mapping_refreshes = c.mapping_refreshes;
        g.session_events_sent = c.sync.events_sent;
        g.session_events_received = c.sync.mirror.events_received;
        g.session_events_missed = c.sync.mirror.events_missed;
        g.session_sync_rejected = c.sync.rejected;
        g.sessions_mirrored = c.sync.mirrored;
        g.cache_copies_received = c.sync.caches_received;
        g.cache_records_mirrored = c.sync.cache_records;
    }
    nlohmann::ordered_json j = {{"ports", std::move(ports)}};
    write_counters(j, Reply::stats, sum, g, {{"resolution", p_.resolution->stats()}});
    return j;
}

nlohmann::ordered_json Commands::session_list(const nlohmann::ordered_json& req) {
    const uint32_t limit = limit_arg(req);
    // Only the lcore may read its sessions: ask it, and wait for the answer.
    auto req_in = std::make_unique<DpRequest>();
    req_in->kind = DpRequest::Kind::session_dump;
    req_in->limit = limit;
    req_in->sessions.reserve(limit);
    // Every worker holds its own sessions: ask each for up to `limit`, keep the first `limit`.
    std::unique_ptr<DpRequest> r = p_.ask_worker(std::move(req_in), kRequestTimeout, 0);
    for (std::size_t w = 1; w < p_.workers.size(); ++w) {
        auto more = std::make_unique<DpRequest>();
        more->kind = DpRequest::Kind::session_dump;
        more->limit = limit;
        more->sessions.reserve(limit);
        more = p_.ask_worker(std::move(more), kRequestTimeout, w);
        r->total += more->total;
        for (const SessionInfo& s : more->sessions)
            if (r->sessions.size() < limit) r->sessions.push_back(s);
    }
    const auto endpoint = [](uint32_t addr, uint16_t port) {
        return format_ipv4(rte_be_to_cpu_32(addr)) + ":" + std::to_string(rte_be_to_cpu_16(port));
    };
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const SessionInfo& s : r->sessions) {
        const bool tcp = s.key[0].proto == IPPROTO_TCP;
        const char* state = !tcp                                  ? "active"
                            : s.tcp_rst || s.tcp_fin == 3        ? "closing"
                            : s.tcp_fin != 0                     ? "half-closed"
                            : s.replied                          ? "established"
                                                                 : "opening";
        list.push_back({
            {"kind", s.kind == 0 ? "import" : "export"},
            {"proto", tcp ? "tcp" : "udp"},
            {"state", state},
            {"in", {{"src", endpoint(s.key[0].src, s.key[0].sport)}, {"dst", endpoint(s.key[0].dst, s.key[0].dport)}}},
            {"out", {{"src", endpoint(s.rw[0].src, s.rw[0].sport)}, {"dst", endpoint(s.rw[0].dst, s.rw[0].dport)}}},
            {"idle_s", static_cast<double>(r->now_ms - std::min(r->now_ms, s.last_seen_ms)) / 1000.0},
            {"timeout_s", s.timeout_ms / 1000},
        });
    }
    return {{"sessions", list}, {"total", r->total}, {"truncated", r->total > list.size()}};
}

// The daemon's own path: the lcore's resolver, exactly as a compute process would be served.
nlohmann::ordered_json Commands::resolve(const nlohmann::ordered_json& req) {
    auto r = std::make_unique<DpRequest>();
    r->kind = DpRequest::Kind::resolve;
    r->target = pid_arg(req, "resolve");
    // A query finishes within its timeout; the wait allows for that and a busy lcore.
    const auto done =
        p_.ask_worker(std::move(r), std::chrono::milliseconds(p_.cfg.resolve.query_timeout_ms) + kRequestTimeout, 0);
    nlohmann::ordered_json j = {{"target", format_process_id(done->target)},
                                {"status", resolve_status_name(done->status)},
                                {"source", answer_source_name(done->source)}};
    if (done->status == ResolveStatus::ok) j["record"] = ResolutionService::record_json(done->record);
    return j;
}

nlohmann::ordered_json Commands::dir(const nlohmann::ordered_json& req) {
    const std::string cmd = req.at("cmd").get<std::string>();
    if (cmd == "dir_show") return p_.resolution->dir_show(pid_arg(req, "dir show"), p_.now_ms());
    const std::string which = req.contains("which") && req["which"].is_string() ? req["which"].get<std::string>() : "all";
    if (which != "all" && which != "local" && which != "remote")
        throw MgmtError("dir list: \"which\" must be \"all\", \"local\" or \"remote\"");
    const uint32_t limit = limit_arg(req);
    return p_.resolution->dir_list(which != "remote", which != "local", limit, p_.now_ms());
}

nlohmann::ordered_json Commands::conn_list(const nlohmann::ordered_json& req) {
    return p_.resolution->conn_list(limit_arg(req), p_.now_ms());
}

// {"type": NAME or GLOB, "level": NAME}: every matching registered type, or nothing when none match.
nlohmann::ordered_json Commands::log_level(const nlohmann::ordered_json& req) {
    if (!req.contains("type") || !req["type"].is_string())
        throw MgmtError("log_level: \"type\" must be a log type name or glob string, like \"fedgate.*\"");
    if (!req.contains("level") || !req["level"].is_string())
        throw MgmtError("log_level: \"level\" must be a string (" + log_level_list() + ")");
    const std::string type = req["type"].get<std::string>(), name = req["level"].get<std::string>();
    if (!valid_log_pattern(type))
        throw MgmtError("log_level: type '" + type + "' is not a log type name or glob (letters, digits, '_', '.', '-', "
                        "'*', '?', '[]')");
    const auto level = parse_log_level(name);
    if (!level) throw MgmtError("log_level: level '" + name + "' is not a log level (" + log_level_list() + ")");
    const std::vector<LogTypeLevel> changed = set_log_level(type, *level);
    if (changed.empty())
        throw MgmtError("log_level: no registered log type " + std::string(is_glob(type) ? "matches" : "is named") + " '" +
                        type + "' (log_list shows them)");
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const LogTypeLevel& t : changed)
        list.push_back({{"type", t.type}, {"from", log_level_name(t.level)}, {"to", log_level_name(*level)}});
    FG_LOG(NOTICE, gateway, "log level of %zu type(s) matching '%s' set to %s", changed.size(), type.c_str(), name.c_str());
    return {{"changed", list}, {"global_level", log_level_name(rte_log_get_global_level())}};
}

nlohmann::ordered_json Commands::ping(const nlohmann::ordered_json& req) {
    if (!req.contains("dst") || !req["dst"].is_string()) throw MgmtError("ping: \"dst\" must be an IPv4 address string");
    const auto dst = parse_ipv4(req["dst"].get<std::string>());
    if (!dst) throw MgmtError("ping: dst '" + req["dst"].get<std::string>() + "' is not an IPv4 address");
    if (*dst == 0 || *dst == UINT32_MAX || (*dst >> 28) == 0xe)
        throw MgmtError("ping: dst " + format_ipv4(*dst) + " is not a unicast address");
    for (const PortConfig& p : p_.cfg.ports)
        if (p.address.addr == *dst)
            throw MgmtError("ping: dst " + format_ipv4(*dst) + " is this gateway's own address (port " + p.name + ")");
    const auto number = [&](const char* key, uint32_t fallback, uint32_t max) -> uint32_t {
        if (!req.contains(key)) return fallback;
        const auto& v = req[key];
        if (!v.is_number_unsigned() || v.get<uint64_t>() < 1 || v.get<uint64_t>() > max)
            throw MgmtError(std::string("ping: \"") + key + "\" must be an integer 1.." + std::to_string(max));
        return v.get<uint32_t>();
    };
    const uint32_t count = number("count", 3, kMaxPingCount);
    const uint32_t timeout = number("timeout_ms", 1000, kMaxPingTimeoutMs);
    const PingResult r = p_.pinger->ping(rte_cpu_to_be_32(*dst), count, std::chrono::milliseconds(timeout));
    nlohmann::ordered_json rtts = nlohmann::ordered_json::array();
    for (const auto& rtt : r.rtt_ms) rtts.push_back(rtt ? nlohmann::ordered_json(*rtt) : nlohmann::ordered_json(nullptr));
    return {{"dst", format_ipv4(*dst)},
            {"src", format_ipv4(rte_be_to_cpu_32(r.src))},
            {"port", p_.cfg.ports[r.port].name},
            {"sent", r.sent},
            {"received", r.received},
            {"rtt_ms", rtts}};
}

}  // namespace fedgate
