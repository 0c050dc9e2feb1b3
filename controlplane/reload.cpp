// The config diff behind `fedgatectl reload`.
#include "controlplane/reload.hpp"

#include <algorithm>

#include "controlplane/log.hpp"
#include "controlplane/mapping.hpp"
#include "dataplane/peer_auth.hpp"

namespace fedgate {

std::string ReloadChange::text() const { return kind + " " + name + " " + change; }

namespace {

struct Refusals {
    std::vector<std::string>& out;
    template <typename T>
    void field(const char* section, const char* key, const T& a, const T& b) {
        if (!(a == b))
            out.push_back(std::string("[") + section + "] " + key + ": cannot change while running; restart fedgated");
    }
};

void diff_peers(const Config& a, const Config& b, ConfigDiff& d) {
    for (const PeerConfig& p : b.peers) {
        const PeerConfig* old = a.peer(p.party);
        if (old == nullptr) {
            d.changes.push_back({"peer", p.party, "added"});
            continue;
        }
        std::vector<std::string> what;
        if (old->party_id != p.party_id) what.push_back("party_id");
        if (old->key != p.key || old->key_id != p.key_id) what.push_back("key");
        if (old->next_key != p.next_key || old->next_key_id != p.next_key_id)
            what.push_back(p.next_key.empty() ? "next_key removed" : old->next_key.empty() ? "next_key added" : "next_key");
        if (old->address != p.address) what.push_back("address");
        if (what.empty()) continue;
        std::string list;
        for (const std::string& w : what) list += (list.empty() ? "" : ", ") + w;
        d.changes.push_back({"peer", p.party, "changed (" + list + ")"});
    }
    for (const PeerConfig& p : a.peers)
        if (b.peer(p.party) == nullptr) d.changes.push_back({"peer", p.party, "removed"});
    d.peers_changed = !d.changes.empty();
}

template <typename M>
void diff_mappings(const std::vector<M>& a, const std::vector<M>& b, const char* kind, ConfigDiff& d) {
    const auto name = [](const M& m) { return std::string(proto_name(m.proto)) + "/" + std::to_string(m.port); };
    const auto find = [](const std::vector<M>& list, const M& m) {
        return std::find_if(list.begin(), list.end(), [&](const M& o) { return o.proto == m.proto && o.port == m.port; });
    };
    for (const M& m : b) {
        const auto old = find(a, m);
        if (old == a.end())
            d.changes.push_back({kind, name(m), "added"});
        else if (!(*old == m))
            d.changes.push_back({kind, name(m), "changed"});
    }
    for (const M& m : a)
        if (find(b, m) == b.end()) d.changes.push_back({kind, name(m), "removed"});
}

}  // namespace

ConfigDiff diff_config(const Config& a, const Config& b) {
    ConfigDiff d;
    Refusals r{d.refused};
    r.field("gateway", "party", a.party, b.party);
    r.field("gateway", "party_id", a.party_id, b.party_id);
    r.field("gateway", "socket", a.socket, b.socket);
    r.field("gateway", "state_dir", a.state_dir, b.state_dir);
    r.field("eal", "args", a.eal_args, b.eal_args);
    const DataplaneSettings &da = a.dataplane, &db = b.dataplane;
    r.field("dataplane", "workers", da.workers, db.workers);
    r.field("dataplane", "idle", da.idle_spin, db.idle_spin);
    r.field("dataplane", "idle_sleep_max_us", da.idle_sleep_max_us, db.idle_sleep_max_us);
    r.field("dataplane", "idle_polls_before_sleep", da.idle_polls_before_sleep, db.idle_polls_before_sleep);
    r.field("dataplane", "idle_yield_us", da.idle_yield_us, db.idle_yield_us);
    r.field("dataplane", "mbufs", da.mbufs, db.mbufs);
    r.field("dataplane", "punt_ring", da.punt_ring, db.punt_ring);
    r.field("dataplane", "neighbour_capacity", da.neighbour_capacity, db.neighbour_capacity);
    r.field("dataplane", "neighbour_reachable_s", da.neighbour_reachable_s, db.neighbour_reachable_s);
    r.field("dataplane", "neighbour_stale_s", da.neighbour_stale_s, db.neighbour_stale_s);
    r.field("dataplane", "arp_probe_interval_ms", da.arp_probe_interval_ms, db.arp_probe_interval_ms);
    r.field("dataplane", "arp_probes", da.arp_probes, db.arp_probes);
    // Ports by position: [[port]] tables in order.
    if (a.ports.size() != b.ports.size()) {
        r.field("port", "(count)", a.ports.size(), b.ports.size());
    } else {
        for (std::size_t i = 0; i < a.ports.size(); ++i)
            if (!(a.ports[i] == b.ports[i]))
                d.refused.push_back("[[port]] " + a.ports[i].name + ": cannot change while running; restart fedgated");
    }
    const NatSettings &na = a.nat, &nb = b.nat;
    r.field("nat", "port_range", std::pair(na.port_lo, na.port_hi), std::pair(nb.port_lo, nb.port_hi));
    r.field("nat", "max_sessions", na.max_sessions, nb.max_sessions);
    r.field("nat", "tcp_established_s", na.tcp_established_s, nb.tcp_established_s);
    r.field("nat", "tcp_transitory_s", na.tcp_transitory_s, nb.tcp_transitory_s);
    r.field("nat", "tcp_closing_s", na.tcp_closing_s, nb.tcp_closing_s);
    r.field("nat", "udp_s", na.udp_s, nb.udp_s);
    const ResolveSettings &ra = a.resolve, &rb = b.resolve;
    r.field("resolve", "port", ra.port, rb.port);
    r.field("resolve", "announce", ra.announce, rb.announce);
    r.field("resolve", "cache_capacity", ra.cache_capacity, rb.cache_capacity);
    r.field("resolve", "pending_queries", ra.pending_queries, rb.pending_queries);
    r.field("resolve", "query_timeout_ms", ra.query_timeout_ms, rb.query_timeout_ms);
    r.field("resolve", "negative_ttl_ms", ra.negative_ttl_ms, rb.negative_ttl_ms);
    r.field("resolve", "answer_ttl_s", ra.answer_ttl_s, rb.answer_ttl_s);
    r.field("resolve", "heartbeat_ms", ra.heartbeat_ms, rb.heartbeat_ms);
    r.field("resolve", "heartbeat_timeout_ms", ra.heartbeat_timeout_ms, rb.heartbeat_timeout_ms);
    r.field("resolve", "broadcast_rate", ra.broadcast_rate, rb.broadcast_rate);
    r.field("resolve", "broadcast_burst", ra.broadcast_burst, rb.broadcast_burst);
    r.field("resolve", "requester_broadcast_rate", ra.requester_broadcast_rate, rb.requester_broadcast_rate);
    r.field("resolve", "requester_broadcast_burst", ra.requester_broadcast_burst, rb.requester_broadcast_burst);
    r.field("resolve", "sync_interval_ms", ra.sync_interval_ms, rb.sync_interval_ms);
    r.field("resolve", "max_clock_skew_ms", ra.max_clock_skew_ms, rb.max_clock_skew_ms);
    r.field("resolve", "announce_window", ra.announce_window, rb.announce_window);
    r.field("resolve", "retransmit_ms", ra.retransmit_ms, rb.retransmit_ms);
    const ConnectSettings &ca = a.connect, &cb = b.connect;
    r.field("connect", "auto_ports", std::pair(ca.auto_port_lo, ca.auto_port_hi), std::pair(cb.auto_port_lo, cb.auto_port_hi));
    r.field("connect", "handshake_timeout_ms", ca.handshake_timeout_ms, cb.handshake_timeout_ms);
    r.field("connect", "max_handshakes", ca.max_handshakes, cb.max_handshakes);
    r.field("connect", "rdma_max_connections", ca.rdma_max_connections, cb.rdma_max_connections);
    r.field("connect", "rdma_idle_s", ca.rdma_idle_s, cb.rdma_idle_s);
    r.field("metrics", "listen", a.metrics.listen, b.metrics.listen);
    r.field("cluster", "etcd", a.cluster.etcd, b.cluster.etcd);
    r.field("cluster", "member", a.cluster.member, b.cluster.member);
    r.field("cluster", "lease_ttl_s", a.cluster.lease_ttl_s, b.cluster.lease_ttl_s);
    r.field("cluster", "txn_ops", a.cluster.txn_ops, b.cluster.txn_ops);
    r.field("cluster", "sync", a.cluster.sync_text(), b.cluster.sync_text());
    r.field("cluster", "sync_key", key_fingerprint(a.cluster.sync_key), key_fingerprint(b.cluster.sync_key));

    diff_peers(a, b, d);
    diff_mappings(a.imports, b.imports, "import", d);
    diff_mappings(a.exports, b.exports, "export", d);
    if (!(a.log == b.log)) {
        d.log_changed = true;
        if (b.log.level) d.changes.push_back({"log", "fedgate.*", "set to " + log_level_name(*b.log.level)});
        for (const auto& [type, level] : b.log.types) d.changes.push_back({"log", type, "set to " + log_level_name(level)});
    }
    return d;
}

nlohmann::ordered_json changes_json(const std::vector<ReloadChange>& changes) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const ReloadChange& c : changes)
        out.push_back({{"kind", c.kind}, {"name", c.name}, {"change", c.change}, {"text", c.text()}});
    return out;
}

}  // namespace fedgate
