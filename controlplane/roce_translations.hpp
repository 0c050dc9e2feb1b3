// The RoCE v2 translations of this gateway: the virtual QPNs of its two sides and, for every RDMA
// connection between parties that established through it, the two table entries the lcore applies
// (dataplane/roce.hpp). Control threads only; the lcore reads the RoceView.
//
// For a connection of local node n (QP qn) with a peer party whose gateway has external address P:
//   internal side, vQPN vi:  n -> (our internal address, vi)   becomes  (our external, P, DestQP pv)
//   external side, vQPN ve:  P -> (our external address, ve)   becomes  (our internal, n, DestQP qn)
// where pv is the vQPN the peer gateway handed out on its external side. A virtual QPN's low bits
// are its slot, the high bits a generation that moves on each reuse, so a value still in use is never
// handed out and a freed one comes back late. A slot freed after the lcore could see it is reused
// only after an RCU grace period.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "dataplane/dataplane.hpp"
#include "proto/resolve_wire.hpp"
#include "dataplane/roce.hpp"

namespace fedgate {

inline constexpr uint32_t kMaxRdmaMaxConnections = 1u << 20;

// One established connection as this gateway translates it. Addresses host order.
struct RoceConn {
    uint64_t conn_id = 0;
    ProcessId initiator, target;
    ProcessId local;          // the process of this party
    ProcessId remote;         // the other party's
    uint16_t peer_party = 0;
    uint32_t node_addr = 0;   // the local process's RoCE address (its GID's IPv4)
    uint32_t node_qpn = 0;    // its real QPN
    uint32_t peer_addr = 0;   // the peer gateway's external address
    uint32_t peer_vqpn = 0;   // the vQPN the peer gateway's external side handed out
    uint32_t internal_vqpn = 0, external_vqpn = 0;  // ours, reserved before
};

struct RoceCounters {
    uint64_t reserved = 0, released = 0, installed = 0, exhausted = 0, install_failed = 0;
    uint64_t removed_process = 0, removed_peer = 0, removed_idle = 0;
};

class RoceTranslations {
public:
    using Synchronize = std::function<void()>;

    // `capacity`: connections at once (rounded up to a power of two, 4..kMaxRdmaMaxConnections).
    // `ports`: the gateway's ports (addresses and routes for the entries). `sync` waits until no
    // lcore can still see a cleared entry.
    // `seed` picks the first generation of each side (random by default), so a gateway's virtual
    // QPNs differ from one start to the next and from the other side's: a packet of a connection
    // from before a restart does not hit a new one by chance.
    RoceTranslations(uint32_t capacity, std::vector<DpPortConfig> ports, Synchronize sync,
                     std::optional<uint32_t> seed = std::nullopt);

    const RoceView& view() const { return view_; }
    uint32_t capacity() const { return view_.mask + 1; }
    // The first port of each role's address, network order (0 when there is none).
    uint32_t address(RoceSide side) const { return side == RoceSide::internal ? internal_addr_ : external_addr_; }

    // A virtual QPN on `side` that nothing uses; empty (counted) when every slot is taken.
    std::optional<uint32_t> reserve(RoceSide side);
    // Gives back a reserved vQPN that was never installed (a refused or timed-out handshake).
    void release(RoceSide side, uint32_t vqpn);
    // Publishes both entries of `c` (its vQPNs reserved before); they then belong to the table.
    // False when no port routes to the node or the peer (both vQPNs are released).
    bool install(const RoceConn& c, uint64_t now_ms);

    // Removes the connections of process `pid` (local or remote); returns how many.
    std::size_t remove_process(ProcessId pid);
    std::size_t remove_peer(uint16_t party);
    // Connections with no packet either way for `idle_ms` go; freed slots come back after a grace period.
    void tick(uint64_t now_ms, uint64_t idle_ms);

    std::size_t size() const { return conns_.size(); }
    nlohmann::ordered_json list(std::size_t limit, uint64_t now_ms) const;
    nlohmann::ordered_json stats() const;
    const RoceCounters& counters() const { return counters_; }

private:
    enum class Slot : uint8_t { free, reserved, installed, quarantined, unusable };
    struct Side {
        std::unique_ptr<RoceEntry[]> entries;
        std::vector<Slot> state;
        std::vector<uint32_t> generation;
        std::deque<uint32_t> free;  // FIFO: a freed slot waits behind all the others
        std::vector<uint32_t> quarantine;
    };
    struct Installed {
        RoceConn conn;
        uint64_t installed_ms = 0, active_ms = 0, seen_packets = 0;
    };

    uint32_t vqpn_of(uint32_t slot, uint32_t gen) const { return (gen << bits_ | slot) & kQpnMask; }
    void clear(RoceSide side, uint32_t vqpn);  // unpublish and quarantine
    bool fill(RoceSide side, uint32_t vqpn, uint32_t expect_src, uint32_t old_dst, uint32_t new_src, uint32_t new_dst,
              uint32_t new_dqpn, uint32_t route_to);
    template <typename Pred>
    std::size_t remove_if(Pred pred);
    uint64_t packets(const RoceConn& c) const;

    std::vector<DpPortConfig> ports_;
    uint32_t internal_addr_ = 0, external_addr_ = 0;
    Synchronize sync_;
    uint32_t bits_ = 0;
    Side sides_[2];
    RoceView view_;
    std::map<std::pair<uint64_t, uint64_t>, Installed> conns_;  // (initiator, conn_id)
    RoceCounters counters_;
};

}  // namespace fedgate
