// Which member of a gateway group is active: an etcd-style election on a lease. Each member holds a
// lease it keeps alive and a member key under it; the first to create the leader key (a
// transaction that puts it only where it does not exist) under its lease is active until that
// lease ends: the member dies (the lease expires after its TTL), resigns, or finds the key no
// longer its own. A pure state machine: the store and the clock are passed in, so the tests drive
// it against MemStore with their own time.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "controlplane/kv_store.hpp"

namespace fedgate {

// The keys of a party's shared state: everything under one prefix per party.
struct ClusterKeys {
    std::string prefix;  // "/fedgate/<party>/"
    explicit ClusterKeys(const std::string& party) : prefix("/fedgate/" + party + "/") {}
    std::string members() const { return prefix + "members/"; }
    std::string member(const std::string& name) const { return members() + name; }
    std::string leader() const { return prefix + "leader"; }
    std::string failover() const { return prefix + "failover"; }
    std::string mappings() const { return prefix + "mappings"; }
    std::string processes() const { return prefix + "processes/"; }
};

struct ElectionSettings {
    std::string member;
    int64_t lease_ttl_s = 2;
    std::string info;  // the member key's value (JSON the status shows)
};

struct Failover {
    std::string from, to;
    uint64_t at_unix_ms = 0;
};

class Election {
public:
    Election(KvStore& store, const ClusterKeys& keys, ElectionSettings s);

    // One round at `now_ms` (monotonic) and `unix_ms` (wall clock, for the failover record): keeps
    // the lease alive (a third of the TTL apart), (re)registers the member, campaigns while not
    // active, checks the leader key while active, reads the members. Never throws: a store that
    // cannot be asked is noted (store_ok, last_error) and the round ends there.
    void step(uint64_t now_ms, uint64_t unix_ms);
    // Gives the leader key up (if ours) and revokes the lease: a clean stop hands over at once.
    void resign();

    bool active() const { return active_; }
    const std::string& leader() const { return leader_; }  // "" when none is known
    int64_t lease() const { return lease_; }
    bool store_ok() const { return store_ok_; }
    const std::string& last_error() const { return last_error_; }
    const std::vector<KvEntry>& members() const { return members_; }
    const std::optional<Failover>& last_failover() const { return failover_; }
    uint64_t became_active() const { return became_active_; }  // times this member took over
    uint64_t stepped_down() const { return stepped_down_; }
    uint64_t lease_renewals() const { return renewals_; }
    uint64_t store_errors() const { return store_errors_; }
    // Monotonic ms of the last keepalive the store confirmed (0: none yet).
    uint64_t last_keepalive_ms() const { return last_ok_ms_; }

private:
    void demote(const char* why);
    void keep_lease(uint64_t now_ms);
    void campaign(uint64_t unix_ms);
    void check_leader();

    KvStore& store_;
    ClusterKeys keys_;
    ElectionSettings s_;
    int64_t lease_ = 0;
    bool registered_ = false;  // the member key is under the current lease
    uint64_t last_sent_ms_ = 0, last_ok_ms_ = 0;
    bool unreachable_ = false;  // the last round reached no endpoint at all
    uint64_t last_read_ms_ = 0;  // members and failover last read (they change rarely)
    uint64_t reads_at_ = 0;      // became_active_ then: a takeover reads them at once
    bool active_ = false;
    bool store_ok_ = false;
    std::string leader_;
    std::string last_error_;
    std::vector<KvEntry> members_;
    std::optional<Failover> failover_;
    uint64_t became_active_ = 0, stepped_down_ = 0, renewals_ = 0, store_errors_ = 0;
};

nlohmann::ordered_json failover_json(const Failover& f);
std::optional<Failover> failover_from(const std::string& text);

}  // namespace fedgate
