// Packet parsing for the data plane: Ethernet (with up to two VLAN tags), ARP, IPv4, ICMP, UDP, TCP.
// Works on a plain byte range so it runs the same on an mbuf, in unit tests and under the fuzzer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dataplane/checksum.hpp"
#include "dataplane/drop_reason.hpp"

namespace fedgate {

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;
inline constexpr uint16_t kEtherTypeQinQ = 0x88A8;
inline constexpr uint8_t kIpProtoIcmp = 1;
inline constexpr uint8_t kIpProtoTcp = 6;
inline constexpr uint8_t kIpProtoUdp = 17;

// Offsets are from the start of the frame. Multi-byte fields keep network byte order
// (as read from the wire) unless the name says _host.
struct ParsedPacket {
    uint16_t ether_type_host = 0;  // after any VLAN tags
    uint8_t vlan_count = 0;
    uint16_t vlan_id_host = 0;     // outermost tag's VLAN ID
    uint16_t l3_offset = 0;
    uint16_t l3_len = 0;           // IPv4: total length; ARP: 28
    uint16_t l4_offset = 0;        // 0 when there is no L4 header to read (ARP, non-first fragment)
    uint16_t l4_len = 0;           // bytes from l4_offset to the end of the IPv4 payload
    uint16_t payload_offset = 0;   // after the TCP/UDP/ICMP header
    uint16_t payload_len = 0;
    uint8_t ip_proto = 0;
    bool fragment = false;         // MF set or offset non-zero
    uint32_t src_ip = 0, dst_ip = 0;      // IPv4, network order
    uint16_t src_port = 0, dst_port = 0;  // TCP/UDP, network order
    uint8_t icmp_type = 0, icmp_code = 0;
    uint16_t arp_op_host = 0;
};
// The addresses, and the ports, sit side by side as in their headers: the parser writes each pair
// with one store, so the flow hash's 8-byte load of both addresses is forwarded from that store
// instead of stalling on two (the stall showed in the fast path's profile).
static_assert(offsetof(ParsedPacket, dst_ip) == offsetof(ParsedPacket, src_ip) + 4);
static_assert(offsetof(ParsedPacket, dst_port) == offsetof(ParsedPacket, src_port) + 2);

// What the receiving port says about a checksum (RX checksum offload): nothing (check it in
// software), checked and right, or checked and wrong.
enum class RxChecksum : uint8_t { unknown, good, bad };

// Parses `len` bytes at `data`. Returns DropReason::none for a packet the data plane can act
// on, otherwise the reason to drop it. Never reads outside [data, data + len).
// The IPv4 header checksum is verified, in software unless `ip_cksum` already says; L4 checksums
// are left to whoever consumes the payload.
DropReason parse_packet(const uint8_t* data, uint32_t len, ParsedPacket& out,
                        RxChecksum ip_cksum = RxChecksum::unknown);

// What the data plane's established-flow path reads of a frame (parse_fast). 16 bytes: the flow's
// addresses and ports in network order, as in their headers. No initialisers: a burst's array of
// them is left unwritten until parse_fast fills each in.
struct FastPacket {
    uint32_t src_ip, dst_ip;
    uint16_t src_port, dst_port;
    uint8_t ip_proto;
    uint8_t tcp_flags;  // TCP: the flags byte; UDP: 0
    uint8_t tcp_hlen;   // TCP: the header's length in bytes, options included; UDP: 0
    uint8_t pad;        // parse_fast leaves it; the burst loop keeps a packet's lane here
};
static_assert(sizeof(FastPacket) == 16);

// The one shape of frame most traffic has, checked in a few loads and compares: untagged IPv4 with a
// 20-byte header, not a fragment, TCP or UDP with a whole header (UDP's length exactly the
// payload's), the IPv4 header sum good (as `ip_cksum` says, or summed here). True exactly for frames
// parse_packet() takes (DropReason::none) with that shape, with the same addresses, ports and
// protocol (l3 at 14, l4 at 34); false for everything else, which the caller parses in full.
inline bool parse_fast(const uint8_t* d, uint32_t len, RxChecksum ip_cksum, FastPacket& out) {
    constexpr uint32_t kL3 = 14, kL4 = kL3 + 20;
    if (len < kL4 + 8) return false;
    // IPv4 (EtherType 0x0800) with a 20-byte header (version 4, IHL 5): bytes 12-14 compared as one
    // word, as are the fragment fields' 14 bits below (as three and two byte compares, GCC's code
    // took 10 instructions a forwarded packet more: NAT_BENCH_INSNS).
    uint32_t head;
    std::memcpy(&head, d + 12, 4);
    constexpr uint32_t kIpv4Head = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? 0x00450008u : 0x08004500u;
    constexpr uint32_t kHeadMask = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? 0x00ffffffu : 0xffffff00u;
    if ((head & kHeadMask) != kIpv4Head) return false;
    const uint8_t* ip = d + kL3;
    const uint32_t total = static_cast<uint32_t>(ip[2]) << 8 | ip[3];
    uint16_t frag;
    std::memcpy(&frag, ip + 6, 2);
    constexpr uint16_t kFragMask = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? 0xff3f : 0x3fff;  // MF and the offset
    if (total > len - kL3 || (frag & kFragMask) != 0) return false;  // cut short; MF or an offset
    const uint8_t* l4 = ip + 20;
    if (ip[9] == kIpProtoTcp) {
        if (total < 40) return false;  // now the segment's 20 bytes are there to read
        const uint32_t hlen = (l4[12] >> 4) * 4u;
        if (hlen < 20 || hlen > total - 20) return false;
        out.tcp_flags = l4[13];
        out.tcp_hlen = static_cast<uint8_t>(hlen);
    } else if (ip[9] == kIpProtoUdp) {
        if (total < 28 || (static_cast<uint32_t>(l4[4]) << 8 | l4[5]) != total - 20) return false;
        out.tcp_flags = 0;
        out.tcp_hlen = 0;
    } else {
        return false;
    }
    if (ip_cksum == RxChecksum::bad || (ip_cksum == RxChecksum::unknown && !ipv4_header20_ok(ip))) return false;
    out.ip_proto = ip[9];
    std::memcpy(&out.src_ip, ip + 12, 8);
    std::memcpy(&out.src_port, l4, 4);
    return true;
}

// What parse_packet() gives for a frame parse_fast() took as `f`, from `f` and the IPv4 total
// length alone: no second parse.
inline ParsedPacket parsed_of_fast(const uint8_t* d, const FastPacket& f) {
    constexpr uint16_t kL3 = 14, kL4 = kL3 + 20;
    const uint16_t total = static_cast<uint16_t>(d[kL3 + 2] << 8 | d[kL3 + 3]);
    ParsedPacket p;
    p.ether_type_host = 0x0800;
    p.l3_offset = kL3;
    p.l3_len = total;
    p.l4_offset = kL4;
    p.l4_len = static_cast<uint16_t>(total - 20);
    p.payload_offset = static_cast<uint16_t>(kL4 + (f.ip_proto == kIpProtoTcp ? f.tcp_hlen : 8));
    p.payload_len = static_cast<uint16_t>(kL4 + p.l4_len - p.payload_offset);
    p.ip_proto = f.ip_proto;
    p.src_ip = f.src_ip;
    p.dst_ip = f.dst_ip;
    p.src_port = f.src_port;
    p.dst_port = f.dst_port;
    return p;
}

}  // namespace fedgate
