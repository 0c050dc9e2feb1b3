// The process directory: the compute processes registered with this gateway, with their DMA
// address records, who may register what, heartbeats and expiry. Pure (time is passed in); the
// resolution service publishes its changes into the cache and announces them to peers.
#pragma once

#include <cstdint>
#include <mutex>
#include <functional>
#include <optional>
#include <queue>
#include <unordered_map>
#include <vector>

#include "proto/resolve_wire.hpp"

namespace fedgate {

struct LocalProcess {
    DmaAddress record;
    uint32_t source = 0;  // host order: the address it registered from
    uint64_t registered_ms = 0;
    uint64_t expires_ms = 0;
};

// What a call changed, for the cache and the peers.
struct DirectoryChange {
    enum class Kind : uint8_t { none, added, replaced, removed } kind = Kind::none;
    DmaAddress record;  // the new record (added/replaced) or the one that left (removed)
};

struct DirectoryCounters {
    uint64_t registered = 0, refreshed = 0, replaced = 0, deregistered = 0, expired = 0, heartbeats = 0,
             refused_wrong_party = 0, refused_address = 0, refused_unknown = 0, refused_stale_epoch = 0,
             refused_bad_record = 0, refused_full = 0, restored = 0;
};

class Directory {
public:
    Directory(uint16_t party_id, std::size_t capacity, uint32_t heartbeat_timeout_ms);

    // `source` (host order) is where the message came from. A record must name this party and the
    // sender's own address; the same epoch refreshes, a new epoch replaces (the process restarted).
    RegStatus register_process(const DmaAddress& record, uint32_t source, uint64_t now_ms, DirectoryChange* change);
    RegStatus heartbeat(ProcessId pid, uint32_t epoch, uint32_t source, uint64_t now_ms);
    RegStatus deregister(ProcessId pid, uint32_t epoch, uint32_t source, DirectoryChange* change);
    // A record a gateway group's store held ([cluster]), taken up by a member that became active:
    // it stays while its process keeps sending heartbeats, from now on. False if it is not ours, is
    // held already, or the directory is full.
    bool restore(const DmaAddress& record, uint32_t source, uint64_t now_ms);
    // Takes back a registration the store did not take (that epoch only); no counter moves.
    bool forget(ProcessId pid, uint32_t epoch);
    // Removes every process whose heartbeats stopped; returns their records.
    std::vector<DmaAddress> expire(uint64_t now_ms);

    std::optional<LocalProcess> find(ProcessId pid) const;
    std::vector<LocalProcess> list() const;
    std::vector<DmaAddress> records() const;
    std::size_t size() const;
    DirectoryCounters counters() const;

private:
    RegStatus refuse(RegStatus s);
    RegStatus check_sender(ProcessId pid, uint32_t epoch, uint32_t source) const;  // under mu_

    const uint16_t party_id_;
    const std::size_t capacity_;
    const uint32_t timeout_ms_;
    // Registrations arrive on one control thread while management requests read from others;
    // every operation is short, so one mutex serves.
    mutable std::mutex mu_;
    std::unordered_map<uint64_t, LocalProcess> procs_;
    // Every deadline ever set, soonest first; one that a heartbeat has since moved is skipped when
    // it comes up. Expiry then costs only what expires (a scan of every process each tick does not
    // scale to a million of them). Holds at most about timeout/heartbeat entries per process.
    using Deadline = std::pair<uint64_t, uint64_t>;  // expires_ms, pid
    std::priority_queue<Deadline, std::vector<Deadline>, std::greater<>> deadlines_;
    DirectoryCounters counters_;
};

}  // namespace fedgate
