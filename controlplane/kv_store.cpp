// The gateway group's store: the in-memory model (etcd: etcd_store.cpp), and the helpers both use.
#include "controlplane/kv_store.hpp"

#include <algorithm>
#include <mutex>

namespace fedgate {

std::string prefix_end(const std::string& prefix) {
    std::string end = prefix;
    while (!end.empty()) {
        auto& c = reinterpret_cast<unsigned char&>(end.back());
        if (c != 0xff) {
            ++c;
            return end;
        }
        end.pop_back();
    }
    return std::string(1, '\0');  // every key
}

// ---------------------------------------------------------------------------------------------
// In memory

void MemStore::enter() {
    if (!available_) throw StoreUnavailable("cluster store unavailable (memory store switched off)", true);
    const uint64_t now = now_ms_();
    std::vector<int64_t> expired;
    for (const auto& [id, l] : leases_)
        if (l.deadline_ms <= now) expired.push_back(id);
    for (const int64_t id : expired) revoke_locked(id);
}

void MemStore::revoke_locked(int64_t lease) {
    if (leases_.erase(lease) == 0) return;
    bool changed = false;
    for (auto it = kv_.begin(); it != kv_.end();) {
        if (it->second.lease == lease) {
            it = kv_.erase(it);
            changed = true;
        } else {
            ++it;
        }
    }
    if (changed) ++revision_;
}

int64_t MemStore::grant(int64_t ttl_s) {
    std::lock_guard lk(mu_);
    enter();
    const int64_t id = ++next_lease_;
    leases_[id] = {ttl_s, now_ms_() + static_cast<uint64_t>(ttl_s) * 1000};
    return id;
}

int64_t MemStore::keepalive(int64_t lease) {
    std::lock_guard lk(mu_);
    enter();
    const auto it = leases_.find(lease);
    if (it == leases_.end()) return 0;
    it->second.deadline_ms = now_ms_() + static_cast<uint64_t>(it->second.ttl_s) * 1000;
    return it->second.ttl_s;
}

void MemStore::revoke(int64_t lease) {
    std::lock_guard lk(mu_);
    enter();
    revoke_locked(lease);
}

std::optional<KvEntry> MemStore::get(const std::string& key) {
    std::lock_guard lk(mu_);
    enter();
    const auto it = kv_.find(key);
    if (it == kv_.end()) return std::nullopt;
    return it->second;
}

std::vector<KvEntry> MemStore::range(const std::string& prefix, int64_t* revision) {
    std::lock_guard lk(mu_);
    enter();
    std::vector<KvEntry> out;
    for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.starts_with(prefix); ++it) out.push_back(it->second);
    if (revision != nullptr) *revision = revision_;
    return out;
}

PrefixSummary MemStore::summarize(const std::string& prefix) {
    std::lock_guard lk(mu_);
    enter();
    PrefixSummary s;
    for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.starts_with(prefix); ++it) {
        ++s.count;
        s.max_mod_revision = std::max(s.max_mod_revision, it->second.mod_revision);
    }
    return s;
}

void MemStore::put_locked(const std::string& key, const std::string& value, int64_t lease) {
    KvEntry& e = kv_[key];
    if (e.create_revision == 0) e.create_revision = revision_;
    e.key = key;
    e.value = value;
    e.mod_revision = revision_;
    e.lease = lease;
}

void MemStore::check_txn_size(std::size_t ops) const {
    if (max_txn_ops_ != 0 && ops > max_txn_ops_) throw StoreRefused("etcdserver: too many operations in txn request");
}

void MemStore::put(const std::vector<std::pair<std::string, std::string>>& kvs, int64_t lease) {
    std::lock_guard lk(mu_);
    enter();
    if (lease != 0 && !leases_.contains(lease)) throw StoreRefused("requested lease not found");
    check_txn_size(kvs.size());
    ++revision_;
    for (const auto& [k, v] : kvs) put_locked(k, v, lease);
}

void MemStore::erase(const std::vector<std::string>& keys) { put_erase({}, keys); }

void MemStore::put_erase(const std::vector<std::pair<std::string, std::string>>& puts,
                         const std::vector<std::string>& erases) {
    std::lock_guard lk(mu_);
    enter();
    check_txn_size(puts.size() + erases.size());
    ++revision_;
    for (const auto& [k, v] : puts) put_locked(k, v, 0);
    for (const auto& k : erases) kv_.erase(k);
}

int64_t MemStore::put_if(const std::string& key, const std::string& value, int64_t lease, int64_t expect_mod,
                         std::optional<KvEntry>* current) {
    std::lock_guard lk(mu_);
    enter();
    const auto it = kv_.find(key);
    const int64_t have = it == kv_.end() ? 0 : it->second.mod_revision;
    if (have != expect_mod) {
        if (current != nullptr) *current = it == kv_.end() ? std::nullopt : std::optional<KvEntry>(it->second);
        return 0;
    }
    if (lease != 0 && !leases_.contains(lease)) throw StoreRefused("requested lease not found");
    ++revision_;
    put_locked(key, value, lease);
    return revision_;
}

bool MemStore::erase_if(const std::string& key, const std::string& value) {
    std::lock_guard lk(mu_);
    enter();
    const auto it = kv_.find(key);
    if (it == kv_.end() || it->second.value != value) return false;
    ++revision_;
    kv_.erase(it);
    return true;
}

std::vector<EndpointHealth> MemStore::health() {
    std::lock_guard lk(mu_);
    return {{"memory", available_ ? "up" : "no quorum"}};
}

}  // namespace fedgate
