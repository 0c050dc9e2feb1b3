// The counter table (counter_table.hpp): the rows, the workers summed, the rows written into a reply.
#include "controlplane/counter_table.hpp"

#include <algorithm>
#include <stdexcept>

#include "dataplane/dataplane.hpp"

namespace fedgate {
namespace {

using json = nlohmann::ordered_json;

// A row being written: CounterDesc with the few changes rows make to the defaults.
struct Row : CounterDesc {
    constexpr Row once() const { Row r = *this; r.combine = Combine::once; return r; }
    constexpr Row gauge() const { Row r = *this; r.type = MetricType::gauge; return r; }
    constexpr Row per_port() const { Row r = *this; r.scope = Scope::port; return r; }
    constexpr Row per_peer() const { Row r = *this; r.scope = Scope::peer; return r; }
    constexpr Row with(Label a, Label b = {}, Label c = {}) const { Row r = *this; r.labels = {a, b, c}; return r; }
    constexpr Row by_reason(bool omit_zero) const {
        Row r = *this;
        r.dim = Dim::drop_reason;
        r.omit_zero = omit_zero;
        return r;
    }
    constexpr Row by_keys(std::string_view label) const {
        Row r = *this;
        r.dim = Dim::keys;
        r.dim_label = label;
        return r;
    }
    constexpr Row resolver() const { Row r = *this; r.needs_resolver = true; return r; }
    constexpr Row in_status() const { Row r = *this; r.reply = Reply::status; return r; }
};

// A worker's counter, the gateway's own, or a control service's (read from its JSON).
constexpr Row worker(std::string_view section, std::string_view key, std::string_view family, std::string_view help,
                     WorkerRead read) {
    Row r;
    r.section = section, r.key = key, r.family = family, r.help = help, r.source = Source::worker, r.worker = read;
    return r;
}
constexpr Row gateway(std::string_view section, std::string_view key, std::string_view family, std::string_view help,
                      GatewayRead read) {
    Row r;
    r.section = section, r.key = key, r.family = family, r.help = help, r.source = Source::gateway, r.gateway = read;
    return r;
}
constexpr Row control(std::string_view section, std::string_view key, std::string_view family, std::string_view help) {
    Row r;
    r.section = section, r.key = key, r.family = family, r.help = help, r.source = Source::control;
    return r;
}

#define FG_READ(expr) [](const Dataplane& w, std::size_t port, std::size_t index) -> uint64_t { \
    (void)w, (void)port, (void)index;                                                            \
    return (expr);                                                                              \
}
#define LCORE(f) FG_READ(w.counters().f.get())
#define NAT(f) FG_READ(w.nat_counters().f.get())
#define PORT(f) FG_READ(w.port_counters(port).f.get())
#define RESOLVER(f) FG_READ(w.resolver() != nullptr ? w.resolver()->counters().f.get() : 0)
#define RESOLVE_DP(f) FG_READ(w.resolve_counters().f.get())
#define DEVICE(f) [](const GatewayReadings& g, std::size_t port) -> uint64_t { \
    return port < g.devices.size() ? g.devices[port].f : 0;                     \
}

uint64_t drops_on_all_ports(const Dataplane& w, std::size_t reason) {
    uint64_t t = 0;
    for (std::size_t p = 0; p < w.port_count(); ++p) t += w.port_counters(p).drops[reason].get();
    return t;
}

uint64_t pool_used(const Dataplane& w, Nat::Pool pool, L4Proto proto) {
    const uint64_t size = w.pool_size(pool, proto), free = w.pool_free(pool, proto);
    return size - std::min(size, free);
}

#define POOL(name, pool, proto)                                                                                 \
    worker("nat/port_pools/" name "_" #proto, "used", "fedgate_nat_pool_ports",                                 \
           "Session ports of a NAT pool, used or free",                                                         \
           FG_READ(pool_used(w, Nat::Pool::pool, L4Proto::proto)))                                              \
        .gauge()                                                                                                \
        .with({"pool", name}, {"proto", #proto}, {"state", "used"}),                                            \
        worker("nat/port_pools/" name "_" #proto, "free", "fedgate_nat_pool_ports",                             \
               "Session ports of a NAT pool, used or free", FG_READ(w.pool_free(Nat::Pool::pool, L4Proto::proto))) \
            .gauge()                                                                                            \
            .with({"pool", name}, {"proto", #proto}, {"state", "free"})

constexpr std::string_view kRefusedHelp = "Lookups refused, by reason";

// Session ports are on the external address for imports, on the internal one for exports.
constexpr Row kRows[] = {
    // ---- stats: ports (each port's entry) ----
    worker("", "rx_packets", "fedgate_port_rx_packets", "Packets the data plane received on the port", PORT(rx_packets)).per_port(),
    worker("", "rx_bytes", "fedgate_port_rx_bytes", "Bytes the data plane received on the port", PORT(rx_bytes)).per_port(),
    worker("", "tx_packets", "fedgate_port_tx_packets", "Packets the data plane sent on the port", PORT(tx_packets)).per_port(),
    worker("", "tx_bytes", "fedgate_port_tx_bytes", "Bytes the data plane sent on the port", PORT(tx_bytes)).per_port(),
    worker("", "drops", "", "Packets the data plane dropped on the port, every reason together",
           FG_READ(w.port_counters(port).total_drops())).per_port(),
    worker("", "drops_by_reason", "fedgate_drops", "Packets the data plane dropped, by port and reason",
           FG_READ(w.port_counters(port).drops[index].get())).per_port().by_reason(true),
    gateway("hw", "ipackets", "fedgate_port_hw_rx_packets", "Packets the device received (rte_eth_stats ipackets)", DEVICE(ipackets)).per_port(),
    gateway("hw", "opackets", "fedgate_port_hw_tx_packets", "Packets the device sent (rte_eth_stats opackets)", DEVICE(opackets)).per_port(),
    gateway("hw", "ibytes", "fedgate_port_hw_rx_bytes", "Bytes the device received (rte_eth_stats ibytes)", DEVICE(ibytes)).per_port(),
    gateway("hw", "obytes", "fedgate_port_hw_tx_bytes", "Bytes the device sent (rte_eth_stats obytes)", DEVICE(obytes)).per_port(),
    gateway("hw", "imissed", "fedgate_port_hw_rx_missed", "Packets the device dropped for want of room (imissed)", DEVICE(imissed)).per_port(),
    gateway("hw", "ierrors", "fedgate_port_hw_rx_errors", "Erroneous packets the device received (ierrors)", DEVICE(ierrors)).per_port(),
    gateway("hw", "oerrors", "fedgate_port_hw_tx_errors", "Packets the device failed to send (oerrors)", DEVICE(oerrors)).per_port(),
    gateway("hw", "rx_nombuf", "fedgate_port_hw_rx_nombuf", "Receive failures for want of mbufs (rx_nombuf)", DEVICE(rx_nombuf)).per_port(),

    // ---- stats: the data plane ----
    worker("", "drops_by_reason", "", "Packets the data plane dropped, by reason, every port together",
           FG_READ(drops_on_all_ports(w, index))).by_reason(false),
    worker("arp", "requests_sent", "fedgate_arp_requests_sent", "ARP requests the data plane sent", LCORE(arp_requests_sent)),
    worker("arp", "requests_received", "fedgate_arp_requests_received", "ARP requests the data plane received", LCORE(arp_requests_received)),
    worker("arp", "replies_sent", "fedgate_arp_replies_sent", "ARP replies the data plane sent", LCORE(arp_replies_sent)),
    worker("arp", "replies_received", "fedgate_arp_replies_received", "ARP replies the data plane received", LCORE(arp_replies_received)),
    worker("arp", "gratuitous_sent", "fedgate_arp_gratuitous_sent",
           "Gratuitous ARP announcing the gateway's addresses, sent when a group member becomes active",
           LCORE(arp_gratuitous_sent)),
    worker("icmp", "echo_requests_received", "fedgate_icmp_echo_requests_received", "ICMP echo requests to the gateway's addresses",
           LCORE(echo_requests_received)),
    worker("icmp", "echo_replies_sent", "fedgate_icmp_echo_replies_sent", "ICMP echo replies the gateway sent", LCORE(echo_replies_sent)),
    // Every worker resolves the same next hops: the first worker's table stands for all.
    worker("neighbour", "entries", "fedgate_neighbours", "Entries of the neighbour (ARP) tables", FG_READ(w.neighbour_entries()))
        .gauge().once(),
    worker("neighbour", "learned", "fedgate_neighbours_learned", "Neighbours learned", LCORE(neigh_learned)),
    worker("neighbour", "expired", "fedgate_neighbours_expired", "Neighbours forgotten after neighbour_stale_s", LCORE(neigh_expired)),
    worker("neighbour", "failed", "fedgate_neighbours_failed", "Next hops that did not answer arp_probes ARP requests", LCORE(neigh_failed)),
    worker("neighbour", "unresolved_drops", "", "Packets dropped for an unresolved next hop (the drop reason neighbour_unresolved)",
           FG_READ(drops_on_all_ports(w, static_cast<std::size_t>(DropReason::neighbour_unresolved)))),
    worker("loop", "polls", "fedgate_loop_polls", "Polls of the data-plane loop", LCORE(polls)),
    worker("loop", "busy_polls", "fedgate_loop_busy_polls", "Polls that found packets or work", LCORE(busy_polls)),
    worker("loop", "idle_sleeps", "fedgate_loop_idle_sleeps", "Naps of an idle data-plane lcore (idle = backoff)", LCORE(idle_sleeps)),
    worker("loop", "idle_yields", "fedgate_loop_idle_yields", "Empty polls after a yield of the CPU, in the idle_yield_us after a packet", LCORE(idle_yields)),
    worker("loop", "arp_copies_failed", "fedgate_loop_arp_copies_failed",
           "ARP packets not copied to another worker for want of an mbuf (that worker learns the sender later)",
           LCORE(arp_copies_failed)),
    worker("loop", "doorbell_wakeups", "fedgate_loop_doorbell_wakeups",
           "Waits of a sleeping worker ended by its doorbell (a control request, an injected packet or a hand-off)",
           LCORE(doorbell_wakeups)),
    worker("loop", "handoffs_sent", "fedgate_loop_handoffs_sent",
           "Packets a worker passed to the worker that owns them (hand-off ring)", LCORE(handoffs_sent)),
    worker("loop", "handoffs_received", "fedgate_loop_handoffs_received",
           "Packets a worker took from its hand-off ring", LCORE(handoffs_received)),
    worker("loop", "arp_copies_sent", "fedgate_loop_arp_copies_sent",
           "ARP packets copied to the other workers to learn from", LCORE(arp_copies_sent)),
    worker("nat", "sessions", "fedgate_sessions", "NAT sessions open now", FG_READ(w.session_count())).gauge(),
    worker("nat", "created", "fedgate_sessions_created", "NAT sessions opened", NAT(sessions_created)),
    worker("nat", "expired", "fedgate_sessions_expired", "NAT sessions closed after their idle timeout", NAT(sessions_expired)),
    worker("nat", "refused_full", "fedgate_sessions_refused_full", "New sessions refused because the table was full",
           NAT(sessions_refused_full)),
    worker("nat", "port_alloc_miss", "fedgate_nat_port_alloc_miss", "Session port allocations that found no free port",
           NAT(port_alloc_miss)),
    worker("nat", "translated", "fedgate_nat_translated_packets", "Packets the NAT rewrote", NAT(translated)),
    worker("nat", "fast_path", "fedgate_nat_fast_path_packets",
           "Of the packets the NAT rewrote, those of established sessions it took without a full parse", NAT(fast_path)),
    worker("nat", "icmp_errors_translated", "fedgate_nat_icmp_errors_translated", "ICMP errors about sessions rewritten",
           NAT(icmp_errors_translated)),
    worker("nat", "mss_clamped", "fedgate_nat_mss_clamped", "TCP SYNs whose MSS option was lowered", NAT(mss_clamped)),
    worker("nat", "session_events_lost", "fedgate_nat_session_events_lost",
           "Session opened/closed events for the group's other members that found no room (log or ring full)",
           NAT(session_events_lost)),
    gateway("nat", "max_sessions", "fedgate_sessions_max", "NAT sessions one data-plane lcore holds at most",
            [](const GatewayReadings& g, std::size_t) { return g.max_sessions; }).gauge(),
    POOL("external", external, tcp),
    POOL("external", external, udp),
    POOL("internal", internal, tcp),
    POOL("internal", internal, udp),
    gateway("maps", "imports", "fedgate_mappings", "Port mappings in the table, by kind",
            [](const GatewayReadings& g, std::size_t) { return g.imports; }).gauge().with({"kind", "import"}),
    gateway("maps", "exports", "fedgate_mappings", "Port mappings in the table, by kind",
            [](const GatewayReadings& g, std::size_t) { return g.exports; }).gauge().with({"kind", "export"}),
#define CLUSTER(f) [](const GatewayReadings& g, std::size_t) { return g.f; }
    gateway("cluster", "member", "fedgate_cluster_member", "1 when the gateway is a member of its party's group ([cluster])",
            CLUSTER(cluster_member)).gauge(),
    gateway("cluster", "active", "fedgate_cluster_active",
            "1 while the gateway carries its party's traffic: the group's active member, or a gateway alone",
            CLUSTER(cluster_active)).gauge(),
    gateway("cluster", "store_healthy", "fedgate_cluster_store_healthy",
            "1 while a majority of the group's store endpoints has a leader (0 alone)", CLUSTER(store_healthy)).gauge(),
    gateway("cluster", "became_active", "fedgate_cluster_became_active", "Times this member took the leader key",
            CLUSTER(became_active)),
    gateway("cluster", "stepped_down", "fedgate_cluster_stepped_down",
            "Times this member stopped being active (lease lost, key taken, store cut off, resigned)", CLUSTER(stepped_down)),
    gateway("cluster", "lease_renewals", "fedgate_cluster_lease_renewals", "Keepalives of this member's lease the store took",
            CLUSTER(lease_renewals)),
    gateway("cluster", "store_errors", "fedgate_cluster_store_errors",
            "Election rounds the store could not serve (unreachable, no quorum, refused)", CLUSTER(store_errors)),
    gateway("cluster", "mapping_refreshes", "fedgate_cluster_mapping_refreshes",
            "Times the mappings were read again after another member changed them", CLUSTER(mapping_refreshes)),
    gateway("cluster", "session_events_sent", "fedgate_cluster_session_events_sent",
            "Session opened/closed events sent to the group's other members ([cluster] sync)", CLUSTER(session_events_sent)),
    gateway("cluster", "session_events_received", "fedgate_cluster_session_events_received",
            "Session events received from other members, snapshots included", CLUSTER(session_events_received)),
    gateway("cluster", "session_events_missed", "fedgate_cluster_session_events_missed",
            "Session events another member sent that never arrived (gaps in its sequence; each asks for a resync)",
            CLUSTER(session_events_missed)),
    gateway("cluster", "session_sync_rejected", "fedgate_cluster_session_sync_rejected",
            "Datagrams on the sync address dropped: malformed, or not from a member's sync address",
            CLUSTER(session_sync_rejected)),
    gateway("cluster", "sessions_mirrored", "fedgate_cluster_sessions_mirrored",
            "Other members' sessions this member holds a copy of, from their events", CLUSTER(sessions_mirrored)).gauge(),
    gateway("cluster", "cache_copies_received", "fedgate_cluster_cache_copies_received",
            "Copies of the active member's remote resolution records a standby took into its cache ([cluster] sync)",
            CLUSTER(cache_copies_received)),
    gateway("cluster", "cache_records_mirrored", "fedgate_cluster_cache_records_mirrored",
            "Remote resolution records in the last copy a standby took from the active member", CLUSTER(cache_records_mirrored)).gauge(),
#undef CLUSTER
    worker("control", "punted", "fedgate_control_punted", "Packets the data plane handed to the control threads", LCORE(punted)),
    worker("control", "injected", "fedgate_control_injected", "Packets the control threads sent through the data plane",
           LCORE(injected)),
    worker("control", "wakeups", "fedgate_control_wakeups", "Times the data plane woke the sleeping punt thread",
           LCORE(control_wakeups)),
    gateway("control", "unmatched_echo_replies", "fedgate_control_unmatched_echo_replies",
            "Echo replies that matched no ping in flight",
            [](const GatewayReadings& g, std::size_t) { return g.unmatched_echo_replies; }),

    // ---- stats: resolution, from the control threads' ResolutionService::stats() ----
    control("resolution/directory", "local", "fedgate_directory_processes", "Compute processes registered with this gateway").gauge(),
    control("resolution/directory", "registered", "fedgate_directory_registered", "Registrations accepted"),
    control("resolution/directory", "refreshed", "fedgate_directory_refreshed", "Registrations repeated with the same record"),
    control("resolution/directory", "replaced", "fedgate_directory_replaced", "Registrations that replaced a record (new epoch)"),
    control("resolution/directory", "deregistered", "fedgate_directory_deregistered", "Processes that deregistered"),
    control("resolution/directory", "expired", "fedgate_directory_expired", "Processes expired for missing heartbeats"),
    control("resolution/directory", "heartbeats", "fedgate_directory_heartbeats", "Heartbeats received"),
    control("resolution/directory", "refused_wrong_party", "fedgate_directory_refused", "Registrations refused, by reason").with({"reason", "wrong_party"}),
    control("resolution/directory", "refused_address", "fedgate_directory_refused", "Registrations refused, by reason").with({"reason", "address"}),
    control("resolution/directory", "refused_unknown", "fedgate_directory_refused", "Registrations refused, by reason").with({"reason", "unknown"}),
    control("resolution/directory", "refused_stale_epoch", "fedgate_directory_refused", "Registrations refused, by reason").with({"reason", "stale_epoch"}),
    control("resolution/directory", "refused_bad_record", "fedgate_directory_refused", "Registrations refused, by reason").with({"reason", "bad_record"}),
    control("resolution/directory", "refused_full", "fedgate_directory_refused", "Registrations refused, by reason").with({"reason", "full"}),
    control("resolution/directory", "store_failures", "fedgate_directory_store_failures",
            "Batches of directory changes the group's store did not take ([cluster]); their processes were told store_unavailable"),
    control("resolution/directory", "store_writes", "fedgate_directory_store_writes",
            "Writes of directory changes to the group's store, each one transaction or a few ([cluster])"),
    control("resolution/directory", "store_write_ms", "fedgate_directory_store_write_ms",
            "Milliseconds the group's store took to answer those writes, summed ([cluster])"),
    control("resolution/directory", "store_writes_in_flight", "fedgate_directory_store_writes_in_flight",
            "Writes of directory changes waiting for the group's store now ([cluster])").gauge(),
    control("resolution/directory", "taken_over", "fedgate_directory_taken_over",
            "Processes taken up from the group's store when this member became active ([cluster])"),
    control("resolution/directory", "taken_over_warm", "fedgate_directory_taken_over_warm",
            "Takeovers that took the directory from the standby's warm copy, the store unchanged since ([cluster])"),
    control("resolution/directory", "warm", "fedgate_directory_warm",
            "Processes in a standby's warm copy of the group's directory ([cluster])").gauge(),
    control("resolution/directory", "warm_loads", "fedgate_directory_warm_loads",
            "Times a standby read the group's directory again because the store's changed ([cluster])"),
    control("resolution/cache", "entries", "", "Records in the resolution cache, every kind together").gauge(),
    control("resolution/cache", "local", "fedgate_resolve_cache_entries", "Records in the resolution cache, by kind").gauge().with({"kind", "local"}),
    control("resolution/cache", "announced", "fedgate_resolve_cache_entries", "Records in the resolution cache, by kind").gauge().with({"kind", "announced"}),
    control("resolution/cache", "answered", "fedgate_resolve_cache_entries", "Records in the resolution cache, by kind").gauge().with({"kind", "answered"}),
    control("resolution/cache", "negative", "fedgate_resolve_cache_entries", "Records in the resolution cache, by kind").gauge().with({"kind", "negative"}),
    control("resolution/cache", "capacity", "fedgate_resolve_cache_capacity", "Records the resolution cache holds at most").gauge(),
    control("resolution/cache", "full", "fedgate_resolve_cache_full", "Records not cached because the cache was full"),
    control("resolution/cache", "expired", "fedgate_resolve_cache_expired", "Cached records that expired"),
    control("resolution/cache", "learned", "fedgate_resolve_cache_learned", "Records learned from peers' answers"),
    control("resolution/cache", "learned_negative", "fedgate_resolve_cache_learned_negative", "\"Not found\" answers cached"),
    control("resolution/exchange", "peer_msgs_sent", "fedgate_exchange_peer_msgs_sent", "Directory messages sent to peers"),
    control("resolution/exchange", "records_applied", "fedgate_exchange_records_applied", "Announced records applied"),
    control("resolution/exchange", "records_withdrawn", "fedgate_exchange_records_withdrawn", "Records peers withdrew"),
    control("resolution/exchange", "refused_foreign_records", "fedgate_exchange_refused_foreign_records",
            "Records refused because a peer announced another party's process"),
    control("resolution/exchange", "snapshots_received", "fedgate_exchange_snapshots_received", "Directory snapshots received"),
    control("resolution/exchange", "stream_resets_sent", "fedgate_exchange_stream_resets_sent", "Announce streams asked to restart"),
    control("resolution/exchange", "stream_gaps", "fedgate_exchange_stream_gaps", "Announce messages that arrived after a gap"),
    control("resolution/exchange", "reg_replies_sent", "fedgate_exchange_reg_replies_sent", "Replies to compute processes' registrations"),
    control("resolution/exchange", "malformed", "fedgate_exchange_malformed", "Directory messages that could not be read"),
    control("", "out_stream_acked", "fedgate_peer_stream_acked_seq", "Last announce sequence the peer acknowledged").gauge().per_peer(),
    control("", "out_stream_last_seq", "fedgate_peer_stream_last_seq", "Last announce sequence sent to the peer").gauge().per_peer(),
    control("", "out_unacked", "fedgate_peer_stream_unacked", "Announce messages not yet acknowledged or queued").gauge().per_peer(),
    control("", "in_applied", "fedgate_peer_stream_applied_seq", "Last sequence of the peer's stream applied here").gauge().per_peer(),
    control("", "out_messages", "fedgate_peer_stream_messages_sent", "Announce messages sent to the peer").per_peer(),
    control("", "out_retransmits", "fedgate_peer_stream_retransmits", "Announce messages sent again").per_peer(),
    control("", "out_restarts", "fedgate_peer_stream_restarts", "Announce streams restarted to the peer").per_peer(),
    control("", "records_announced", "fedgate_peer_records_announced", "Records announced to the peer").per_peer(),
    control("", "records_withdrawn", "fedgate_peer_records_withdrawn", "Records withdrawn from the peer").per_peer(),
    control("resolution/handshakes", "in_table", "fedgate_handshakes_in_table", "Relayed handshakes held, in flight and finished").gauge(),
    control("resolution/handshakes", "in_flight", "fedgate_handshakes_in_flight", "Relayed handshakes not finished yet").gauge(),
    control("resolution/handshakes", "req_relayed", "fedgate_handshakes_relayed", "Handshake messages relayed, by message").with({"msg", "req"}),
    control("resolution/handshakes", "rep_relayed", "fedgate_handshakes_relayed", "Handshake messages relayed, by message").with({"msg", "rep"}),
    control("resolution/handshakes", "rtu_relayed", "fedgate_handshakes_relayed", "Handshake messages relayed, by message").with({"msg", "rtu"}),
    control("resolution/handshakes", "established", "fedgate_handshakes_established", "Handshakes that finished (RTU relayed)"),
    control("resolution/handshakes", "duplicates", "fedgate_handshakes_duplicates", "Handshake messages seen again"),
    control("resolution/handshakes", "timed_out", "fedgate_handshakes_timed_out", "Handshakes not finished within handshake_timeout_ms"),
    control("resolution/handshakes", "unknown_handshake", "fedgate_handshakes_unknown", "REP or RTU messages for no known handshake"),
    control("resolution/handshakes", "wrong_sender", "fedgate_handshakes_wrong_sender", "Handshake messages from the wrong party"),
    control("resolution/handshakes", "rdma_translated", "fedgate_handshakes_rdma_translated",
            "RDMA handshakes whose RoCE v2 translation was installed"),
    control("resolution/handshakes", "rdma_unmapped_gid", "fedgate_handshakes_rdma_unmapped_gid",
            "RDMA offers whose GID is not IPv4-mapped (offered as tcp only)"),
    control("resolution/handshakes", "refused", "fedgate_handshakes_refused", "Handshakes refused, by status").by_keys("status"),
    control("resolution/handshakes", "malformed", "fedgate_handshakes_malformed", "Handshake messages that could not be read"),
    control("resolution/auto_mappings", "exports", "fedgate_auto_mappings", "Mappings the gateway made for the tcp transport, by kind")
        .gauge().with({"kind", "export"}),
    control("resolution/auto_mappings", "imports", "fedgate_auto_mappings", "Mappings the gateway made for the tcp transport, by kind")
        .gauge().with({"kind", "import"}),
    control("resolution/auto_mappings", "exports_made", "fedgate_auto_mappings_made", "Automatic mappings made, by kind").with({"kind", "export"}),
    control("resolution/auto_mappings", "imports_made", "fedgate_auto_mappings_made", "Automatic mappings made, by kind").with({"kind", "import"}),
    control("resolution/auto_mappings", "exports_removed", "fedgate_auto_mappings_removed", "Automatic mappings removed, by kind")
        .with({"kind", "export"}),
    control("resolution/auto_mappings", "imports_removed", "fedgate_auto_mappings_removed", "Automatic mappings removed, by kind")
        .with({"kind", "import"}),
    control("resolution/auto_mappings", "ports_exhausted", "fedgate_auto_mappings_ports_exhausted", "Automatic mappings with no free port"),
    control("resolution/auto_mappings", "refused", "fedgate_auto_mappings_refused", "Automatic mappings the port-map table refused"),
    // RoCE v2 translations of RDMA connections between parties (an empty object when RoCE is off).
    control("resolution/roce", "connections", "fedgate_roce_connections", "RDMA connections whose RoCE v2 traffic is translated").gauge(),
    control("resolution/roce", "capacity", "fedgate_roce_capacity", "RDMA connections the translation table holds at most").gauge(),
    control("resolution/roce", "free_internal", "fedgate_roce_free_vqpns", "Virtual QPNs free, by gateway side").gauge()
        .with({"side", "internal"}),
    control("resolution/roce", "free_external", "fedgate_roce_free_vqpns", "Virtual QPNs free, by gateway side").gauge()
        .with({"side", "external"}),
    control("resolution/roce", "reserved", "fedgate_roce_reserved", "Virtual QPN pairs reserved for RDMA handshakes"),
    control("resolution/roce", "released", "fedgate_roce_released", "Reserved virtual QPN pairs given back unused"),
    control("resolution/roce", "installed", "fedgate_roce_installed", "RoCE v2 translations installed"),
    control("resolution/roce", "exhausted", "fedgate_roce_exhausted", "RDMA handshakes refused no_mapping: no virtual QPN free"),
    control("resolution/roce", "install_failed", "fedgate_roce_install_failed", "RoCE v2 translations that could not be installed"),
    control("resolution/roce", "removed_process", "fedgate_roce_removed", "RoCE v2 translations removed, by why").with({"why", "process"}),
    control("resolution/roce", "removed_peer", "fedgate_roce_removed", "RoCE v2 translations removed, by why").with({"why", "peer"}),
    control("resolution/roce", "removed_idle", "fedgate_roce_removed", "RoCE v2 translations removed, by why").with({"why", "idle"}),

    // ---- stats: resolution on the workers ----
    worker("resolution/resolve", "requests", "fedgate_resolve_requests", "Lookups compute processes asked for", RESOLVER(requests)).resolver(),
    worker("resolution/resolve", "hits", "fedgate_resolve_hits", "Lookups answered from the cache", RESOLVER(hits)).resolver(),
    worker("resolution/resolve", "misses", "fedgate_resolve_misses", "Lookups the cache could not answer", RESOLVER(misses)).resolver(),
    worker("resolution/resolve", "folded", "fedgate_resolve_folded", "Lookups joined to a query already pending", RESOLVER(folded)).resolver(),
    worker("resolution/resolve", "directed", "fedgate_resolve_directed", "Queries sent to the owner's gateway", RESOLVER(directed)).resolver(),
    worker("resolution/resolve", "broadcast", "fedgate_resolve_broadcast", "Queries broadcast to every peer", RESOLVER(broadcast)).resolver(),
    worker("resolution/resolve", "answered", "fedgate_resolve_answered", "Queries a peer answered with a record", RESOLVER(answered)).resolver(),
    worker("resolution/resolve", "not_found", "fedgate_resolve_not_found", "Queries answered \"not found\"", RESOLVER(not_found)).resolver(),
    worker("resolution/resolve", "timed_out", "fedgate_resolve_timed_out", "Queries no peer answered in time", RESOLVER(timed_out)).resolver(),
    worker("resolution/resolve", "negative", "fedgate_resolve_negative_hits", "Lookups answered from a cached \"not found\"",
           RESOLVER(negative_hits)).resolver(),
    worker("resolution/resolve", "refused", "", "Lookups refused, every reason together",
           FG_READ(w.resolver() == nullptr ? 0
                                           : w.resolver()->counters().refused_rate.get() + w.resolver()->counters().refused_busy.get() +
                                                 w.resolver()->counters().bad_requests.get())).resolver(),
    worker("resolution/resolve", "refused_rate", "fedgate_resolve_refused", kRefusedHelp, RESOLVER(refused_rate)).resolver().with({"reason", "rate"}),
    worker("resolution/resolve", "refused_busy", "fedgate_resolve_refused", kRefusedHelp, RESOLVER(refused_busy)).resolver().with({"reason", "busy"}),
    worker("resolution/resolve", "bad_requests", "fedgate_resolve_refused", kRefusedHelp, RESOLVER(bad_requests)).resolver()
        .with({"reason", "bad_request"}),
    worker("resolution/resolve", "pending", "fedgate_resolve_pending", "Queries waiting for a peer's answer",
           FG_READ(w.resolver() != nullptr ? w.resolver()->pending() : 0)).gauge().resolver(),
    worker("resolution/resolve", "answers_unmatched", "fedgate_resolve_answers_unmatched", "Peer answers that matched no query",
           RESOLVER(answers_unmatched)).resolver(),
    worker("resolution/resolve", "peer_queries_found", "fedgate_resolve_peer_queries_found", "Peers' queries answered with a record",
           RESOLVER(queries_answered_found)).resolver(),
    worker("resolution/resolve", "peer_queries_not_here", "fedgate_resolve_peer_queries_not_here", "Peers' queries answered \"not here\"",
           RESOLVER(queries_answered_no)).resolver(),
    worker("resolution/resolve", "client_msgs", "fedgate_resolve_client_msgs", "Messages from compute processes", RESOLVE_DP(client_msgs)).resolver(),
    worker("resolution/resolve", "punted_registrations", "fedgate_resolve_punted_registrations", "Registrations handed to control",
           RESOLVE_DP(punted_registrations)).resolver(),
    worker("resolution/resolve", "punted_peer_msgs", "fedgate_resolve_punted_peer_msgs", "Peer directory messages handed to control",
           RESOLVE_DP(punted_peer_msgs)).resolver(),
    worker("resolution/resolve", "punted_handshakes", "fedgate_resolve_punted_handshakes", "Handshake messages handed to control",
           RESOLVE_DP(punted_handshakes)).resolver(),
    worker("resolution/resolve", "peer_msgs", "fedgate_resolve_peer_msgs", "Messages from peer gateways", RESOLVE_DP(peer_msgs)).resolver(),
    worker("resolution/resolve", "replies_sent", "fedgate_resolve_replies_sent", "Replies sent to compute processes", RESOLVE_DP(replies_sent)).resolver(),
    worker("resolution/resolve", "hits_in_place", "fedgate_resolve_hits_in_place",
           "Replies sent: cache hits answered in the request's own packet", RESOLVE_DP(hits_in_place)).resolver(),
    worker("resolution/resolve", "queries_sent", "fedgate_resolve_queries_sent", "Queries sent to peer gateways", RESOLVE_DP(queries_sent)).resolver(),
    worker("resolution/resolve", "answers_sent", "fedgate_resolve_answers_sent", "Answers sent to peer gateways", RESOLVE_DP(answers_sent)).resolver(),
    worker("resolution/resolve", "events_lost", "fedgate_resolve_events_lost", "Events the control threads could not take (ring full)",
           RESOLVE_DP(events_lost)).resolver(),

    // ---- status: each port's entry ----
    worker("", "neighbours", "fedgate_port_neighbours", "Entries of the port's neighbour (ARP) table",
           FG_READ(w.neighbour_entries(port))).gauge().once().per_port().in_status(),
};

#undef POOL
#undef DEVICE
#undef RESOLVE_DP
#undef RESOLVER
#undef PORT
#undef NAT
#undef LCORE
#undef FG_READ

const std::vector<CounterDesc>& table() {
    static const std::vector<CounterDesc> t(std::begin(kRows), std::end(kRows));
    return t;
}

// The object at `section` below `from`, made on the way when missing.
json& object_at(json& from, std::string_view section) {
    json* o = &from;
    while (!section.empty()) {
        const std::size_t slash = section.find('/');
        const std::string part(section.substr(0, slash));
        json& next = (*o)[part];
        if (next.is_null()) next = json::object();
        o = &next;
        section = slash == std::string_view::npos ? std::string_view{} : section.substr(slash + 1);
    }
    return *o;
}

std::string_view top_of(const CounterDesc& d) {
    if (d.scope == Scope::port) return "ports";
    if (d.scope == Scope::peer) return "resolution";
    return d.section.substr(0, d.section.find('/'));
}

// One row's value(s) for one port (or the only one), as JSON.
json row_json(const CounterDesc& d, std::size_t row, std::size_t port, const CounterSnapshot& s, const GatewayReadings& g) {
    if (d.source == Source::gateway) return d.gateway(g, port);
    if (d.dim == Dim::none) return s.at(row, port);
    json o = json::object();
    for (std::size_t r = 0; r < kDropReasonCount; ++r) {
        const uint64_t v = s.at(row, port, r);
        if (v != 0 || !d.omit_zero) o[std::string(kDropReasonNames[r])] = v;
    }
    return o;
}

}  // namespace

std::span<const CounterDesc> counter_table() { return table(); }

std::size_t row_width(const CounterDesc& d, std::size_t ports) {
    if (d.source != Source::worker) return 0;
    return (d.scope == Scope::port ? ports : 1) * (d.dim == Dim::drop_reason ? kDropReasonCount : 1);
}

uint64_t CounterSnapshot::at(std::size_t row, std::size_t port, std::size_t index) const {
    if (row >= table().size()) return 0;
    const CounterDesc& d = table()[row];
    const std::size_t per_port = d.dim == Dim::drop_reason ? kDropReasonCount : 1;
    const std::size_t i = (d.scope == Scope::port ? port : 0) * per_port + index;
    return row < values.size() && i < values[row].size() ? values[row][i] : 0;
}

void add_worker(CounterSnapshot& into, const CounterSnapshot& w, bool first) {
    const auto rows = table();
    if (first) {
        into.ports = w.ports;
        into.resolver = false;
        into.values.assign(rows.size(), {});
        for (std::size_t i = 0; i < rows.size(); ++i) into.values[i].assign(row_width(rows[i], w.ports), 0);
    } else if (w.ports != into.ports) {
        throw std::invalid_argument("counter table: workers with different port counts");
    }
    into.resolver = into.resolver || w.resolver;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        if (rows[i].combine == Combine::once && !first) continue;
        for (std::size_t k = 0; k < into.values[i].size() && k < w.values[i].size(); ++k) into.values[i][k] += w.values[i][k];
    }
}

CounterSnapshot sum_workers(std::span<const Dataplane* const> workers) {
    const auto rows = table();
    CounterSnapshot sum;
    bool first = true;
    for (const Dataplane* w : workers) {
        if (w == nullptr) continue;
        CounterSnapshot one;
        one.ports = w->port_count();
        one.resolver = w->resolver() != nullptr;
        one.values.resize(rows.size());
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const CounterDesc& d = rows[i];
            std::vector<uint64_t>& v = one.values[i];
            v.resize(row_width(d, one.ports));
            const std::size_t per_port = d.dim == Dim::drop_reason ? kDropReasonCount : 1;
            for (std::size_t k = 0; k < v.size(); ++k) v[k] = d.worker(*w, k / per_port, k % per_port);
        }
        add_worker(sum, one, first);
        first = false;
    }
    return sum;
}

void write_counters(json& out, Reply reply, const CounterSnapshot& s, const GatewayReadings& g, const json& control) {
    const auto rows = table();
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const CounterDesc& d = rows[i];
        if (d.reply != reply) continue;
        const std::string top(top_of(d));
        if (!top.empty() && !out.contains(top) && control.is_object() && control.contains(top)) out[top] = control[top];
        if (d.source == Source::control) continue;  // the service's JSON holds it
        if (d.needs_resolver && !s.resolver) continue;
        if (d.scope == Scope::port) {
            json& ports = out["ports"];
            for (std::size_t p = 0; p < ports.size(); ++p) object_at(ports[p], d.section)[std::string(d.key)] = row_json(d, i, p, s, g);
        } else {
            object_at(out, d.section)[std::string(d.key)] = row_json(d, i, 0, s, g);
        }
    }
}

std::string exposed_family(const CounterDesc& d) {
    if (d.family.empty()) return {};
    return std::string(d.family) + (d.type == MetricType::counter ? "_total" : "");
}

}  // namespace fedgate
