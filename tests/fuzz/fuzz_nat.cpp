// libFuzzer target: the port-map NAT under hostile packets (Nat::handle with MSS clamping on, and
// Nat::handle_icmp_error). A forwarded packet leaves with good IPv4 and ICMP checksums, TTL one lower,
// a TCP/UDP checksum as valid as it came in, and only addresses, ports (and a SYN's MSS) changed;
// anything not forwarded leaves untouched; every pool port belongs to exactly one session.
//
// Input: frames separated by the marker "\xfeNAT". Every frame after the first starts with two bytes,
// [control][time step]; the first frame has kFirstControl at time 0 and is sent twice, as it is and
// as the peer would send it to the external address, so a raw frame (as fuzz_make_seeds writes)
// reaches imports and exports by itself. Control bit 0: arriving port (0 internal,
// 1 external); bit 1: fix the IPv4 header checksum first; bit 2: fix the TCP/UDP/ICMP checksum
// first; bit 3: after a forward, send the reply (the output with addresses and ports swapped) back
// in; bits 4-5: that many more copies with source port +1, +2, ... (new flows, to fill the pools and
// the table); bit 6: after a forward, send an ICMP port-unreachable about it back in; bit 7: arriving
// port from the destination address instead of bit 0.
#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "dataplane/nat.hpp"
#include "dataplane/packet.hpp"
#include "tests/support/packet_builder.hpp"

namespace {

using namespace fedgate;

constexpr uint8_t kPortBit = 1, kFixIpBit = 2, kFixL4Bit = 4, kReplyBit = 8, kCopiesShift = 4, kCopiesMask = 3,
                  kIcmpErrorBit = 0x40, kPortByDstBit = 0x80;
constexpr uint8_t kFirstControl = kFixIpBit | kFixL4Bit | kReplyBit | kIcmpErrorBit | kPortByDstBit;
constexpr char kMarker[] = "\xfeNAT";
constexpr std::size_t kMarkerLen = sizeof kMarker - 1;
constexpr uint8_t kTcpSyn = 0x02;

// The internal address is fuzz_make_seeds' TCP and UDP destination, and their ports (80, 53) are
// rules on both addresses, so a seed needs only its addresses changed to reach an export.
const uint32_t kInternal = htonl(test::ip("198.18.2.10"));
const uint32_t kExternal = htonl(test::ip("198.19.0.1"));
const uint32_t kPeer = htonl(test::ip("198.19.0.2"));  // the one peer gateway the exports allow

int route(const void*, uint32_t dst, uint32_t* next_hop) {
    const uint32_t net16 = ntohl(dst) >> 16;
    *next_hop = dst;
    return net16 == (test::ip("198.18.0.0") >> 16) ? 0 : net16 == (test::ip("198.19.0.0") >> 16) ? 1 : -1;
}

// Rules live for the whole run; each input gets a fresh Nat over them.
const PortMapView& maps() {
    static const PortMapView* const view = [] {
        auto* v = new PortMapView();
        auto* any = new ImportRule();
        any->peer_addr = kPeer;
        any->peer_port = htons(6000);
        auto* limited = new ImportRule(*any);
        limited->n_allow = 1;
        limited->allow[0] = {htonl(test::ip("198.18.1.0")), htonl(0xffffff00u)};
        auto* exp = new ExportRule();
        exp->node_addr = htonl(test::ip("198.18.1.20"));
        exp->node_port = htons(8000);
        exp->n_peers = 1;
        exp->peer_addrs[0] = kPeer;
        v->publish(L4Proto::tcp, htons(80), limited);
        v->publish(L4Proto::udp, htons(53), any);
        for (L4Proto p : {L4Proto::tcp, L4Proto::udp}) {
            v->publish(p, htons(80), exp);
            v->publish(p, htons(53), exp);
        }
        return v;
    }();
    return *view;
}

NatConfig small_config() {
    NatConfig c;
    c.max_sessions = 4;
    c.port_lo = 20000;  // 3 ports a pool: a full pool and a full table are in reach
    c.port_hi = 20002;
    c.timeouts = {.tcp_established_ms = 2000, .tcp_transitory_ms = 500, .udp_ms = 1000, .tcp_closing_ms = 100};
    c.mss_clamp = 1200;
    return c;
}

void check(bool ok) {
    if (!ok) std::abort();
}

uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
void wr16(uint8_t* p, uint16_t v) { p[0] = static_cast<uint8_t>(v >> 8), p[1] = static_cast<uint8_t>(v); }

// An untagged IPv4 packet's header lengths, if the packet fits in the frame.
struct Layout {
    bool ok = false;
    uint32_t ihl = 0, total = 0;
    uint8_t proto = 0;
    uint32_t seg() const { return total - ihl; }
};
Layout layout(const uint8_t* f, uint32_t len) {
    Layout l;
    if (len < 14 + 20 || rd16(f + 12) != 0x0800) return l;
    l.ihl = (f[14] & 0x0f) * 4u;
    l.total = rd16(f + 16);
    l.proto = f[14 + 9];
    l.ok = l.ihl >= 20 && l.total >= l.ihl && 14 + l.total <= len;
    return l;
}

// Where the TCP/UDP/ICMP checksum is, if the segment holds it.
uint8_t* l4_checksum_at(uint8_t* f, const Layout& l) {
    uint8_t* l4 = f + 14 + l.ihl;
    if (l.proto == kIpProtoTcp && l.seg() >= 20) return l4 + 16;
    if (l.proto == kIpProtoUdp && l.seg() >= 8) return l4 + 6;
    if (l.proto == kIpProtoIcmp && l.seg() >= 8) return l4 + 2;
    return nullptr;
}

uint32_t pseudo_sum(const uint8_t* f, const Layout& l) {
    if (l.proto == kIpProtoIcmp) return 0;
    uint8_t ph[12];
    std::memcpy(ph, f + 14 + 12, 8);
    ph[8] = 0, ph[9] = l.proto;
    wr16(ph + 10, static_cast<uint16_t>(l.seg()));
    return test::sum16(ph, 12);
}

void fix_ip_checksum(uint8_t* f, uint32_t len) {
    if (len < 14 + 20 || rd16(f + 12) != 0x0800) return;
    const uint32_t ihl = (f[14] & 0x0f) * 4u;
    if (ihl < 20 || 14 + ihl > len) return;
    wr16(f + 14 + 10, 0);
    wr16(f + 14 + 10, test::inet_checksum(f + 14, ihl));
}

void fix_l4_checksum(uint8_t* f, uint32_t len) {
    const Layout l = layout(f, len);
    uint8_t* at = l.ok ? l4_checksum_at(f, l) : nullptr;
    if (at == nullptr) return;
    wr16(at, 0);
    uint16_t c = test::inet_checksum(f + 14 + l.ihl, l.seg(), pseudo_sum(f, l));
    if (l.proto == kIpProtoUdp && c == 0) c = 0xffff;
    wr16(at, c);
}

enum class L4Sum { none, good, bad };
L4Sum l4_sum(uint8_t* f, const Layout& l) {
    const uint8_t* at = l4_checksum_at(f, l);
    if (l.proto == kIpProtoUdp && rd16(at) == 0) return L4Sum::none;
    return test::inet_checksum(f + 14 + l.ihl, l.seg(), pseudo_sum(f, l)) == 0 ? L4Sum::good : L4Sum::bad;
}

// Every session holds one use of one pool port; a port out of the FIFO has at least one session.
void check_pools(const Nat& nat) {
    uint32_t uses = 0, used_ports = 0;
    for (Nat::Pool pool : {Nat::Pool::external, Nat::Pool::internal})
        for (L4Proto proto : {L4Proto::tcp, L4Proto::udp}) {
            uses += nat.pool(pool, proto).sessions();
            used_ports += nat.pool(pool, proto).size() - nat.pool(pool, proto).free_count();
        }
    check(uses == nat.session_count());
    check(used_ports <= uses);
    check(nat.session_count() <= nat.sessions().capacity());
}

bool is_ours(uint32_t addr) { return addr == kInternal || addr == kExternal; }

struct Forwarded {
    std::vector<uint8_t> frame;  // empty: not forwarded
    uint16_t port = 0;
};

// What the data plane would hand the NAT, and the checks on what comes back.
Forwarded feed(Nat& nat, const uint8_t* data, uint32_t len, uint8_t control, uint64_t now) {
    if (len == 0) return {};
    // An exact-size copy, so ASan flags any access past the end.
    std::unique_ptr<uint8_t[]> buf(new uint8_t[len]);
    std::memcpy(buf.get(), data, len);
    uint8_t* f = buf.get();
    if (control & kFixIpBit) fix_ip_checksum(f, len);
    if (control & kFixL4Bit) fix_l4_checksum(f, len);

    ParsedPacket p;
    if (parse_packet(f, len, p) != DropReason::none || p.ether_type_host != kEtherTypeIpv4 || p.fragment) return {};
    const uint32_t l3 = p.l3_offset, l4 = p.l4_offset;
    const bool icmp_error = p.ip_proto == kIpProtoIcmp && (p.icmp_type == 3 || p.icmp_type == 11 || p.icmp_type == 12);
    // The data plane gives the NAT ICMP errors addressed to the gateway with a good ICMP checksum.
    if (icmp_error && (!is_ours(p.dst_ip) || test::inet_checksum(f + l4, p.l4_len) != 0)) return {};
    if (!icmp_error && p.ip_proto != kIpProtoTcp && p.ip_proto != kIpProtoUdp) return {};

    const std::vector<uint8_t> before(f, f + len);
    const uint16_t in_port = control & kPortBit;
    const Nat::Verdict v = icmp_error ? nat.handle_icmp_error(f + l3, p) : nat.handle(f + l3, p, in_port, now);
    check_pools(nat);
    if (v.kind != Nat::Verdict::Kind::forward) {
        check(std::memcmp(f, before.data(), len) == 0);
        check((v.kind == Nat::Verdict::Kind::drop) == (v.reason != DropReason::none));
        return {};
    }
    check(v.out_port < 2 && v.reason == DropReason::none);

    // IPv4: header checksum good, TTL one lower, from one of our addresses.
    check(test::inet_checksum(f + l3, l4 - l3) == 0);
    check(f[l3 + 8] + 1 == before[l3 + 8]);
    uint32_t src;
    std::memcpy(&src, f + l3 + 12, 4);
    check(is_ours(src));
    if (icmp_error) {
        // Only the outer header and the ICMP message change; the message's checksum is good.
        check(std::memcmp(f, before.data(), l3) == 0);
        check(test::inet_checksum(f + l4, p.l4_len) == 0);
        check(std::memcmp(f + l4 + p.l4_len, before.data() + l4 + p.l4_len, len - l4 - p.l4_len) == 0);
        return {std::vector<uint8_t>(f, f + len), v.out_port};
    }

    // TCP/UDP: only TTL, addresses, ports and checksums change, and a SYN's options (MSS clamp).
    const bool tcp = p.ip_proto == kIpProtoTcp;
    const bool syn = tcp && (before[l4 + 13] & kTcpSyn);
    const uint32_t csum_at = l4 + (tcp ? 16 : 6);
    for (uint32_t i = 0; i < len; ++i) {
        const bool may_change = i == l3 + 8 || i == l3 + 10 || i == l3 + 11 || (i >= l3 + 12 && i < l3 + 20) ||
                                (i >= l4 && i < l4 + 4) || i == csum_at || i == csum_at + 1 ||
                                (syn && i >= l4 + 20u && i < p.payload_offset);
        check(may_change || f[i] == before[i]);
    }
    // A good checksum stays good; "no UDP checksum" stays so.
    if (p.vlan_count == 0) {
        std::vector<uint8_t> was = before;
        const Layout lo = layout(f, len);
        check(lo.ok);
        const L4Sum in = l4_sum(was.data(), lo), out = l4_sum(f, lo);
        check(in != L4Sum::good || out == L4Sum::good);
        check((in == L4Sum::none) == (out == L4Sum::none));
    }
    return {std::vector<uint8_t>(f, f + len), v.out_port};
}

// The reply to a forwarded TCP/UDP frame: addresses and ports swapped, fresh TTL, checksums good.
std::vector<uint8_t> reply_to(std::vector<uint8_t> f) {
    ParsedPacket p;
    if (parse_packet(f.data(), static_cast<uint32_t>(f.size()), p) != DropReason::none || p.l4_offset == 0 ||
        (p.ip_proto != kIpProtoTcp && p.ip_proto != kIpProtoUdp))
        return {};
    uint8_t* ip = f.data() + p.l3_offset;
    uint8_t tmp[4];
    std::memcpy(tmp, ip + 12, 4), std::memcpy(ip + 12, ip + 16, 4), std::memcpy(ip + 16, tmp, 4);
    uint8_t* l4 = f.data() + p.l4_offset;
    std::memcpy(tmp, l4, 2), std::memcpy(l4, l4 + 2, 2), std::memcpy(l4 + 2, tmp, 2);
    ip[8] = 64;
    fix_ip_checksum(f.data(), static_cast<uint32_t>(f.size()));
    fix_l4_checksum(f.data(), static_cast<uint32_t>(f.size()));
    return f;
}

// An ICMP port unreachable from a forwarded frame's destination back to its source, quoting it.
std::vector<uint8_t> icmp_error_about(const std::vector<uint8_t>& out) {
    ParsedPacket p;
    if (parse_packet(out.data(), static_cast<uint32_t>(out.size()), p) != DropReason::none || p.l4_offset == 0 ||
        (p.ip_proto != kIpProtoTcp && p.ip_proto != kIpProtoUdp))
        return {};
    const uint32_t quoted = std::min<uint32_t>(p.l3_len, 548);
    std::vector<uint8_t> e(14 + 20 + 8 + quoted, 0);
    std::memcpy(e.data(), out.data(), 12);
    wr16(&e[12], 0x0800);
    uint8_t* ip = &e[14];
    ip[0] = 0x45, ip[8] = 64, ip[9] = kIpProtoIcmp;
    wr16(ip + 2, static_cast<uint16_t>(20 + 8 + quoted));
    std::memcpy(ip + 12, out.data() + p.l3_offset + 16, 4);
    std::memcpy(ip + 16, out.data() + p.l3_offset + 12, 4);
    ip[20] = 3, ip[21] = 3;
    std::memcpy(ip + 28, out.data() + p.l3_offset, quoted);
    fix_ip_checksum(e.data(), static_cast<uint32_t>(e.size()));
    fix_l4_checksum(e.data(), static_cast<uint32_t>(e.size()));
    return e;
}

uint16_t arriving_port(const uint8_t* f, uint32_t len, uint8_t control) {
    if (!(control & kPortByDstBit)) return control & kPortBit;
    uint32_t dst = 0;
    if (len >= 14 + 20 && rd16(f + 12) == 0x0800) std::memcpy(&dst, f + 14 + 16, 4);
    return dst == kExternal ? 1 : 0;
}

// The frame with its TCP/UDP source port moved up by `plus` (untagged IPv4 only).
std::vector<uint8_t> with_sport_plus(const uint8_t* data, uint32_t len, uint16_t plus) {
    std::vector<uint8_t> f(data, data + len);
    const Layout l = layout(f.data(), len);
    if (plus != 0 && l.ok && (l.proto == kIpProtoTcp || l.proto == kIpProtoUdp) && l.seg() >= 4)
        wr16(f.data() + 14 + l.ihl, static_cast<uint16_t>(rd16(f.data() + 14 + l.ihl) + plus));
    return f;
}

// The frame as the peer gateway would send it to the external address (untagged IPv4 only).
std::vector<uint8_t> from_peer(const uint8_t* data, uint32_t len) {
    std::vector<uint8_t> f(data, data + len);
    if (len >= 14 + 20 && rd16(f.data() + 12) == 0x0800) {
        std::memcpy(f.data() + 14 + 12, &kPeer, 4);
        std::memcpy(f.data() + 14 + 16, &kExternal, 4);
    }
    return f;
}

void feed_frame(Nat& nat, const uint8_t* data, uint32_t len, uint8_t control, uint64_t now) {
    const uint8_t in = static_cast<uint8_t>(arriving_port(data, len, control));
    const uint8_t fixes = control & (kFixIpBit | kFixL4Bit);
    const unsigned copies = (control >> kCopiesShift) & kCopiesMask;
    for (uint16_t i = 0; i <= copies; ++i) {
        const std::vector<uint8_t> frame = with_sport_plus(data, len, i);
        const Forwarded out = feed(nat, frame.data(), len, static_cast<uint8_t>(fixes | in), now);
        if (out.frame.empty()) continue;
        // Answers come in where the forward went out.
        const uint8_t back = static_cast<uint8_t>(out.port);
        if (control & kIcmpErrorBit) {
            const std::vector<uint8_t> e = icmp_error_about(out.frame);
            if (!e.empty()) feed(nat, e.data(), static_cast<uint32_t>(e.size()), back, now);
        }
        if (control & kReplyBit) {
            const std::vector<uint8_t> r = reply_to(out.frame);
            if (!r.empty()) feed(nat, r.data(), static_cast<uint32_t>(r.size()), back, now);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 1 << 16) return 0;
    Nat nat(small_config(), {NatPort{false, kInternal}, NatPort{true, kExternal}}, &maps(), route, nullptr);
    uint64_t now = 0;
    const uint8_t* const end = data + size;
    uint8_t control = kFirstControl;
    for (const uint8_t* at = data;;) {
        const auto* mark = static_cast<const uint8_t*>(memmem(at, static_cast<size_t>(end - at), kMarker, kMarkerLen));
        const uint8_t* frame_end = mark != nullptr ? mark : end;
        feed_frame(nat, at, static_cast<uint32_t>(frame_end - at), control, now);
        if (at == data) {
            const std::vector<uint8_t> twin = from_peer(at, static_cast<uint32_t>(frame_end - at));
            feed_frame(nat, twin.data(), static_cast<uint32_t>(twin.size()), control, now);
        }
        if (mark == nullptr || end - (mark + kMarkerLen) < 2) break;
        at = mark + kMarkerLen;
        control = at[0];
        now += at[1] * 16u;  // up to ~4 s a step: every timeout is within reach
        at += 2;
        nat.expire(now, 2);
        check_pools(nat);
    }
    return 0;
}
