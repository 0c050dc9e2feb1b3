// The data plane of one lcore: the run-to-completion loop (rx burst, parse, classify, act, tx)
// over the gateway's ports, with the ARP/ICMP responder, neighbour resolution, and the rings to and
// from the control threads. Never blocks, allocates (beyond mbufs), throws or takes a lock once running.
#pragma once

#include <rte_ether.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "dataplane/counters.hpp"
#include "dataplane/idle.hpp"
#include "dataplane/nat.hpp"
#include "dataplane/neighbour.hpp"
#include "dataplane/packet.hpp"

struct rte_mbuf;
struct rte_mempool;
struct rte_ring;
struct rte_rcu_qsbr;

namespace fedgate {

enum class PortRole : uint8_t { internal, external };

// What the data plane needs to know about one port; addresses in network byte order.
struct DpPortConfig {
    uint16_t port_id = 0;  // DPDK ethdev port
    PortRole role = PortRole::internal;
    rte_ether_addr mac{};
    uint32_t addr = 0;
    uint8_t prefix_len = 24;
    uint32_t next_hop = 0;  // 0: none (only the port's own subnet is reachable through it)
    std::vector<std::pair<uint32_t, MacAddr>> static_neighbours;  // configured ARP entries
};

struct DataplaneConfig {
    IdleConfig idle;
    NeighbourTimers neighbour;
    uint32_t neighbour_capacity = 4096;
    NatConfig nat;
};

// Rings between the lcore and the control threads. Both carry mbufs.
//  punt:   lcore -> control, packets the control threads must see (echo replies to our pings, ...)
//  inject: control -> lcore, IPv4 packets (no Ethernet header) the lcore routes, resolves and sends
//  requests: control -> lcore, DpRequest pointers: questions only the lcore can answer (its tables)
struct DpRings {
    rte_ring* punt = nullptr;
    rte_ring* inject = nullptr;
    rte_ring* requests = nullptr;
};

// A question to the lcore. The control thread sizes `sessions` (reserve) before it asks, so the
// lcore fills it without allocating, then sets `done` (release) and never touches it again.
struct DpRequest {
    enum class Kind : uint8_t { session_dump } kind = Kind::session_dump;
    uint32_t limit = 0;
    std::vector<Session> sessions;
    uint64_t total = 0;
    uint64_t now_ms = 0;
    std::atomic<bool> done{false};
};

// What the lcore reads that control threads change: the port maps, and the RCU variable the lcore
// reports its quiescent states on (thread id = its data-plane index), so old rules can be freed.
struct DpShared {
    const PortMapView* maps = nullptr;
    rte_rcu_qsbr* rcu = nullptr;
    unsigned rcu_thread = 0;
};

class Dataplane {
public:
    static constexpr uint16_t kBurst = 32;
    static constexpr uint16_t kTxQueueLen = 2 * kBurst;
    static constexpr uint32_t kTickMs = 50;  // neighbour timers run at this period

    Dataplane(const DataplaneConfig& cfg, const std::vector<DpPortConfig>& ports, rte_mempool* pool, DpRings rings,
              DpShared shared = {});
    ~Dataplane();
    Dataplane(const Dataplane&) = delete;
    Dataplane& operator=(const Dataplane&) = delete;

    // One pass over every port and the inject ring. Returns how many packets it handled.
    uint32_t poll_once();
    // The lcore main loop, until `quit` turns true. Idle back-off sleeps between empty polls.
    void run(const std::atomic<bool>& quit);

    // Read from any thread (lock-free).
    std::size_t port_count() const { return nports_; }
    const PortCounters& port_counters(std::size_t i) const { return ports_[i].counters; }
    const LcoreCounters& counters() const { return counters_; }
    const NatCounters& nat_counters() const { return nat_.counters(); }
    uint64_t session_count() const { return sessions_gauge_.load(std::memory_order_relaxed); }
    // Free ports of a NAT pool as of the last timer tick, and the pool's size.
    uint64_t pool_free(Nat::Pool pool, L4Proto proto) const {
        return pool_free_[static_cast<int>(pool)][static_cast<int>(proto)].load(std::memory_order_relaxed);
    }
    uint64_t pool_size(Nat::Pool pool, L4Proto proto) const { return nat_.pool(pool, proto).size(); }
    uint64_t neighbour_entries() const { return neigh_entries_.load(std::memory_order_relaxed); }
    uint64_t neighbour_entries(std::size_t port) const {
        return ports_[port].neigh_entries.load(std::memory_order_relaxed);
    }

    // Which port and next hop reach `dst` (network order); -1 if none. Pure; any thread.
    static int route(const std::vector<DpPortConfig>& ports, uint32_t dst, uint32_t* next_hop);

private:
    struct Port {
        DpPortConfig cfg;
        uint32_t mask = 0;  // network order
        PortCounters counters;
        std::atomic<uint64_t> neigh_entries{0};
        uint16_t tx_len = 0;
        rte_mbuf* tx[kTxQueueLen];
    };

    void handle(rte_mbuf* m, uint16_t in);
    void handle_arp(rte_mbuf* m, uint16_t in, const ParsedPacket& p);
    void handle_ipv4(rte_mbuf* m, uint16_t in, const ParsedPacket& p);
    void handle_local_icmp(rte_mbuf* m, uint16_t in, const ParsedPacket& p);
    void handle_inject(rte_mbuf* m);
    void answer(DpRequest& r);
    // Carries out the NAT's verdict; false when the packet is not the NAT's (the caller goes on).
    bool act(rte_mbuf* m, uint16_t in, const Nat::Verdict& v);
    void send_ipv4(rte_mbuf* m, uint16_t out, uint32_t next_hop);
    void send_arp_request(uint16_t out, uint32_t target_ip);
    void tx(rte_mbuf* m, uint16_t out);
    void flush();
    void drop(rte_mbuf* m, uint16_t port, DropReason r);
    bool owns_address(uint32_t ip) const;
    void tick(uint64_t now_ms);
    uint64_t now_ms() const;

    std::unique_ptr<Port[]> ports_;  // fixed at construction: counters never move
    std::size_t nports_;
    std::vector<DpPortConfig> port_cfgs_;  // for route(); off the per-packet path
    static int route_for_nat(const void* self, uint32_t dst, uint32_t* next_hop);
    static std::vector<NatPort> nat_ports(const std::vector<DpPortConfig>& ports);
    LcoreCounters counters_;
    NeighbourTable neigh_;
    PortMapView empty_maps_;  // used when no maps are shared (tests of the responder alone)
    Nat nat_;
    DpShared shared_;
    std::atomic<uint64_t> sessions_gauge_{0};
    std::atomic<uint64_t> pool_free_[2][kL4Protos] = {};
    std::atomic<uint64_t> neigh_entries_{0};
    rte_mempool* pool_;
    DpRings rings_;
    IdleConfig idle_;
    uint64_t tsc_per_ms_;
    uint64_t now_ms_ = 0;
    uint64_t next_tick_ms_ = 0;
};

}  // namespace fedgate
