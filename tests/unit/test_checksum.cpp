// Incremental checksum update agrees with a full recomputation by the test builder's own routine.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "dataplane/checksum.hpp"
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

TEST(Checksum, EchoRequestToReplyTypeChange) {
    // Type 8 -> 0 in the first word: the checksum grows by 0x0800 (one's complement).
    EXPECT_EQ(checksum_adjust(0x1234, 0x0800, 0x0000), 0x1a34);
    EXPECT_EQ(checksum_adjust(0xf900, 0x0800, 0x0000), 0x0101);  // the end-around carry
}

}  // namespace
}  // namespace fedgate
