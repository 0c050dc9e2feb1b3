// The Prometheus endpoint: stats/status JSON rendered as exposition text, and its HTTP server.
#include "controlplane/metrics.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "controlplane/config.hpp"
#include "controlplane/log.hpp"

namespace fedgate {
namespace {

using json = nlohmann::ordered_json;
using Labels = std::vector<std::pair<std::string_view, std::string>>;

// The sample value as exposition text: integers exactly, other numbers shortest round-trip,
// booleans 1/0; nothing for anything else.
std::optional<std::string> value_text(const json& v) {
    if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
    if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
    if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
    if (v.is_number_float()) {
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof buf, v.get<double>());
        return std::string(buf, r.ptr);
    }
    return std::nullopt;
}

std::string escape_help(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

// Families in the order first seen, each with its samples together, so HELP and TYPE come once.
class Exposition {
public:
    void add(std::string_view name, const char* type, std::string_view help, const Labels& labels, const json& v) {
        const auto value = value_text(v);
        if (!value) return;
        Family* f = nullptr;
        for (Family& g : families_)
            if (g.name == name) f = &g;
        if (f == nullptr) f = &families_.emplace_back(Family{std::string(name), type, std::string(help), {}});
        std::string line(name);
        if (!labels.empty()) {
            line += '{';
            for (std::size_t i = 0; i < labels.size(); ++i) {
                if (i > 0) line += ',';
                line += std::string(labels[i].first) + "=\"" + escape_label_value(labels[i].second) + "\"";
            }
            line += '}';
        }
        f->samples.push_back(line + " " + *value);
    }

    std::string text() const {
        std::string out;
        for (const Family& f : families_) {
            out += "# HELP " + f.name + " " + escape_help(f.help) + "\n";
            out += "# TYPE " + f.name + " " + f.type + "\n";
            for (const std::string& s : f.samples) out += s + "\n";
        }
        return out;
    }

private:
    struct Family {
        std::string name;
        const char* type;
        std::string help;
        std::vector<std::string> samples;
    };
    std::vector<Family> families_;
};

const json& at(const json& obj, std::string_view key) {
    static const json missing;
    if (!obj.is_object()) return missing;
    const auto it = obj.find(key);
    return it == obj.end() ? missing : *it;
}

std::string str(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_null()) return "";
    return v.dump();
}

// A JSON member and the family it feeds (name without `_total` for counters).
struct Field {
    const char* key;
    const char* name;
    const char* help;
};

void counters(Exposition& e, const json& obj, std::initializer_list<Field> fields, const Labels& labels = {}) {
    for (const Field& f : fields) e.add(std::string(f.name) + "_total", "counter", f.help, labels, at(obj, f.key));
}

void gauges(Exposition& e, const json& obj, std::initializer_list<Field> fields, const Labels& labels = {}) {
    for (const Field& f : fields) e.add(f.name, "gauge", f.help, labels, at(obj, f.key));
}

void render_status(Exposition& e, const json& status) {
    if (!status.is_object()) return;
    if (at(status, "party").is_string())
        e.add("fedgate_info", "gauge", "The gateway's party and version (always 1)",
              {{"party", str(at(status, "party"))}, {"party_id", str(at(status, "party_id"))},
               {"version", str(at(status, "version"))}},
              json(1));
    e.add("fedgate_uptime_seconds", "gauge", "Seconds since fedgated started", {}, at(status, "uptime_s"));
    const json& ports = at(status, "ports");
    if (ports.is_array())
        for (const json& p : ports) {
            const Labels l{{"port", str(at(p, "name"))}};
            e.add("fedgate_port_link_up", "gauge", "1 if the port's link is up", l, at(at(p, "link"), "up"));
            e.add("fedgate_port_neighbours", "gauge", "Entries of the port's neighbour (ARP) table", l,
                  at(p, "neighbours"));
        }
    const json& peers = at(status, "peers");
    if (peers.is_array())
        for (const json& p : peers)
            e.add("fedgate_peer_info", "gauge", "A configured peer gateway (always 1)",
                  {{"peer", str(at(p, "party"))}, {"party_id", str(at(p, "party_id"))}, {"address", str(at(p, "address"))}},
                  json(1));
}

void render_ports(Exposition& e, const json& stats) {
    const json& ports = at(stats, "ports");
    const json& reasons = at(stats, "drops_by_reason");
    if (!ports.is_array()) return;
    for (const json& p : ports) {
        const Labels l{{"port", str(at(p, "name"))}};
        counters(e, p,
                 {{"rx_packets", "fedgate_port_rx_packets", "Packets the data plane received on the port"},
                  {"rx_bytes", "fedgate_port_rx_bytes", "Bytes the data plane received on the port"},
                  {"tx_packets", "fedgate_port_tx_packets", "Packets the data plane sent on the port"},
                  {"tx_bytes", "fedgate_port_tx_bytes", "Bytes the data plane sent on the port"}},
                 l);
        // Every reason for every port: the per-port JSON lists only the non-zero ones.
        if (reasons.is_object())
            for (const auto& r : reasons.items()) {
                const json& v = at(at(p, "drops_by_reason"), r.key());
                e.add("fedgate_drops_total", "counter", "Packets the data plane dropped, by port and reason",
                      {{"port", str(at(p, "name"))}, {"reason", r.key()}}, v.is_null() ? json(0) : v);
            }
        counters(e, at(p, "hw"),
                 {{"ipackets", "fedgate_port_hw_rx_packets", "Packets the device received (rte_eth_stats ipackets)"},
                  {"opackets", "fedgate_port_hw_tx_packets", "Packets the device sent (rte_eth_stats opackets)"},
                  {"ibytes", "fedgate_port_hw_rx_bytes", "Bytes the device received (rte_eth_stats ibytes)"},
                  {"obytes", "fedgate_port_hw_tx_bytes", "Bytes the device sent (rte_eth_stats obytes)"},
                  {"imissed", "fedgate_port_hw_rx_missed", "Packets the device dropped for want of room (imissed)"},
                  {"ierrors", "fedgate_port_hw_rx_errors", "Erroneous packets the device received (ierrors)"},
                  {"oerrors", "fedgate_port_hw_tx_errors", "Packets the device failed to send (oerrors)"},
                  {"rx_nombuf", "fedgate_port_hw_rx_nombuf", "Receive failures for want of mbufs (rx_nombuf)"}},
                 l);
    }
}

void render_dataplane(Exposition& e, const json& stats) {
    counters(e, at(stats, "arp"),
             {{"requests_sent", "fedgate_arp_requests_sent", "ARP requests the data plane sent"},
              {"requests_received", "fedgate_arp_requests_received", "ARP requests the data plane received"},
              {"replies_sent", "fedgate_arp_replies_sent", "ARP replies the data plane sent"},
              {"replies_received", "fedgate_arp_replies_received", "ARP replies the data plane received"}});
    counters(e, at(stats, "icmp"),
             {{"echo_requests_received", "fedgate_icmp_echo_requests_received",
               "ICMP echo requests to the gateway's addresses"},
              {"echo_replies_sent", "fedgate_icmp_echo_replies_sent", "ICMP echo replies the gateway sent"}});
    const json& n = at(stats, "neighbour");
    gauges(e, n, {{"entries", "fedgate_neighbours", "Entries of the neighbour (ARP) tables"}});
    counters(e, n,
             {{"learned", "fedgate_neighbours_learned", "Neighbours learned"},
              {"expired", "fedgate_neighbours_expired", "Neighbours forgotten after neighbour_stale_s"},
              {"failed", "fedgate_neighbours_failed", "Next hops that did not answer arp_probes ARP requests"}});
    counters(e, at(stats, "loop"),
             {{"polls", "fedgate_loop_polls", "Polls of the data-plane loop"},
              {"busy_polls", "fedgate_loop_busy_polls", "Polls that found packets or work"},
              {"idle_sleeps", "fedgate_loop_idle_sleeps", "Naps of an idle data-plane lcore (idle = backoff)"}});

    const json& nat = at(stats, "nat");
    gauges(e, nat,
           {{"sessions", "fedgate_sessions", "NAT sessions open now"},
            {"max_sessions", "fedgate_sessions_max", "NAT sessions one data-plane lcore holds at most"}});
    counters(e, nat,
             {{"created", "fedgate_sessions_created", "NAT sessions opened"},
              {"expired", "fedgate_sessions_expired", "NAT sessions closed after their idle timeout"},
              {"refused_full", "fedgate_sessions_refused_full", "New sessions refused because the table was full"},
              {"port_alloc_miss", "fedgate_nat_port_alloc_miss", "Session port allocations that found no free port"},
              {"translated", "fedgate_nat_translated_packets", "Packets the NAT rewrote"},
              {"icmp_errors_translated", "fedgate_nat_icmp_errors_translated", "ICMP errors about sessions rewritten"},
              {"mss_clamped", "fedgate_nat_mss_clamped", "TCP SYNs whose MSS option was lowered"}});
    // "external_tcp": {"used": N, "free": M}
    const json& pools = at(nat, "port_pools");
    if (pools.is_object())
        for (const auto& p : pools.items()) {
            const std::string key = p.key();
            const auto us = key.find('_');
            const std::string pool = key.substr(0, us), proto = us == std::string::npos ? "" : key.substr(us + 1);
            for (const char* state : {"used", "free"})
                e.add("fedgate_nat_pool_ports", "gauge", "Session ports of a NAT pool, used or free",
                      {{"pool", pool}, {"proto", proto}, {"state", state}}, at(p.value(), state));
        }

    const json& maps = at(stats, "maps");
    e.add("fedgate_mappings", "gauge", "Port mappings in the table, by kind", {{"kind", "import"}}, at(maps, "imports"));
    e.add("fedgate_mappings", "gauge", "Port mappings in the table, by kind", {{"kind", "export"}}, at(maps, "exports"));
    counters(e, at(stats, "control"),
             {{"punted", "fedgate_control_punted", "Packets the data plane handed to the control threads"},
              {"injected", "fedgate_control_injected", "Packets the control threads sent through the data plane"},
              {"wakeups", "fedgate_control_wakeups", "Times the data plane woke the sleeping punt thread"},
              {"unmatched_echo_replies", "fedgate_control_unmatched_echo_replies",
               "Echo replies that matched no ping in flight"}});
}

void render_resolution(Exposition& e, const json& res) {
    const json& dir = at(res, "directory");
    gauges(e, dir, {{"local", "fedgate_directory_processes", "Compute processes registered with this gateway"}});
    counters(e, dir,
             {{"registered", "fedgate_directory_registered", "Registrations accepted"},
              {"refreshed", "fedgate_directory_refreshed", "Registrations repeated with the same record"},
              {"replaced", "fedgate_directory_replaced", "Registrations that replaced a record (new epoch)"},
              {"deregistered", "fedgate_directory_deregistered", "Processes that deregistered"},
              {"expired", "fedgate_directory_expired", "Processes expired for missing heartbeats"},
              {"heartbeats", "fedgate_directory_heartbeats", "Heartbeats received"}});
    if (dir.is_object())
        for (const auto& d : dir.items())
            if (d.key().starts_with("refused_"))
                e.add("fedgate_directory_refused_total", "counter", "Registrations refused, by reason",
                      {{"reason", d.key().substr(8)}}, d.value());

    const json& cache = at(res, "cache");
    for (const char* kind : {"local", "announced", "answered", "negative"})
        e.add("fedgate_resolve_cache_entries", "gauge", "Records in the resolution cache, by kind", {{"kind", kind}},
              at(cache, kind));
    gauges(e, cache, {{"capacity", "fedgate_resolve_cache_capacity", "Records the resolution cache holds at most"}});
    counters(e, cache,
             {{"full", "fedgate_resolve_cache_full", "Records not cached because the cache was full"},
              {"expired", "fedgate_resolve_cache_expired", "Cached records that expired"},
              {"learned", "fedgate_resolve_cache_learned", "Records learned from peers' answers"},
              {"learned_negative", "fedgate_resolve_cache_learned_negative", "\"Not found\" answers cached"}});

    const json& x = at(res, "exchange");
    counters(e, x,
             {{"peer_msgs_sent", "fedgate_exchange_peer_msgs_sent", "Directory messages sent to peers"},
              {"records_applied", "fedgate_exchange_records_applied", "Announced records applied"},
              {"records_withdrawn", "fedgate_exchange_records_withdrawn", "Records peers withdrew"},
              {"refused_foreign_records", "fedgate_exchange_refused_foreign_records",
               "Records refused because a peer announced another party's process"},
              {"snapshots_received", "fedgate_exchange_snapshots_received", "Directory snapshots received"},
              {"stream_resets_sent", "fedgate_exchange_stream_resets_sent", "Announce streams asked to restart"},
              {"stream_gaps", "fedgate_exchange_stream_gaps", "Announce messages that arrived after a gap"},
              {"reg_replies_sent", "fedgate_exchange_reg_replies_sent", "Replies to compute processes' registrations"},
              {"malformed", "fedgate_exchange_malformed", "Directory messages that could not be read"}});
    const json& peers = at(x, "peers");
    if (peers.is_array())
        for (const json& p : peers) {
            const Labels l{{"peer", str(at(p, "party"))}};
            gauges(e, p,
                   {{"out_stream_acked", "fedgate_peer_stream_acked_seq", "Last announce sequence the peer acknowledged"},
                    {"out_stream_last_seq", "fedgate_peer_stream_last_seq", "Last announce sequence sent to the peer"},
                    {"out_unacked", "fedgate_peer_stream_unacked", "Announce messages not yet acknowledged or queued"},
                    {"in_applied", "fedgate_peer_stream_applied_seq", "Last sequence of the peer's stream applied here"}},
                   l);
            counters(e, p,
                     {{"out_messages", "fedgate_peer_stream_messages_sent", "Announce messages sent to the peer"},
                      {"out_retransmits", "fedgate_peer_stream_retransmits", "Announce messages sent again"},
                      {"out_restarts", "fedgate_peer_stream_restarts", "Announce streams restarted to the peer"},
                      {"records_announced", "fedgate_peer_records_announced", "Records announced to the peer"},
                      {"records_withdrawn", "fedgate_peer_records_withdrawn", "Records withdrawn from the peer"}},
                     l);
        }

    const json& h = at(res, "handshakes");
    gauges(e, h,
           {{"in_table", "fedgate_handshakes_in_table", "Relayed handshakes held, in flight and finished"},
            {"in_flight", "fedgate_handshakes_in_flight", "Relayed handshakes not finished yet"}});
    for (const char* msg : {"req", "rep", "rtu"})
        e.add("fedgate_handshakes_relayed_total", "counter", "Handshake messages relayed, by message", {{"msg", msg}},
              at(h, std::string(msg) + "_relayed"));
    counters(e, h,
             {{"established", "fedgate_handshakes_established", "Handshakes that finished (RTU relayed)"},
              {"duplicates", "fedgate_handshakes_duplicates", "Handshake messages seen again"},
              {"timed_out", "fedgate_handshakes_timed_out", "Handshakes not finished within handshake_timeout_ms"},
              {"unknown_handshake", "fedgate_handshakes_unknown", "REP or RTU messages for no known handshake"},
              {"wrong_sender", "fedgate_handshakes_wrong_sender", "Handshake messages from the wrong party"},
              {"malformed", "fedgate_handshakes_malformed", "Handshake messages that could not be read"}});
    const json& refused = at(h, "refused");
    if (refused.is_object())
        for (const auto& r : refused.items())
            e.add("fedgate_handshakes_refused_total", "counter", "Handshakes refused, by status",
                  {{"status", r.key()}}, r.value());

    const json& a = at(res, "auto_mappings");
    for (const auto& [kind, key] : {std::pair{"export", "exports"}, std::pair{"import", "imports"}}) {
        const std::string k(key);
        e.add("fedgate_auto_mappings", "gauge", "Mappings the gateway made for the tcp transport, by kind",
              {{"kind", kind}}, at(a, k));
        e.add("fedgate_auto_mappings_made_total", "counter", "Automatic mappings made, by kind", {{"kind", kind}},
              at(a, k + "_made"));
        e.add("fedgate_auto_mappings_removed_total", "counter", "Automatic mappings removed, by kind", {{"kind", kind}},
              at(a, k + "_removed"));
    }
    counters(e, a,
             {{"ports_exhausted", "fedgate_auto_mappings_ports_exhausted", "Automatic mappings with no free port"},
              {"refused", "fedgate_auto_mappings_refused", "Automatic mappings the port-map table refused"}});

    // RoCE v2 translations of RDMA connections between parties (an empty object when RoCE is off).
    const json& roce = at(res, "roce");
    if (roce.is_object() && !roce.empty()) {
        gauges(e, roce,
               {{"connections", "fedgate_roce_connections", "RDMA connections whose RoCE v2 traffic is translated"},
                {"capacity", "fedgate_roce_capacity", "RDMA connections the translation table holds at most"}});
        counters(e, roce,
                 {{"installed", "fedgate_roce_installed", "RoCE v2 translations installed"},
                  {"exhausted", "fedgate_roce_exhausted", "RDMA handshakes refused no_mapping: no virtual QPN free"}});
        for (const auto& [why, key] : {std::pair{"process", "removed_process"}, std::pair{"peer", "removed_peer"},
                                       std::pair{"idle", "removed_idle"}})
            e.add("fedgate_roce_removed_total", "counter", "RoCE v2 translations removed, by why", {{"why", why}},
                  at(roce, key));
    }

    const json& r = at(res, "resolve");
    counters(e, r,
             {{"requests", "fedgate_resolve_requests", "Lookups compute processes asked for"},
              {"hits", "fedgate_resolve_hits", "Lookups answered from the cache"},
              {"misses", "fedgate_resolve_misses", "Lookups the cache could not answer"},
              {"folded", "fedgate_resolve_folded", "Lookups joined to a query already pending"},
              {"directed", "fedgate_resolve_directed", "Queries sent to the owner's gateway"},
              {"broadcast", "fedgate_resolve_broadcast", "Queries broadcast to every peer"},
              {"answered", "fedgate_resolve_answered", "Queries a peer answered with a record"},
              {"not_found", "fedgate_resolve_not_found", "Queries answered \"not found\""},
              {"timed_out", "fedgate_resolve_timed_out", "Queries no peer answered in time"},
              {"negative", "fedgate_resolve_negative_hits", "Lookups answered from a cached \"not found\""},
              {"answers_unmatched", "fedgate_resolve_answers_unmatched", "Peer answers that matched no query"},
              {"peer_queries_found", "fedgate_resolve_peer_queries_found", "Peers' queries answered with a record"},
              {"peer_queries_not_here", "fedgate_resolve_peer_queries_not_here", "Peers' queries answered \"not here\""},
              {"client_msgs", "fedgate_resolve_client_msgs", "Messages from compute processes"},
              {"punted_registrations", "fedgate_resolve_punted_registrations", "Registrations handed to control"},
              {"punted_peer_msgs", "fedgate_resolve_punted_peer_msgs", "Peer directory messages handed to control"},
              {"punted_handshakes", "fedgate_resolve_punted_handshakes", "Handshake messages handed to control"},
              {"peer_msgs", "fedgate_resolve_peer_msgs", "Messages from peer gateways"},
              {"replies_sent", "fedgate_resolve_replies_sent", "Replies sent to compute processes"},
              {"queries_sent", "fedgate_resolve_queries_sent", "Queries sent to peer gateways"},
              {"answers_sent", "fedgate_resolve_answers_sent", "Answers sent to peer gateways"},
              {"events_lost", "fedgate_resolve_events_lost", "Events the control threads could not take (ring full)"}});
    for (const auto& [reason, key] :
         {std::pair{"rate", "refused_rate"}, std::pair{"busy", "refused_busy"}, std::pair{"bad_request", "bad_requests"}})
        e.add("fedgate_resolve_refused_total", "counter", "Lookups refused, by reason", {{"reason", reason}},
              at(r, key));
    gauges(e, r, {{"pending", "fedgate_resolve_pending", "Queries waiting for a peer's answer"}});
}

// ---- HTTP ----

std::string reply(int code, std::string_view reason, std::string_view content_type, const std::string& body,
                  bool head = false, std::string_view extra_header = {}) {
    std::string r = "HTTP/1.1 " + std::to_string(code) + " " + std::string(reason) + "\r\n";
    r += "Content-Type: " + std::string(content_type) + "\r\n";
    r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    if (!extra_header.empty()) r += std::string(extra_header) + "\r\n";
    r += "Connection: close\r\n\r\n";
    if (!head) r += body;
    return r;
}

std::string error_reply(int code, std::string_view reason, const std::string& why, std::string_view extra = {}) {
    return reply(code, reason, "text/plain; charset=utf-8", std::to_string(code) + " " + std::string(reason) + ": " + why + "\n",
                 false, extra);
}

bool token_char(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '-' || c == '_'; }

bool wait_fd(int fd, short events, int timeout_ms) {
    pollfd p{fd, events, 0};
    int rc;
    do rc = ::poll(&p, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    return rc > 0;
}

constexpr int kPollMs = 200;            // how soon stop() is noticed
constexpr int kClientTimeoutMs = 2000;  // a scraper that says nothing is dropped after this

}  // namespace

std::string escape_label_value(std::string_view v) {
    std::string out;
    for (char c : v) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

std::string render_prometheus(const json& stats, const json& status) {
    Exposition e;
    render_status(e, status);
    render_ports(e, stats);
    render_dataplane(e, stats);
    render_resolution(e, at(stats, "resolution"));
    return e.text();
}

std::string http_reply(std::string_view request, const std::function<std::string()>& metrics) {
    if (request.size() > kMaxHttpRequestBytes)
        return error_reply(431, "Request Header Fields Too Large",
                           "requests are limited to " + std::to_string(kMaxHttpRequestBytes) + " bytes");
    const std::size_t eol = request.find('\n');
    if (eol == std::string_view::npos) return error_reply(400, "Bad Request", "no request line");
    std::string_view line = request.substr(0, eol);
    if (line.ends_with('\r')) line.remove_suffix(1);
    // METHOD SP TARGET SP HTTP/1.x, nothing more.
    const std::size_t sp1 = line.find(' ');
    const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
        return error_reply(400, "Bad Request", "the request line must be METHOD PATH HTTP/1.x");
    const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                           version = line.substr(sp2 + 1);
    if (method.empty() || !std::all_of(method.begin(), method.end(), token_char) || target.empty() ||
        target[0] != '/' || (version != "HTTP/1.0" && version != "HTTP/1.1"))
        return error_reply(400, "Bad Request", "the request line must be METHOD PATH HTTP/1.x");
    const bool head = method == "HEAD";
    if (method != "GET" && !head)
        return error_reply(405, "Method Not Allowed", "only GET and HEAD are served", "Allow: GET, HEAD");
    const std::string_view path = target.substr(0, target.find('?'));
    if (path != "/metrics") return error_reply(404, "Not Found", "metrics are at /metrics");
    std::string body;
    try {
        body = metrics();
    } catch (const std::exception& ex) {
        return error_reply(500, "Internal Server Error", ex.what());
    }
    return reply(200, "OK", kMetricsContentType, body, head);
}

MetricsServer::MetricsServer(uint32_t addr_host_order, uint16_t port, Render render)
    : render_(std::move(render)), address_(format_ipv4(addr_host_order) + ":" + std::to_string(port)), port_(port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw std::runtime_error("metrics.listen " + address_ + ": socket(): " + std::strerror(errno));
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a restart within TIME_WAIT
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(addr_host_order);
    socklen_t len = sizeof a;
    if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 16) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        const int err = errno;
        ::close(listen_fd_);
        listen_fd_ = -1;
        throw std::runtime_error("metrics.listen " + address_ + ": cannot listen: " + std::strerror(err) +
                                 (err == EADDRNOTAVAIL ? " (not an address of the gateway's network namespace; the "
                                                         "data plane's port addresses are not kernel addresses)"
                                                       : ""));
    }
    port_ = ntohs(a.sin_port);
    address_ = format_ipv4(addr_host_order) + ":" + std::to_string(port_);
}

MetricsServer::~MetricsServer() { stop(); }

void MetricsServer::start() {
    FG_LOG(INFO, metrics, "Prometheus metrics at http://%s/metrics", address_.c_str());
    thread_ = std::thread([this] { accept_loop(); });
}

void MetricsServer::stop() {
    stopping_.store(true);
    if (thread_.joinable()) thread_.join();
    if (listen_fd_ >= 0) {
        ::close(listen_fd_);
        listen_fd_ = -1;
    }
}

void MetricsServer::accept_loop() {
    while (!stopping_.load()) {
        if (!wait_fd(listen_fd_, POLLIN, kPollMs)) continue;
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        serve(fd);
    }
}

void MetricsServer::serve(int fd) {
    std::string request;
    char buf[2048];
    // Up to the blank line that ends the headers (the body of a GET is never read), or the limit.
    while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos &&
           request.size() <= kMaxHttpRequestBytes && !stopping_.load()) {
        if (!wait_fd(fd, POLLIN, kClientTimeoutMs)) break;
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        request.append(buf, static_cast<std::size_t>(n));
    }
    if (!request.empty()) {
        const std::string r = http_reply(request, render_);
        for (std::size_t off = 0; off < r.size();) {
            if (!wait_fd(fd, POLLOUT, kClientTimeoutMs)) break;
            const ssize_t n = ::send(fd, r.data() + off, r.size() - off, MSG_NOSIGNAL);
            if (n <= 0) break;
            off += static_cast<std::size_t>(n);
        }
        // Closing with unread request bytes would reset the connection and could lose the reply.
        ::shutdown(fd, SHUT_WR);
        for (int i = 0; i < 16 && wait_fd(fd, POLLIN, 100) && ::recv(fd, buf, sizeof buf, 0) > 0; ++i) {
        }
    }
    ::close(fd);
}

}  // namespace fedgate
