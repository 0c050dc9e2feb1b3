// Adaptive polling: after a run of empty polls the lcore yields the CPU between polls for a short
// while after its last packet, then waits, so idle gateways leave the CPU to others, and the first
// packet ends the wait. Where every RX queue it polls has a descriptor that turns readable on
// traffic (an rx interrupt's event fd, or the af_packet / af_xdp socket), the lcore blocks on those
// up to the longest nap and wakes on the packet; otherwise it naps, short and precise while traffic
// is recent, doubling up to the cap once it is not. `spin` never waits.
#pragma once

#include <rte_config.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace fedgate {

// Milliseconds from TSC ticks by a multiply: the lcore turns its clock into milliseconds once a
// poll, and a 64-bit division there (with a second TSC read for the back-off) was a fortieth of a
// poll at 1K flows (dropping both gave 38.5-39.0 Mpps against 37.1-37.6 in nat_bench, alternated).
// ms(t) is floor(t / ticks per ms) or, close to a millisecond's end, one more (the constant,
// 2^64 / ticks per ms, is rounded up); never less, and never smaller for a later t.
class TickClock {
public:
    explicit TickClock(uint64_t ticks_per_s)
        : per_ms_(std::max<uint64_t>(ticks_per_s / 1000, 2)), inverse_(UINT64_MAX / per_ms_ + 1) {}
    uint64_t ms(uint64_t ticks) const {
        __extension__ using u128 = unsigned __int128;
        return static_cast<uint64_t>((static_cast<u128>(ticks) * inverse_) >> 64);
    }
    uint64_t ticks_per_ms() const { return per_ms_; }

private:
    uint64_t per_ms_;   // at least 2, so that the inverse fits in 64 bits
    uint64_t inverse_;  // ceil(2^64 / per_ms_)
};

struct IdleConfig {
    bool spin = false;
    uint32_t empty_polls_before_sleep = 4;
    uint32_t min_sleep_us = 1;
    uint32_t max_sleep_us = 200;
    // Naps of min_sleep_us before they start doubling: a ping-pong's next packet comes within a
    // few of them, so it never meets a long nap; an idle lcore gets past them in a few ms.
    uint32_t warm_naps = 1024;
    // Wakeable waits (traffic ends them) of max_sleep_us, this many in a row (about 50 ms),
    // before they double up to deep_sleep_max_us: what an idle gateway costs then is a few
    // hundred wake-ups a second. Work on rings ends a wait through the lcore's doorbell
    // (LcoreWake); without one it waits that long, and only after 50 ms without a packet.
    uint32_t deep_after_waits = 250;
    uint32_t deep_sleep_max_us = 5000;
    // For this long after the last packet, empty polls past empty_polls_before_sleep go on, each
    // after a sched_yield (the caller's), instead of waiting: the reply to what the lcore just sent
    // usually comes within it and then costs no wake-up, while a thread that wants the CPU gets it
    // at the next yield. 0: wait as soon as the empty polls are done ([dataplane] idle_yield_us sets
    // it, 300 by default).
    uint32_t yield_us = 0;
};

class IdleBackoff {
public:
    // `wakeable`: the wait ends on traffic, so it may as well be the longest at once.
    // `ticks_per_us`: the rate of the clock after_poll is given (the TSC's, on an lcore).
    explicit IdleBackoff(IdleConfig c, bool wakeable = false, uint64_t ticks_per_us = 1)
        : cfg_(c), wakeable_(wakeable), yield_ticks_(uint64_t{c.yield_us} * ticks_per_us) {}

    // Called after every poll with the number of packets it handled and the time now. Returns how
    // long to wait now, in microseconds (0: poll again at once, after a sched_yield if yielding()).
    uint32_t after_poll(uint32_t handled, uint64_t now = 0) {
        yield_ = false;
        if (handled != 0 || cfg_.spin) {
            empty_ = 0;
            naps_ = 0;
            sleep_us_ = 0;
            last_busy_ = now;
            return 0;
        }
        if (empty_ < cfg_.empty_polls_before_sleep) ++empty_;
        if (empty_ < cfg_.empty_polls_before_sleep) return 0;
        // Unsigned: a clock that went backwards reads as a long time ago.
        if (now - last_busy_ < yield_ticks_) {
            yield_ = true;
            return 0;
        }
        if (wakeable_) {
            if (naps_ < cfg_.deep_after_waits) {
                ++naps_;
                return sleep_us_ = cfg_.max_sleep_us;
            }
            const uint32_t deep = std::max(cfg_.deep_sleep_max_us, cfg_.max_sleep_us);
            return sleep_us_ = sleep_us_ == 0 ? deep : std::min(std::max(sleep_us_ * 2, cfg_.max_sleep_us), deep);
        }
        if (naps_ < cfg_.warm_naps) {
            ++naps_;
            return sleep_us_ = cfg_.min_sleep_us;
        }
        sleep_us_ = sleep_us_ == 0 ? cfg_.min_sleep_us : std::min(sleep_us_ * 2, cfg_.max_sleep_us);
        return sleep_us_;
    }

    // The last after_poll asked for a sched_yield before the next poll.
    bool yielding() const { return yield_; }

private:
    IdleConfig cfg_;
    bool wakeable_;
    bool yield_ = false;
    uint64_t yield_ticks_;
    uint64_t last_busy_ = 0;
    uint32_t empty_ = 0;
    uint32_t naps_ = 0;
    uint32_t sleep_us_ = 0;
};

// What wakes a waiting lcore when one RX queue gets a packet, recorded by port bring-up
// (drivers/port.cpp) for the lcore that polls the queue. `interrupt`: an rx interrupt's event fd,
// armed with rte_eth_dev_rx_intr_enable before each wait; otherwise a socket that poll() reports
// readable while the queue holds packets.
struct RxWakeSource {
    int fd = -1;
    bool interrupt = false;
};

inline constexpr uint16_t kMaxWakeQueues = 16;

namespace detail {
// Written at start-up before the lcores are launched (rte_eal_remote_launch orders it before their
// reads) and when a port is closed after they stopped.
inline std::array<std::array<RxWakeSource, kMaxWakeQueues>, RTE_MAX_ETHPORTS> g_rx_wake{};
}  // namespace detail

inline void record_rx_wake_source(uint16_t port_id, uint16_t queue, RxWakeSource s) {
    if (port_id < RTE_MAX_ETHPORTS && queue < kMaxWakeQueues) detail::g_rx_wake[port_id][queue] = s;
}
inline RxWakeSource rx_wake_source(uint16_t port_id, uint16_t queue) {
    return port_id < RTE_MAX_ETHPORTS && queue < kMaxWakeQueues ? detail::g_rx_wake[port_id][queue] : RxWakeSource{};
}
inline void forget_rx_wake_sources(uint16_t port_id) {
    if (port_id < RTE_MAX_ETHPORTS) detail::g_rx_wake[port_id] = {};
}

struct RxQueueRef {
    uint16_t port_id = 0;
    uint16_t queue = 0;
};

// The waiting itself, for one lcore: blocks in ppoll on the queues' wake descriptors when every
// queue has one, else sleeps. While it lives, the thread's timer slack is 1 µs instead of Linux's
// default 50 µs, which would stretch every 1 µs nap to about 55 µs.
class IdleWaiter {
public:
    static constexpr size_t kMaxPollFds = 64;

    // `doorbell`: a descriptor (an eventfd) that also ends a wakeable wait; -1 for none. The
    // caller reads it to reset it.
    explicit IdleWaiter(std::span<const RxQueueRef> queues, int doorbell = -1);
    ~IdleWaiter();
    IdleWaiter(const IdleWaiter&) = delete;
    IdleWaiter& operator=(const IdleWaiter&) = delete;

    // True when traffic on any of the queues ends a wait (every queue has a wake source).
    bool wakeable() const { return wakeable_; }
    // Waits up to `us` microseconds; returns true if a queue's descriptor (or the doorbell)
    // turned readable.
    bool wait(uint32_t us);
    // The last wait found the doorbell readable (the caller reads it, to empty it).
    bool doorbell_rang() const { return doorbell_rang_; }

private:
    std::vector<RxQueueRef> interrupts_;  // queues to arm before waiting
    std::vector<int> fds_;                // sockets, the doorbell, then the EAL epoll descriptor if any
    int epfd_ = -1;
    int doorbell_at_ = -1;  // its index in fds_
    bool doorbell_rang_ = false;
    bool wakeable_ = false;
    long saved_slack_ns_ = -1;
};

}  // namespace fedgate
