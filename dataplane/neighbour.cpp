// Neighbour table: open addressing with linear probing and backward-shift deletion (no tombstones).
#include "dataplane/neighbour.hpp"

#include <rte_jhash.h>

#include <bit>
#include <stdexcept>

namespace fedgate {

NeighbourTable::NeighbourTable(uint32_t capacity, NeighbourTimers timers) : timers_(timers) {
    if (capacity == 0) throw std::invalid_argument("neighbour table capacity must be positive");
    const uint32_t slots = std::bit_ceil(capacity + capacity / 3 + 1);
    slots_.resize(slots);
    mask_ = slots - 1;
    max_used_ = capacity;
    per_port_.reserve(64);  // grown only for a port index past it
}

uint32_t NeighbourTable::slot_of(uint16_t port, uint32_t ip) const {
    return rte_jhash_1word(ip, port) & mask_;
}

Neighbour* NeighbourTable::find_mut(uint16_t port, uint32_t ip) {
    // Most packets go to the same next hop as the one before: try the last hit before hashing. A
    // slot whose entry moved or left fails the check (erase clears it), so the memo is never wrong.
    if (Neighbour& last = slots_[last_hit_]; last.ip == ip && last.port == port && last.state != Neighbour::State::free)
        return &last;
    for (uint32_t i = slot_of(port, ip);; i = (i + 1) & mask_) {
        Neighbour& n = slots_[i];
        if (n.state == Neighbour::State::free) return nullptr;
        if (n.ip == ip && n.port == port) {
            last_hit_ = i;
            return &n;
        }
    }
}

const Neighbour* NeighbourTable::find(uint16_t port, uint32_t ip) const {
    return const_cast<NeighbourTable*>(this)->find_mut(port, ip);
}

Neighbour* NeighbourTable::insert(uint16_t port, uint32_t ip) {
    if (used_ >= max_used_) return nullptr;
    uint32_t i = slot_of(port, ip);
    while (slots_[i].state != Neighbour::State::free) i = (i + 1) & mask_;
    slots_[i] = Neighbour{};
    slots_[i].ip = ip;
    slots_[i].port = port;
    ++used_;
    if (port >= per_port_.size()) per_port_.resize(port + 1u, 0);
    ++per_port_[port];
    return &slots_[i];
}

void NeighbourTable::erase(uint32_t hole) {
    --per_port_[slots_[hole].port];
    slots_[hole] = Neighbour{};
    --used_;
    ++version_;
    // Shift later members of the probe chain back so lookups never stop at the hole early.
    for (uint32_t j = (hole + 1) & mask_; slots_[j].state != Neighbour::State::free; j = (j + 1) & mask_) {
        const uint32_t home = slot_of(slots_[j].port, slots_[j].ip);
        // Move j into the hole if its home is not in the cyclic range (hole, j].
        const bool home_between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!home_between) {
            slots_[hole] = slots_[j];
            slots_[j] = Neighbour{};
            hole = j;
        }
    }
}

NeighbourTable::Lookup NeighbourTable::lookup(uint16_t port, uint32_t ip, uint64_t now_ms) {
    Neighbour* n = find_mut(port, ip);
    if (n == nullptr) {
        n = insert(port, ip);
        if (n == nullptr) return {Verdict::full, nullptr};
        n->state = Neighbour::State::incomplete;
        n->probes_sent = 1;
        n->next_probe_ms = now_ms + timers_.probe_interval_ms;
        return {Verdict::probe, n};
    }
    if (n->permanent) return {Verdict::resolved, n};
    switch (n->state) {
    case Neighbour::State::reachable:
        if (now_ms < n->confirmed_ms + timers_.reachable_ms) return {Verdict::resolved, n};
        n->state = Neighbour::State::stale;
        [[fallthrough]];
    case Neighbour::State::stale:
        // Refresh at most once per probe interval, however many packets go out meanwhile.
        if (now_ms >= n->next_probe_ms) {
            n->next_probe_ms = now_ms + timers_.probe_interval_ms;
            return {Verdict::resolved_probe, n};
        }
        return {Verdict::resolved, n};
    default:
        return {Verdict::pending, n};
    }
}

Neighbour* NeighbourTable::learn(uint16_t port, uint32_t ip, const MacAddr& mac, uint64_t now_ms, bool create) {
    Neighbour* n = find_mut(port, ip);
    if (n == nullptr) {
        if (!create || (n = insert(port, ip)) == nullptr) return nullptr;
    }
    if (n->permanent) return nullptr;  // configured entries are not overwritten by what we hear
    if (n->mac != mac || n->state != Neighbour::State::reachable) ++version_;  // not for a confirmation
    n->mac = mac;
    n->state = Neighbour::State::reachable;
    n->confirmed_ms = now_ms;
    n->probes_sent = 0;
    n->next_probe_ms = now_ms;
    return n;
}

bool NeighbourTable::add_permanent(uint16_t port, uint32_t ip, const MacAddr& mac) {
    Neighbour* n = find_mut(port, ip);
    if (n == nullptr && (n = insert(port, ip)) == nullptr) return false;
    n->mac = mac;
    n->state = Neighbour::State::reachable;
    n->permanent = true;
    ++version_;
    return true;
}

}  // namespace fedgate
