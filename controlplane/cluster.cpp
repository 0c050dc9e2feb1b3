// A gateway's role in its party's group: election loop, shared mappings, status.
#include "controlplane/cluster.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string_view>
#include <utility>

#include "controlplane/log.hpp"

namespace fedgate {
namespace {

constexpr long kChangeBudgetMs = 5000;
// A registration waits for the store at most this long before its process hears store_unavailable
// (the client's own retries go on from there); meanwhile the punt thread waits too.
constexpr long kRegistrationBudgetMs = 2000;

uint64_t mono_ms() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
uint64_t unix_ms() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

std::string hex(const uint8_t* p, std::size_t n) {
    static const char* d = "0123456789abcdef";
    std::string s;
    for (std::size_t i = 0; i < n; ++i) {
        s.push_back(d[p[i] >> 4]);
        s.push_back(d[p[i] & 15]);
    }
    return s;
}

std::string version_text(const PrefixSummary& s) {
    return std::to_string(s.count) + "@" + std::to_string(s.max_mod_revision);
}

}  // namespace

std::string StoreDirectory::encode(const StoredProcess& p) {
    DmaAddressWire w{};
    fedgate::encode(p.record, w);
    return nlohmann::ordered_json{{"record", hex(reinterpret_cast<const uint8_t*>(&w), sizeof w)},
                                  {"source", p.source},
                                  {"control_port", p.control_port}}
        .dump();
}

std::optional<StoredProcess> StoreDirectory::decode(const std::string& value) {
    const auto j = nlohmann::json::parse(value, nullptr, false);
    if (!j.is_object()) return std::nullopt;
    try {
        const std::string h = j.at("record").get<std::string>();
        DmaAddressWire w{};
        if (h.size() != 2 * sizeof w) return std::nullopt;
        auto* out = reinterpret_cast<uint8_t*>(&w);
        for (std::size_t i = 0; i < sizeof w; ++i) out[i] = static_cast<uint8_t>(std::stoi(h.substr(2 * i, 2), nullptr, 16));
        const auto rec = fedgate::decode(w);
        if (!rec) return std::nullopt;
        return StoredProcess{*rec, j.at("source").get<uint32_t>(), j.at("control_port").get<uint16_t>()};
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

// ---- the segments' index -----------------------------------------------------------------------

void SegmentIndex::release(uint64_t seg) {
    const auto it = segs_.find(seg);
    if (it == segs_.end()) return;
    if (it->second.live > 0 && --it->second.live == 0 && !it->second.erasing) dead_.insert(seg);
}

void SegmentIndex::add(const std::string& key, std::span<const DirectoryStore::Op> ops) {
    if (by_key_.contains(key)) return;
    const uint64_t id = next_id_++;
    Seg& s = segs_[id];
    s.key = key;
    by_key_[key] = id;
    s.entries.reserve(ops.size());
    for (const DirectoryStore::Op& c : ops) {
        const uint64_t pid = c.process.record.pid.value;
        Pid& p = pids_[pid];
        if (p.holders > 0 && p.seg == id) {  // twice in one segment (not written so): the later wins
            const bool before = needed(p);
            auto e = std::find_if(s.entries.begin(), s.entries.end(), [&](const auto& x) { return x.first == pid; });
            if (e->second) --p.registered;
            e->second = !c.remove;
            if (e->second) ++p.registered;
            p.removed = c.remove;
            s.live = s.live - (before ? 1 : 0) + (needed(p) ? 1 : 0);
            continue;
        }
        if (p.holders > 0 && needed(p)) release(p.seg);
        s.entries.emplace_back(pid, !c.remove);
        ++p.holders;
        if (!c.remove) ++p.registered;
        p.seg = id;
        p.removed = c.remove;
        if (needed(p)) ++s.live;
    }
    if (s.live == 0) dead_.insert(id);
}

void SegmentIndex::erased(const std::string& key) {
    const auto k = by_key_.find(key);
    if (k == by_key_.end()) return;
    const uint64_t id = k->second;
    Seg s = std::move(segs_.at(id));
    segs_.erase(id);
    by_key_.erase(k);
    dead_.erase(id);
    for (const auto& [pid, registration] : s.entries) {
        const auto it = pids_.find(pid);
        if (it == pids_.end()) continue;
        Pid& p = it->second;
        const bool before = needed(p);
        --p.holders;
        if (registration) --p.registered;
        if (p.seg == id) {
            // Its newest entry was here: fine for a removal that hid nothing, otherwise the store
            // lost an entry that was needed (deleted behind our back): read it all again.
            if (before) valid_ = false;
        } else if (before && !needed(p)) {
            release(p.seg);
        }
        if (p.holders == 0) pids_.erase(it);
    }
}

std::vector<std::string> SegmentIndex::take_dead(std::size_t max) {
    std::vector<std::string> out;
    while (!dead_.empty() && out.size() < max) {
        Seg& s = segs_.at(*dead_.begin());
        dead_.erase(dead_.begin());
        s.erasing = true;
        out.push_back(s.key);
    }
    return out;
}

void SegmentIndex::untake(const std::vector<std::string>& keys) {
    for (const std::string& k : keys) {
        const auto it = by_key_.find(k);
        if (it == by_key_.end()) continue;
        Seg& s = segs_.at(it->second);
        s.erasing = false;
        if (s.live == 0) dead_.insert(it->second);
    }
}

std::string SegmentIndex::next_key(const std::string& prefix) {
    if (start_ == 0) start_ = std::random_device{}() | uint64_t{std::random_device{}()} << 32 | 1;
    char b[48];
    std::snprintf(b, sizeof b, "seg-%016llx-%016llx", static_cast<unsigned long long>(start_),
                  static_cast<unsigned long long>(next_seq_++));
    return prefix + b;
}

void SegmentIndex::rebuild(const std::vector<StoredSegment>& segments) {
    segs_.clear();
    by_key_.clear();
    pids_.clear();
    dead_.clear();
    for (const StoredSegment& seg : segments) add(seg.key, seg.ops);
    valid_ = true;
}

// ---- the directory in the store ------------------------------------------------------------------

namespace {
constexpr char kSegmentMagic[4] = {'F', 'G', 'D', '1'};
}

std::string StoreDirectory::encode_segment(std::span<const Op> ops) {
    std::string v(sizeof kSegmentMagic + ops.size() * kEntryBytes, '\0');
    std::memcpy(v.data(), kSegmentMagic, sizeof kSegmentMagic);
    auto* p = reinterpret_cast<uint8_t*>(v.data()) + sizeof kSegmentMagic;
    for (const Op& op : ops) {
        p[0] = op.remove ? 1 : 0;
        DmaAddressWire w{};
        fedgate::encode(op.process.record, w);
        std::memcpy(p + 1, &w, sizeof w);
        store_be32(p + 1 + sizeof w, op.process.source);
        store_be16(p + 5 + sizeof w, op.process.control_port);
        p += kEntryBytes;
    }
    return v;
}

std::optional<std::vector<DirectoryStore::Op>> StoreDirectory::decode_segment(const std::string& value) {
    if (!value.empty() && value.front() == '{') {  // the earlier layout: one process's record
        auto p = decode(value);
        if (!p) return std::nullopt;
        return std::vector<Op>{{false, *p}};
    }
    if (value.size() < sizeof kSegmentMagic || std::memcmp(value.data(), kSegmentMagic, sizeof kSegmentMagic) != 0 ||
        (value.size() - sizeof kSegmentMagic) % kEntryBytes != 0)
        return std::nullopt;
    std::vector<Op> out((value.size() - sizeof kSegmentMagic) / kEntryBytes);
    const auto* p = reinterpret_cast<const uint8_t*>(value.data()) + sizeof kSegmentMagic;
    for (Op& op : out) {
        if (p[0] > 1) return std::nullopt;
        op.remove = p[0] == 1;
        DmaAddressWire w;
        std::memcpy(&w, p + 1, sizeof w);
        const auto rec = fedgate::decode(w);
        if (!rec) return std::nullopt;
        op.process = {*rec, load_be32(p + 1 + sizeof w), load_be16(p + 5 + sizeof w)};
        p += kEntryBytes;
    }
    return out;
}

std::vector<StoredSegment> StoreDirectory::read_segments(const std::vector<KvEntry>& all) {
    std::vector<StoredSegment> out;
    out.reserve(all.size());
    for (const KvEntry& e : all)
        if (auto ops = decode_segment(e.value))  // a key that is none: not ours, never deleted here
            out.push_back({e.key, e.mod_revision, std::move(*ops)});
    std::stable_sort(out.begin(), out.end(),
                     [](const StoredSegment& x, const StoredSegment& y) { return x.mod_revision < y.mod_revision; });
    return out;
}

std::vector<StoredProcess> StoreDirectory::resolve(const std::vector<StoredSegment>& segments) {
    std::map<uint64_t, const Op*> newest;  // by process ID: what load() returns comes out in ID order
    for (const StoredSegment& seg : segments)
        for (const Op& op : seg.ops) newest[op.process.record.pid.value] = &op;
    std::vector<StoredProcess> out;
    out.reserve(newest.size());
    for (const auto& [pid, op] : newest)
        if (!op->remove) out.push_back(op->process);
    return out;
}

void StoreDirectory::write(std::span<const Op> ops) {
    // A process's last op wins.
    std::map<uint64_t, const Op*> last;
    for (const Op& op : ops) last[op.process.record.pid.value] = &op;
    std::vector<Op> chunk;
    chunk.reserve(std::min(last.size(), kSegmentEntries));
    {
        std::lock_guard lk(index_->mu);
        if (!index_->valid()) index_->rebuild(read_segments(store_.range(keys_.processes())));
    }
    for (auto it = last.begin(); it != last.end();) {
        chunk.clear();
        for (; it != last.end() && chunk.size() < kSegmentEntries; ++it) chunk.push_back(*it->second);
        std::string key;
        {
            std::lock_guard lk(index_->mu);
            key = index_->next_key(keys_.processes());
        }
        commit(key, chunk);
    }
    compact();
}

// etcd: "too many operations in txn request" (its --max-txn-ops under txn_ops). True when there is
// a smaller size to go on with: 128 from now on, logged the first time.
bool StoreDirectory::fall_back(std::size_t n, const StoreRefused& e) {
    if (n <= kStoreDefaultTxnOps || std::string_view(e.what()).find("too many operations") == std::string_view::npos)
        return false;
    if (txn_ops_.exchange(kStoreDefaultTxnOps) != kStoreDefaultTxnOps)
        FG_LOG(WARNING, gateway,
               "cluster: the store refuses transactions of %zu operations ([cluster] txn_ops is more than its "
               "--max-txn-ops): directory segments are deleted in transactions of %zu from now on (%s)",
               n, kStoreDefaultTxnOps, e.what());
    return true;
}

// One segment in, with as many of the segments nothing needs as the transaction may delete.
void StoreDirectory::commit(const std::string& key, std::span<const Op> ops) {
    const std::string value = encode_segment(ops);
    for (;;) {
        const std::size_t n = txn_ops();
        std::vector<std::string> dead;
        {
            std::lock_guard lk(index_->mu);
            dead = index_->take_dead(n - 1);
        }
        try {
            store_.put_erase({{key, value}}, dead);
        } catch (const StoreRefused& e) {
            {
                std::lock_guard lk(index_->mu);
                index_->untake(dead);
            }
            if (!fall_back(n, e)) throw;
            continue;
        } catch (...) {
            // Maybe taken, maybe not: what the store holds is read again before the next write.
            std::lock_guard lk(index_->mu);
            index_->invalidate();
            throw;
        }
        std::lock_guard lk(index_->mu);
        index_->add(key, ops);
        for (const std::string& d : dead) index_->erased(d);
        return;
    }
}

// The segments the writes left unneeded, and those their deletion leaves unneeded in turn. The
// changes are in the store already: a failure here is logged and left to the next write.
void StoreDirectory::compact() {
    for (;;) {
        const std::size_t n = txn_ops();
        std::vector<std::string> dead;
        {
            std::lock_guard lk(index_->mu);
            dead = index_->take_dead(n);
        }
        if (dead.empty()) return;
        try {
            store_.erase(dead);
        } catch (const std::exception& e) {
            std::lock_guard lk(index_->mu);
            index_->untake(dead);
            const auto* refused = dynamic_cast<const StoreRefused*>(&e);
            if (refused != nullptr && fall_back(n, *refused)) continue;
            index_->invalidate();
            FG_LOG(INFO, gateway, "cluster: %zu directory segment(s) nothing needs are left in the store for now: %s",
                   dead.size(), e.what());
            return;
        }
        std::lock_guard lk(index_->mu);
        for (const std::string& d : dead) index_->erased(d);
    }
}

std::vector<StoredProcess> StoreDirectory::load(std::string* version) {
    std::vector<KvEntry> all = store_.range(keys_.processes());
    if (version != nullptr) {
        PrefixSummary read;  // of this very range: the copy and its version come from one read
        for (const KvEntry& e : all) {
            ++read.count;
            read.max_mod_revision = std::max(read.max_mod_revision, e.mod_revision);
        }
        *version = version_text(read);
    }
    const std::vector<StoredSegment> segments = read_segments(all);
    if (index_on_load_) {
        std::lock_guard lk(index_->mu);
        index_->rebuild(segments);
    }
    return resolve(segments);
}

std::string StoreDirectory::version() { return version_text(store_.summarize(keys_.processes())); }

std::optional<std::string> StoreMapState::read() {
    try {
        const auto e = store_.get(key_);
        revision_.store(e ? e->mod_revision : 0, std::memory_order_release);
        if (!e) return std::nullopt;
        return e->value;
    } catch (const StoreUnavailable& e) {
        throw MapError("store", std::string(e.what()) + "; the mappings were not changed here");
    } catch (const StoreRefused& e) {
        throw MapError("store", std::string("cluster store refused the read: ") + e.what());
    }
}

void StoreMapState::write(const std::string& text) {
    const int64_t expect = revision_.load(std::memory_order_acquire);
    if (expect < 0) throw MapConflict("the cluster's mappings have not been read from the store yet");
    int64_t rev = 0;
    std::optional<KvEntry> now;
    try {
        // A linearizable read first: a store without quorum fails it, and the change is refused
        // without having been sent (a write that reached such a store could still be applied
        // once its quorum returns, after it was reported refused).
        const auto cur = store_.get(key_);
        if ((cur ? cur->mod_revision : 0) != expect) throw MapConflict("another member of the group changed the mappings first");
        rev = store_.put_if(key_, text, 0, expect, &now);
    } catch (const StoreUnavailable& e) {
        // A request that reached a store without quorum may still be applied if it regains quorum
        // soon; the watcher then shows it. Until then nothing changed here.
        revision_.store(-1, std::memory_order_release);  // re-read before the next change
        throw MapError("store", std::string(e.what()) + "; the mappings were not changed here");
    } catch (const StoreRefused& e) {
        throw MapError("store", std::string("cluster store refused the change: ") + e.what());
    }
    if (rev == 0) {
        // The client retries a request whose answer it did not get: the compare then fails against
        // our own earlier write. The key holding exactly our document means that write went in.
        if (now && now->value == text) {
            revision_.store(now->mod_revision, std::memory_order_release);
            return;
        }
        throw MapConflict("another member of the group changed the mappings first");
    }
    revision_.store(rev, std::memory_order_release);
}

ClusterService::ClusterService(const Config& cfg, std::unique_ptr<KvStore> loop_store, std::unique_ptr<KvStore> state_store,
                               std::unique_ptr<KvStore> dir_store, std::unique_ptr<KvStore> warm_store,
                               std::vector<std::unique_ptr<KvStore>> writer_stores)
    : cfg_(cfg), keys_(cfg.party), loop_store_(std::move(loop_store)), state_store_(std::move(state_store)),
      dir_store_(std::move(dir_store)), warm_store_(std::move(warm_store)), writer_stores_(std::move(writer_stores)) {
    segments_ = std::make_shared<SegmentIndex>();
    directory_ = std::make_unique<StoreDirectory>(*dir_store_, keys_, cfg.cluster.txn_ops, segments_);
    for (const auto& w : writer_stores_)
        writer_directories_.push_back(std::make_unique<StoreDirectory>(*w, keys_, cfg.cluster.txn_ops, segments_));
    if (warm_store_) warm_directory_ = std::make_unique<StoreDirectory>(*warm_store_, keys_);
    map_state_owned_ = std::make_unique<StoreMapState>(*state_store_, keys_.mappings());
    map_state_ = map_state_owned_.get();
    started_unix_ms_ = unix_ms();
    ElectionSettings s;
    s.member = cfg.cluster.member;
    s.lease_ttl_s = cfg.cluster.lease_ttl_s;
    s.info = nlohmann::ordered_json{{"member", cfg.cluster.member},
                                    {"pid", static_cast<int64_t>(::getpid())},
                                    {"version", FEDGATE_VERSION},
                                    {"started_unix_ms", started_unix_ms_},
                                    {"sync", cfg.cluster.sync ? nlohmann::ordered_json(cfg.cluster.sync_text())
                                                              : nlohmann::ordered_json(nullptr)}}
                 .dump();
    election_ = std::make_unique<Election>(*loop_store_, keys_, s);
}

ClusterService::ClusterService(const Config& cfg)
    // The loop's calls fail fast (the next round is 200 ms away); a change an operator makes
    // waits out a store electing its leader (a few seconds) before it is refused.
    : ClusterService(cfg, std::make_unique<EtcdStore>(cfg.cluster.etcd),
                     std::make_unique<EtcdStore>(cfg.cluster.etcd, 1000, kChangeBudgetMs),
                     std::make_unique<EtcdStore>(cfg.cluster.etcd, 1000, kRegistrationBudgetMs),
                     std::make_unique<EtcdStore>(cfg.cluster.etcd), [&cfg] {
                         std::vector<std::unique_ptr<KvStore>> w;
                         for (std::size_t i = 0; i < kDirectoryWriters; ++i)
                             w.push_back(std::make_unique<EtcdStore>(cfg.cluster.etcd, 1000, kRegistrationBudgetMs));
                         return w;
                     }()) {}

std::vector<DirectoryStore*> ClusterService::directory_writers() {
    std::vector<DirectoryStore*> out;
    for (const auto& d : writer_directories_) out.push_back(d.get());
    return out;
}

ClusterService::~ClusterService() { stop(); }

std::unique_ptr<MapState> ClusterService::take_map_state() { return std::move(map_state_owned_); }

void ClusterService::start(PortMapTable* table, std::function<void(bool)> on_role, uint64_t period_ms) {
    table_ = table;
    on_role_ = std::move(on_role);
    {
        std::lock_guard lk(wait_mu_);
        stop_ = false;
    }
    thread_ = std::thread([this, period_ms] { loop(period_ms); });
    if (warm_directory_ && warmer_) warm_thread_ = std::thread([this] { warm_loop(); });
    if (sync_) sync_->start();
}

std::vector<SyncPeer> ClusterService::sync_peers() const {
    std::lock_guard lk(mu_);
    return sync_peers_;
}

void ClusterService::stop() {
    {
        std::lock_guard lk(wait_mu_);
        stop_ = true;
    }
    wake_.notify_all();
    // Resign first: a standby takes over while the other threads finish (a resync's dump can take
    // a while when the workers have stopped).
    if (thread_.joinable()) {
        thread_.join();
        const bool was = election_->active();
        election_->resign();
        active_.store(false, std::memory_order_release);
        if (was) {
            FG_LOG(NOTICE, gateway, "cluster: member %s resigned as active", cfg_.cluster.member.c_str());
            if (on_role_) on_role_(false);
        }
    }
    if (warm_thread_.joinable()) warm_thread_.join();
    if (sync_) sync_->stop();
}

void ClusterService::watch_mappings() {
    if (table_ == nullptr || map_state_ == nullptr) return;
    try {
        const auto e = loop_store_->get(keys_.mappings());
        const int64_t now = e ? e->mod_revision : 0;
        if (now == map_state_->revision()) return;
        std::vector<std::string> warnings;
        table_->load(&warnings);
        for (const auto& w : warnings) FG_LOG(WARNING, gateway, "cluster: %s", w.c_str());
        std::lock_guard lk(mu_);
        ++counters_.mapping_refreshes;
        mapping_error_.clear();
    } catch (const std::exception& ex) {  // the next round tries again
        std::lock_guard lk(mu_);
        mapping_error_ = ex.what();
    }
}

void ClusterService::check_health() {
    auto h = loop_store_->health();
    std::size_t up = 0;
    for (const auto& e : h) up += e.state == "up";
    std::lock_guard lk(mu_);
    endpoints_ = std::move(h);
    // Healthy: a majority of the endpoints we know says it has a leader.
    healthy_ = up * 2 > endpoints_.size();
}

void ClusterService::loop(uint64_t period_ms) {
    uint64_t last_health = 0;
    bool was_active = false;
    for (;;) {
        const uint64_t now = mono_ms();
        election_->step(now, unix_ms());
        const bool is_active = election_->active();
        active_.store(is_active, std::memory_order_release);
        if (is_active != was_active) {
            FG_LOG(NOTICE, gateway, "cluster: member %s is %s (leader %s)", cfg_.cluster.member.c_str(),
                   is_active ? "active" : "standby", election_->leader().empty() ? "none" : election_->leader().c_str());
            if (is_active) {
                // Other members may have written the directory since this one last did: its first
                // write reads the store's segments again.
                std::lock_guard lk(segments_->mu);
                segments_->invalidate();
            }
            if (on_role_) on_role_(is_active);
            was_active = is_active;
        }
        watch_mappings();
        if (now - last_health >= 1000) {
            check_health();
            last_health = now;
        }

        nlohmann::ordered_json members = nlohmann::ordered_json::array();
        std::vector<SyncPeer> sync_peers;
        for (const KvEntry& m : election_->members()) {
            const std::string name = m.key.substr(keys_.members().size());
            auto info = nlohmann::ordered_json::parse(m.value, nullptr, false);
            if (info.is_discarded()) info = nullptr;
            members.push_back({{"member", name}, {"active", name == election_->leader()}, {"info", info}});
            if (name == cfg_.cluster.member || !info.is_object() || !info.contains("sync") || !info["sync"].is_string())
                continue;
            if (const auto ep = parse_endpoint(info["sync"].get<std::string>()); ep && ep->first != 0 && ep->second != 0)
                sync_peers.push_back({name, ep->first, ep->second, name == election_->leader()});
        }
        nlohmann::ordered_json lease = nullptr;
        if (election_->lease() != 0) {
            char id[32];
            std::snprintf(id, sizeof id, "%llx", static_cast<unsigned long long>(election_->lease()));
            const uint64_t ok = election_->last_keepalive_ms();
            lease = {{"id", id}, {"ttl_s", cfg_.cluster.lease_ttl_s}, {"renewed_ms_ago", ok == 0 ? 0 : mono_ms() - ok}};
        }
        std::lock_guard lk(mu_);
        sync_peers_ = std::move(sync_peers);
        counters_.became_active = election_->became_active();
        counters_.stepped_down = election_->stepped_down();
        counters_.lease_renewals = election_->lease_renewals();
        counters_.store_errors = election_->store_errors();
        snapshot_ = {{"role", is_active ? "active" : "standby"},
                     {"active", election_->leader().empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(election_->leader())},
                     {"lease", lease},
                     {"members", members},
                     {"last_failover", election_->last_failover() ? failover_json(*election_->last_failover())
                                                                  : nlohmann::ordered_json(nullptr)},
                     {"store_ok", election_->store_ok()},
                     {"last_error", election_->last_error()}};

        std::unique_lock wl(wait_mu_);
        if (wake_.wait_for(wl, std::chrono::milliseconds(period_ms), [&] { return stop_; })) return;
    }
}

void ClusterService::warm_loop() {
    std::string last;  // the version of the copy handed over last; "" after a takeover used it
    for (;;) {
        if (active()) {
            last.clear();  // take_over used the copy: read it again if this member stands by again
        } else {
            try {
                if (warm_directory_->version() != last) {  // the cheap question first
                    std::string v;
                    std::vector<StoredProcess> all = warm_directory_->load(&v);
                    const std::size_t n = all.size();
                    warmer_(std::move(all), v);
                    FG_LOG(DEBUG, gateway, "cluster: warm copy of the directory: %zu process(es) at %s", n, v.c_str());
                    last = v;
                }
            } catch (const std::exception& e) {  // the next round tries again; takeover then reads the store
                FG_LOG(DEBUG, gateway, "cluster: cannot warm the directory: %s", e.what());
            }
        }
        std::unique_lock wl(wait_mu_);
        if (wake_.wait_for(wl, std::chrono::milliseconds(warm_period_ms_), [&] { return stop_; })) return;
    }
}

bool ClusterService::store_healthy() const {
    std::lock_guard lk(mu_);
    return healthy_;
}

ClusterCounters ClusterService::counters() const {
    std::lock_guard lk(mu_);
    ClusterCounters c = counters_;
    if (sync_) c.sync = sync_->counters();
    return c;
}

nlohmann::ordered_json ClusterService::status() const {
    std::lock_guard lk(mu_);
    nlohmann::ordered_json endpoints = nlohmann::ordered_json::array();
    for (const auto& e : endpoints_) endpoints.push_back({{"url", e.url}, {"state", e.state}});
    const auto get = [&](const char* k) { return snapshot_.contains(k) ? snapshot_[k] : nlohmann::ordered_json(nullptr); };
    nlohmann::ordered_json store{{"healthy", healthy_ && snapshot_.value("store_ok", false)},
                                 {"endpoints", endpoints},
                                 {"last_error", snapshot_.value("last_error", std::string())},
                                 {"mapping_error", mapping_error_}};
    return {{"party", cfg_.party},
            {"member", cfg_.cluster.member},
            {"role", snapshot_.value("role", std::string("standby"))},
            {"active", get("active")},
            {"lease", get("lease")},
            {"members", snapshot_.contains("members") ? snapshot_["members"] : nlohmann::ordered_json::array()},
            {"store", store},
            {"last_failover", get("last_failover")},
            {"sessions", sync_ ? sync_->status() : nlohmann::ordered_json(nullptr)},
            {"counters",
             {{"became_active", counters_.became_active},
              {"stepped_down", counters_.stepped_down},
              {"lease_renewals", counters_.lease_renewals},
              {"store_errors", counters_.store_errors},
              {"mapping_refreshes", counters_.mapping_refreshes}}}};
}

}  // namespace fedgate
