// The neighbour (ARP) table: resolution states, probes and timeouts driven by explicit time, capacity,
// and a randomised check of the open-addressing table against a std::map.
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

#include "dataplane/neighbour.hpp"

namespace {

using fedgate::MacAddr;
using fedgate::Neighbour;
using fedgate::NeighbourTable;
using fedgate::NeighbourTimers;
using Verdict = NeighbourTable::Verdict;
using State = Neighbour::State;

constexpr NeighbourTimers kTimers{.reachable_ms = 1'000, .stale_ms = 5'000, .probe_interval_ms = 100, .probes = 3};

constexpr uint16_t kPort = 1;
const uint32_t kNextHop = htonl(0xC6126401);  // 198.18.100.1, network order as the data plane keeps it
const uint32_t kOtherHop = htonl(0xC6126402);
constexpr MacAddr kMac{0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
constexpr MacAddr kNewMac{0x02, 0x00, 0x00, 0x00, 0x00, 0x02};

// The table never dereferences held packets, so any distinct non-null value stands in for one.
rte_mbuf* fake_mbuf(uintptr_t n) { return reinterpret_cast<rte_mbuf*>(n * 64); }

// What tick() reported, in order.
struct Calls {
    struct Expired {
        uint16_t port;
        uint32_t ip;
        bool failed;
        rte_mbuf* held;
    };
    std::vector<std::pair<uint16_t, uint32_t>> probes;
    std::vector<Expired> expired;
};

void tick(NeighbourTable& t, uint64_t now_ms, Calls& calls) {
    t.tick(
        now_ms, [&](Neighbour& n) { calls.probes.emplace_back(n.port, n.ip); },
        [&](Neighbour& n, bool failed) { calls.expired.push_back({n.port, n.ip, failed, n.held}); });
}

TEST(NeighbourTable, ZeroCapacityIsRejected) { EXPECT_THROW(NeighbourTable(0, kTimers), std::invalid_argument); }

TEST(NeighbourTable, LookupOfUnknownNextHopCreatesIncompleteEntryAndAsksForAProbe) {
    NeighbourTable t(16, kTimers);
    const auto l = t.lookup(kPort, kNextHop, 1'000);

    EXPECT_EQ(l.verdict, Verdict::probe);
    ASSERT_NE(l.entry, nullptr);
    EXPECT_EQ(l.entry->state, State::incomplete);
    EXPECT_EQ(l.entry->ip, kNextHop);
    EXPECT_EQ(l.entry->port, kPort);
    EXPECT_EQ(l.entry->probes_sent, 1);
    EXPECT_EQ(l.entry->next_probe_ms, 1'100u);
    EXPECT_EQ(l.entry->held, nullptr);
    EXPECT_EQ(t.size(), 1u);
    EXPECT_EQ(t.find(kPort, kNextHop), l.entry);
}

TEST(NeighbourTable, SecondLookupBeforeAnAnswerIsPending) {
    NeighbourTable t(16, kTimers);
    const auto first = t.lookup(kPort, kNextHop, 1'000);
    first.entry->held = fake_mbuf(1);

    const auto second = t.lookup(kPort, kNextHop, 1'050);
    EXPECT_EQ(second.verdict, Verdict::pending);
    EXPECT_EQ(second.entry, first.entry);
    EXPECT_EQ(second.entry->held, fake_mbuf(1));
    EXPECT_EQ(second.entry->probes_sent, 1);
    EXPECT_EQ(t.size(), 1u);
}

TEST(NeighbourTable, LearnResolvesAPendingEntryWithTheMac) {
    NeighbourTable t(16, kTimers);
    const auto l = t.lookup(kPort, kNextHop, 1'000);
    l.entry->held = fake_mbuf(1);

    Neighbour* n = t.learn(kPort, kNextHop, kMac, 1'020, /*create=*/false);
    ASSERT_EQ(n, l.entry);
    EXPECT_EQ(n->state, State::reachable);
    EXPECT_EQ(n->mac, kMac);
    EXPECT_EQ(n->confirmed_ms, 1'020u);
    EXPECT_EQ(n->probes_sent, 0);
    EXPECT_EQ(n->held, fake_mbuf(1));  // the caller sends the held packet; the table leaves it alone

    const auto after = t.lookup(kPort, kNextHop, 1'030);
    EXPECT_EQ(after.verdict, Verdict::resolved);
    EXPECT_EQ(after.entry->mac, kMac);
}

TEST(NeighbourTable, LearnWithoutCreateIgnoresAnUnknownNextHop) {
    NeighbourTable t(16, kTimers);
    EXPECT_EQ(t.learn(kPort, kNextHop, kMac, 1'000, /*create=*/false), nullptr);
    EXPECT_EQ(t.size(), 0u);
    EXPECT_EQ(t.find(kPort, kNextHop), nullptr);
}

TEST(NeighbourTable, LearnWithCreateAddsAReachableEntry) {
    NeighbourTable t(16, kTimers);
    Neighbour* n = t.learn(kPort, kNextHop, kMac, 1'000, /*create=*/true);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->state, State::reachable);
    EXPECT_EQ(n->mac, kMac);
    EXPECT_EQ(t.size(), 1u);
    EXPECT_EQ(t.lookup(kPort, kNextHop, 1'001).verdict, Verdict::resolved);
}

TEST(NeighbourTable, LearnReplacesTheMacOfAKnownEntry) {
    NeighbourTable t(16, kTimers);
    t.learn(kPort, kNextHop, kMac, 1'000, true);
    Neighbour* n = t.learn(kPort, kNextHop, kNewMac, 1'500, false);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->mac, kNewMac);
    EXPECT_EQ(n->confirmed_ms, 1'500u);
    EXPECT_EQ(t.size(), 1u);
}

TEST(NeighbourTable, ReachableEntryTurnsStaleAfterReachableMsAndAsksForOneProbePerInterval) {
    NeighbourTable t(16, kTimers);
    t.learn(kPort, kNextHop, kMac, 1'000, true);

    EXPECT_EQ(t.lookup(kPort, kNextHop, 1'999).verdict, Verdict::resolved);
    EXPECT_EQ(t.find(kPort, kNextHop)->state, State::reachable);

    EXPECT_EQ(t.lookup(kPort, kNextHop, 2'000).verdict, Verdict::resolved_probe);
    EXPECT_EQ(t.find(kPort, kNextHop)->state, State::stale);
    EXPECT_EQ(t.lookup(kPort, kNextHop, 2'001).verdict, Verdict::resolved);
    EXPECT_EQ(t.lookup(kPort, kNextHop, 2'099).verdict, Verdict::resolved);
    EXPECT_EQ(t.lookup(kPort, kNextHop, 2'100).verdict, Verdict::resolved_probe);
    EXPECT_EQ(t.lookup(kPort, kNextHop, 2'150).verdict, Verdict::resolved);
    EXPECT_EQ(t.lookup(kPort, kNextHop, 2'200).verdict, Verdict::resolved_probe);
    EXPECT_EQ(t.find(kPort, kNextHop)->mac, kMac);  // a stale MAC is still used
}

TEST(NeighbourTable, LearnMakesAStaleEntryReachableAgain) {
    NeighbourTable t(16, kTimers);
    t.learn(kPort, kNextHop, kMac, 1'000, true);
    EXPECT_EQ(t.lookup(kPort, kNextHop, 2'500).verdict, Verdict::resolved_probe);

    t.learn(kPort, kNextHop, kMac, 2'510, false);
    EXPECT_EQ(t.find(kPort, kNextHop)->state, State::reachable);
    EXPECT_EQ(t.lookup(kPort, kNextHop, 3'509).verdict, Verdict::resolved);
    EXPECT_EQ(t.lookup(kPort, kNextHop, 3'510).verdict, Verdict::resolved_probe);
}

TEST(NeighbourTable, TickTurnsReachableStaleWithoutProbing) {
    NeighbourTable t(16, kTimers);
    t.learn(kPort, kNextHop, kMac, 1'000, true);
    Calls calls;

    tick(t, 1'999, calls);
    EXPECT_EQ(t.find(kPort, kNextHop)->state, State::reachable);
    tick(t, 2'000, calls);
    EXPECT_EQ(t.find(kPort, kNextHop)->state, State::stale);
    EXPECT_TRUE(calls.probes.empty());
    EXPECT_TRUE(calls.expired.empty());
}

TEST(NeighbourTable, TickProbesAnUnansweredEntryEachIntervalThenExpiresItAsFailed) {
    NeighbourTable t(16, kTimers);
    const auto l = t.lookup(kPort, kNextHop, 1'000);  // probe 1 of 3, sent by the caller
    ASSERT_EQ(l.verdict, Verdict::probe);
    l.entry->held = fake_mbuf(7);
    Calls calls;
    const std::vector<std::pair<uint16_t, uint32_t>> one_probe{{kPort, kNextHop}};
    const std::vector<std::pair<uint16_t, uint32_t>> two_probes{{kPort, kNextHop}, {kPort, kNextHop}};

    tick(t, 1'099, calls);
    EXPECT_TRUE(calls.probes.empty());

    tick(t, 1'100, calls);  // probe 2
    EXPECT_EQ(calls.probes, one_probe);
    EXPECT_EQ(t.find(kPort, kNextHop)->probes_sent, 2);
    EXPECT_EQ(t.find(kPort, kNextHop)->next_probe_ms, 1'200u);

    tick(t, 1'150, calls);
    EXPECT_EQ(calls.probes, one_probe);

    tick(t, 1'200, calls);  // probe 3
    EXPECT_EQ(calls.probes, two_probes);
    EXPECT_EQ(t.find(kPort, kNextHop)->probes_sent, 3);

    tick(t, 1'299, calls);
    EXPECT_TRUE(calls.expired.empty());
    ASSERT_NE(t.find(kPort, kNextHop), nullptr);

    tick(t, 1'300, calls);  // no answer to any of the three
    EXPECT_EQ(calls.probes, two_probes);
    ASSERT_EQ(calls.expired.size(), 1u);
    EXPECT_EQ(calls.expired[0].port, kPort);
    EXPECT_EQ(calls.expired[0].ip, kNextHop);
    EXPECT_TRUE(calls.expired[0].failed);
    EXPECT_EQ(calls.expired[0].held, fake_mbuf(7));
    EXPECT_EQ(t.find(kPort, kNextHop), nullptr);
    EXPECT_EQ(t.size(), 0u);
}

TEST(NeighbourTable, AnsweredEntryIsNotProbedByTick) {
    NeighbourTable t(16, kTimers);
    t.lookup(kPort, kNextHop, 1'000);
    t.learn(kPort, kNextHop, kMac, 1'050, false);
    Calls calls;

    for (uint64_t now = 1'100; now <= 1'500; now += 100) tick(t, now, calls);
    EXPECT_TRUE(calls.probes.empty());
    EXPECT_TRUE(calls.expired.empty());
    EXPECT_EQ(t.find(kPort, kNextHop)->state, State::reachable);
}

TEST(NeighbourTable, StaleEntryExpiresNotFailedAfterStaleMs) {
    NeighbourTable t(16, kTimers);
    t.learn(kPort, kNextHop, kMac, 1'000, true);
    Calls calls;

    tick(t, 2'000, calls);
    EXPECT_EQ(t.find(kPort, kNextHop)->state, State::stale);
    tick(t, 5'999, calls);
    EXPECT_TRUE(calls.expired.empty());
    ASSERT_NE(t.find(kPort, kNextHop), nullptr);

    tick(t, 6'000, calls);
    ASSERT_EQ(calls.expired.size(), 1u);
    EXPECT_EQ(calls.expired[0].ip, kNextHop);
    EXPECT_FALSE(calls.expired[0].failed);
    EXPECT_EQ(t.find(kPort, kNextHop), nullptr);
    EXPECT_EQ(t.size(), 0u);
    EXPECT_TRUE(calls.probes.empty());
}

TEST(NeighbourTable, FullTableAnswersFullForANewNextHopOnly) {
    NeighbourTable t(4, kTimers);
    for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(t.lookup(kPort, htonl(0xC6126401 + i), 1'000).verdict, Verdict::probe);
    EXPECT_EQ(t.size(), 4u);

    const auto l = t.lookup(kPort, htonl(0xC6126409), 1'000);
    EXPECT_EQ(l.verdict, Verdict::full);
    EXPECT_EQ(l.entry, nullptr);
    EXPECT_EQ(t.learn(kPort, htonl(0xC6126409), kMac, 1'000, true), nullptr);
    EXPECT_EQ(t.size(), 4u);

    EXPECT_EQ(t.lookup(kPort, htonl(0xC6126401), 1'010).verdict, Verdict::pending);
    EXPECT_NE(t.learn(kPort, htonl(0xC6126402), kMac, 1'010, true), nullptr);
}

TEST(NeighbourTable, FullTableTakesANewEntryOnceOneExpires) {
    NeighbourTable t(4, kTimers);
    for (uint32_t i = 0; i < 4; ++i) t.lookup(kPort, htonl(0xC6126401 + i), 1'000);
    for (uint32_t i = 1; i < 4; ++i) t.learn(kPort, htonl(0xC6126401 + i), kMac, 1'000, false);
    Calls calls;
    for (uint64_t now = 1'100; now <= 1'300; now += 100) tick(t, now, calls);  // the unanswered one fails
    ASSERT_EQ(calls.expired.size(), 1u);
    EXPECT_EQ(t.size(), 3u);

    EXPECT_EQ(t.lookup(kPort, htonl(0xC6126409), 1'300).verdict, Verdict::probe);
    EXPECT_EQ(t.lookup(kPort, htonl(0xC612640A), 1'300).verdict, Verdict::full);
}

TEST(NeighbourTable, SameIpOnDifferentPortsIsTwoEntries) {
    NeighbourTable t(16, kTimers);
    const auto on0 = t.lookup(0, kNextHop, 1'000);
    const auto on1 = t.lookup(1, kNextHop, 1'000);
    EXPECT_EQ(on0.verdict, Verdict::probe);
    EXPECT_EQ(on1.verdict, Verdict::probe);
    EXPECT_NE(on0.entry, on1.entry);
    EXPECT_EQ(t.size(), 2u);

    t.learn(1, kNextHop, kMac, 1'010, false);
    EXPECT_EQ(t.find(1, kNextHop)->state, State::reachable);
    EXPECT_EQ(t.find(0, kNextHop)->state, State::incomplete);
    EXPECT_EQ(t.lookup(0, kNextHop, 1'020).verdict, Verdict::pending);
    EXPECT_EQ(t.lookup(1, kNextHop, 1'020).verdict, Verdict::resolved);
    EXPECT_EQ(t.find(2, kNextHop), nullptr);
}

TEST(NeighbourTable, CountPortCountsOnlyThatPortsEntries) {
    NeighbourTable t(16, kTimers);
    t.lookup(0, kNextHop, 1'000);
    t.lookup(0, kOtherHop, 1'000);
    t.learn(1, kNextHop, kMac, 1'000, true);
    EXPECT_EQ(t.count_port(0), 2u);
    EXPECT_EQ(t.count_port(1), 1u);
    EXPECT_EQ(t.count_port(2), 0u);

    Calls calls;
    for (uint64_t now = 1'100; now <= 1'300; now += 100) tick(t, now, calls);  // port 0's two fail
    EXPECT_EQ(calls.expired.size(), 2u);
    EXPECT_EQ(t.count_port(0), 0u);
    EXPECT_EQ(t.count_port(1), 1u);
}

// Random inserts and removals on a nearly full table, checked against a std::map after every step. Removal
// goes through tick() (the only way entries leave), so this exercises backward-shift deletion, including
// several deletions in one sweep and chains that wrap around the end of the slot array.
TEST(NeighbourTable, AgreesWithAMapUnderRandomInsertsAndRemovals) {
    constexpr uint32_t kCapacity = 23;  // 32 slots: load up to 23/32
    constexpr NeighbourTimers timers{.reachable_ms = 10, .stale_ms = 100, .probe_interval_ms = 1'000, .probes = 3};
    constexpr uint16_t kPorts = 3;
    constexpr uint32_t kIps = 64;
    NeighbourTable t(kCapacity, timers);

    using Key = std::pair<uint16_t, uint32_t>;
    std::map<Key, rte_mbuf*> model;  // key -> the held pointer stamped on its entry
    uintptr_t next_stamp = 1;
    uint64_t now = 1'000;
    std::mt19937 rng(20240601);
    std::map<Key, uint16_t> memos;  // the last memo_of() each key's entry gave
    uint64_t recalled = 0;
    const auto random_key = [&] {
        return Key{static_cast<uint16_t>(rng() % kPorts), htonl(0xC6120000 + static_cast<uint32_t>(rng() % kIps))};
    };

    // Removes `victims` by letting them age out while every other entry is confirmed.
    const auto remove = [&](const std::vector<Key>& victims) {
        for (const auto& [key, held] : model)  // all resolved now, so none is waiting on a probe
            ASSERT_NE(t.learn(key.first, key.second, kMac, now, false), nullptr);
        now += timers.stale_ms;
        for (const auto& [key, held] : model) {
            if (std::find(victims.begin(), victims.end(), key) != victims.end()) continue;
            ASSERT_NE(t.learn(key.first, key.second, kMac, now, false), nullptr);
        }
        Calls calls;
        tick(t, now, calls);  // reachable -> stale
        tick(t, now, calls);  // stale past stale_ms -> expired
        EXPECT_TRUE(calls.probes.empty());
        ASSERT_EQ(calls.expired.size(), victims.size());
        for (const auto& e : calls.expired) {
            const Key k{e.port, e.ip};
            ASSERT_NE(std::find(victims.begin(), victims.end(), k), victims.end());
            EXPECT_FALSE(e.failed);
            EXPECT_EQ(e.held, model.at(k));
        }
        for (const Key& k : victims) model.erase(k);
    };

    for (int step = 0; step < 20'000; ++step) {
        const uint32_t op = rng() % 10;
        if (op < 5) {
            const Key k = random_key();
            const bool known = model.count(k) != 0;
            Neighbour* n;
            if (op < 3) {
                n = t.learn(k.first, k.second, kMac, now, true);
            } else {
                const auto l = t.lookup(k.first, k.second, now);
                EXPECT_EQ(l.verdict == Verdict::full, !known && model.size() == kCapacity);
                n = l.entry;
            }
            if (known || model.size() < kCapacity) {
                ASSERT_NE(n, nullptr) << "step " << step;
                if (!known) {
                    n->held = fake_mbuf(next_stamp++);
                    model[k] = n->held;
                }
            } else {
                EXPECT_EQ(n, nullptr) << "step " << step;
            }
        } else if (!model.empty()) {
            std::vector<Key> victims;
            if (op < 9) {
                auto it = model.begin();
                std::advance(it, rng() % model.size());
                victims.push_back(it->first);
            } else {
                for (const auto& [key, held] : model)
                    if (rng() % 2 == 0) victims.push_back(key);
            }
            remove(victims);
            if (::testing::Test::HasFatalFailure()) return;
        }

        ASSERT_EQ(t.size(), model.size()) << "step " << step;
        // A memo taken when an entry was last reachable names it or nothing, whatever moved since.
        for (const auto& [k, memo] : memos) {
            const Neighbour* r = t.recall(memo, k.first, k.second, now);
            if (r != nullptr) {
                ASSERT_EQ(r, t.find(k.first, k.second)) << "step " << step << ": a memo named another entry";
                ++recalled;
            }
        }
        for (const auto& [k, held] : model)
            if (const Neighbour* n = t.find(k.first, k.second); n != nullptr && n->state == State::reachable)
                memos[k] = t.memo_of(n);
        for (uint16_t port = 0; port < kPorts; ++port) {
            uint32_t on_port = 0;
            for (uint32_t i = 0; i < kIps; ++i) {
                const Key k{port, htonl(0xC6120000 + i)};
                const Neighbour* n = t.find(k.first, k.second);
                const auto m = model.find(k);
                if (m == model.end()) {
                    ASSERT_EQ(n, nullptr) << "step " << step << ": found an entry that was removed";
                } else {
                    ++on_port;
                    ASSERT_NE(n, nullptr) << "step " << step << ": lost an entry";
                    ASSERT_EQ(n->port, k.first);
                    ASSERT_EQ(n->ip, k.second);
                    ASSERT_EQ(n->held, m->second) << "step " << step << ": entry's contents did not move with it";
                }
            }
            ASSERT_EQ(t.count_port(port), on_port) << "step " << step;
        }
    }
    EXPECT_GT(recalled, 10'000u);  // the memos were used, not only refused
}

TEST(NeighbourTable, AMemoRecallsItsEntryWhileItIsReachableAndReadsAChangedMac) {
    NeighbourTable t(16, kTimers);
    const Neighbour* n = t.learn(kPort, kNextHop, kMac, 1'000, true);
    ASSERT_NE(n, nullptr);
    const uint16_t memo = t.memo_of(n);
    ASSERT_NE(memo, 0);
    EXPECT_EQ(t.recall(memo, kPort, kNextHop, 1'000), n);
    EXPECT_EQ(t.recall(0, kPort, kNextHop, 1'000), nullptr);                    // no memo yet
    EXPECT_EQ(t.recall(memo, kPort + 1, kNextHop, 1'000), nullptr);             // another port's next hop
    EXPECT_EQ(t.recall(memo, kPort, kNextHop + htonl(1), 1'000), nullptr);      // another next hop
    EXPECT_EQ(t.recall(UINT16_MAX, kPort, kNextHop, 1'000), nullptr);           // past the table

    // The neighbour's MAC changes: the memo still serves and reads the new one.
    t.learn(kPort, kNextHop, kNewMac, 1'500, false);
    ASSERT_NE(t.recall(memo, kPort, kNextHop, 1'500), nullptr);
    EXPECT_EQ(t.recall(memo, kPort, kNextHop, 1'500)->mac, kNewMac);

    // Past its reachable time, before any tick marks it stale: the memo stops serving as the
    // entry's lookup starts asking for a probe, so a sender with a memo probes as one without.
    EXPECT_EQ(t.recall(memo, kPort, kNextHop, 2'499), n);
    EXPECT_EQ(t.recall(memo, kPort, kNextHop, 2'500), nullptr);
    EXPECT_EQ(t.lookup(kPort, kNextHop, 2'500).verdict, Verdict::resolved_probe);
    t.learn(kPort, kNextHop, kNewMac, 2'510, false);  // the answer
    EXPECT_EQ(t.recall(memo, kPort, kNextHop, 2'510), n);

    // Stale by the tick: the memo stops serving, and the lookup asks for a probe.
    Calls calls;
    tick(t, 3'600, calls);
    EXPECT_EQ(t.recall(memo, kPort, kNextHop, 3'600), nullptr);
    EXPECT_EQ(t.lookup(kPort, kNextHop, 3'600).verdict, Verdict::resolved_probe);
    t.learn(kPort, kNextHop, kNewMac, 3'610, false);  // the answer
    EXPECT_EQ(t.recall(memo, kPort, kNextHop, 3'610), n);

    // Gone: never recalled again, nor once another next hop takes the slot.
    tick(t, 5'000, calls);   // stale
    tick(t, 11'000, calls);  // expired
    ASSERT_EQ(t.find(kPort, kNextHop), nullptr);
    EXPECT_EQ(t.recall(memo, kPort, kNextHop, 11'000), nullptr);

    // A permanent entry serves for ever.
    ASSERT_TRUE(t.add_permanent(kPort, kNextHop, kMac));
    const uint16_t fixed = t.memo_of(t.find(kPort, kNextHop));
    tick(t, 100'000, calls);
    EXPECT_NE(t.recall(fixed, kPort, kNextHop, 100'000), nullptr);
}

// version()'s promise, which a cache hit's reply route leans on: a sender that recalled an entry
// and kept its MAC, the table's version and the entry's reachable deadline gets from recall(),
// for as long as the version is the same and the clock before the deadline, the same entry with
// that MAC. Random lookups, learns (new MACs, the same MAC again, new next hops), permanent
// entries, ticks (stale, probes, expiry, so erasures that move entries) and clears, with the
// clock moving on; after every step every kept answer still vouched for is checked.
TEST(NeighbourTable, AnAnswerKeptWhileTheVersionHoldsIsWhatRecallGives) {
    NeighbourTable t(24, kTimers);
    std::mt19937 rng(5);
    struct Kept {
        uint16_t memo;
        uint32_t ip;
        MacAddr mac;
        uint64_t until;
        uint32_t version;
    };
    std::vector<Kept> kept;
    uint64_t now = 1'000, checked = 0, moves = 0;
    Calls calls;
    const auto ip_of = [](uint32_t i) { return htonl(0xC6126400u + i); };
    for (int step = 0; step < 20'000; ++step) {
        const uint32_t before = t.version();
        const uint32_t i = rng() % 30;
        const MacAddr mac{0x02, 0, 0, 0, 0, static_cast<uint8_t>(rng() % 3)};
        switch (rng() % 8) {
        case 0: case 1: t.lookup(kPort, ip_of(i), now); break;
        case 2: case 3: case 4: t.learn(kPort, ip_of(i), mac, now, rng() % 2 == 0); break;
        case 5: if (rng() % 50 == 0) t.add_permanent(kPort, ip_of(i), mac); break;
        case 6: tick(t, now, calls); break;
        default: if (rng() % 500 == 0) t.clear([](Neighbour&) {}); break;
        }
        now += rng() % 60;
        moves += t.version() != before;
        // What a sender keeps from a recall now.
        if (const Neighbour* n = t.find(kPort, ip_of(i)); n != nullptr) {
            const uint16_t memo = t.memo_of(n);
            if (const Neighbour* r = t.recall(memo, kPort, ip_of(i), now); r != nullptr)
                kept.push_back({memo, ip_of(i), r->mac, r->permanent ? UINT64_MAX : r->confirmed_ms + kTimers.reachable_ms, t.version()});
        }
        std::erase_if(kept, [&](const Kept& k) { return k.version != t.version() || now >= k.until; });
        for (const Kept& k : kept) {
            const Neighbour* r = t.recall(k.memo, kPort, k.ip, now);
            ASSERT_NE(r, nullptr) << "step " << step;
            ASSERT_EQ(r->mac, k.mac) << "step " << step;
            ++checked;
        }
    }
    EXPECT_GT(checked, 10'000u);  // answers were kept and checked, not dropped at once
    EXPECT_GT(moves, 100u);
    EXPECT_LT(moves, 20'000u);  // and not every step moves it
}

// A confirmation (the same MAC again, reachable) and a lookup that finds a reachable entry leave
// the version as it is, so traffic to known neighbours does not undo what senders keep.
TEST(NeighbourTable, ConfirmationsAndResolvedLookupsLeaveTheVersion) {
    NeighbourTable t(16, kTimers);
    t.learn(kPort, kNextHop, kMac, 1'000, true);
    const uint32_t v = t.version();
    t.learn(kPort, kNextHop, kMac, 1'200, false);
    EXPECT_EQ(t.lookup(kPort, kNextHop, 1'300).verdict, Verdict::resolved);
    EXPECT_EQ(t.version(), v);
    t.learn(kPort, kNextHop, kNewMac, 1'400, false);  // a new MAC moves it
    EXPECT_NE(t.version(), v);
}

TEST(NeighbourTable, APassInSlicesDoesWhatOneTickDoes) {
    // Two tables with the same entries: one ticked whole, one in slices of 3 slots.
    NeighbourTable whole(40, kTimers), sliced(40, kTimers);
    for (uint32_t i = 0; i < 30; ++i) {
        const uint32_t ip = htonl(0xC6126400u + i);
        for (NeighbourTable* t : {&whole, &sliced}) {
            if (i % 3 == 0)
                t->lookup(kPort, ip, 1'000);  // incomplete: due a probe
            else
                t->learn(kPort, ip, kMac, i % 3 == 1 ? 1'000 : 100, true);  // reachable; some long ago
        }
    }
    Calls a, b;
    for (const uint64_t now : {1'200ull, 2'000ull, 5'200ull, 7'000ull}) {
        tick(whole, now, a);
        uint32_t from = 0, slices = 0;
        while (from < sliced.slot_count()) {
            from = sliced.tick_slots(
                now, from, 3, [&](Neighbour& n) { b.probes.emplace_back(n.port, n.ip); },
                [&](Neighbour& n, bool failed) { b.expired.push_back({n.port, n.ip, failed, n.held}); });
            ++slices;
        }
        EXPECT_EQ(slices, (sliced.slot_count() + 2) / 3);
        EXPECT_EQ(whole.size(), sliced.size()) << "at " << now;
        EXPECT_EQ(whole.count_port(kPort), sliced.count_port(kPort)) << "at " << now;
    }
    EXPECT_FALSE(a.probes.empty());
    EXPECT_FALSE(a.expired.empty());
    std::multiset<std::pair<uint16_t, uint32_t>> pa(a.probes.begin(), a.probes.end()), pb(b.probes.begin(), b.probes.end());
    EXPECT_EQ(pa, pb);
    EXPECT_EQ(a.expired.size(), b.expired.size());
}

}  // namespace
