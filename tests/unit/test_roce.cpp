// RoCE v2 on the data plane without the EAL: the ICRC against published vectors and an independent
// CRC, the incremental update against full recomputation, and the MTU clamp.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "dataplane/roce.hpp"
#include "tests/support/packet_builder.hpp"

namespace fedgate {
namespace {

using test::PacketBuilder;

std::vector<uint8_t> from_hex(const std::string& h) {
    std::vector<uint8_t> out;
    for (std::size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<uint8_t>(std::stoi(h.substr(i, 2), nullptr, 16)));
    return out;
}

constexpr std::size_t kEth = 14;
uint32_t ip_len_of(const std::vector<uint8_t>& f) { return test::get16(f, kEth + 2); }
uint32_t wire_icrc(const std::vector<uint8_t>& f) { return icrc_load(&f[kEth + ip_len_of(f) - 4]); }
uint32_t full_icrc(const std::vector<uint8_t>& f) { return icrc_compute(&f[kEth], ip_len_of(f)); }

// scapy's test/contrib/roce.uts, "RoCE layer": a UC SEND_ONLY whose ICRC field reads 0x78f353f3
// (big-endian display of the little-endian stored CRC 0xf353f378). Bytes as scapy builds them.
TEST(Icrc, MatchesScapysPublishedVector) {
    const auto f = from_hex(
        "248a07a8fa22248a07a8fa22080045010040047840004011b4d5c0a80007c0a80007c00012b7002caca22460ffff000000d3"
        "00cf17104630818be28935d90e9a95505401be885e50000078f353f3");
    ASSERT_EQ(ip_len_of(f), 64u);
    EXPECT_EQ(full_icrc(f), 0xf353f378u);
    EXPECT_EQ(wire_icrc(f), 0xf353f378u);
}

// The same file's CNP captured from a ConnectX-4 Lx: real hardware's ICRC.
TEST(Icrc, MatchesACnpCapturedFromHardware) {
    const auto f = from_hex(std::string("e41d2dab2bc27cfe90643b32080045c2") + "003c718c4000401191610a0011010a00" +
                            "1201000012b7002800008100ffff4000" + "01180000000000000000000000000000" +
                            "00000000000082fd002a");
    ASSERT_EQ(f.size(), kEth + 60);
    EXPECT_EQ(f[kEth + 28], kOpCnp);
    EXPECT_EQ(full_icrc(f), icrc_load(&f[f.size() - 4]));
}

TEST(Icrc, BuilderAndDataPlaneAgree) {
    // The test builder's bitwise CRC is independent of rte_net_crc.
    for (std::size_t n : {0, 1, 3, 16, 100, 1024}) {
        const auto f = PacketBuilder()
                           .eth({2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 2})
                           .ipv4("198.18.0.10", "198.18.0.1")
                           .udp(49152, kRoceV2Port)
                           .udp_no_checksum()
                           .bth(0x04, 0x1234, 77)
                           .payload(n, 9)
                           .icrc()
                           .build();
        EXPECT_EQ(full_icrc(f), wire_icrc(f)) << n;
    }
}

TEST(Icrc, CarrylessAndPortableShiftAgree) {
    std::mt19937 rng(7);
    for (int i = 0; i < 2000; ++i) {
        const uint32_t d = rng();
        const uint32_t tail = rng() % (kIcrcMaxTail + 1);
        ASSERT_EQ(icrc_shift(d, tail), icrc_shift_portable(d, tail)) << d << " " << tail;
    }
    EXPECT_EQ(icrc_shift(0, 100), 0u);  // no change, nothing to xor
}

TEST(RdmaMtu, ClampsToWhatTheIpMtuCarries) {
    EXPECT_EQ(rdma_mtu_for_ip_mtu(1500), 1024);
    EXPECT_EQ(rdma_mtu_for_ip_mtu(9000), 4096);
    EXPECT_EQ(rdma_mtu_for_ip_mtu(1084), 1024);
    EXPECT_EQ(rdma_mtu_for_ip_mtu(1083), 512);
    EXPECT_EQ(rdma_mtu_for_ip_mtu(316), 256);
    EXPECT_EQ(rdma_mtu_for_ip_mtu(315), 0);
}

struct Rewrite {
    uint32_t old_src, old_dst, old_dqpn;
    RoceEntry e;
};

uint32_t be(const std::string& s) { return htonl(test::ip(s)); }

// A random RoCE v2 packet: RC opcodes and CNP, random ECN/DSCP, TTL, FECN/BECN, payload length.
std::vector<uint8_t> random_packet(std::mt19937& rng, std::size_t payload, uint32_t src, uint32_t dst, uint32_t dqpn,
                                   bool udp_checksum) {
    static const uint8_t ops[] = {0x00, 0x01, 0x02, 0x04, 0x06, 0x0a, 0x0c, 0x10, 0x11, 0x12, 0x13, 0x14, 0x17, kOpCnp};
    char s[16], d[16];
    in_addr a{src}, b{dst};
    inet_ntop(AF_INET, &a, s, sizeof s);
    inet_ntop(AF_INET, &b, d, sizeof d);
    PacketBuilder pb;
    pb.eth({2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 2})
        .ipv4(s, d, static_cast<uint8_t>(2 + rng() % 250), static_cast<uint16_t>(rng()))
        .udp(static_cast<uint16_t>(49152 + rng() % 16384), kRoceV2Port);
    if (!udp_checksum) pb.udp_no_checksum();
    pb.bth(ops[rng() % std::size(ops)], dqpn, rng() & kQpnMask, static_cast<uint8_t>(rng() & 0xc0), rng() & 1)
        .payload(payload, static_cast<uint8_t>(rng()))
        .icrc();
    auto f = pb.build();
    // DSCP/ECN after the checksums: fix the header checksum for it.
    f[kEth + 1] = static_cast<uint8_t>(rng());
    f[kEth + 10] = f[kEth + 11] = 0;
    const uint16_t c = test::inet_checksum(&f[kEth], 20);
    f[kEth + 10] = static_cast<uint8_t>(c >> 8), f[kEth + 11] = static_cast<uint8_t>(c);
    return f;
}

TEST(Icrc, IncrementalUpdateEqualsFullRecomputationForEveryLengthClass) {
    std::mt19937 rng(11);
    const std::size_t lengths[] = {0, 1, 2, 3, 4, 15, 16, 28, 63, 64, 255, 256, 1023, 1024, 1040, 2048, 4096, 4112, 9000};
    for (int round = 0; round < 40; ++round) {
        for (std::size_t n : lengths) {
            const uint32_t old_src = be("198.18.0.10"), old_dst = be("198.18.0.1");
            const uint32_t old_dqpn = rng() & kQpnMask;
            RoceEntry e;
            e.new_src = rng(), e.new_dst = rng(), e.new_dqpn = rng() & kQpnMask;
            roce_prepare(e, old_src, old_dst, old_dqpn);
            const bool with_udp_checksum = round % 2 == 1;
            auto f = random_packet(rng, n, old_src, old_dst, old_dqpn, with_udp_checksum);
            const std::vector<uint8_t> before = f;
            roce_rewrite(&f[kEth], ip_len_of(f), e);

            ASSERT_EQ(wire_icrc(f), full_icrc(f)) << "payload " << n;
            // Exactly the rewritten fields changed, DSCP/ECN kept, TTL one less.
            EXPECT_EQ(f[kEth + 1], before[kEth + 1]);
            EXPECT_EQ(f[kEth + 8], before[kEth + 8] - 1);
            EXPECT_EQ(test::get32(f, kEth + 12), ntohl(e.new_src));
            EXPECT_EQ(test::get32(f, kEth + 16), ntohl(e.new_dst));
            EXPECT_EQ(bth_dqpn(&f[kEth + 28]), e.new_dqpn);
            EXPECT_EQ(f[kEth + 32], before[kEth + 32]);  // FECN/BECN byte
            EXPECT_TRUE(std::equal(f.begin() + kEth + 36, f.end() - 4, before.begin() + kEth + 36));
            EXPECT_EQ(test::inet_checksum(&f[kEth], 20), 0) << "IPv4 header checksum";
            if (with_udp_checksum) {
                const std::size_t udp_len = ip_len_of(f) - 20;
                EXPECT_EQ(test::inet_checksum(&f[kEth + 20], udp_len, PacketBuilder::pseudo_sum(f, kEth, udp_len)), 0);
            } else {
                EXPECT_EQ(test::get16(f, kEth + 26), 0);
            }
        }
    }
}

TEST(Icrc, ACorruptPacketStaysCorruptByTheSameBits) {
    std::mt19937 rng(5);
    for (std::size_t n : {0, 8, 1024, 4096}) {
        const uint32_t old_src = be("198.18.0.10"), old_dst = be("198.18.0.1");
        RoceEntry e;
        e.new_src = be("198.18.1.1"), e.new_dst = be("198.18.2.1"), e.new_dqpn = 0x00abcd;
        roce_prepare(e, old_src, old_dst, 0x000102);
        auto f = random_packet(rng, n + 4, old_src, old_dst, 0x000102, false);
        f[kEth + 40 + rng() % (n + 4)] ^= static_cast<uint8_t>(1u << (rng() % 8));  // a payload bit flips on the way
        const uint32_t error_before = wire_icrc(f) ^ full_icrc(f);
        ASSERT_NE(error_before, 0u);
        roce_rewrite(&f[kEth], ip_len_of(f), e);
        EXPECT_EQ(wire_icrc(f) ^ full_icrc(f), error_before) << "payload " << n;
    }
}

}  // namespace
}  // namespace fedgate
