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
#include <string>
#include <thread>
#include <vector>

#include "controlplane/config.hpp"
#include "controlplane/election.hpp"
#include "controlplane/kv_store.hpp"
#include "controlplane/portmap_table.hpp"
#include "controlplane/resolution.hpp"
#include "controlplane/session_sync.hpp"

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

// The directory as the group's store keeps it: a key per process under <prefix>processes/, written
// in transactions of up to `txn_ops` operations ([cluster] txn_ops). A store that refuses a
// transaction that big (etcd's --max-txn-ops lower than txn_ops) gets the write again in
// transactions of etcd's default 128, and every later one too; the first time is logged, naming
// both settings.
class StoreDirectory final : public DirectoryStore {
public:
    // What a refused size falls back to: etcd's default --max-txn-ops ([cluster] txn_ops's default).
    static constexpr std::size_t kStoreDefaultTxnOps = kDefaultTxnOps;
    StoreDirectory(KvStore& store, const ClusterKeys& keys, std::size_t txn_ops = kStoreDefaultTxnOps)
        : store_(store), keys_(keys), txn_ops_(std::max<std::size_t>(txn_ops, 1)) {}
    void write(std::span<const Op> ops) override;
    // The transaction size in use: txn_ops, or 128 after the store refused it.
    std::size_t txn_ops() const { return txn_ops_.load(std::memory_order_relaxed); }
    std::vector<StoredProcess> load(std::string* version = nullptr) override;
    std::string version() override;  // the processes prefix's key count and newest mod revision
    static std::string encode(const StoredProcess& p);
    static std::optional<StoredProcess> decode(const std::string& value);

private:
    void write_in(const std::vector<std::pair<std::string, std::string>>& puts, const std::vector<std::string>& dels,
                  std::size_t txn_ops);
    KvStore& store_;
    ClusterKeys keys_;
    std::atomic<std::size_t> txn_ops_;
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
