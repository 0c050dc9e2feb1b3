// Packet parser: every layer it reads, and every way a packet can be cut short or malformed.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "dataplane/packet.hpp"
#include "tests/support/packet_builder.hpp"

namespace fedgate {
namespace {

using test::PacketBuilder;
const test::Mac kA{0x02, 0, 0, 0, 0, 0x0a};
const test::Mac kB{0x02, 0, 0, 0, 0, 0x0b};

DropReason parse(const std::vector<uint8_t>& b, ParsedPacket& p) {
    // Copy into an exact-size heap buffer so ASan catches any read past the end.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[b.size() ? b.size() : 1]);
    if (!b.empty()) std::memcpy(exact.get(), b.data(), b.size());
    return parse_packet(exact.get(), static_cast<uint32_t>(b.size()), p);
}
DropReason parse(const std::vector<uint8_t>& b) {
    ParsedPacket p;
    return parse(b, p);
}

TEST(PacketParse, UdpOverIpv4ReadsAddressesPortsAndPayload) {
    const auto b = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").udp(4000, 53).payload(10).build();
    ParsedPacket p;
    ASSERT_EQ(parse(b, p), DropReason::none);
    EXPECT_EQ(p.ether_type_host, kEtherTypeIpv4);
    EXPECT_EQ(p.l3_offset, 14);
    EXPECT_EQ(p.l3_len, 20 + 8 + 10);
    EXPECT_EQ(p.l4_offset, 34);
    EXPECT_EQ(p.ip_proto, kIpProtoUdp);
    EXPECT_EQ(ntohl(p.src_ip), test::ip("198.18.1.10"));
    EXPECT_EQ(ntohl(p.dst_ip), test::ip("198.18.1.1"));
    EXPECT_EQ(ntohs(p.src_port), 4000);
    EXPECT_EQ(ntohs(p.dst_port), 53);
    EXPECT_EQ(p.payload_offset, 42);
    EXPECT_EQ(p.payload_len, 10);
    EXPECT_FALSE(p.fragment);
}

TEST(PacketParse, TcpHeaderWithOptionsPutsPayloadAfterThem) {
    auto b = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.2.10").tcp(1234, 80).payload(12).build();
    b[34 + 12] = 8 << 4;  // data offset 32 bytes: 12 option bytes, which the payload now stands in for
    b[24] = b[25] = 0;    // checksum refilled below
    const uint16_t c = test::inet_checksum(&b[14], 20);
    b[24] = static_cast<uint8_t>(c >> 8), b[25] = static_cast<uint8_t>(c);
    ParsedPacket p;
    ASSERT_EQ(parse(b, p), DropReason::none);
    EXPECT_EQ(p.ip_proto, kIpProtoTcp);
    EXPECT_EQ(p.payload_offset, 34 + 32);
    EXPECT_EQ(p.payload_len, 0);
    EXPECT_EQ(ntohs(p.dst_port), 80);
}

TEST(PacketParse, IcmpEchoReadsTypeAndCode) {
    const auto b = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").icmp(8, 0, 7, 1).payload(56).build();
    ParsedPacket p;
    ASSERT_EQ(parse(b, p), DropReason::none);
    EXPECT_EQ(p.icmp_type, 8);
    EXPECT_EQ(p.icmp_code, 0);
    EXPECT_EQ(p.l4_len, 64);
}

TEST(PacketParse, ArpRequestReadsOpAndAddresses) {
    const auto b = PacketBuilder().eth(test::kBroadcast, kB).arp(1, kB, "198.18.1.10", {}, "198.18.1.1").build();
    ParsedPacket p;
    ASSERT_EQ(parse(b, p), DropReason::none);
    EXPECT_EQ(p.ether_type_host, kEtherTypeArp);
    EXPECT_EQ(p.arp_op_host, 1);
    EXPECT_EQ(ntohl(p.src_ip), test::ip("198.18.1.10"));
    EXPECT_EQ(ntohl(p.dst_ip), test::ip("198.18.1.1"));
}

TEST(PacketParse, VlanAndQinQTagsAreSkippedAndCounted) {
    ParsedPacket p;
    auto one = PacketBuilder().eth(kA, kB).vlan(100).ipv4("198.18.1.10", "198.18.1.1").udp(1, 2).build();
    ASSERT_EQ(parse(one, p), DropReason::none);
    EXPECT_EQ(p.vlan_count, 1);
    EXPECT_EQ(p.vlan_id_host, 100);
    EXPECT_EQ(p.l3_offset, 18);
    EXPECT_EQ(ntohs(p.dst_port), 2);
    auto two = PacketBuilder().eth(kA, kB).vlan(7).vlan(9).ipv4("198.18.1.10", "198.18.1.1").udp(1, 2).build();
    two[12] = 0x88, two[13] = 0xa8;  // outer tag as 802.1ad
    ASSERT_EQ(parse(two, p), DropReason::none);
    EXPECT_EQ(p.vlan_count, 2);
    EXPECT_EQ(p.vlan_id_host, 7);
    EXPECT_EQ(p.l3_offset, 22);
}

TEST(PacketParse, AProtocolWithoutAParserIsAllPayload) {
    const auto b = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").payload(12).ip_proto(47).build();
    ParsedPacket p;
    ASSERT_EQ(parse(b, p), DropReason::none);
    EXPECT_EQ(p.ip_proto, 47);
    EXPECT_EQ(p.payload_offset, 34);
    EXPECT_EQ(p.payload_len, 12);
}

TEST(PacketParse, UnknownEtherTypeIsLeftToTheCaller) {
    auto b = PacketBuilder().eth(kA, kB).payload(40).build();
    b[12] = 0x86, b[13] = 0xdd;
    ParsedPacket p;
    ASSERT_EQ(parse(b, p), DropReason::none);
    EXPECT_EQ(p.ether_type_host, 0x86dd);
}

TEST(PacketParse, EthernetPaddingAfterIpv4IsAllowed) {
    auto b = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").udp(1, 2).build();
    b.resize(60, 0);
    ParsedPacket p;
    ASSERT_EQ(parse(b, p), DropReason::none);
    EXPECT_EQ(p.l3_len, 28);
    EXPECT_EQ(p.payload_len, 0);
}

TEST(PacketParse, FragmentsAreFlaggedAndLaterOnesHaveNoL4) {
    ParsedPacket p;
    const auto first = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").fragment(true, 0).udp(1, 2).payload(16).build();
    ASSERT_EQ(parse(first, p), DropReason::none);
    EXPECT_TRUE(p.fragment);
    EXPECT_EQ(p.l4_offset, 34);
    const auto later = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").fragment(false, 3).ip_proto(17).payload(16).build();
    ASSERT_EQ(parse(later, p), DropReason::none);
    EXPECT_TRUE(p.fragment);
    EXPECT_EQ(p.l4_offset, 0);
}

// Every prefix of a good packet must be rejected with the reason of the layer it cuts into.
TEST(PacketParse, EveryTruncationIsDroppedWithTheLayersReason) {
    const auto udp = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").udp(1, 2).payload(4).build();
    for (std::size_t n = 0; n < udp.size(); ++n) {
        const std::vector<uint8_t> cut(udp.begin(), udp.begin() + static_cast<long>(n));
        const DropReason want = n < 14 ? DropReason::eth_truncated
                              : n < 34 ? DropReason::ipv4_truncated
                                       : DropReason::ipv4_bad_length;  // total length now exceeds the frame
        EXPECT_EQ(parse(cut), want) << "length " << n;
    }
    const auto arp = PacketBuilder().eth(test::kBroadcast, kB).arp(1, kB, "198.18.1.10", {}, "198.18.1.1").build();
    for (std::size_t n = 14; n < arp.size(); ++n)
        EXPECT_EQ(parse({arp.begin(), arp.begin() + static_cast<long>(n)}), DropReason::arp_malformed) << n;
    const auto tagged = PacketBuilder().eth(kA, kB).vlan(5).ipv4("198.18.1.10", "198.18.1.1").build();
    for (std::size_t n = 14; n < 18; ++n)
        EXPECT_EQ(parse({tagged.begin(), tagged.begin() + static_cast<long>(n)}), DropReason::vlan_truncated) << n;
}

// L4 headers cut short inside a consistent IPv4 packet (total length agrees with the frame).
TEST(PacketParse, ShortL4HeadersHaveTheirOwnReasons) {
    const auto icmp = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").payload(7).ip_proto(1).build();
    EXPECT_EQ(parse(icmp), DropReason::icmp_truncated);
    const auto udp = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").payload(7).ip_proto(17).build();
    EXPECT_EQ(parse(udp), DropReason::udp_truncated);
    const auto tcp = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").payload(19).ip_proto(6).build();
    EXPECT_EQ(parse(tcp), DropReason::tcp_truncated);
}

std::vector<uint8_t> with_ip_byte(std::size_t off, uint8_t v, bool fix_checksum = true) {
    auto b = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").udp(1, 2).payload(8).build();
    b[14 + off] = v;
    if (fix_checksum) {
        b[24] = b[25] = 0;
        const uint16_t c = test::inet_checksum(&b[14], 20);
        b[24] = static_cast<uint8_t>(c >> 8), b[25] = static_cast<uint8_t>(c);
    }
    return b;
}

TEST(PacketParse, MalformedIpv4HeadersAreDroppedWithTheRightReason) {
    EXPECT_EQ(parse(with_ip_byte(0, 0x65)), DropReason::ipv4_bad_version);
    EXPECT_EQ(parse(with_ip_byte(0, 0x44)), DropReason::ipv4_bad_ihl);
    EXPECT_EQ(parse(with_ip_byte(0, 0x4f)), DropReason::ipv4_truncated);    // 60-byte header in a 50-byte packet
    EXPECT_EQ(parse(with_ip_byte(2, 0x01)), DropReason::ipv4_bad_length);   // total length 256+ > frame
    EXPECT_EQ(parse(with_ip_byte(3, 10)), DropReason::ipv4_bad_length);     // total length < header
    EXPECT_EQ(parse(with_ip_byte(8, 1, false)), DropReason::ipv4_bad_checksum);
}

TEST(PacketParse, APortsVerdictOnTheIpv4ChecksumIsTrustedOtherwiseItIsSummed) {
    const auto good = with_ip_byte(8, 1);        // checksum right
    const auto bad = with_ip_byte(8, 1, false);  // checksum wrong
    ParsedPacket p;
    EXPECT_EQ(parse_packet(good.data(), static_cast<uint32_t>(good.size()), p, RxChecksum::unknown), DropReason::none);
    EXPECT_EQ(parse_packet(bad.data(), static_cast<uint32_t>(bad.size()), p, RxChecksum::unknown),
              DropReason::ipv4_bad_checksum);
    // The port checked it: its word stands, whatever the bytes say.
    EXPECT_EQ(parse_packet(bad.data(), static_cast<uint32_t>(bad.size()), p, RxChecksum::good), DropReason::none);
    EXPECT_EQ(parse_packet(good.data(), static_cast<uint32_t>(good.size()), p, RxChecksum::bad),
              DropReason::ipv4_bad_checksum);
    // Only IPv4 has a header checksum: an ARP is not dropped for a port's IPv4 verdict.
    const auto arp = PacketBuilder().eth(test::kBroadcast, kB).arp(1, kB, "198.18.1.10", {}, "198.18.1.1").build();
    EXPECT_EQ(parse_packet(arp.data(), static_cast<uint32_t>(arp.size()), p, RxChecksum::bad), DropReason::none);
}

TEST(PacketParse, MalformedL4HeadersAreDroppedWithTheRightReason) {
    auto udp = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").udp(1, 2).payload(8).build();
    udp[34 + 5] = 7;  // UDP length 7 < 8
    EXPECT_EQ(parse(udp), DropReason::udp_bad_length);
    udp[34 + 5] = 20;  // 20 != 16 bytes of UDP
    EXPECT_EQ(parse(udp), DropReason::udp_bad_length);
    auto tcp = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").tcp(1, 2).build();
    tcp[34 + 12] = 4 << 4;  // data offset 16 bytes
    EXPECT_EQ(parse(tcp), DropReason::tcp_bad_header);
    tcp[34 + 12] = 6 << 4;  // 24 bytes, past the 20 there are
    EXPECT_EQ(parse(tcp), DropReason::tcp_bad_header);
}

TEST(PacketParse, ArpThatIsNotEthernetIpv4OrHasAnOddOpIsDropped) {
    auto b = PacketBuilder().eth(test::kBroadcast, kB).arp(1, kB, "198.18.1.10", {}, "198.18.1.1").build();
    auto bad_htype = b;
    bad_htype[15] = 6;
    EXPECT_EQ(parse(bad_htype), DropReason::arp_malformed);
    auto bad_plen = b;
    bad_plen[19] = 16;
    EXPECT_EQ(parse(bad_plen), DropReason::arp_malformed);
    auto rarp = PacketBuilder().eth(test::kBroadcast, kB).arp(3, kB, "198.18.1.10", {}, "198.18.1.1").build();
    EXPECT_EQ(parse(rarp), DropReason::arp_unsupported_op);
}

// ---- parse_fast: the established-flow path's parser ---------------------------------------------

// parse_fast() on an exact-size copy (ASan sees any read past the end).
bool parse_fast_exact(const std::vector<uint8_t>& b, FastPacket& f, RxChecksum c = RxChecksum::unknown) {
    std::unique_ptr<uint8_t[]> exact(new uint8_t[b.size() ? b.size() : 1]);
    if (!b.empty()) std::memcpy(exact.get(), b.data(), b.size());
    return parse_fast(exact.get(), static_cast<uint32_t>(b.size()), c, f);
}

// What parse_fast must agree with: parse_packet's verdict on the frame, narrowed to its one shape.
bool full_parse_takes(const std::vector<uint8_t>& b, RxChecksum c, ParsedPacket& p) {
    return parse_packet(b.data(), static_cast<uint32_t>(b.size()), p, c) == DropReason::none &&
           p.ether_type_host == kEtherTypeIpv4 && p.vlan_count == 0 && p.l3_offset == 14 && p.l4_offset == 34 &&
           !p.fragment && (p.ip_proto == kIpProtoTcp || p.ip_proto == kIpProtoUdp);
}

testing::AssertionResult agree(const std::vector<uint8_t>& b, RxChecksum c) {
    FastPacket f;
    ParsedPacket p;
    const bool fast = parse_fast_exact(b, f, c), full = full_parse_takes(b, c, p);
    if (fast != full) return testing::AssertionFailure() << "parse_fast " << fast << ", parse_packet's shape " << full;
    if (fast && (f.src_ip != p.src_ip || f.dst_ip != p.dst_ip || f.src_port != p.src_port || f.dst_port != p.dst_port ||
                 f.ip_proto != p.ip_proto))
        return testing::AssertionFailure() << "parse_fast read other addresses, ports or protocol";
    if (fast && p.ip_proto == kIpProtoTcp &&
        (f.tcp_flags != b[34 + 13] || f.tcp_hlen != p.payload_offset - p.l4_offset))
        return testing::AssertionFailure() << "parse_fast read other TCP flags or header length";
    if (fast) {
        // What the service path hands on instead of a second parse: every field parse_packet set.
        const ParsedPacket q = parsed_of_fast(b.data(), f);
        const auto fields = [](const ParsedPacket& x) {
            return std::tuple(x.ether_type_host, x.vlan_count, x.vlan_id_host, x.l3_offset, x.l3_len, x.l4_offset,
                              x.l4_len, x.payload_offset, x.payload_len, x.ip_proto, x.fragment, x.src_ip, x.dst_ip,
                              x.src_port, x.dst_port, x.icmp_type, x.icmp_code, x.arp_op_host);
        };
        if (fields(q) != fields(p)) return testing::AssertionFailure() << "parsed_of_fast differs from parse_packet";
    }
    return testing::AssertionSuccess();
}

TEST(PacketParseFast, TakesPlainTcpAndUdpWithTheirFlagsAndHeaderLength) {
    const auto tcp = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").tcp(1234, 80, 0x12).payload(5).build();
    FastPacket f;
    ASSERT_TRUE(parse_fast_exact(tcp, f));
    EXPECT_EQ(ntohl(f.src_ip), test::ip("198.18.1.10"));
    EXPECT_EQ(ntohl(f.dst_ip), test::ip("198.18.1.1"));
    EXPECT_EQ(ntohs(f.src_port), 1234);
    EXPECT_EQ(ntohs(f.dst_port), 80);
    EXPECT_EQ(f.ip_proto, kIpProtoTcp);
    EXPECT_EQ(f.tcp_flags, 0x12);
    EXPECT_EQ(f.tcp_hlen, 20);
    auto padded = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").udp(4000, 53).build();
    padded.resize(60, 0);  // Ethernet padding
    ASSERT_TRUE(parse_fast_exact(padded, f));
    EXPECT_EQ(f.ip_proto, kIpProtoUdp);
    EXPECT_EQ(f.tcp_flags, 0);
    EXPECT_EQ(f.tcp_hlen, 0);
    EXPECT_TRUE(agree(tcp, RxChecksum::unknown));
    EXPECT_TRUE(agree(padded, RxChecksum::unknown));
}

TEST(PacketParseFast, LeavesEveryOtherShapeToTheFullParser) {
    const auto udp = PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").udp(4000, 53).payload(4).build();
    const std::vector<std::pair<std::string, std::vector<uint8_t>>> others = {
        {"VLAN tag", PacketBuilder().eth(kA, kB).vlan(7).ipv4("198.18.1.10", "198.18.1.1").udp(4000, 53).build()},
        {"ARP", PacketBuilder().eth(test::kBroadcast, kB).arp(1, kB, "198.18.1.10", {}, "198.18.1.1").build()},
        {"ICMP", PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").icmp(8, 0, 1, 1).payload(8).build()},
        {"first fragment", PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").fragment(true, 0).udp(1, 2).payload(16).build()},
        {"later fragment", PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").fragment(false, 3).udp(1, 2).build()},
        {"cut short", std::vector<uint8_t>(udp.begin(), udp.end() - 1)},
        {"empty", {}},
    };
    FastPacket f;
    for (const auto& [what, b] : others) {
        EXPECT_FALSE(parse_fast_exact(b, f)) << what;
        EXPECT_TRUE(agree(b, RxChecksum::unknown)) << what;
    }
    auto bad_sum = udp;
    bad_sum[14 + 10] ^= 1;
    EXPECT_FALSE(parse_fast_exact(bad_sum, f));
    EXPECT_TRUE(parse_fast_exact(bad_sum, f, RxChecksum::good)) << "the port's verdict stands";
    EXPECT_FALSE(parse_fast_exact(udp, f, RxChecksum::bad));
    auto udp_len = udp;
    udp_len[34 + 5] ^= 1;
    EXPECT_FALSE(parse_fast_exact(udp_len, f));
}

// Both ways, on frames the fuzzer would make: random bytes flipped in valid frames (the headers'
// fields, the sums, the lengths), random lengths, every RX checksum verdict. parse_fast takes a
// frame exactly when parse_packet takes it with the fast shape, and reads the same fields.
TEST(PacketParseFast, AgreesWithTheFullParserOnEveryMutatedFrame) {
    std::mt19937 rng(20261203);
    const std::vector<std::vector<uint8_t>> seeds = {
        PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").tcp(1234, 80, 0x10).build(),
        PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").tcp(1234, 80, 0x18).payload(30).build(),
        PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").udp(4000, 53).payload(12).build(),
        PacketBuilder().eth(kA, kB).ipv4("198.18.1.10", "198.18.1.1").udp(4000, 53).build(),
    };
    const RxChecksum verdicts[] = {RxChecksum::unknown, RxChecksum::good, RxChecksum::bad};
    int taken = 0;
    for (int i = 0; i < 200000; ++i) {
        std::vector<uint8_t> b = seeds[rng() % seeds.size()];
        const int flips = static_cast<int>(rng() % 3);
        for (int k = 0; k < flips; ++k) {
            // Mostly the 54 header bytes; a flip anywhere in a byte's bits.
            const std::size_t at = rng() % std::min<std::size_t>(b.size(), rng() % 4 == 0 ? b.size() : 54);
            b[at] = static_cast<uint8_t>(rng() % 2 ? b[at] ^ (1u << (rng() % 8)) : rng());
        }
        if (rng() % 8 == 0) b.resize(rng() % (b.size() + 8), 0);
        const RxChecksum c = verdicts[rng() % 3];
        ASSERT_TRUE(agree(b, c)) << "mutation " << i;
        FastPacket f;
        taken += parse_fast_exact(b, f, c);
    }
    EXPECT_GT(taken, 10000) << "too few mutated frames kept the fast shape to test the agreement";
}

TEST(PacketParse, EveryDropReasonHasANameAndHelp) {
    for (std::size_t i = 0; i < kDropReasonCount; ++i) {
        EXPECT_FALSE(kDropReasonNames[i].empty());
        EXPECT_FALSE(kDropReasonHelp[i].empty());
    }
    EXPECT_EQ(drop_reason_name(DropReason::tx_full), "tx_full");
    EXPECT_EQ(drop_reason_name(DropReason::none), "none");
}

}  // namespace
}  // namespace fedgate
