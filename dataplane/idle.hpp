// Adaptive polling: after a run of empty polls the lcore sleeps, doubling the nap up to a cap, so
// idle gateways leave the CPU to others; the first packet resets it. `spin` never sleeps.
#pragma once

#include <algorithm>
#include <cstdint>

namespace fedgate {

struct IdleConfig {
    bool spin = false;
    uint32_t empty_polls_before_sleep = 256;
    uint32_t min_sleep_us = 1;
    uint32_t max_sleep_us = 200;
};

class IdleBackoff {
public:
    explicit IdleBackoff(IdleConfig c) : cfg_(c) {}

    // Called after every poll with the number of packets it handled. Returns how long to sleep
    // now, in microseconds (0: poll again at once).
    uint32_t after_poll(uint32_t handled) {
        if (handled != 0 || cfg_.spin) {
            empty_ = 0;
            sleep_us_ = 0;
            return 0;
        }
        if (++empty_ < cfg_.empty_polls_before_sleep) return 0;
        sleep_us_ = sleep_us_ == 0 ? cfg_.min_sleep_us : std::min(sleep_us_ * 2, cfg_.max_sleep_us);
        return sleep_us_;
    }

private:
    IdleConfig cfg_;
    uint32_t empty_ = 0;
    uint32_t sleep_us_ = 0;
};

}  // namespace fedgate
