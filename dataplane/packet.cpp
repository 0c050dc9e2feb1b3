// Packet parsing: bounds-checked walk from Ethernet to the L4 header.
#include "dataplane/packet.hpp"

#include <rte_arp.h>
#include <rte_ether.h>
#include <rte_icmp.h>
#include <rte_ip.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <cstring>

#include "dataplane/checksum.hpp"

namespace fedgate {
namespace {

uint16_t load_be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

DropReason parse_arp(const uint8_t* data, uint32_t len, ParsedPacket& out) {
    if (len - out.l3_offset < sizeof(rte_arp_hdr)) return DropReason::arp_malformed;
    rte_arp_hdr arp;
    std::memcpy(&arp, data + out.l3_offset, sizeof arp);
    if (rte_be_to_cpu_16(arp.arp_hardware) != RTE_ARP_HRD_ETHER ||
        rte_be_to_cpu_16(arp.arp_protocol) != RTE_ETHER_TYPE_IPV4 || arp.arp_hlen != RTE_ETHER_ADDR_LEN ||
        arp.arp_plen != 4)
        return DropReason::arp_malformed;
    out.arp_op_host = rte_be_to_cpu_16(arp.arp_opcode);
    if (out.arp_op_host != RTE_ARP_OP_REQUEST && out.arp_op_host != RTE_ARP_OP_REPLY)
        return DropReason::arp_unsupported_op;
    out.l3_len = sizeof(rte_arp_hdr);
    out.src_ip = arp.arp_data.arp_sip;
    out.dst_ip = arp.arp_data.arp_tip;
    return DropReason::none;
}

DropReason parse_l4(const uint8_t* data, ParsedPacket& out) {
    const uint8_t* l4 = data + out.l4_offset;
    switch (out.ip_proto) {
    case kIpProtoIcmp:
        if (out.l4_len < sizeof(rte_icmp_hdr)) return DropReason::icmp_truncated;
        out.icmp_type = l4[0];
        out.icmp_code = l4[1];
        out.payload_offset = out.l4_offset + sizeof(rte_icmp_hdr);
        break;
    case kIpProtoUdp: {
        if (out.l4_len < sizeof(rte_udp_hdr)) return DropReason::udp_truncated;
        const uint16_t ulen = load_be16(l4 + 4);
        // A first fragment carries only part of the datagram, so its length can exceed the payload.
        if (ulen < sizeof(rte_udp_hdr) || (!out.fragment && ulen != out.l4_len)) return DropReason::udp_bad_length;
        out.payload_offset = out.l4_offset + sizeof(rte_udp_hdr);
        break;
    }
    case kIpProtoTcp: {
        if (out.l4_len < sizeof(rte_tcp_hdr)) return DropReason::tcp_truncated;
        const uint16_t hlen = (l4[12] >> 4) * 4;
        if (hlen < sizeof(rte_tcp_hdr) || hlen > out.l4_len) return DropReason::tcp_bad_header;
        out.payload_offset = out.l4_offset + hlen;
        break;
    }
    default:  // a protocol we do not parse: all of it is payload
        out.payload_offset = out.l4_offset;
        break;
    }
    if (out.ip_proto == kIpProtoTcp || out.ip_proto == kIpProtoUdp) {
        std::memcpy(&out.src_port, l4, 4);  // both ports in one store (see ParsedPacket)
    }
    out.payload_len = static_cast<uint16_t>(out.l4_offset + out.l4_len - out.payload_offset);
    return DropReason::none;
}

DropReason parse_ipv4(const uint8_t* data, uint32_t len, ParsedPacket& out, RxChecksum ip_cksum) {
    const uint32_t avail = len - out.l3_offset;
    if (avail < sizeof(rte_ipv4_hdr)) return DropReason::ipv4_truncated;
    const uint8_t* ip = data + out.l3_offset;
    if ((ip[0] >> 4) != 4) return DropReason::ipv4_bad_version;
    const uint32_t ihl = (ip[0] & 0x0f) * 4u;
    if (ihl < sizeof(rte_ipv4_hdr)) return DropReason::ipv4_bad_ihl;
    if (ihl > avail) return DropReason::ipv4_truncated;
    const uint16_t total = load_be16(ip + 2);
    // Shorter frames are cut; longer ones may carry Ethernet padding, which is allowed.
    if (total < ihl || total > avail) return DropReason::ipv4_bad_length;
    if (ip_cksum == RxChecksum::bad ||
        (ip_cksum == RxChecksum::unknown && !(ihl == 20 ? ipv4_header20_ok(ip) : rte_raw_cksum(ip, ihl) == 0xffff)))
        return DropReason::ipv4_bad_checksum;

    out.l3_len = total;
    out.ip_proto = ip[9];
    std::memcpy(&out.src_ip, ip + 12, 8);  // both addresses in one store (see ParsedPacket)
    const uint16_t frag = load_be16(ip + 6);
    const uint16_t frag_offset = frag & RTE_IPV4_HDR_OFFSET_MASK;
    out.fragment = (frag & RTE_IPV4_HDR_MF_FLAG) || frag_offset != 0;
    if (frag_offset != 0) return DropReason::none;  // no L4 header in a later fragment
    out.l4_offset = static_cast<uint16_t>(out.l3_offset + ihl);
    out.l4_len = static_cast<uint16_t>(total - ihl);
    return parse_l4(data, out);
}

}  // namespace

DropReason parse_packet(const uint8_t* data, uint32_t len, ParsedPacket& out, RxChecksum ip_cksum) {
    out = ParsedPacket{};
    if (len < sizeof(rte_ether_hdr)) return DropReason::eth_truncated;
    uint32_t off = offsetof(rte_ether_hdr, ether_type);
    uint16_t type = load_be16(data + off);
    off += 2;
    while (type == kEtherTypeVlan || type == kEtherTypeQinQ) {
        if (out.vlan_count == 2) break;  // a third tag: leave it to the EtherType check
        if (len < off + sizeof(rte_vlan_hdr)) return DropReason::vlan_truncated;
        if (out.vlan_count++ == 0) out.vlan_id_host = load_be16(data + off) & 0x0fff;
        type = load_be16(data + off + 2);
        off += sizeof(rte_vlan_hdr);
    }
    out.ether_type_host = type;
    out.l3_offset = static_cast<uint16_t>(off);
    switch (type) {
    case kEtherTypeArp: return parse_arp(data, len, out);
    case kEtherTypeIpv4: return parse_ipv4(data, len, out, ip_cksum);
    default: return DropReason::none;  // the caller decides what it handles
    }
}

}  // namespace fedgate
