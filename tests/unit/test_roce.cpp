// RoCE v2 on the data plane without the EAL: the ICRC against published vectors and an independent
// CRC, the incremental update against full recomputation, and the MTU clamp.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
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

TEST(Icrc, OneEntryStaysRightAcrossChangingLengths) {
    // The entry remembers the last length's shift: a new length must not reuse it.
    std::mt19937 rng(9);
    const uint32_t old_src = be("198.18.0.10"), old_dst = be("198.18.0.1");
    RoceEntry e;
    e.new_src = be("198.19.0.1"), e.new_dst = be("198.19.0.2"), e.new_dqpn = 0x777;
    roce_prepare(e, old_src, old_dst, 0x4000);
    for (std::size_t n : {64, 64, 1024, 4, 4, 1024, 0, 64}) {
        auto f = random_packet(rng, n, old_src, old_dst, 0x4000, false);
        roce_rewrite(&f[kEth], ip_len_of(f), e);
        ASSERT_EQ(wire_icrc(f), full_icrc(f)) << "payload " << n;
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

// ---- the translation table and its virtual QPNs --------------------------------------------------

#include "controlplane/roce_translations.hpp"

namespace fedgate {
namespace {

std::vector<DpPortConfig> two_ports() {
    DpPortConfig in, ex;
    in.port_id = 0, in.role = PortRole::internal, in.addr = htonl(test::ip("198.18.1.1")), in.prefix_len = 24;
    ex.port_id = 1, ex.role = PortRole::external, ex.addr = htonl(test::ip("198.19.0.1")), ex.prefix_len = 24;
    return {in, ex};
}

struct TableTest : ::testing::Test {
    int syncs = 0;
    RoceTranslations t{4, two_ports(), [this] { ++syncs; }};

    RoceConn conn(uint64_t id, uint32_t vi, uint32_t ve) {
        RoceConn c;
        c.conn_id = id;
        c.initiator = c.local = ProcessId::make(1, 3, 100);
        c.target = c.remote = ProcessId::make(2, 7, 42);
        c.peer_party = 2;
        c.node_addr = test::ip("198.18.1.3");
        c.node_qpn = 0x123;
        c.peer_addr = test::ip("198.19.0.2");
        c.peer_vqpn = 0x777;
        c.internal_vqpn = vi;
        c.external_vqpn = ve;
        return c;
    }
};

TEST_F(TableTest, ReservesDistinctValidQpnsUntilExhaustedAndCountsIt) {
    std::set<uint32_t> got;
    for (int i = 0; i < 4; ++i) {
        const auto q = t.reserve(RoceSide::internal);
        ASSERT_TRUE(q);
        EXPECT_NE(*q, 0u);
        EXPECT_NE(*q, 1u);
        EXPECT_LE(*q, kQpnMask);
        got.insert(*q);
    }
    EXPECT_EQ(got.size(), 4u);
    EXPECT_FALSE(t.reserve(RoceSide::internal));
    EXPECT_EQ(t.counters().exhausted, 1u);
    EXPECT_TRUE(t.reserve(RoceSide::external));  // each side has its own space
}

TEST_F(TableTest, NeverHandsOutAValueStillInUseAndReusesFreedOnesLate) {
    std::mt19937 rng(3);
    std::set<uint32_t> in_use;
    std::map<uint32_t, int> handed;
    for (int i = 0; i < 2000; ++i) {
        if (in_use.size() < 4 && (in_use.empty() || rng() % 2 == 0)) {
            const auto q = t.reserve(RoceSide::internal);
            ASSERT_TRUE(q);
            ASSERT_EQ(in_use.count(*q), 0u) << "handed out twice: " << *q;
            in_use.insert(*q);
            ++handed[*q];
        } else {
            auto it = in_use.begin();
            std::advance(it, rng() % in_use.size());
            t.release(RoceSide::internal, *it);
            in_use.erase(it);
        }
    }
    // A released value does not come straight back: generations move on.
    const auto q = t.reserve(RoceSide::internal);
    ASSERT_TRUE(q);
    t.release(RoceSide::internal, *q);
    const auto r = t.reserve(RoceSide::internal);
    ASSERT_TRUE(r);
    EXPECT_NE(*q, *r);
}

TEST_F(TableTest, InstallPublishesBothDirectionsAndRemovalWaitsForAGracePeriod) {
    const uint32_t vi = *t.reserve(RoceSide::internal), ve = *t.reserve(RoceSide::external);
    ASSERT_TRUE(t.install(conn(9, vi, ve), 0));
    const RoceView& v = t.view();
    const RoceEntry* to_peer = v.find(RoceSide::internal, vi);
    ASSERT_NE(to_peer, nullptr);
    EXPECT_EQ(to_peer->expect_src, htonl(test::ip("198.18.1.3")));
    EXPECT_EQ(to_peer->new_src, htonl(test::ip("198.19.0.1")));
    EXPECT_EQ(to_peer->new_dst, htonl(test::ip("198.19.0.2")));
    EXPECT_EQ(to_peer->new_dqpn, 0x777u);
    EXPECT_EQ(to_peer->out_port, 1);
    const RoceEntry* from_peer = v.find(RoceSide::external, ve);
    ASSERT_NE(from_peer, nullptr);
    EXPECT_EQ(from_peer->expect_src, htonl(test::ip("198.19.0.2")));
    EXPECT_EQ(from_peer->new_src, htonl(test::ip("198.18.1.1")));
    EXPECT_EQ(from_peer->new_dst, htonl(test::ip("198.18.1.3")));
    EXPECT_EQ(from_peer->new_dqpn, 0x123u);
    EXPECT_EQ(from_peer->out_port, 0);
    const auto listed = t.list(10, 0);
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0]["node"], "198.18.1.3");
    EXPECT_EQ(listed[0]["internal_vqpn"], vi);
    EXPECT_EQ(listed[0]["peer_vqpn"], 0x777);

    EXPECT_EQ(t.remove_process(ProcessId::make(2, 7, 42)), 1u);  // the remote process left
    EXPECT_EQ(v.find(RoceSide::internal, vi), nullptr);
    EXPECT_EQ(v.find(RoceSide::external, ve), nullptr);
    EXPECT_EQ(t.size(), 0u);
    // The slots come back only after the lcore passed a quiescent state.
    EXPECT_EQ(syncs, 0);
    t.tick(1, 0);
    EXPECT_EQ(syncs, 1);
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(t.reserve(RoceSide::internal));
}

TEST_F(TableTest, IdleTranslationsGoAndBusyOnesStay) {
    const uint32_t vi = *t.reserve(RoceSide::internal), ve = *t.reserve(RoceSide::external);
    const uint32_t wi = *t.reserve(RoceSide::internal), we = *t.reserve(RoceSide::external);
    ASSERT_TRUE(t.install(conn(1, vi, ve), 0));
    ASSERT_TRUE(t.install(conn(2, wi, we), 0));
    t.view().find(RoceSide::external, we)->packets.add();  // connection 2 carries a packet
    t.tick(500, 1000);
    EXPECT_EQ(t.size(), 2u);
    t.tick(1000, 1000);
    EXPECT_EQ(t.size(), 1u);  // connection 1: no packet for 1000 ms
    EXPECT_EQ(t.counters().removed_idle, 1u);
    EXPECT_NE(t.view().find(RoceSide::internal, wi), nullptr);
    EXPECT_EQ(t.remove_peer(2), 1u);
    EXPECT_EQ(t.size(), 0u);
}

TEST_F(TableTest, InstallRefusesQpnsItDidNotReserve) {
    EXPECT_FALSE(t.install(conn(1, 0x1234, 0x2345), 0));
    EXPECT_EQ(t.counters().install_failed, 1u);
}

}  // namespace
}  // namespace fedgate
