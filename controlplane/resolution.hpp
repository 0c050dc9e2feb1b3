// The resolution service's control side: the process directory, the announce streams to and from
// every peer, the cache writes (local, announced, answered and negative records), and the
// management requests dir_list, dir_show and the resolution part of stats. One control thread
// drives it (messages the lcore punted, events it queued, a timer); management threads read.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "controlplane/announce_stream.hpp"
#include "controlplane/auto_mapping.hpp"
#include "controlplane/config.hpp"
#include "controlplane/directory.hpp"
#include "controlplane/handshake_relay.hpp"
#include "dataplane/peer_auth.hpp"
#include "dataplane/resolve_cache.hpp"

namespace fedgate {

struct ResolveEvent;
class StoreWriters;

struct ResolutionCounters {
    uint64_t reg_replies_sent = 0, peer_msgs_sent = 0, records_applied = 0, records_withdrawn = 0,
             refused_foreign_records = 0, snapshots_received = 0, stream_resets_sent = 0, stream_gaps = 0,
             cache_full = 0, learned = 0, learned_negative = 0, expired_cache_entries = 0, malformed = 0,
             malformed_handshakes = 0, store_failures = 0, taken_over = 0, warm_loads = 0, taken_over_warm = 0,
             store_writes = 0, store_write_us = 0;
};

// A remote record of the resolution cache as the sync channel carries it to a standby ([cluster]
// sync): what a peer announced or a query learned, found under `key`.
struct CacheRecord {
    ProcessId key;
    DmaAddress record;
    uint16_t owner_party = 0;
    CacheKind kind = CacheKind::announced;  // announced or answered
    uint32_t ttl_ms = 0;                    // what is left of an answer's time; 0: no expiry
    bool operator==(const CacheRecord&) const = default;
};

// A registered process as a gateway group's store keeps it ([cluster]).
struct StoredProcess {
    DmaAddress record;
    uint32_t source = 0;        // host order: the address it registers from
    uint16_t control_port = 0;  // the UDP port it registers from (handshakes reach it there)
};

// Where a group's members keep the directory: a change is in it before the process hears of it,
// and a member that becomes active takes it up. Throws (StoreUnavailable, StoreRefused) when it
// cannot; calls come from the thread that drives the resolution service.
class DirectoryStore {
public:
    virtual ~DirectoryStore() = default;
    struct Op {
        bool remove = false;
        StoredProcess process;
    };
    // In order: a process's last op in the span is what the store keeps.
    virtual void write(std::span<const Op> ops) = 0;
    // Every stored process; `version` (may be null) gets the version of exactly what was read.
    virtual std::vector<StoredProcess> load(std::string* version = nullptr) = 0;
    // A token that changes whenever what load() reads does; cheap to ask. A copy load() read at
    // version V is current for as long as version() still gives V.
    virtual std::string version() = 0;
};

class ResolutionService : private RelayIo {
public:
    // Sends one UDP datagram from this gateway's resolution port to dst:dst_port (host order).
    using SendUdp = std::function<void(uint32_t dst, uint16_t dst_port, std::span<const uint8_t> datagram)>;
    // Waits until no lcore can still see a retired cache entry.
    using Synchronize = std::function<void()>;

    ResolutionService(const Config& cfg, ResolveCache& cache, SendUdp send, Synchronize sync);

    ~ResolutionService() override;

    // The port mappings the tcp transport of the connection handshake needs (null: handshakes over
    // tcp across parties are refused with no_mapping). Set before start().
    void set_auto_mappings(AutoMappings* m) { auto_ = m; }
    // The RoCE v2 translations of RDMA connections between parties (null: RDMA handshakes across
    // parties are refused with no_mapping), and the largest RDMA MTU the ports carry. Before start().
    void set_roce(RoceTranslations* t, uint16_t rdma_mtu_limit) {
        roce_ = t;
        rdma_mtu_limit_ = rdma_mtu_limit;
    }

    // A gateway group's store ([cluster]); null (the default): the directory lives here only. Set
    // before start().
    void set_directory_store(DirectoryStore* s) { store_ = s; }
    // Registrations and deregistrations since the last call go into the store in one write; then
    // their processes get their replies (ok, or store_unavailable with the change taken back) and
    // the changes reach the cache and the peers. The driving thread calls it after each burst.
    void flush(uint64_t now_ms);
    // The writes go out on `writers`' threads, several at a time, each of up to `max_batch`
    // changes (more only when one process has several), and a process's changes never in two
    // writes at once: flush() then submits what is staged and finishes the writes that came back,
    // without waiting for the store. Null (the default): flush() writes on the calling thread.
    // Before start().
    void set_directory_writers(std::unique_ptr<StoreWriters> writers, std::size_t max_batch);
    // With two writes out, a third goes only once this many changes are staged (or once fewer
    // writes are out): a write costs the store and the writer threads about the same whatever it
    // carries, so under load fewer, bigger writes register more; a lone registration still goes
    // out at once, and a second beside it.
    static constexpr std::size_t kBusyBatch = 256;
    // Waits for the writes in flight (their processes get no reply: they register again); later
    // flushes write on the calling thread. Call once the driving thread has stopped.
    void stop_directory_writers();
    std::size_t staged() const {
        std::lock_guard lock(mu_);
        return staged_.size();
    }
    // This member became its group's active member: the store's directory becomes this gateway's
    // (each process with a whole heartbeat timeout from now), into the cache and out to the peers.
    // Returns how many processes it took up; throws when the store cannot be read. With a warm
    // copy (warm()) that is still current (its version is the store's), it is taken up without
    // reading the directory again.
    std::size_t take_over(uint64_t now_ms);
    // A standby's copy of the store's directory and the version load() read it at: kept for the
    // next take_over. Any thread.
    void warm(std::vector<StoredProcess> all, std::string version);
    std::size_t warm_size() const { return warm_size_.load(std::memory_order_relaxed); }
    // The cache's remote records (announced and answered, unexpired) and their version, which
    // changes whenever what peers announce or queries learn does (never 0); nullopt, without
    // copying anything, while the version is still `unless_version`. Any thread.
    std::optional<std::pair<uint64_t, std::vector<CacheRecord>>> remote_cache(uint64_t now_ms,
                                                                              uint64_t unless_version = 0) const;
    // A standby: the active member's remote records replace this cache's (its local records stay).
    // Returns how many it holds now. Any thread.
    std::size_t warm_cache(const std::vector<CacheRecord>& records, uint64_t now_ms);
    uint64_t warm_loads() const { return warm_loads_.load(std::memory_order_relaxed); }

    // `fedgatectl reload`: the peers become `next`'s. A new peer gets a stream with a snapshot; a
    // removed one loses its stream, and what it announced or answered leaves the cache (with the
    // automatic imports that reached its processes); one whose key or address changed starts a new
    // stream. `next` becomes the config every later read sees. Returns the removed peers' parties.
    std::vector<uint16_t> reload(std::shared_ptr<const Config> next, uint64_t now_ms);

    // Starts the announce streams (each with a snapshot of the directory, empty at first).
    void start(uint64_t now_ms);
    // A resolution message the lcore punted (its checks passed). Addresses and ports host order.
    void on_message(uint32_t src, uint16_t src_port, std::span<const uint8_t> datagram, uint64_t now_ms);
    void on_event(const ResolveEvent& ev, uint64_t now_ms);
    // Expiry, retransmission, keepalives, and freeing what the cache retired.
    void tick(uint64_t now_ms);

    nlohmann::ordered_json dir_list(bool local, bool remote, std::size_t limit, uint64_t now_ms) const;
    nlohmann::ordered_json dir_show(ProcessId pid, uint64_t now_ms) const;
    nlohmann::ordered_json stats() const;  // directory, streams and cache; the lcore adds its own
    // Per peer party: the key ID of the last message from it that reached the control threads
    // (announce stream, handshakes); 0 before the first.
    std::map<uint16_t, uint8_t> last_key_ids() const;
    // The management request conn_list: relayed handshakes, newest first.
    nlohmann::ordered_json conn_list(std::size_t limit, uint64_t now_ms) const;

    static nlohmann::ordered_json record_json(const DmaAddress& r);

private:
    struct Peer {
        PeerConfig cfg;
        PeerKeys keys;
        AnnounceSender out;
        AnnounceReceiver in;
        uint8_t last_key_id = 0;  // the key ID of the last message from the peer the lcore passed here
    };

    void handle_client(uint32_t src, uint16_t src_port, const ParsedMsg& m, uint64_t now_ms);
    void handle_peer(Peer& peer, const ParsedMsg& m, uint64_t now_ms);
    void apply_stream(Peer& peer, const ParsedMsg& m, bool snapshot);
    void publish(const DirectoryChange& c, uint64_t now_ms);
    void send_peer(Peer& peer, MsgType type, std::span<const uint8_t> body);
    void send_ack(Peer& peer, uint64_t stream, uint64_t acked, uint8_t flags);
    void reg_reply(uint32_t dst, uint16_t dst_port, uint64_t request_id, RegStatus s, ProcessId pid, uint32_t epoch);
    Peer* peer_by_party(uint16_t party);
    void restart_stream(Peer& peer, uint64_t now_ms);
    void reclaim();
    void process_gone(const DmaAddress& record);
    struct Staged;
    // After a write: replies, cache and peers (written), or the changes taken back (not: `error`).
    void finish(std::vector<Staged>& batch, const std::optional<std::string>& error, uint64_t write_us,
                uint64_t now_ms);
    void submit_staged();
    static std::vector<DirectoryStore::Op> ops_of(const std::vector<Staged>& batch);  // what the store is told

    // RelayIo: what the handshake relay needs from the directory, the peers and the mappings.
    std::optional<Endpoint4> control_endpoint(ProcessId pid) override;
    bool has_peer(uint16_t party) override;
    void to_process(Endpoint4 dst, MsgType type, const ConnParams& p) override;
    void to_peer(uint16_t party, MsgType type, const ConnParams& p) override;
    std::optional<Endpoint4> exported_endpoint(ProcessId target) override;
    std::optional<Endpoint4> imported_endpoint(uint16_t party, uint16_t peer_port, ProcessId target,
                                               ProcessId initiator) override;
    std::optional<uint32_t> roce_reserve(RoceSide side) override;
    void roce_release(RoceSide side, uint32_t vqpn) override;
    bool roce_install(const RoceConn& c) override;
    uint32_t own_address(RoceSide side) override;
    uint32_t peer_address(uint16_t party) override;
    uint16_t rdma_mtu_limit() override { return rdma_mtu_limit_; }

    // The config as started, or as the last reload left it (held_ keeps that one alive); the
    // fields a reload may change (peers) are read under mu_.
    const Config* cfg_;
    std::shared_ptr<const Config> held_;
    ResolveCache& cache_;
    SendUdp send_;
    Synchronize sync_;
    Directory dir_;
    std::vector<std::unique_ptr<Peer>> peers_;
    SeqClock seq_;  // our channel 1
    uint64_t next_sync_ms_ = 0;
    std::size_t sweep_cursor_ = 0;  // the cache's expiry sweep goes round a slice per tick
    ResolutionCounters counters_;
    HandshakeRelay relay_;
    AutoMappings* auto_ = nullptr;
    RoceTranslations* roce_ = nullptr;
    uint16_t rdma_mtu_limit_ = 0;
    uint64_t now_ms_ = 0;  // of the message or tick being handled (roce_install stamps with it)
    // remote_cache()'s: from the wall clock in microseconds at start, then one up per change, so a
    // later run's versions are higher too and a standby can refuse an older copy sent again.
    uint64_t remote_version_ = 1;
    std::unordered_map<uint64_t, uint16_t> control_ports_;  // local process -> UDP port it registers from
    DirectoryStore* store_ = nullptr;
    // Changes waiting for the store, with the replies that wait for them.
    struct Staged {
        DirectoryChange change;
        StoredProcess stored;
        uint32_t dst = 0;
        uint16_t dst_port = 0;
        uint64_t request_id = 0;
        bool reply = true;  // an expiry has no one to answer
    };
    std::vector<Staged> staged_;
    // With writers: the writes in flight by id, and how many of their changes each process has.
    std::unique_ptr<StoreWriters> writers_;
    std::size_t max_batch_ = 0;
    uint64_t next_write_ = 0;
    std::unordered_map<uint64_t, std::vector<Staged>> in_flight_;
    std::unordered_map<uint64_t, uint32_t> in_flight_pids_;
    // The driving thread holds it while it works; management threads while they read.
    mutable std::mutex mu_;
    // The warm copy, apart from mu_ (a standby fills it from another thread); never held across a
    // call to the store.
    mutable std::mutex warm_mu_;
    std::vector<StoredProcess> warm_;
    std::optional<std::string> warm_version_;
    std::atomic<uint64_t> warm_loads_{0}, warm_size_{0};
};

}  // namespace fedgate
