// Packet parsing for the data plane: Ethernet (with up to two VLAN tags), ARP, IPv4, ICMP, UDP, TCP.
// Works on a plain byte range so it runs the same on an mbuf, in unit tests and under the fuzzer.
#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace fedgate
