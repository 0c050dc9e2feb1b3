// ICMP echo from the gateway's own addresses: the control threads build the request, the data plane
// routes, resolves and sends it, and the reply comes back on the punt ring.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "dataplane/dataplane.hpp"

struct rte_mempool;
struct rte_ring;

namespace fedgate {

struct PingResult {
    uint32_t dst = 0, src = 0;  // network order
    int port = -1;              // index of the port it left by
    uint32_t sent = 0, received = 0;
    std::vector<std::optional<double>> rtt_ms;  // one per probe; nullopt = no reply in time
};

class Pinger {
public:
    static constexpr uint16_t kPayloadBytes = 56;

    // `bell`: the injecting lcore's doorbell, rung after each enqueue (null: none).
    Pinger(rte_mempool* pool, rte_ring* inject, std::vector<DpPortConfig> ports, LcoreWake* bell = nullptr);

    // Sends `count` echo requests to `dst` (network order), one after the other, each waiting up to
    // `timeout` for its reply. Blocks the calling control thread. Throws std::runtime_error when
    // nothing can be sent (no route, no mbufs, ring full).
    PingResult ping(uint32_t dst, uint32_t count, std::chrono::milliseconds timeout);

    // From the punt dispatcher: an echo reply arrived (fields in network order).
    void on_echo_reply(uint32_t src, uint16_t ident, uint16_t seq);
    uint64_t unmatched_replies() const;
    // Ends every ping in progress (they report what they have) and refuses new ones: for shutdown.
    void cancel();

private:
    using Clock = std::chrono::steady_clock;
    struct Key {
        uint16_t ident, seq;
        bool operator<(const Key& o) const { return ident != o.ident ? ident < o.ident : seq < o.seq; }
    };
    struct Waiter {
        uint32_t dst;
        Clock::time_point sent;
        std::optional<Clock::time_point> answered;
    };

    rte_mempool* pool_;
    rte_ring* inject_;
    std::vector<DpPortConfig> ports_;
    LcoreWake* bell_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::map<Key, Waiter> waiting_;
    uint16_t next_ident_ = 0;
    uint64_t unmatched_ = 0;
    bool cancelled_ = false;
};

}  // namespace fedgate
