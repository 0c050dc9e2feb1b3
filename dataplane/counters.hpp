// Counters the data plane writes and the control threads read, lock-free: one writer per counter.
#pragma once

#include <atomic>
#include <cstdint>

#include "dataplane/drop_reason.hpp"

namespace fedgate {

// A counter with a single writer (its lcore). The writer does load+store, not an atomic
// read-modify-write, so the hot path pays no locked instruction; readers see a torn-free value.
class Counter {
public:
    // Inlined wherever it is used: in the data plane's larger functions GCC had left it a call.
    [[gnu::always_inline]] void add(uint64_t n = 1) {
        v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    uint64_t get() const { return v_.load(std::memory_order_relaxed); }
    // Only while no lcore writes it (a table slot before it is published).
    void reset() { v_.store(0, std::memory_order_relaxed); }

private:
    std::atomic<uint64_t> v_{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct alignas(64) PortCounters {
    Counter rx_packets, rx_bytes, tx_packets, tx_bytes;
    Counter drops[kDropReasonCount];

    void drop(DropReason r) { drops[static_cast<std::size_t>(r)].add(); }
    uint64_t total_drops() const {
        uint64_t t = 0;
        for (const auto& d : drops) t += d.get();
        return t;
    }
};

// Per-lcore event counters that belong to no single port.
struct alignas(64) LcoreCounters {
    Counter polls, busy_polls, idle_sleeps, idle_yields;
    Counter arp_requests_sent, arp_requests_received, arp_replies_sent, arp_replies_received;
    Counter echo_requests_received, echo_replies_sent;
    Counter neigh_learned, neigh_expired, neigh_failed;
    Counter punted, injected;
    Counter control_wakeups;  // eventfd writes to a sleeping control thread (ControlWake)
    Counter handoffs_sent, handoffs_received;  // packets steered to / taken from another worker
    Counter arp_copies_sent;                   // ARP packets copied to the other workers to learn from
    Counter arp_copies_failed;                 // ... copies not made (no mbuf)
    Counter doorbell_wakeups;                  // waits ended by the doorbell (LcoreWake)
    Counter arp_gratuitous_sent;               // announcements of our addresses after a takeover ([cluster])
};

}  // namespace fedgate
