// The port-map proxy's data path on one lcore: full NAT in both directions. A packet either belongs
// to a session (lookup by its flow key, then the session's precomputed rewrite) or opens one through
// an import or export rule; everything else is left to the caller.
#pragma once

#include <rte_byteorder.h>
#include <rte_ip.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "dataplane/checksum.hpp"
#include "dataplane/counters.hpp"
#include "dataplane/drop_reason.hpp"
#include "dataplane/packet.hpp"
#include "dataplane/portmap.hpp"
#include "dataplane/session_table.hpp"

namespace fedgate {

// Session ports of one (address, protocol) on one worker: the worker's slice of [lo, hi], the ports
// p with p % stride == offset. Ports are shared endpoint-dependently (NAT44-ED): one port serves any
// number of sessions as long as their reply keys differ (towards different remote addresses or
// ports); the NAT checks that against its session table. The pool counts each port's sessions.
// Ports without a session are handed out first, FIFO, so a port just released is the last to be
// reused; once none is left, shared() offers the slice's ports round robin.
class PortPool {
public:
    PortPool() = default;
    PortPool(uint16_t lo, uint16_t hi, uint16_t stride = 1, uint16_t offset = 0);
    bool take(uint16_t* port_be);  // a port with no session (network order out); it now has one
    // The next port of the slice in round-robin order, for a session to share (network order).
    // False for an empty slice.
    bool next_shared(uint16_t* port_be);
    void share(uint16_t port_be);  // one more session on a port that has one or more
    void give(uint16_t port_be);   // one session less; a port left with none goes to the FIFO's back
    uint32_t uses(uint16_t port_be) const;  // sessions on the port (0 for a port not in the slice)
    uint32_t free_count() const { return count_; }  // ports with no session
    uint32_t size() const { return static_cast<uint32_t>(ring_.size()); }  // ports in the slice
    uint32_t sessions() const { return sessions_; }  // sessions holding a port of this pool

private:
    int slot(uint16_t port_be) const;  // index of the port in the slice, or -1

    std::vector<uint16_t> ring_;   // free ports, network order (FIFO)
    std::vector<uint32_t> uses_;   // sessions per port, by index in the slice
    uint32_t head_ = 0, count_ = 0, sessions_ = 0;
    uint32_t cursor_ = 0;          // next_shared()'s position in the slice
    uint16_t first_ = 0, stride_ = 1;
};

struct NatTimeouts {
    uint32_t tcp_established_ms = 7'440'000;
    uint32_t tcp_transitory_ms = 240'000;
    uint32_t udp_ms = 300'000;
    uint32_t tcp_closing_ms = 10'000;  // after FIN from both sides, or RST
};

struct NatConfig {
    uint32_t max_sessions = 262144;
    uint16_t mss_clamp = 0;  // largest TCP MSS a SYN may announce across the gateway; 0: leave it
    uint16_t port_lo = 20000, port_hi = 59999;  // host order
    // This NAT is worker `worker` of `workers`: its session ports are those p (host order) of
    // [port_lo, port_hi] with p % workers == worker, so a reply's destination port names the worker
    // that owns its session (Nat::port_owner).
    uint16_t worker = 0, workers = 1;
    NatTimeouts timeouts;
};

// One gateway port as the NAT sees it; addresses network order.
struct NatPort {
    bool external = false;
    uint32_t addr = 0;
};

// A session opened or closed, as a standby member of the party's group could mirror it ([cluster]
// sync): the flow as it arrived (`in`) and as the gateway sends it on (`out`). Addresses and ports
// network order; `out_port` is the gateway's port index the flow leaves by.
struct SessionEvent {
    enum Type : uint8_t { opened = 1, closed = 2 };
    uint8_t type = 0;
    uint8_t proto = 0;
    uint8_t kind = 0;  // 0 import, 1 export
    uint8_t out_port = 0;
    uint32_t in_src = 0, in_dst = 0;
    uint16_t in_sport = 0, in_dport = 0;
    uint32_t out_src = 0, out_dst = 0;
    uint16_t out_sport = 0, out_dport = 0;
    uint32_t timeout_ms = 0;
};
static_assert(sizeof(SessionEvent) == 32);

struct alignas(64) NatCounters {
    Counter sessions_created, sessions_expired, sessions_refused_full;
    Counter session_events_lost;  // opened/closed events the log or the ring to the control threads had no room for
    Counter port_alloc_miss;
    Counter translated;
    Counter fast_path;  // of those, packets forward_established() took (no full parse)
    Counter icmp_errors_translated;
    Counter mss_clamped;
};

class Nat {
public:
    enum class Pool : uint8_t { external = 0, internal = 1 };

    struct Verdict {
        enum class Kind : uint8_t { not_nat, forward, drop } kind = Kind::not_nat;
        DropReason reason = DropReason::none;
        uint16_t out_port = 0;
        uint32_t next_hop = 0;
        // The session's memo of the next hop's neighbour entry (NatRewrite::neigh), for the sender
        // to read and fill in; null when there is none to keep (ICMP errors).
        uint16_t* neigh = nullptr;
    };

    // `route(dst, &next_hop)` gives the port index and next hop for a destination (network order).
    using RouteFn = int (*)(const void* ctx, uint32_t dst, uint32_t* next_hop);
    // `source_ok(src, port)`: whether a packet from `src` (network order) arriving on `port` passes
    // the data plane's check of IPv4 sources (not zero, broadcast, multicast or one of ours).
    using SourceFn = bool (*)(const void* ctx, uint32_t src, uint16_t port);

    Nat(const NatConfig& cfg, std::vector<NatPort> ports, const PortMapView* maps, RouteFn route, const void* route_ctx);

    // With a source check set, a session opens only when the sources of both its directions pass
    // it on the ports they arrive on (the opening packet's on its own port, the replies' on the
    // port the session sends by): then every packet that matches a session key on the port
    // forward_established() takes it from has a source that passes too, and the established-flow
    // path need not check it again. The check must stand for the NAT's life (the ports' addresses
    // and prefixes are fixed). A session its target's address would break this for is refused
    // (DropReason::map_bad_target). Without one (unit tests of the NAT alone), nothing is checked.
    void set_source_check(SourceFn fn, const void* ctx) {
        source_ok_ = fn;
        source_ctx_ = ctx;
    }

    // Called for TCP/UDP IPv4 packets that are not fragments. Rewrites the packet in place (headers
    // at `l3`, `p` describes them) when it forwards. `flow_hash`:
    // prefetch_session()'s value for this packet's key, or kNoFlowHash.
    static constexpr uint64_t kNoFlowHash = UINT64_MAX;
    Verdict handle(uint8_t* l3, const ParsedPacket& p, uint16_t in_port, uint64_t now_ms,
                   uint64_t flow_hash = kNoFlowHash);

    // A burst's first passes (see SessionTable): prefetch(p) hashes a TCP/UDP packet's flow key and
    // prefetches its slot; prefetch_session(h) the session behind it and returns a hint of what it
    // found (SessionTable::find_hinted), which handle() starts from. Nothing changes.
    static FlowKey key_of(const ParsedPacket& p) {
        return FlowKey{p.src_ip, p.dst_ip, p.src_port, p.dst_port, p.ip_proto, {0, 0, 0}};
    }
    static FlowKey key_of(const FastPacket& f) {
        return FlowKey{f.src_ip, f.dst_ip, f.src_port, f.dst_port, f.ip_proto, {0, 0, 0}};
    }
    uint32_t prefetch(const FlowKey& k) const { return sessions_.hash(k); }
    uint64_t prefetch_session(uint32_t h) const { return sessions_.prefetch_session(h); }
    // prefetch_session() for a pass that changes no session (SessionTable::SessionPrefetcher).
    SessionTable::SessionPrefetcher session_prefetcher() const { return sessions_.session_prefetcher(); }
    uint32_t prefetch(const ParsedPacket& p) const { return prefetch(key_of(p)); }

    // The established-flow path, for a frame parse_fast() took (IPv4 header at `l3`, 20 bytes): when
    // the packet belongs to a session (so its source passed the source check when the session
    // opened: set_source_check), arrived on the port its direction arrives on, leaves with a
    // TTL above 0, and changes nothing of the session but its idle clock (TCP: no FIN or RST, the
    // session neither closing nor waiting for its first reply when this is one, and no MSS option
    // to clamp), the packet is rewritten and counted exactly as handle() would, and the session's
    // rewrite for it returned, for the caller to send by (out_port, next_hop, neigh). Otherwise null,
    // with nothing changed: handle() decides. `flow_hash`: prefetch_session()'s value for its key.
    // The caller counts what it forwarded this way, a burst at a time: count_established(n).
    NatRewrite* forward_established(uint8_t* l3, const FastPacket& f, uint16_t in_port, uint64_t now_ms,
                                    uint64_t flow_hash);
    void count_established(uint32_t n) {
        counters_.translated.add(n);
        counters_.fast_path.add(n);
    }

    // An ICMP error (destination unreachable, time exceeded, parameter problem) addressed to the
    // gateway whose quoted packet belongs to a session: rewritten for the host that sent the
    // original (quoted packet restored, outer addresses and all checksums fixed) and forwarded.
    Verdict handle_icmp_error(uint8_t* l3, const ParsedPacket& p);

    // Expires idle sessions, looking at up to `budget` of them.
    uint32_t expire(uint64_t now_ms, uint32_t budget);

    // Session events ([cluster] sync): off until log_events(true); then every session opened and
    // closed is logged here, up to kEventLog between clear_events() calls (more are counted lost).
    static constexpr uint32_t kEventLog = 512;
    void log_events(bool on) { log_events_ = on; }
    std::span<const SessionEvent> events() const { return {events_, events_len_}; }
    void clear_events() { events_len_ = 0; }
    void events_lost(uint32_t n) { counters_.session_events_lost.add(n); }
    static SessionEvent event_of(const Session& s, const SessionCold& c, SessionEvent::Type type);
    static SessionEvent event_of(const SessionInfo& s, SessionEvent::Type type) { return event_of(s, s, type); }

    const NatCounters& counters() const { return counters_; }
    const SessionTable& sessions() const { return sessions_; }
    const PortPool& pool(Pool p, L4Proto proto) const { return pools_[static_cast<int>(p)][static_cast<int>(proto)]; }
    uint32_t session_count() const { return sessions_.size(); }

    // The worker that owns the session a session port (host order) belongs to, among `workers`.
    static uint16_t port_owner(uint16_t port_host_order, uint16_t workers) {
        return workers <= 1 ? 0 : static_cast<uint16_t>(port_host_order % workers);
    }

    // The rewrite a session applies to packets matching `key` to become `rw`: fills the deltas.
    static void prepare(const FlowKey& key, NatRewrite& rw);
    static uint16_t address_delta(const FlowKey& key, const NatRewrite& rw);  // the addresses' change alone
    // Applies `rw` to an IPv4 packet with its TCP/UDP header at l3 + ihl; decrements the TTL.
    static void apply(uint8_t* l3, uint16_t ihl, uint8_t proto, const NatRewrite& rw);
    // Lowers the MSS option of a TCP SYN to `mss` if it is larger, fixing the checksum. The TCP
    // header is at `tcp`, `len` bytes long including options.
    static bool clamp_mss(uint8_t* tcp, uint16_t len, uint16_t mss);  // true if it changed it

private:
    static constexpr uint8_t kTcpFin = 0x01, kTcpSyn = 0x02, kTcpRst = 0x04, kTcpAck = 0x10;

    Session* open_import(const FlowKey& k, uint16_t in_port, const ImportRule& r, uint64_t now_ms, DropReason* why);
    Session* open_export(const FlowKey& k, uint16_t in_port, const ExportRule& r, uint64_t now_ms, DropReason* why);
    Session* open(const FlowKey& k, const NatRewrite& out, uint16_t reply_port, uint32_t reply_hop, Pool pool,
                  uint8_t kind, uint64_t now_ms, DropReason* why);
    bool alloc_port(Pool pool, L4Proto proto, const FlowKey& reverse, uint16_t* sport);
    void track(Session& s, uint8_t dir, const uint8_t* l4, uint8_t proto, uint64_t now_ms);
    void log_event(const Session& s, SessionEvent::Type type) {
        if (!log_events_) return;
        if (events_len_ == kEventLog) return counters_.session_events_lost.add();
        events_[events_len_++] = event_of(s, sessions_.cold(&s), type);
    }
    int port_index(bool external) const;

    NatConfig cfg_;
    std::vector<NatPort> ports_;
    const PortMapView* maps_;
    RouteFn route_;
    const void* route_ctx_;
    SourceFn source_ok_ = nullptr;
    const void* source_ctx_ = nullptr;
    SessionTable sessions_;
    PortPool pools_[2][kL4Protos];
    NatCounters counters_;
    bool log_events_ = false;
    uint32_t events_len_ = 0;
    SessionEvent events_[kEventLog];
};

// Inline: the established-flow path runs them once per packet, from the data plane's burst loop.

inline void Nat::apply(uint8_t* l3, uint16_t ihl, uint8_t proto, const NatRewrite& rw) {
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(l3);
    // TTL and protocol as one 16-bit word, read and written whole: a byte store followed by a word
    // load of the same bytes stalls on store forwarding. The TTL is the word's first byte and above
    // 1, so taking one from it never borrows from the protocol. (A constant, not a byte swap at run
    // time: DPDK's 16-bit swap is an xchg of byte registers, slow on some cores.)
    uint16_t ttl_proto_old;
    std::memcpy(&ttl_proto_old, &ip->time_to_live, 2);
    const uint16_t ttl_proto_new = static_cast<uint16_t>(ttl_proto_old - rte_cpu_to_be_16(0x0100));
    std::memcpy(&ip->time_to_live, &ttl_proto_new, 2);
    ip->src_addr = rw.src;
    ip->dst_addr = rw.dst;
    ip->hdr_checksum = checksum_add(ip->hdr_checksum, rw.l3_delta);  // the TTL's change included

    uint8_t* l4 = l3 + ihl;
    // Both ports in one 4-byte copy: they lie side by side in the header and in the rewrite.
    static_assert(offsetof(NatRewrite, dport) == offsetof(NatRewrite, sport) + 2);
    std::memcpy(l4, &rw.sport, 4);
    uint16_t* csum = reinterpret_cast<uint16_t*>(l4 + (proto == kIpProtoTcp ? 16 : 6));
    uint16_t c;
    std::memcpy(&c, csum, 2);
    if (proto == kIpProtoUdp && c == 0) return;  // UDP without a checksum stays without one
    c = checksum_add(c, rw.l4_delta);
    if (proto == kIpProtoUdp && c == 0) c = 0xffff;  // 0 means "none" in UDP
    std::memcpy(csum, &c, 2);
}

inline NatRewrite* Nat::forward_established(uint8_t* l3, const FastPacket& f, uint16_t in_port, uint64_t now_ms,
                                            uint64_t flow_hash) {
    static_assert(offsetof(FastPacket, src_ip) == offsetof(FlowKey, src) && offsetof(FastPacket, dst_ip) == offsetof(FlowKey, dst) &&
                  offsetof(FastPacket, src_port) == offsetof(FlowKey, sport) &&
                  offsetof(FastPacket, dst_port) == offsetof(FlowKey, dport) && offsetof(FastPacket, ip_proto) == offsetof(FlowKey, proto));
    const SessionTable::Hit hit = sessions_.find_hinted_by(flow_hash, &f, [&f] { return key_of(f); });
    Session* const s = hit.session;
    if (s == nullptr || s->rw[hit.dir ^ 1].out_port != in_port || l3[8] <= 1) return nullptr;
    if (f.ip_proto == kIpProtoTcp) {
        // What track() would change, and a SYN's MSS option clamp_mss() would read: handle()'s.
        // The session's FIN bits and RST flag side by side, read as one word; a reply before the
        // first (replied < dir) is track()'s.
        static_assert(offsetof(Session, tcp_rst) == offsetof(Session, tcp_fin) + 1 && sizeof(Session::tcp_rst) == 1);
        uint16_t fin_rst;
        std::memcpy(&fin_rst, &s->tcp_fin, sizeof fin_rst);
        if ((f.tcp_flags & (kTcpFin | kTcpRst)) != 0 || fin_rst != 0 || uint8_t{s->replied} < hit.dir ||
            ((f.tcp_flags & kTcpSyn) != 0 && f.tcp_hlen > 20 && cfg_.mss_clamp != 0))
            return nullptr;
    }
    // The idle clock alone: the timeout is the one track() set for the session's state (by
    // protocol, and for TCP by FIN, RST and the first reply), which a packet taken here leaves as
    // it is.
    s->last_seen_ms = now_ms;
    NatRewrite& rw = s->rw[hit.dir];
    apply(l3, 20, f.ip_proto, rw);
    return &rw;
}

}  // namespace fedgate
