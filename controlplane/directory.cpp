// The process directory: registration checks, heartbeats, expiry.
#include "controlplane/directory.hpp"

namespace fedgate {

Directory::Directory(uint16_t party_id, std::size_t capacity, uint32_t heartbeat_timeout_ms)
    : party_id_(party_id), capacity_(capacity), timeout_ms_(heartbeat_timeout_ms) {}

RegStatus Directory::refuse(RegStatus s) {
    switch (s) {
    case RegStatus::wrong_party: ++counters_.refused_wrong_party; break;
    case RegStatus::address_mismatch: ++counters_.refused_address; break;
    case RegStatus::unknown: ++counters_.refused_unknown; break;
    case RegStatus::stale_epoch: ++counters_.refused_stale_epoch; break;
    case RegStatus::bad_record: ++counters_.refused_bad_record; break;
    case RegStatus::full: ++counters_.refused_full; break;
    case RegStatus::store_unavailable:
    case RegStatus::ok: break;
    }
    return s;
}

RegStatus Directory::register_process(const DmaAddress& r, uint32_t source, uint64_t now_ms, DirectoryChange* change) {
    std::lock_guard lock(mu_);
    change->kind = DirectoryChange::Kind::none;
    if (r.pid.party() != party_id_) return refuse(RegStatus::wrong_party);
    if (r.pid.node() == 0 && r.pid.local() == 0) return refuse(RegStatus::bad_record);
    if (r.ipv4 != source) return refuse(RegStatus::address_mismatch);
    if (r.transport == Transport::tcp && r.port == 0) return refuse(RegStatus::bad_record);

    const auto it = procs_.find(r.pid.value);
    if (it != procs_.end()) {
        LocalProcess& p = it->second;
        // Another node cannot take over a live process's ID.
        if (p.source != source) return refuse(RegStatus::address_mismatch);
        p.expires_ms = now_ms + timeout_ms_;
        deadlines_.emplace(p.expires_ms, r.pid.value);
        if (p.record == r) {
            ++counters_.refreshed;  // a retried registration
            return RegStatus::ok;
        }
        p.record = r;
        p.registered_ms = now_ms;
        ++counters_.replaced;
        *change = {DirectoryChange::Kind::replaced, r};
        return RegStatus::ok;
    }
    if (procs_.size() >= capacity_) return refuse(RegStatus::full);
    procs_.emplace(r.pid.value, LocalProcess{r, source, now_ms, now_ms + timeout_ms_});
    deadlines_.emplace(now_ms + timeout_ms_, r.pid.value);
    ++counters_.registered;
    *change = {DirectoryChange::Kind::added, r};
    return RegStatus::ok;
}

RegStatus Directory::check_sender(ProcessId pid, uint32_t epoch, uint32_t source) const {
    const auto it = procs_.find(pid.value);
    if (it == procs_.end()) return RegStatus::unknown;
    if (it->second.source != source) return RegStatus::address_mismatch;
    if (it->second.record.epoch != epoch) return RegStatus::stale_epoch;
    return RegStatus::ok;
}

RegStatus Directory::heartbeat(ProcessId pid, uint32_t epoch, uint32_t source, uint64_t now_ms) {
    std::lock_guard lock(mu_);
    if (const RegStatus s = check_sender(pid, epoch, source); s != RegStatus::ok) return refuse(s);
    procs_.at(pid.value).expires_ms = now_ms + timeout_ms_;
    deadlines_.emplace(now_ms + timeout_ms_, pid.value);
    ++counters_.heartbeats;
    return RegStatus::ok;
}

RegStatus Directory::deregister(ProcessId pid, uint32_t epoch, uint32_t source, DirectoryChange* change) {
    std::lock_guard lock(mu_);
    change->kind = DirectoryChange::Kind::none;
    if (const RegStatus s = check_sender(pid, epoch, source); s != RegStatus::ok) return refuse(s);
    const auto it = procs_.find(pid.value);
    *change = {DirectoryChange::Kind::removed, it->second.record};
    procs_.erase(it);
    ++counters_.deregistered;
    return RegStatus::ok;
}

std::vector<DmaAddress> Directory::expire(uint64_t now_ms) {
    std::lock_guard lock(mu_);
    std::vector<DmaAddress> gone;
    while (!deadlines_.empty() && deadlines_.top().first <= now_ms) {
        const uint64_t pid = deadlines_.top().second;
        deadlines_.pop();
        const auto it = procs_.find(pid);
        // Gone already, or its deadline moved on since this one was set.
        if (it == procs_.end() || it->second.expires_ms > now_ms) continue;
        gone.push_back(it->second.record);
        procs_.erase(it);
        ++counters_.expired;
    }
    return gone;
}

std::optional<LocalProcess> Directory::find(ProcessId pid) const {
    std::lock_guard lock(mu_);
    const auto it = procs_.find(pid.value);
    if (it == procs_.end()) return std::nullopt;
    return it->second;
}

std::vector<LocalProcess> Directory::list() const {
    std::lock_guard lock(mu_);
    std::vector<LocalProcess> out;
    out.reserve(procs_.size());
    for (const auto& [id, p] : procs_) out.push_back(p);
    return out;
}

std::vector<DmaAddress> Directory::records() const {
    std::lock_guard lock(mu_);
    std::vector<DmaAddress> out;
    out.reserve(procs_.size());
    for (const auto& [id, p] : procs_) out.push_back(p.record);
    return out;
}

std::size_t Directory::size() const {
    std::lock_guard lock(mu_);
    return procs_.size();
}

DirectoryCounters Directory::counters() const {
    std::lock_guard lock(mu_);
    return counters_;
}

bool Directory::restore(const DmaAddress& r, uint32_t source, uint64_t now_ms) {
    std::lock_guard lock(mu_);
    if (r.pid.party() != party_id_ || procs_.contains(r.pid.value) || procs_.size() >= capacity_) return false;
    procs_.emplace(r.pid.value, LocalProcess{r, source, now_ms, now_ms + timeout_ms_});
    deadlines_.emplace(now_ms + timeout_ms_, r.pid.value);
    ++counters_.restored;
    return true;
}

bool Directory::forget(ProcessId pid, uint32_t epoch) {
    std::lock_guard lock(mu_);
    const auto it = procs_.find(pid.value);
    if (it == procs_.end() || it->second.record.epoch != epoch) return false;
    procs_.erase(it);
    return true;
}

}  // namespace fedgate
