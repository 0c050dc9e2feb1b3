// Adaptive polling: when an idle lcore starts to wait, how the nap grows, what resets it, and what
// ends a wait on the RX queues' wake descriptors.
#include <gtest/gtest.h>

#include <sys/prctl.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <vector>

#include "dataplane/idle.hpp"

namespace {

using fedgate::IdleBackoff;
using fedgate::IdleConfig;
using fedgate::TickClock;

// The lcore's clock against the division it replaces: equal or one more, never less, and never
// going back, at TSC rates of real machines and at edges of the range; and one more only rarely
// (near a millisecond's end) within a few hundred days of ticks.
TEST(TickClock, MillisecondsAreTheQuotientOrOneMoreAndNeverGoBack) {
    std::mt19937_64 rng(7);
    for (const uint64_t hz : {2'994'374'000ull, 2'450'000'000ull, 1'000'000'000ull, 33'554'432'000ull, 1'000'000ull, 3'999ull}) {
        const TickClock c(hz);
        const uint64_t d = c.ticks_per_ms();
        ASSERT_EQ(d, std::max<uint64_t>(hz / 1000, 2));
        uint64_t uptime_samples = 0, uptime_exact = 0, prev_ticks = 0, prev_ms = 0;
        for (int i = 0; i < 200'000; ++i) {
            // Anywhere in 64 bits, around a millisecond's start or just before its end, ascending,
            // and anywhere below 2^56 ticks (277 days at 3 GHz).
            uint64_t t = rng();
            switch (i % 5) {
            case 1: t = (t / d) * d + (rng() % 3); break;
            case 2: t = (t / d) * d - 1 - (rng() % 3); break;
            case 3: t = prev_ticks + rng() % (4 * d); break;
            case 4: t >>= 8; break;
            }
            const uint64_t ms = c.ms(t);
            ASSERT_GE(ms, t / d) << "hz " << hz << " ticks " << t;
            ASSERT_LE(ms, t / d + 1) << "hz " << hz << " ticks " << t;
            if (i % 5 == 3) {
                ASSERT_GE(ms, prev_ms) << "hz " << hz << " went back at ticks " << t;
                prev_ticks = t, prev_ms = ms;
            }
            if (i % 5 == 4) ++uptime_samples, uptime_exact += ms == t / d;
        }
        EXPECT_GE(uptime_exact * 100, uptime_samples * 99) << "hz " << hz;
        for (uint64_t t = 0; t < 10 * d; t += d / 7 + 1) ASSERT_EQ(c.ms(t), t / d) << "hz " << hz;
    }
}

constexpr IdleConfig kBackoff{.spin = false, .empty_polls_before_sleep = 4, .min_sleep_us = 1, .max_sleep_us = 200, .warm_naps = 0};

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
    IdleBackoff b(IdleConfig{.spin = false, .empty_polls_before_sleep = 1, .min_sleep_us = 10, .max_sleep_us = 50, .warm_naps = 0});
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

TEST(IdleBackoff, DefaultsSleepAfter4EmptyPollsThen1024ShortNapsThenDoubleUpTo200Us) {
    IdleBackoff b(IdleConfig{});  // no packet yet: no yields
    const std::vector<uint32_t> sleeps = empty_polls(b, 3 + 1024 + 10);
    EXPECT_EQ(std::vector<uint32_t>(sleeps.begin(), sleeps.begin() + 3), std::vector<uint32_t>(3, 0));
    EXPECT_EQ(std::vector<uint32_t>(sleeps.begin() + 3, sleeps.begin() + 3 + 1024), std::vector<uint32_t>(1024, 1));
    EXPECT_EQ(std::vector<uint32_t>(sleeps.begin() + 3 + 1024, sleeps.end()),
              (std::vector<uint32_t>{2, 4, 8, 16, 32, 64, 128, 200, 200, 200}));
}

TEST(IdleBackoff, WarmNapsStayAtTheMinimumBeforeDoubling) {
    IdleBackoff b(IdleConfig{.spin = false, .empty_polls_before_sleep = 2, .min_sleep_us = 3, .max_sleep_us = 20, .warm_naps = 3});
    EXPECT_EQ(empty_polls(b, 8), (std::vector<uint32_t>{0, 3, 3, 3, 6, 12, 20, 20}));
}

TEST(IdleBackoff, APacketDuringTheLongNapsGivesBackTheWarmNaps) {
    IdleBackoff b(IdleConfig{.spin = false, .empty_polls_before_sleep = 1, .min_sleep_us = 1, .max_sleep_us = 200, .warm_naps = 2});
    EXPECT_EQ(empty_polls(b, 5), (std::vector<uint32_t>{1, 1, 2, 4, 8}));
    EXPECT_EQ(b.after_poll(1), 0u);
    EXPECT_EQ(empty_polls(b, 4), (std::vector<uint32_t>{1, 1, 2, 4}));
}

TEST(IdleBackoff, WakeableWaitsAreTheLongestAtOnce) {
    // Traffic ends the wait, so nothing is gained by short naps first.
    IdleBackoff b(kBackoff, /*wakeable=*/true);
    EXPECT_EQ(empty_polls(b, 6), (std::vector<uint32_t>{0, 0, 0, 200, 200, 200}));
    EXPECT_EQ(b.after_poll(3), 0u);
    EXPECT_EQ(empty_polls(b, 4), (std::vector<uint32_t>{0, 0, 0, 200}));
}

TEST(IdleBackoff, WakeableWaitsGrowToTheDeepCapAfterALongQuietStretch) {
    IdleBackoff b(IdleConfig{.empty_polls_before_sleep = 1, .max_sleep_us = 200, .deep_after_waits = 3, .deep_sleep_max_us = 1000},
                  /*wakeable=*/true);
    EXPECT_EQ(empty_polls(b, 7), (std::vector<uint32_t>{200, 200, 200, 400, 800, 1000, 1000}));
    EXPECT_EQ(b.after_poll(1), 0u);  // a packet: back to short waits
    EXPECT_EQ(empty_polls(b, 4), (std::vector<uint32_t>{200, 200, 200, 400}));
}

TEST(IdleBackoff, ADeepCapBelowTheMaxNeverShortensAWakeableWait) {
    IdleBackoff b(IdleConfig{.empty_polls_before_sleep = 1, .max_sleep_us = 200, .deep_after_waits = 1, .deep_sleep_max_us = 50},
                  /*wakeable=*/true);
    EXPECT_EQ(empty_polls(b, 4), (std::vector<uint32_t>{200, 200, 200, 200}));
}

TEST(IdleBackoff, NapsWithoutAWakeUpNeverGoPastTheMax) {
    // The deep cap is for waits that traffic ends; a nap's length is a lone packet's delay.
    IdleBackoff b(IdleConfig{.empty_polls_before_sleep = 1, .max_sleep_us = 8, .warm_naps = 0, .deep_after_waits = 1,
                             .deep_sleep_max_us = 1000});
    EXPECT_EQ(empty_polls(b, 6), (std::vector<uint32_t>{1, 2, 4, 8, 8, 8}));
}

TEST(IdleBackoff, WakeableSpinStillNeverWaits) {
    IdleBackoff b(IdleConfig{.spin = true}, /*wakeable=*/true);
    EXPECT_EQ(empty_polls(b, 500), std::vector<uint32_t>(500, 0));
}

// ---- the yields after a packet (time in the caller's ticks; 3 ticks a microsecond here) ----

// after_poll at `now`, as 0 (poll at once), 'y' (poll after a yield), or the wait in microseconds.
long step(IdleBackoff& b, uint32_t handled, uint64_t now) {
    const uint32_t us = b.after_poll(handled, now);
    if (b.yielding()) {
        EXPECT_EQ(us, 0u);
        return 'y';
    }
    return us;
}

constexpr IdleConfig kYield{.spin = false, .empty_polls_before_sleep = 2, .min_sleep_us = 1, .max_sleep_us = 200,
                            .warm_naps = 0, .yield_us = 10};

TEST(IdleBackoff, EmptyPollsYieldForYieldUsAfterThePacketThenWait) {
    IdleBackoff b(kYield, /*wakeable=*/true, /*ticks_per_us=*/3);
    EXPECT_EQ(step(b, 4, 1000), 0);    // a packet at 1000: the window ends at 1030
    EXPECT_EQ(step(b, 0, 1001), 0);    // the empty polls before any yield
    EXPECT_EQ(step(b, 0, 1002), 'y');
    EXPECT_EQ(step(b, 0, 1029), 'y');  // still inside it
    EXPECT_EQ(step(b, 0, 1030), 200);  // over: the wakeable wait
    EXPECT_EQ(step(b, 0, 5000), 200);
}

TEST(IdleBackoff, APacketAmongTheYieldsStartsTheWindowAgain) {
    IdleBackoff b(kYield, /*wakeable=*/false, /*ticks_per_us=*/3);
    EXPECT_EQ(step(b, 1, 100), 0);
    EXPECT_EQ(step(b, 0, 101), 0);
    EXPECT_EQ(step(b, 0, 125), 'y');
    EXPECT_EQ(step(b, 2, 126), 0);  // the window now ends at 156
    EXPECT_EQ(step(b, 0, 127), 0);
    EXPECT_EQ(step(b, 0, 150), 'y');
    EXPECT_EQ(step(b, 0, 156), 1);  // naps, as without yields
    EXPECT_EQ(step(b, 0, 157), 2);
}

TEST(IdleBackoff, NoYieldsWhenYieldUsIsZeroOrWhenSpinning) {
    IdleConfig off = kYield;
    off.yield_us = 0;
    IdleBackoff none(off, true, 3);
    EXPECT_EQ(step(none, 1, 10), 0);
    EXPECT_EQ(step(none, 0, 11), 0);
    EXPECT_EQ(step(none, 0, 12), 200);
    IdleConfig spin = kYield;
    spin.spin = true;
    IdleBackoff spinning(spin, true, 3);
    EXPECT_EQ(step(spinning, 1, 10), 0);
    for (uint64_t t = 11; t < 100; ++t) ASSERT_EQ(step(spinning, 0, t), 0);
}

TEST(IdleBackoff, AClockThatGoesBackwardsEndsTheYieldsInsteadOfYieldingForever) {
    IdleBackoff b(kYield, true, 3);
    EXPECT_EQ(step(b, 1, 1000), 0);
    EXPECT_EQ(step(b, 0, 1001), 0);
    EXPECT_EQ(step(b, 0, 500), 200);
}

TEST(IdleBackoff, TheFirstEmptyPollsOfALifeDoNotYield) {
    // No packet yet: nothing to wait for a reply to.
    IdleBackoff b(kYield, true, 3);
    EXPECT_EQ(step(b, 0, 1'000'000), 0);
    EXPECT_EQ(step(b, 0, 1'000'001), 200);
}

TEST(IdleBackoff, TheEmptyPollCountDoesNotWrapOnALongIdleStretch) {
    IdleBackoff b(IdleConfig{.spin = false, .empty_polls_before_sleep = 2, .min_sleep_us = 1, .max_sleep_us = 4, .warm_naps = 0});
    empty_polls(b, 100'000);
    EXPECT_EQ(b.after_poll(0), 4u);
}

// ---- the wake sources and the waiter (no timing asserted: only what ended a wait) ----

TEST(RxWakeSource, RecordedPerPortAndQueueAndForgottenPerPort) {
    fedgate::record_rx_wake_source(3, 0, {17, false});
    fedgate::record_rx_wake_source(3, 1, {18, true});
    EXPECT_EQ(fedgate::rx_wake_source(3, 0).fd, 17);
    EXPECT_TRUE(fedgate::rx_wake_source(3, 1).interrupt);
    EXPECT_EQ(fedgate::rx_wake_source(4, 0).fd, -1);
    fedgate::forget_rx_wake_sources(3);
    EXPECT_EQ(fedgate::rx_wake_source(3, 0).fd, -1);
    EXPECT_EQ(fedgate::rx_wake_source(3, 1).fd, -1);
}

TEST(RxWakeSource, OutOfRangePortsAndQueuesAreIgnored) {
    fedgate::record_rx_wake_source(RTE_MAX_ETHPORTS, 0, {5, false});
    fedgate::record_rx_wake_source(0, fedgate::kMaxWakeQueues, {5, false});
    EXPECT_EQ(fedgate::rx_wake_source(RTE_MAX_ETHPORTS, 0).fd, -1);
    EXPECT_EQ(fedgate::rx_wake_source(0, fedgate::kMaxWakeQueues).fd, -1);
}

class IdleWaiterTest : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_EQ(::pipe(a_), 0);
        ASSERT_EQ(::pipe(b_), 0);
        fedgate::record_rx_wake_source(7, 0, {a_[0], false});
        fedgate::record_rx_wake_source(8, 0, {b_[0], false});
    }
    void TearDown() override {
        fedgate::forget_rx_wake_sources(7);
        fedgate::forget_rx_wake_sources(8);
        for (int fd : {a_[0], a_[1], b_[0], b_[1]}) ::close(fd);
    }
    int a_[2]{-1, -1};
    int b_[2]{-1, -1};
};

TEST_F(IdleWaiterTest, WakeableOnlyWhenEveryQueueHasASource) {
    const std::vector<fedgate::RxQueueRef> both{{7, 0}, {8, 0}};
    const std::vector<fedgate::RxQueueRef> one_without{{7, 0}, {9, 0}};
    EXPECT_TRUE(fedgate::IdleWaiter(both).wakeable());
    EXPECT_FALSE(fedgate::IdleWaiter(one_without).wakeable());
    EXPECT_FALSE(fedgate::IdleWaiter(std::vector<fedgate::RxQueueRef>{}).wakeable());
}

TEST_F(IdleWaiterTest, TrafficOnAnyQueueEndsTheWait) {
    const std::vector<fedgate::RxQueueRef> both{{7, 0}, {8, 0}};
    fedgate::IdleWaiter w(both);
    ASSERT_EQ(::write(b_[1], "x", 1), 1);
    // A wait of an hour that returns says the descriptor ended it.
    EXPECT_TRUE(w.wait(3'600'000'000u));
}

TEST_F(IdleWaiterTest, AWaitWithoutTrafficEndsByItsTimeout) {
    const std::vector<fedgate::RxQueueRef> both{{7, 0}, {8, 0}};
    fedgate::IdleWaiter w(both);
    EXPECT_FALSE(w.wait(100));
}

TEST_F(IdleWaiterTest, NotWakeableSleepsAndReportsNoTraffic) {
    const std::vector<fedgate::RxQueueRef> none{{9, 0}};
    fedgate::IdleWaiter w(none);
    ASSERT_EQ(::write(a_[1], "x", 1), 1);  // not watched: a queue without a source means naps
    EXPECT_FALSE(w.wait(10));
}

TEST_F(IdleWaiterTest, TightensTheTimerSlackWhileItLivesAndRestoresIt) {
    const int before = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    {
        const std::vector<fedgate::RxQueueRef> none{{9, 0}};
        fedgate::IdleWaiter w(none);
        EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), 1000);
    }
    EXPECT_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), before);
}

}  // namespace
