// Full NAT for the port-map proxy: session lookup, session creation from import/export rules, and
// the incremental rewrite.
#include "dataplane/nat.hpp"

#include <rte_byteorder.h>
#include <rte_ip.h>
#include <rte_tcp.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dataplane/checksum.hpp"

namespace fedgate {
namespace {

enum SessionKind : uint8_t { kImport = 0, kExport = 1 };
// Ports looked at per allocation, in each of the two rounds (free ports, then shared ones): a run
// of mapped ports this long is still crossed.
constexpr uint32_t kPortTries = 1024;

L4Proto l4_of(uint8_t ip_proto) { return ip_proto == kIpProtoTcp ? L4Proto::tcp : L4Proto::udp; }

}  // namespace

PortPool::PortPool(uint16_t lo, uint16_t hi, uint16_t stride, uint16_t offset) : stride_(stride == 0 ? 1 : stride) {
    for (uint32_t p = lo; p <= hi; ++p)
        if (p % stride_ == offset) ring_.push_back(rte_cpu_to_be_16(static_cast<uint16_t>(p)));
    first_ = ring_.empty() ? 0 : rte_be_to_cpu_16(ring_[0]);
    uses_.assign(ring_.size(), 0);
    count_ = static_cast<uint32_t>(ring_.size());
}

int PortPool::slot(uint16_t port_be) const {
    const uint16_t p = rte_be_to_cpu_16(port_be);
    if (ring_.empty() || p < first_ || (p - first_) % stride_ != 0) return -1;
    const uint32_t i = static_cast<uint32_t>(p - first_) / stride_;
    return i < uses_.size() ? static_cast<int>(i) : -1;
}

bool PortPool::take(uint16_t* port_be) {
    if (count_ == 0) return false;
    *port_be = ring_[head_];
    head_ = head_ + 1 == ring_.size() ? 0 : head_ + 1;
    --count_;
    uses_[static_cast<uint32_t>(slot(*port_be))] = 1;  // the FIFO holds only ports of the slice with no session
    ++sessions_;
    return true;
}

bool PortPool::next_shared(uint16_t* port_be) {
    if (uses_.empty()) return false;
    *port_be = rte_cpu_to_be_16(static_cast<uint16_t>(first_ + cursor_ * stride_));
    cursor_ = cursor_ + 1 == uses_.size() ? 0 : cursor_ + 1;
    return true;
}

void PortPool::share(uint16_t port_be) {
    const int i = slot(port_be);
    if (i < 0 || uses_[static_cast<uint32_t>(i)] == 0) return;  // a free port is taken from the FIFO, not shared
    ++uses_[static_cast<uint32_t>(i)];
    ++sessions_;
}

void PortPool::give(uint16_t port_be) {
    const int i = slot(port_be);
    if (i < 0 || uses_[static_cast<uint32_t>(i)] == 0) return;  // not ours to take back
    --sessions_;
    if (--uses_[static_cast<uint32_t>(i)] != 0) return;
    uint32_t tail = head_ + count_;
    if (tail >= ring_.size()) tail -= static_cast<uint32_t>(ring_.size());
    ring_[tail] = port_be;
    ++count_;
}

uint32_t PortPool::uses(uint16_t port_be) const {
    const int i = slot(port_be);
    return i < 0 ? 0 : uses_[static_cast<uint32_t>(i)];
}

Nat::Nat(const NatConfig& cfg, std::vector<NatPort> ports, const PortMapView* maps, RouteFn route, const void* route_ctx)
    : cfg_(cfg), ports_(std::move(ports)), maps_(maps), route_(route), route_ctx_(route_ctx), sessions_(cfg.max_sessions) {
    if (cfg.workers == 0 || cfg.worker >= cfg.workers)
        throw std::invalid_argument("nat: worker " + std::to_string(cfg.worker) + " of " + std::to_string(cfg.workers));
    for (auto& by_proto : pools_)
        for (auto& pool : by_proto) pool = PortPool(cfg.port_lo, cfg.port_hi, cfg.workers, cfg.worker);
}

int Nat::port_index(bool external) const {
    for (std::size_t i = 0; i < ports_.size(); ++i)
        if (ports_[i].external == external) return static_cast<int>(i);
    return -1;
}

uint16_t Nat::address_delta(const FlowKey& key, const NatRewrite& rw) {
    ChecksumDelta d;
    d.change32(key.src, rw.src);
    d.change32(key.dst, rw.dst);
    return d.folded();
}

void Nat::prepare(const FlowKey& key, NatRewrite& rw) {
    const uint16_t addrs = address_delta(key, rw);
    // apply() takes one from the TTL: the TTL/protocol word goes from w to w - T (T the TTL's unit
    // in that word's memory order, no borrow since the TTL is above 1), which adds ~w + w - T = ~T
    // to the sum (RFC 1624, eqn. 3). Adding it here with the addresses' change gives the same sum
    // as adding the two in turn (both are positive, so no -0 can appear).
    ChecksumDelta l3;
    l3.add(addrs);
    l3.add(static_cast<uint16_t>(~stored16(0x0100)));
    rw.l3_delta = l3.folded();
    ChecksumDelta l4;
    l4.add(addrs);  // the pseudo-header carries the same addresses (and no TTL)
    l4.change(key.sport, rw.sport);
    l4.change(key.dport, rw.dport);
    rw.l4_delta = l4.folded();
}

void Nat::track(Session& s, uint8_t dir, const uint8_t* l4, uint8_t proto, uint64_t now_ms) {
    s.last_seen_ms = now_ms;
    if (proto != kIpProtoTcp) {
        s.timeout_ms = cfg_.timeouts.udp_ms;
        return;
    }
    const uint8_t flags = l4[13];
    // A new SYN on a session that was closing: the 4-tuple is being reused, start over.
    if (dir == 0 && (flags & (kTcpSyn | kTcpAck)) == kTcpSyn && (s.tcp_rst || s.tcp_fin != 0)) {
        s.tcp_rst = false;
        s.tcp_fin = 0;
        s.replied = false;
    }
    if (flags & kTcpRst) s.tcp_rst = true;
    if (flags & kTcpFin) s.tcp_fin |= static_cast<uint8_t>(1u << dir);
    if (dir == 1) s.replied = true;
    s.timeout_ms = s.tcp_rst || s.tcp_fin == 3 ? cfg_.timeouts.tcp_closing_ms
                   : s.replied                 ? cfg_.timeouts.tcp_established_ms
                                               : cfg_.timeouts.tcp_transitory_ms;
}

Nat::Verdict Nat::handle(uint8_t* l3, const ParsedPacket& p, uint16_t in_port, uint64_t now_ms, uint64_t flow_hash) {
    Verdict v;
    const FlowKey k = key_of(p);
    const uint16_t ihl = static_cast<uint16_t>(p.l4_offset - p.l3_offset);
    uint8_t* l4 = l3 + ihl;
    Session* s = nullptr;
    uint8_t dir = 0;
    bool opened = false;

    const SessionTable::Hit hit = flow_hash == kNoFlowHash ? sessions_.find(k) : sessions_.find_hinted(k, flow_hash);
    if (hit.session != nullptr) {
        s = hit.session;
        dir = hit.dir;
        // Each direction arrives on one port: where the other direction leaves.
        if (s->rw[1 - dir].out_port != in_port) {
            v.kind = Verdict::Kind::drop;
            v.reason = DropReason::session_wrong_port;
            return v;
        }
    } else {
        // Only a packet to the receiving port's own address can open a session, and only through a
        // rule of that port's kind: imports on internal ports, exports on the external one.
        if (k.dst != ports_[in_port].addr) return v;
        const L4Proto proto = l4_of(p.ip_proto);
        const bool external = ports_[in_port].external;
        const ImportRule* ir = external ? nullptr : maps_->import_rule(proto, k.dport);
        const ExportRule* er = external ? maps_->export_rule(proto, k.dport) : nullptr;
        if (ir == nullptr && er == nullptr) return v;
        DropReason why = DropReason::none;
        if (l3[8] <= 1)
            why = DropReason::ttl_expired;
        else if (p.ip_proto == kIpProtoTcp && (l4[13] & (kTcpSyn | kTcpAck | kTcpRst | kTcpFin)) != kTcpSyn)
            why = DropReason::tcp_no_session;  // only a plain SYN opens a TCP session
        else
            s = er != nullptr ? open_export(k, in_port, *er, now_ms, &why) : open_import(k, in_port, *ir, now_ms, &why);
        if (s == nullptr) {
            v.kind = Verdict::Kind::drop;
            v.reason = why;
            return v;
        }
        opened = true;
    }

    if (l3[8] <= 1) {  // TTL: the packet would leave with 0
        v.kind = Verdict::Kind::drop;
        v.reason = DropReason::ttl_expired;
        return v;
    }
    track(*s, dir, l4, p.ip_proto, now_ms);
    if (opened) log_event(*s, SessionEvent::opened);  // with the timeout its first packet set
    NatRewrite& rw = s->rw[dir];
    if (cfg_.mss_clamp != 0 && p.ip_proto == kIpProtoTcp && (l4[13] & kTcpSyn)) {
        const uint16_t hlen = static_cast<uint16_t>(p.payload_offset - p.l4_offset);
        if (clamp_mss(l4, hlen, cfg_.mss_clamp)) counters_.mss_clamped.add();
    }
    apply(l3, ihl, p.ip_proto, rw);
    counters_.translated.add();
    v.kind = Verdict::Kind::forward;
    v.out_port = rw.out_port;
    v.next_hop = rw.next_hop;
    v.neigh = &rw.neigh;
    return v;
}

Session* Nat::open_import(const FlowKey& k, uint16_t in_port, const ImportRule& r, uint64_t now_ms, DropReason* why) {
    if (!r.allows(k.src)) {
        *why = DropReason::map_source_denied;
        return nullptr;
    }
    const int ext = port_index(true);
    NatRewrite out;
    uint32_t hop = 0;
    const int out_port = ext < 0 ? -1 : route_(route_ctx_, r.peer_addr, &hop);
    uint32_t back_hop = 0;
    if (out_port < 0) {
        *why = DropReason::no_route;
        return nullptr;
    }
    // The node must be reachable back through the port it came in on (strict reverse path).
    if (route_(route_ctx_, k.src, &back_hop) != in_port) {
        *why = DropReason::map_source_denied;
        return nullptr;
    }
    out.src = ports_[ext].addr;
    out.dst = r.peer_addr;
    out.dport = r.peer_port;
    out.out_port = static_cast<uint16_t>(out_port);
    out.next_hop = hop;
    return open(k, out, in_port, back_hop, Pool::external, kImport, now_ms, why);
}

Session* Nat::open_export(const FlowKey& k, uint16_t in_port, const ExportRule& r, uint64_t now_ms, DropReason* why) {
    if (!r.allows(k.src)) {
        *why = DropReason::map_peer_denied;
        return nullptr;
    }
    NatRewrite out;
    uint32_t hop = 0, back_hop = 0;
    const int out_port = route_(route_ctx_, r.node_addr, &hop);
    if (out_port < 0 || ports_[out_port].external) {
        *why = DropReason::no_route;
        return nullptr;
    }
    if (route_(route_ctx_, k.src, &back_hop) != in_port) {  // strict reverse path, as for imports
        *why = DropReason::map_peer_denied;
        return nullptr;
    }
    out.src = ports_[out_port].addr;
    out.dst = r.node_addr;
    out.dport = r.node_port;
    out.out_port = static_cast<uint16_t>(out_port);
    out.next_hop = hop;
    return open(k, out, in_port, back_hop, Pool::internal, kExport, now_ms, why);
}

bool Nat::alloc_port(Pool pool, L4Proto proto, const FlowKey& reverse, uint16_t* sport) {
    PortPool& ports = pools_[static_cast<int>(pool)][static_cast<int>(proto)];
    // A session port must not be one that a mapping serves on the same address (exports use the
    // external address, imports the internal one), and the reply key it makes must be new.
    const auto usable = [&](uint16_t p) {
        const bool mapped = pool == Pool::external ? maps_->export_rule(proto, p) != nullptr
                                                   : maps_->import_rule(proto, p) != nullptr;
        FlowKey r = reverse;
        r.dport = p;
        return !mapped && !sessions_.contains(r);
    };
    // First a port with no session yet. One that cannot serve goes to the back of the FIFO (a mapping
    // may go away later); a bounded number of tries crosses a run of mapped ports.
    uint16_t p = 0;
    const uint32_t fresh_tries = std::min<uint32_t>(kPortTries, ports.free_count());
    for (uint32_t t = 0; t < fresh_tries && ports.take(&p); ++t) {
        if (usable(p)) {
            *sport = p;
            return true;
        }
        ports.give(p);
    }
    // Then endpoint-dependent sharing: a port that has sessions, none of them with this reply key.
    const uint32_t shared_tries = std::min<uint32_t>(kPortTries, ports.size());
    for (uint32_t t = 0; t < shared_tries && ports.next_shared(&p); ++t) {
        if (ports.uses(p) != 0 && usable(p)) {
            ports.share(p);
            *sport = p;
            return true;
        }
    }
    return false;
}

Session* Nat::open(const FlowKey& k, const NatRewrite& out, uint16_t reply_port, uint32_t reply_hop, Pool pool,
                   uint8_t kind, uint64_t now_ms, DropReason* why) {
    // The sources both directions' packets will come from, on the ports they will arrive on
    // (set_source_check). The data plane has checked the opening packet's already (handle_ipv4);
    // it is asked again here so that the invariant the established-flow path relies on holds by
    // the NAT alone, whoever calls it. Once a session, not per packet.
    if (source_ok_ != nullptr) {
        if (!source_ok_(source_ctx_, k.src, reply_port)) {
            *why = DropReason::ipv4_bad_source;
            return nullptr;
        }
        if (!source_ok_(source_ctx_, out.dst, out.out_port)) {
            *why = DropReason::map_bad_target;
            return nullptr;
        }
    }
    const L4Proto proto = l4_of(k.proto);
    PortPool& ports = pools_[static_cast<int>(pool)][static_cast<int>(proto)];
    FlowKey reverse{out.dst, out.src, out.dport, 0, k.proto, {0, 0, 0}};
    uint16_t sport = 0;
    if (!alloc_port(pool, proto, reverse, &sport)) {
        counters_.port_alloc_miss.add();
        *why = DropReason::nat_ports_exhausted;
        return nullptr;
    }
    reverse.dport = sport;
    Session* s = sessions_.insert(k, reverse);
    if (s == nullptr) {
        ports.give(sport);
        counters_.sessions_refused_full.add();
        *why = DropReason::session_table_full;
        return nullptr;
    }
    s->rw[0] = out;  // its addresses and ports as insert() wrote them, `reverse` being out's reply
    s->rw[0].sport = sport;
    prepare(k, s->rw[0]);
    NatRewrite& back = s->rw[1];  // insert() wrote its addresses and ports: k reversed
    back.out_port = reply_port;
    back.next_hop = reply_hop;
    prepare(reverse, back);
    SessionCold& c = sessions_.cold(s);
    c.alloc_port = sport;
    c.alloc_pool = static_cast<uint8_t>(pool);
    c.kind = kind;
    s->last_seen_ms = now_ms;
    counters_.sessions_created.add();
    return s;
}

SessionEvent Nat::event_of(const Session& s, const SessionCold& c, SessionEvent::Type type) {
    SessionEvent e;
    e.type = type;
    e.proto = c.key[0].proto;
    e.kind = c.kind;
    e.out_port = static_cast<uint8_t>(s.rw[0].out_port);
    e.in_src = c.key[0].src, e.in_dst = c.key[0].dst;
    e.in_sport = c.key[0].sport, e.in_dport = c.key[0].dport;
    e.out_src = s.rw[0].src, e.out_dst = s.rw[0].dst;
    e.out_sport = s.rw[0].sport, e.out_dport = s.rw[0].dport;
    e.timeout_ms = s.timeout_ms;
    return e;
}

bool Nat::clamp_mss(uint8_t* tcp, uint16_t len, uint16_t mss) {
    for (uint16_t i = 20; i + 1 < len;) {
        const uint8_t kind = tcp[i];
        if (kind == 0) return false;  // end of options
        if (kind == 1) {        // no-op
            ++i;
            continue;
        }
        const uint8_t olen = tcp[i + 1];
        if (olen < 2 || i + olen > len) return false;  // malformed: leave it alone
        if (kind == 2 && olen == 4) {
            uint16_t old_be, new_be = rte_cpu_to_be_16(mss);
            std::memcpy(&old_be, tcp + i + 2, 2);
            if (rte_be_to_cpu_16(old_be) <= mss) return false;
            std::memcpy(tcp + i + 2, &new_be, 2);
            // A 16-bit value at an odd offset adds into the sum byte-swapped (RFC 1071, 2(B)).
            uint16_t c;
            std::memcpy(&c, tcp + 16, 2);
            c = (i & 1) == 0 ? checksum_adjust(c, old_be, new_be)
                             : checksum_adjust(c, rte_bswap16(old_be), rte_bswap16(new_be));
            std::memcpy(tcp + 16, &c, 2);
            return true;
        }
        i = static_cast<uint16_t>(i + olen);
    }
    return false;
}

Nat::Verdict Nat::handle_icmp_error(uint8_t* l3, const ParsedPacket& p) {
    Verdict v;
    // Outer ICMP header, then the quoted IPv4 header and at least the 8 bytes that hold the ports.
    if (p.l4_len < 8 + 20 + 8) return v;
    uint8_t* icmp = l3 + (p.l4_offset - p.l3_offset);
    uint8_t* inner = icmp + 8;
    const uint16_t inner_ihl = static_cast<uint16_t>((inner[0] & 0x0f) * 4);
    if ((inner[0] >> 4) != 4 || inner_ihl < 20 || p.l4_len < 8 + inner_ihl + 8) return v;
    const uint8_t proto = inner[9];
    if (proto != kIpProtoTcp && proto != kIpProtoUdp) return v;
    uint8_t* inner_l4 = inner + inner_ihl;

    // The quoted packet is one the gateway sent; its reverse is the session's key for the other way.
    FlowKey k;
    std::memcpy(&k.src, inner + 16, 4);
    std::memcpy(&k.dst, inner + 12, 4);
    std::memcpy(&k.sport, inner_l4 + 2, 2);
    std::memcpy(&k.dport, inner_l4, 2);
    k.proto = proto;
    const SessionTable::Hit hit = sessions_.find(k);
    if (hit.session == nullptr) return v;
    if (l3[8] <= 1) {
        v.kind = Verdict::Kind::drop;
        v.reason = DropReason::ttl_expired;
        return v;
    }
    Session& s = *hit.session;
    const uint8_t orig = static_cast<uint8_t>(1 - hit.dir);  // the direction the quoted packet went
    const FlowKey& was = sessions_.cold(&s).key[orig];        // ... and what it looked like before
    const NatRewrite& back = s.rw[hit.dir];                   // how to reach its sender

    // Restore the quoted packet: addresses and ports as its sender wrote them.
    FlowKey quoted;
    std::memcpy(&quoted.src, inner + 12, 4);
    std::memcpy(&quoted.dst, inner + 16, 4);
    std::memcpy(&quoted.sport, inner_l4, 2);
    std::memcpy(&quoted.dport, inner_l4 + 2, 2);
    NatRewrite restore;
    restore.src = was.src;
    restore.dst = was.dst;
    restore.sport = was.sport;
    restore.dport = was.dport;
    prepare(quoted, restore);
    std::memcpy(inner + 12, &was.src, 4);
    std::memcpy(inner + 16, &was.dst, 4);
    uint16_t c;
    std::memcpy(&c, inner + 10, 2);
    c = checksum_add(c, address_delta(quoted, restore));  // the quoted header's TTL stays
    std::memcpy(inner + 10, &c, 2);
    std::memcpy(inner_l4, &was.sport, 2);
    std::memcpy(inner_l4 + 2, &was.dport, 2);
    // The quoted L4 checksum, when it is there: UDP's is in the first 8 bytes, TCP's at 16.
    const uint16_t quoted_l4_len = static_cast<uint16_t>(p.l4_len - 8 - inner_ihl);
    const uint16_t csum_at = proto == kIpProtoTcp ? 16 : 6;
    if (quoted_l4_len >= csum_at + 2) {
        std::memcpy(&c, inner_l4 + csum_at, 2);
        if (proto == kIpProtoTcp || c != 0) {
            c = checksum_add(c, restore.l4_delta);
            if (proto == kIpProtoUdp && c == 0) c = 0xffff;
            std::memcpy(inner_l4 + csum_at, &c, 2);
        }
    }
    // The ICMP checksum covers the whole message: sum it again (errors are small and rare).
    icmp[2] = icmp[3] = 0;
    c = static_cast<uint16_t>(~rte_raw_cksum(icmp, p.l4_len));
    std::memcpy(icmp + 2, &c, 2);

    // Outer header: from the address the sender wrote to, to the sender.
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(l3);
    ip->src_addr = was.dst;
    ip->dst_addr = was.src;
    --ip->time_to_live;
    ip->hdr_checksum = 0;
    ip->hdr_checksum = rte_ipv4_cksum(ip);
    counters_.icmp_errors_translated.add();
    v.kind = Verdict::Kind::forward;
    v.out_port = back.out_port;
    v.next_hop = back.next_hop;
    return v;
}

uint32_t Nat::expire(uint64_t now_ms, uint32_t budget) {
    // Each session looked at may expire and be logged: no more than the log has room for, so no
    // close is lost to a long sweep (the rest waits for the next poll, after the log is flushed).
    if (log_events_) budget = std::min(budget, kEventLog - events_len_);
    const uint32_t n = sessions_.sweep(now_ms, budget, [this](Session& s, const SessionCold& c) {
        log_event(s, SessionEvent::closed);
        pools_[c.alloc_pool][static_cast<int>(l4_of(c.key[0].proto))].give(c.alloc_port);
    });
    counters_.sessions_expired.add(n);
    return n;
}

}  // namespace fedgate
