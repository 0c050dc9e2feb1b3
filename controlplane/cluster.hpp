// A gateway's role in its party's group ([cluster]): the election on the store, the mappings kept
// in the store and watched for other members' changes, and `fedgatectl cluster status`. The
// gateway builds one when [cluster] names a store and hands it the port-map table; without one
// nothing here runs and the gateway is alone, as always.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <unordered_map>
#include <string>
#include <thread>
#include <vector>

#include "controlplane/config.hpp"
#include "controlplane/election.hpp"
#include "controlplane/kv_store.hpp"
#include "controlplane/portmap_table.hpp"
#include "controlplane/resolution.hpp"
#include "controlplane/session_sync.hpp"
#include "proto/resolve_wire.hpp"

namespace fedgate {

// The run-time mappings as one key in the store, replaced with compare-and-swap on its revision.
class StoreMapState final : public MapState {
public:
    StoreMapState(KvStore& store, std::string key) : store_(store), key_(std::move(key)) {}
    std::optional<std::string> read() override;
    void write(const std::string& text) override;
    std::string where() const override { return "cluster store key " + key_; }
    // The key's mod revision as last read or written here; -1 until the store has been read.
    int64_t revision() const { return revision_.load(std::memory_order_acquire); }

private:
    KvStore& store_;
    std::string key_;
    std::atomic<int64_t> revision_{-1};
};

// What a member knows of the directory's segments in the store, for compaction: which segment
// holds each process's newest entry, how many segments hold an entry for it, and so which segments
// nothing needs any more. A segment is needed while it holds a process's newest entry that is a
// registration, or a removal that still hides an older registration in another segment. Built from
// the store (rebuild) before a member's first write and after any write whose outcome is unknown;
// kept up to date after each transaction the store took. Shared by one member's writer threads,
// and built again whenever the member becomes active (another member may have written meanwhile):
// from the takeover's read of the directory, or by the first write.
// A segment as read from the store: its key, its mod revision and the changes it holds.
struct StoredSegment {
    std::string key;
    int64_t mod_revision = 0;
    std::vector<DirectoryStore::Op> ops;
};

class SegmentIndex {
public:
    std::mutex mu;  // the callers hold it around each call below

    bool valid() const { return valid_; }
    void invalidate() { valid_ = false; }
    // Everything again from the store's segments (StoreDirectory::read_segments: in commit order).
    void rebuild(const std::vector<StoredSegment>& segments);
    // A segment the store took, with its changes (skipped if already known).
    void add(const std::string& key, std::span<const DirectoryStore::Op> ops);
    // A segment the store deleted.
    void erased(const std::string& key);
    // Up to `max` segments nothing needs, handed out once (to one transaction); put back with
    // untake() when that transaction was refused.
    std::vector<std::string> take_dead(std::size_t max);
    void untake(const std::vector<std::string>& keys);
    // The key of a new segment: unique to this index's life (a random start) and in write order.
    std::string next_key(const std::string& prefix);

    std::size_t segments() const { return segs_.size(); }
    std::size_t processes() const { return pids_.size(); }  // with an entry in some segment

private:
    struct Seg {
        std::string key;
        std::vector<std::pair<uint64_t, bool>> entries;  // (process, a registration)
        uint32_t live = 0;                                // entries still needed
        bool erasing = false;
    };
    struct Pid {
        uint64_t seg = 0;  // the segment with the newest entry
        bool removed = false;
        uint32_t holders = 0;      // segments with an entry for it
        uint32_t registered = 0;   // ... of which a registration
    };
    // A newest entry is needed when it is a registration, or a removal that hides one.
    static bool needed(const Pid& p) { return !p.removed || p.registered > 0; }
    void release(uint64_t seg);

    bool valid_ = false;
    uint64_t next_id_ = 1, next_seq_ = 0, start_ = 0;
    std::unordered_map<uint64_t, Seg> segs_;
    std::unordered_map<std::string, uint64_t> by_key_;
    std::unordered_map<uint64_t, Pid> pids_;
    std::set<uint64_t> dead_;  // live == 0, not handed out
};

// The directory as the group's store keeps it: under <prefix>processes/, a segment per write (each
// write's changes, a process's last one, as fixed-size binary entries: a registration or a
// removal). A process's newest entry wins: the one in the segment with the highest mod revision
// (a process has one change in flight at a time, so the store commits its changes in order). etcd's
// cost is per key and per transaction, so a segment of a few hundred registrations costs it about
// what one registration did as a key of its own. A write deletes, in its own transaction, the
// segments nothing needs any more (SegmentIndex), and then any those deletions left unneeded, so a
// process that is gone leaves nothing behind. A key of the earlier layout (one JSON record per
// process) reads as a segment of one registration and goes the same way once superseded. A delete
// transaction holds up to `txn_ops` keys ([cluster] txn_ops); a store that refuses that many
// (etcd's --max-txn-ops lower) gets 128 from then on, and the first time is logged.
class StoreDirectory final : public DirectoryStore {
public:
    // What a refused size falls back to: etcd's default --max-txn-ops ([cluster] txn_ops's default).
    static constexpr std::size_t kStoreDefaultTxnOps = kDefaultTxnOps;
    // Most entries in one segment: 4,096 of 55 bytes keep a transaction well under etcd's
    // --max-request-bytes (1.5 MiB by default).
    static constexpr std::size_t kSegmentEntries = 4096;
    static constexpr std::size_t kEntryBytes = 1 + sizeof(DmaAddressWire) + 4 + 2;
    // `index`: shared with the member's other writers (null: one of its own). A directory given
    // one also rebuilds it from what load() reads (a takeover's read then serves the first write).
    StoreDirectory(KvStore& store, const ClusterKeys& keys, std::size_t txn_ops = kStoreDefaultTxnOps,
                   std::shared_ptr<SegmentIndex> index = nullptr)
        : store_(store), keys_(keys), txn_ops_(std::max<std::size_t>(txn_ops, 1)), index_on_load_(index != nullptr),
          index_(index ? std::move(index) : std::make_shared<SegmentIndex>()) {}
    void write(std::span<const Op> ops) override;
    // The delete transactions' size in use: txn_ops, or 128 after the store refused it.
    std::size_t txn_ops() const { return txn_ops_.load(std::memory_order_relaxed); }
    std::vector<StoredProcess> load(std::string* version = nullptr) override;
    std::string version() override;  // the processes prefix's key count and newest mod revision
    // A segment's value, and what one holds (nullopt: not a segment, nor a record of the earlier
    // layout, or any entry malformed).
    static std::string encode_segment(std::span<const Op> ops);
    static std::optional<std::vector<Op>> decode_segment(const std::string& value);
    // The earlier layout's value: one process as JSON.
    static std::string encode(const StoredProcess& p);
    static std::optional<StoredProcess> decode(const std::string& value);
    // The segments among the keys read (those that decode), in commit order (mod revision).
    static std::vector<StoredSegment> read_segments(const std::vector<KvEntry>& all);
    // The processes those segments hold, newest entry winning (what load() returns).
    static std::vector<StoredProcess> resolve(const std::vector<StoredSegment>& segments);

private:
    void commit(const std::string& key, std::span<const Op> ops);
    void compact();
    bool fall_back(std::size_t n, const StoreRefused& e);
    KvStore& store_;
    ClusterKeys keys_;
    std::atomic<std::size_t> txn_ops_;
    bool index_on_load_;
    std::shared_ptr<SegmentIndex> index_;
};

struct ClusterCounters {
    uint64_t became_active = 0, stepped_down = 0, lease_renewals = 0, store_errors = 0, mapping_refreshes = 0;
    SyncCounters sync;  // zeros without [cluster] sync
};

class ClusterService {
public:
    // Stores for each thread that talks to it: the loop's, and the one map changes write through.
    // `warm_store` (may be null: no warm copy): the one a standby reads the directory through.
    // `writer_stores`: one per thread that writes registrations (directory_writers()).
    ClusterService(const Config& cfg, std::unique_ptr<KvStore> loop_store, std::unique_ptr<KvStore> state_store,
                   std::unique_ptr<KvStore> dir_store, std::unique_ptr<KvStore> warm_store = nullptr,
                   std::vector<std::unique_ptr<KvStore>> writer_stores = {});
    // Registrations in flight to the store at once, each its own connection (StoreWriters).
    static constexpr std::size_t kDirectoryWriters = 4;
    // On the endpoints of cfg.cluster.etcd.
    explicit ClusterService(const Config& cfg);
    ~ClusterService();
    ClusterService(const ClusterService&) = delete;
    ClusterService& operator=(const ClusterService&) = delete;

    // The port-map table's state: give it to the table before start().
    std::unique_ptr<MapState> take_map_state();
    // The directory's store, for the resolution service (lives as long as this).
    DirectoryStore* directory_store() { return directory_.get(); }
    // The same directory on a store of its own for each writer thread (kDirectoryWriters of them
    // on etcd; live as long as this).
    std::vector<DirectoryStore*> directory_writers();

    // Starts the loop: the election every `period_ms` (a standby's campaign is one request), the
    // mappings watched as often, the store's
    // endpoints checked every second. `on_role(active)` runs on the loop's thread at each change.
    void start(PortMapTable* table, std::function<void(bool active)> on_role, uint64_t period_ms = 100);
    // The session-event channel ([cluster] sync), before start(); it runs while this does.
    void set_session_sync(std::unique_ptr<SessionSync> sync) { sync_ = std::move(sync); }
    // While this member stands by, a thread of its own reads the store's directory whenever its
    // version changes (checked every `period_ms`) and hands it here, so a takeover starts warm.
    // Before start().
    using Warmer = std::function<void(std::vector<StoredProcess> all, std::string version)>;
    void set_directory_warmer(Warmer w, uint64_t period_ms = 1000) {
        warmer_ = std::move(w);
        warm_period_ms_ = period_ms;
    }
    // The other members that publish a sync address, as the store showed them last (any thread).
    std::vector<SyncPeer> sync_peers() const;
    // Stops the loop and resigns: a clean stop hands the group over at once.
    void stop();

    bool active() const { return active_.load(std::memory_order_acquire); }
    bool store_healthy() const;
    nlohmann::ordered_json status() const;  // the management request cluster_status
    ClusterCounters counters() const;

private:
    void loop(uint64_t period_ms);
    void warm_loop();
    void watch_mappings();
    void check_health();

    const Config& cfg_;
    ClusterKeys keys_;
    std::unique_ptr<KvStore> loop_store_, state_store_, dir_store_, warm_store_;
    std::unique_ptr<StoreDirectory> warm_directory_;  // on warm_store_, null without one
    Warmer warmer_;
    uint64_t warm_period_ms_ = 1000;
    std::thread warm_thread_;
    std::shared_ptr<SegmentIndex> segments_;  // the active's writers', one for all of them
    std::unique_ptr<StoreDirectory> directory_;
    std::vector<std::unique_ptr<KvStore>> writer_stores_;
    std::vector<std::unique_ptr<StoreDirectory>> writer_directories_;
    std::unique_ptr<StoreMapState> map_state_owned_;
    StoreMapState* map_state_ = nullptr;
    std::unique_ptr<Election> election_;  // on the loop's thread only
    std::unique_ptr<SessionSync> sync_;
    PortMapTable* table_ = nullptr;
    std::function<void(bool)> on_role_;
    std::thread thread_;
    std::mutex wait_mu_;
    std::condition_variable wake_;
    bool stop_ = false;  // under wait_mu_
    std::atomic<bool> active_{false};

    // What status() shows: copied from the loop's thread after each round.
    mutable std::mutex mu_;
    nlohmann::ordered_json snapshot_;
    std::vector<EndpointHealth> endpoints_;
    std::vector<SyncPeer> sync_peers_;
    bool healthy_ = false;
    std::string mapping_error_;
    ClusterCounters counters_;
    uint64_t started_unix_ms_ = 0;
};

}  // namespace fedgate
