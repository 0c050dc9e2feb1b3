// libFuzzer target: the packet parser must never read outside the frame, and what it reports for a
// good packet must lie inside the frame. A UDP packet to port 4791 that roce_check accepts is then
// translated as the lcore would: roce_rewrite stays inside the frame and leaves the ICRC exactly as
// right or as wrong as it was (the incremental update never re-blesses a packet). parse_fast, the
// established-flow path's parser, takes a frame exactly when parse_packet takes it with its shape
// (untagged IPv4, 20-byte header, not a fragment, TCP or UDP) and reads the same flow from it.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "dataplane/packet.hpp"
#include "dataplane/roce.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 65535) return 0;
    // An exact-size copy, so ASan flags any read past the end.
    std::unique_ptr<uint8_t[]> buf(new uint8_t[size]);
    std::memcpy(buf.get(), data, size);
    fedgate::ParsedPacket p;
    const bool parsed = fedgate::parse_packet(buf.get(), static_cast<uint32_t>(size), p) == fedgate::DropReason::none;
    fedgate::FastPacket f;
    const bool fast = fedgate::parse_fast(buf.get(), static_cast<uint32_t>(size), fedgate::RxChecksum::unknown, f);
    const bool fast_shape = parsed && p.ether_type_host == fedgate::kEtherTypeIpv4 && p.vlan_count == 0 &&
                            p.l4_offset == 34 && !p.fragment &&
                            (p.ip_proto == fedgate::kIpProtoTcp || p.ip_proto == fedgate::kIpProtoUdp);
    if (fast != fast_shape) std::abort();
    if (fast && (f.src_ip != p.src_ip || f.dst_ip != p.dst_ip || f.src_port != p.src_port || f.dst_port != p.dst_port ||
                 f.ip_proto != p.ip_proto ||
                 (p.ip_proto == fedgate::kIpProtoTcp && f.tcp_hlen != p.payload_offset - p.l4_offset)))
        std::abort();
    if (!parsed) return 0;
    const auto in_frame = [&](uint32_t off, uint32_t len) { return off + len <= size; };
    if (!in_frame(p.l3_offset, 0)) std::abort();
    if (p.ether_type_host == 0x0800 || p.ether_type_host == 0x0806) {
        if (!in_frame(p.l3_offset, p.l3_len)) std::abort();
    }
    if (p.l4_offset != 0) {
        if (!in_frame(p.l4_offset, p.l4_len) || p.l4_offset < p.l3_offset + 20) std::abort();
        if (p.payload_offset < p.l4_offset || !in_frame(p.payload_offset, p.payload_len)) std::abort();
        if (p.payload_offset + p.payload_len != p.l4_offset + p.l4_len) std::abort();
    }
    if (p.ip_proto == fedgate::kIpProtoUdp && p.dst_port == __builtin_bswap16(fedgate::kRoceV2Port) &&
        fedgate::roce_check(buf.get(), static_cast<uint32_t>(size), p) == fedgate::DropReason::none) {
        uint8_t* ip = buf.get() + p.l3_offset;
        const uint32_t ip_len = p.l3_len;
        if (ip[8] <= 1) return 0;  // the lcore drops it (ttl_expired)
        const uint32_t before = fedgate::icrc_load(ip + ip_len - 4) ^ fedgate::icrc_compute(ip, ip_len);
        fedgate::RoceEntry e;
        e.new_src = 0x0a0112c6, e.new_dst = 0x020013c6, e.new_dqpn = 0x777;  // 198.18.1.10, 198.19.0.2
        uint32_t src, dst;
        std::memcpy(&src, ip + 12, 4);
        std::memcpy(&dst, ip + 16, 4);
        fedgate::roce_prepare(e, src, dst, fedgate::bth_dqpn(ip + 28));
        fedgate::roce_rewrite(ip, ip_len, e);
        const uint32_t after = fedgate::icrc_load(ip + ip_len - 4) ^ fedgate::icrc_compute(ip, ip_len);
        if (before != after) std::abort();
    }
    return 0;
}
