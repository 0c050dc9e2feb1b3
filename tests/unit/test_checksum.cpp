// Incremental checksum update agrees with a full recomputation by the test builder's own routine.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>

#include <rte_ip.h>

#include "dataplane/checksum.hpp"
#include "dataplane/dataplane.hpp"
#include "proto/resolve_wire.hpp"
#include "tests/support/packet_builder.hpp"

namespace fedgate {
namespace {

TEST(Checksum, AdjustAgreesWithFullRecomputationForRandomEdits) {
    std::mt19937 rng(7);
    for (int round = 0; round < 2000; ++round) {
        std::vector<uint8_t> data(2 * (1 + rng() % 40));
        for (auto& b : data) b = static_cast<uint8_t>(rng());
        const uint16_t before = test::inet_checksum(data.data(), data.size());
        const std::size_t w = 2 * (rng() % (data.size() / 2));
        const uint16_t old_word = static_cast<uint16_t>(data[w] << 8 | data[w + 1]);
        const uint16_t new_word = static_cast<uint16_t>(rng());
        data[w] = static_cast<uint8_t>(new_word >> 8), data[w + 1] = static_cast<uint8_t>(new_word);
        EXPECT_EQ(checksum_adjust(before, old_word, new_word), test::inet_checksum(data.data(), data.size()))
            << "round " << round;
    }
}

// raw_sum folds to DPDK's rte_raw_cksum (16 bits at a time) on every length,
// odd ones and zero included, at every alignment, on random bytes and on the extremes.
TEST(Checksum, RawSumFoldsToDpdksSumOnEveryLengthAndAlignment) {
    std::mt19937 rng(7);
    std::vector<uint8_t> buf(160);
    for (int fill = 0; fill < 3; ++fill) {
        for (auto& b : buf) b = fill == 0 ? static_cast<uint8_t>(rng()) : fill == 1 ? 0xff : 0x00;
        for (std::size_t off = 0; off < 4; ++off)
            for (std::size_t len = 0; len + off <= buf.size(); ++len)
                ASSERT_EQ(fold_sum(raw_sum(buf.data() + off, len)), rte_raw_cksum(buf.data() + off, len))
                    << "fill " << fill << ", offset " << off << ", length " << len;
    }
}

// raw_sum_fixed<N> (a chain of 64-bit adds with carry on x86-64) folds to DPDK's sum for its two
// lengths, at every alignment, on random bytes, on all ones (every add carries, the case that needs
// the carry added back) and all zeros, and on spans whose sum folds to all ones exactly (the
// checksum filled in), which sums_to_ones() must take, and the same spans with one bit flipped,
// which it must not.
template <std::size_t N>
static void expect_fixed_sum_matches_dpdk() {
    std::mt19937 rng(11);
    std::array<uint8_t, N + 8> buf{};
    for (int round = 0; round < 3000; ++round) {
        for (auto& b : buf) b = round == 0 ? 0xff : round == 1 ? 0x00 : static_cast<uint8_t>(rng());
        for (std::size_t off = 0; off < 8; ++off) {
            uint8_t* const p = buf.data() + off;
            ASSERT_EQ(fold_sum(raw_sum_fixed<N>(p)), rte_raw_cksum(p, N)) << "N " << N << ", round " << round << ", offset " << off;
            // Bytes 10-11 as the checksum field (where an IPv4 header has it): filled in, the span verifies.
            p[10] = p[11] = 0;
            const uint16_t c = static_cast<uint16_t>(~rte_raw_cksum(p, N));
            std::memcpy(p + 10, &c, 2);
            ASSERT_TRUE(sums_to_ones(raw_sum_fixed<N>(p))) << "N " << N << ", round " << round << ", offset " << off;
            p[rng() % N] ^= static_cast<uint8_t>(1u << (rng() % 8));
            ASSERT_FALSE(sums_to_ones(raw_sum_fixed<N>(p))) << "N " << N << ", round " << round << ", offset " << off;
        }
    }
}

TEST(Checksum, FixedLengthSumsFoldToDpdksSumAndVerifyExactlyTheRightSpans) {
    expect_fixed_sum_matches_dpdk<20>();
    expect_fixed_sum_matches_dpdk<44>();
}

// fold_sum32 (and so fold_sum, which ends in it) gives a one's-complement fold's value: 0 for 0,
// else the one of 1..0xffff equal to the sum modulo 0xffff (2^16 = 1 modulo 0xffff). On the edges
// of its two folds (0x1fffe and 0x1ffff after the first, all ones, the multiples of 0x10000) and
// random sums of every width.
TEST(Checksum, FoldSum32IsTheSumModuloFfffInOneToFfff) {
    std::vector<uint32_t> sums{0, 1, 0xffff, 0x10000, 0x1fffe, 0x1ffff, 0xfffeffff, 0xffff0000, 0xfffffffe, 0xffffffff};
    for (uint32_t k = 0; k < 0x10000; ++k) {
        sums.push_back(k << 16 | 0xffff);
        sums.push_back(k << 16 | (0xffff - k));
        sums.push_back(k << 16);
    }
    std::mt19937 rng(7);
    for (int i = 0; i < 200000; ++i) sums.push_back(rng() >> (rng() % 32));
    for (uint32_t s : sums) {
        const uint32_t expected = s == 0 ? 0 : (s % 0xffff == 0 ? 0xffff : s % 0xffff);
        ASSERT_EQ(fold_sum32(s), expected) << "sum " << s;
        ASSERT_EQ(fold_sum(s), expected) << "sum " << s;
    }
}

// sums_to_ones(s) is fold_sum(s) == 0xffff without the folds: on the edges (0, the multiples of
// 0xffff, their neighbours, the widest sums) and on random sums of every width.
TEST(Checksum, SumsToOnesIsTheFoldedSumBeingAllOnes) {
    std::vector<uint64_t> sums{0, 1, 0xfffe, 0xffff, 0x10000, 0x1fffe, 0x1ffff, 0xffffffff, 0x100000000,
                               0xffffffffffffffffull, 0xfffffffffffffffeull, 0xffffull * 0x10001,
                               0xffffffffffffffffull - 0xffff, 0xffffffffffffffffull - 0x10000, 0xffffffffffffffffull - 0xfffe};
    for (uint64_t k = 1; k < 4096; ++k) {
        sums.push_back(k * 0xffff);
        sums.push_back(k * 0xffff + 1);
        sums.push_back(k * 0xffff - 1);
    }
    std::mt19937_64 rng(5);
    for (int i = 0; i < 200000; ++i) {
        const uint64_t r = rng() >> (rng() % 64);
        sums.push_back(r);
        sums.push_back(r / 0xffff * 0xffff);
    }
    int ones = 0;
    for (uint64_t s : sums) {
        ASSERT_EQ(sums_to_ones(s), fold_sum(s) == 0xffff) << "sum " << s;
        ones += sums_to_ones(s);
    }
    EXPECT_GT(ones, 100000);  // both answers were asked for
}

// checksum_add folds once (two 16-bit terms), checksum_adjust twice (three: 0x1ffff needs both): they
// agree with a sum folded until nothing carries, for every stored checksum with a spread of deltas
// (all of the extremes among them), and for random word changes and every term at its extremes.
TEST(Checksum, AddingADeltaAndChangingAWordAgreeWithAFullFold) {
    const auto full = [](uint64_t sum) {
        while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
        return static_cast<uint16_t>(~sum);
    };
    std::vector<uint16_t> deltas{0, 1, 0x7fff, 0x8000, 0xfffe, 0xffff};
    std::mt19937 rng(9);
    for (int i = 0; i < 250; ++i) deltas.push_back(static_cast<uint16_t>(rng()));
    for (uint32_t c = 0; c <= 0xffff; ++c)
        for (uint16_t d : deltas)
            ASSERT_EQ(checksum_add(static_cast<uint16_t>(c), d), full(uint64_t{static_cast<uint16_t>(~c)} + d))
                << "checksum " << c << ", delta " << d;
    for (int i = 0; i < 2000000; ++i) {
        const auto c = static_cast<uint16_t>(rng()), o = static_cast<uint16_t>(rng()), n = static_cast<uint16_t>(rng());
        ASSERT_EQ(checksum_adjust(c, o, n),
                  full(uint64_t{static_cast<uint16_t>(~c)} + static_cast<uint16_t>(~o) + n));
    }
    for (uint16_t c : {0, 1, 0xfffe, 0xffff})  // every term at its extremes
        for (uint16_t o : {0, 1, 0xfffe, 0xffff})
            for (uint16_t n : {0, 1, 0xfffe, 0xffff})
                EXPECT_EQ(checksum_adjust(c, o, n), full(uint64_t{static_cast<uint16_t>(~c)} + static_cast<uint16_t>(~o) + n));
}

TEST(Checksum, TheTwentyByteHeaderCheckAgreesWithTheBuildersSum) {
    std::mt19937 rng(11);
    int good = 0;
    for (int round = 0; round < 20000; ++round) {
        uint8_t h[20];
        for (auto& b : h) b = static_cast<uint8_t>(rng());
        if (round % 2 == 0) {  // a right checksum half the time (all-ones headers included)
            if (round % 10 == 0) std::fill(h, h + 20, 0xff);
            h[10] = h[11] = 0;
            const uint16_t c = test::inet_checksum(h, 20);
            h[10] = static_cast<uint8_t>(c >> 8), h[11] = static_cast<uint8_t>(c);
        }
        const bool expect = test::sum16(h, 20) == 0xffff;
        good += expect;
        ASSERT_EQ(ipv4_header20_ok(h), expect) << "round " << round;
    }
    EXPECT_GE(good, 10000);
}

// The gateway's own datagrams (resolution replies, peer messages) get both sums from the values it
// writes: each must be what a full sum of the finished packet says, with the payload summed whole
// or its tail's sum given, for random addresses, ports and payloads of every length.
TEST(Checksum, UdpDatagramsTheGatewayWritesCarryBothSumsRight) {
    std::mt19937 rng(1071);
    for (int round = 0; round < 5000; ++round) {
        const uint16_t len = static_cast<uint16_t>(rng() % 200);
        std::vector<uint8_t> pkt(20 + 8 + len + 1);  // one spare byte: an odd length's sum must not read it
        for (std::size_t i = 28; i < pkt.size(); ++i) pkt[i] = static_cast<uint8_t>(rng());
        pkt.back() = 0xa5;
        const uint32_t src = static_cast<uint32_t>(rng()), dst = static_cast<uint32_t>(rng());
        const uint16_t sport = static_cast<uint16_t>(rng()), dport = static_cast<uint16_t>(rng());
        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(pkt.data());
        // Sometimes the payload's tail sum is handed over, as reply_hit does for a cached record.
        const bool tail = len >= 2 && rng() % 2 == 0;
        const uint16_t from = tail ? static_cast<uint16_t>(2 * (rng() % (len / 2))) : UINT16_MAX;
        const uint32_t tail_sum = tail ? rte_raw_cksum(pkt.data() + 28 + from, len - from) : 0;
        // A third of the time the caller has the whole payload's sum (a cache hit answered in place).
        if (rng() % 3 == 0)
            Dataplane::write_udp_ipv4_summed(ip, src, dst, sport, dport, len, rte_raw_cksum(pkt.data() + 28, len));
        else
            Dataplane::write_udp_ipv4(ip, src, dst, sport, dport, len, tail_sum, from);
        ASSERT_EQ(pkt.back(), 0xa5) << "a byte past the payload written, round " << round;
        pkt.pop_back();
        ASSERT_EQ(test::inet_checksum(pkt.data(), 20), 0) << "IPv4 header, round " << round;
        // Every other header field, byte by byte: version and IHL, TOS 0, the lengths, ID 0, don't
        // fragment, TTL 64, UDP, the addresses and ports as given (network order, stored as is).
        const uint8_t head[] = {0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17};
        for (std::size_t i = 0; i < sizeof head; ++i) {
            if (i == 2 || i == 3) continue;  // the total length, below
            ASSERT_EQ(pkt[i], head[i]) << "IPv4 header byte " << i << ", round " << round;
        }
        ASSERT_EQ(test::get16(pkt, 2), 28 + len);
        ASSERT_EQ(std::memcmp(pkt.data() + 12, &src, 4), 0);
        ASSERT_EQ(std::memcmp(pkt.data() + 16, &dst, 4), 0);
        ASSERT_EQ(std::memcmp(pkt.data() + 20, &sport, 2), 0);
        ASSERT_EQ(std::memcmp(pkt.data() + 22, &dport, 2), 0);
        ASSERT_EQ(test::get16(pkt, 24), 8 + len);
        ASSERT_EQ(test::inet_checksum(pkt.data() + 20, 8u + len, test::PacketBuilder::pseudo_sum(pkt, 0, 8u + len)), 0)
            << "UDP, round " << round << ", length " << len << (tail ? ", tail sum given" : "");
        ASSERT_NE(test::get16(pkt, 26), 0) << "a computed UDP checksum of 0 is sent as 0xffff";
    }
}

// A resolution reply's UDP sum is made without reading the message back: the header's from its
// values (Dataplane::header_sum), a body's head from the values written (stored16, stored64_sum). Each must fold
// to what rte_raw_cksum gives over the bytes encode() and the body's stores leave, for random
// headers and bodies.
TEST(Checksum, MessageSumsFromValuesMatchTheEncodedBytes) {
    std::mt19937_64 rng(20261204);
    for (int round = 0; round < 5000; ++round) {
        Header h;
        h.type = static_cast<MsgType>(rng() % 256);
        h.sender_party = static_cast<uint16_t>(rng());
        h.body_len = static_cast<uint16_t>(rng());
        h.seq = rng();
        h.channel = static_cast<uint8_t>(rng());
        h.key_id = static_cast<uint8_t>(rng());
        if (round % 3 == 0) h.seq = round % 2 ? 0 : UINT64_MAX;  // all zeros, all ones
        MsgHeader w;
        encode(h, w);
        ASSERT_EQ(fold_sum(Dataplane::header_sum(h)), rte_raw_cksum(&w, sizeof w)) << "round " << round;

        ResolveReplyBody b{};
        b.status = static_cast<uint8_t>(rng());
        b.source = static_cast<uint8_t>(rng());
        const uint64_t target = rng();
        store_be64(b.target, target);
        ASSERT_EQ(fold_sum(stored16(static_cast<uint16_t>(b.status << 8 | b.source)) + stored64_sum(target)),
                  rte_raw_cksum(&b, offsetof(ResolveReplyBody, record)))
            << "round " << round;
    }
}

TEST(Checksum, EchoRequestToReplyTypeChange) {
    // Type 8 -> 0 in the first word: the checksum grows by 0x0800 (one's complement).
    EXPECT_EQ(checksum_adjust(0x1234, 0x0800, 0x0000), 0x1a34);
    EXPECT_EQ(checksum_adjust(0xf900, 0x0800, 0x0000), 0x0101);  // the end-around carry
}

}  // namespace
}  // namespace fedgate
