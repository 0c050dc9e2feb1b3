// Adaptive polling: when an idle lcore starts to sleep, how the nap grows, and what resets it.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dataplane/idle.hpp"

namespace {

using fedgate::IdleBackoff;
using fedgate::IdleConfig;

constexpr IdleConfig kBackoff{.spin = false, .empty_polls_before_sleep = 4, .min_sleep_us = 1, .max_sleep_us = 200};

// The sleeps returned by `n` empty polls in a row.
std::vector<uint32_t> empty_polls(IdleBackoff& b, int n) {
    std::vector<uint32_t> out;
    for (int i = 0; i < n; ++i) out.push_back(b.after_poll(0));
    return out;
}

TEST(IdleBackoff, NoSleepBeforeEnoughEmptyPolls) {
    IdleBackoff b(kBackoff);
    EXPECT_EQ(empty_polls(b, 3), (std::vector<uint32_t>{0, 0, 0}));
    EXPECT_EQ(b.after_poll(0), 1u);  // the 4th empty poll in a row
}

TEST(IdleBackoff, SleepDoublesFromMinToMaxAndStaysThere) {
    IdleBackoff b(kBackoff);
    EXPECT_EQ(empty_polls(b, 14),
              (std::vector<uint32_t>{0, 0, 0, 1, 2, 4, 8, 16, 32, 64, 128, 200, 200, 200}));
}

TEST(IdleBackoff, DoublingIsCappedAtMaxEvenWhenMaxIsNotAPowerOfTwoTimesMin) {
    IdleBackoff b(IdleConfig{.spin = false, .empty_polls_before_sleep = 1, .min_sleep_us = 10, .max_sleep_us = 50});
    EXPECT_EQ(empty_polls(b, 6), (std::vector<uint32_t>{10, 20, 40, 50, 50, 50}));
}

TEST(IdleBackoff, BusyPollResetsTheCountAndTheSleep) {
    IdleBackoff b(kBackoff);
    empty_polls(b, 8);  // asleep, at 16 us
    EXPECT_EQ(b.after_poll(32), 0u);
    EXPECT_EQ(empty_polls(b, 6), (std::vector<uint32_t>{0, 0, 0, 1, 2, 4}));
}

TEST(IdleBackoff, OnePacketIsEnoughToReset) {
    IdleBackoff b(kBackoff);
    empty_polls(b, 3);
    EXPECT_EQ(b.after_poll(1), 0u);
    EXPECT_EQ(empty_polls(b, 4), (std::vector<uint32_t>{0, 0, 0, 1}));
}

TEST(IdleBackoff, SpinNeverSleeps) {
    IdleBackoff b(IdleConfig{.spin = true, .empty_polls_before_sleep = 1, .min_sleep_us = 1, .max_sleep_us = 200});
    EXPECT_EQ(empty_polls(b, 1'000), std::vector<uint32_t>(1'000, 0));
    EXPECT_EQ(b.after_poll(5), 0u);
}

TEST(IdleBackoff, DefaultsSleepAfter256EmptyPollsUpTo200Us) {
    IdleBackoff b(IdleConfig{});
    const std::vector<uint32_t> sleeps = empty_polls(b, 265);
    EXPECT_EQ(std::vector<uint32_t>(sleeps.begin(), sleeps.begin() + 255), std::vector<uint32_t>(255, 0));
    EXPECT_EQ(std::vector<uint32_t>(sleeps.begin() + 255, sleeps.end()),
              (std::vector<uint32_t>{1, 2, 4, 8, 16, 32, 64, 128, 200, 200}));
}

}  // namespace
