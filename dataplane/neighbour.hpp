// The neighbour (ARP) table of one data-plane lcore: IPv4 next hop -> MAC, with probes, a hold
// slot for the first packet waiting on resolution, and timeouts. Single writer; no allocation after
// construction; time is passed in (milliseconds) so tests drive it directly.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

struct rte_mbuf;

namespace fedgate {

using MacAddr = std::array<uint8_t, 6>;

struct NeighbourTimers {
    uint32_t reachable_ms = 30'000;  // a learned MAC is used without question this long
    uint32_t stale_ms = 300'000;     // after that it is still used, refreshed by a probe, and dropped after this
    uint32_t probe_interval_ms = 500;
    uint32_t probes = 3;             // unanswered probes before the entry fails
};

struct Neighbour {
    enum class State : uint8_t { free, incomplete, reachable, stale };
    uint32_t ip = 0;        // network order
    uint16_t port = 0;      // the gateway's port index
    State state = State::free;
    uint8_t probes_sent = 0;
    MacAddr mac{};
    uint64_t confirmed_ms = 0;   // last time the MAC was learned or confirmed
    uint64_t next_probe_ms = 0;
    rte_mbuf* held = nullptr;    // first packet waiting for resolution (owned by the table's user)
    bool permanent = false;      // configured, not learned: never probed, aged or overwritten
};

class NeighbourTable {
public:
    enum class Verdict : uint8_t {
        resolved,       // mac is good: send
        resolved_probe, // mac is good but stale: send, and send a probe too
        probe,          // new entry: hold the packet and send the first probe
        pending,        // a probe is out: hold the packet if the slot is free, else drop it
        full,           // no room for a new entry
    };
    struct Lookup {
        Verdict verdict;
        Neighbour* entry;  // null only for `full`
    };

    NeighbourTable(uint32_t capacity, NeighbourTimers timers);

    // Finds or creates the entry for a next hop we want to send to.
    Lookup lookup(uint16_t port, uint32_t ip, uint64_t now_ms);
    // A MAC heard for `ip` (ARP request or reply). Creates the entry only if `create` (the ARP was for
    // us, as Linux does); otherwise just refreshes a known one. Returns the entry or null.
    Neighbour* learn(uint16_t port, uint32_t ip, const MacAddr& mac, uint64_t now_ms, bool create);
    const Neighbour* find(uint16_t port, uint32_t ip) const;

    // A sender's memo of where an entry is (a NAT session keeps one per direction, so its packets
    // skip the hash): memo_of(n) is n's slot + 1, 0 when the slot does not fit in 16 bits. recall()
    // gives the entry back only while that slot still holds (port, ip) in the reachable state (or a
    // permanent entry): an entry that moved, left, changed port or went stale or incomplete is
    // noticed and the sender looks it up again (which probes a stale one). A changed MAC needs no
    // new memo: it is read from the entry.
    uint16_t memo_of(const Neighbour* n) const {
        const std::size_t i = static_cast<std::size_t>(n - slots_.data());
        return i < UINT16_MAX ? static_cast<uint16_t>(i + 1) : 0;
    }
    // Past its reachable time (`now_ms`) an entry is not vouched for either, even before tick()
    // marks it stale: lookup() then marks it and asks for the probe, as for a sender with no memo.
    // Always inline: every packet of a session and every reply of a cache hit asks, and GCC left a
    // call in the cache hit's path once that function grew.
    [[gnu::always_inline]] const Neighbour* recall(uint16_t memo, uint16_t port, uint32_t ip, uint64_t now_ms) const {
        // One compare for both: memo 0 wraps past every slot; the slots are mask_ + 1 (a vector's
        // size() is a division by the entry's 48 bytes).
        const uint32_t i = uint32_t{memo} - 1u;
        if (i > mask_) return nullptr;
        const Neighbour& n = slots_[i];
        return n.ip == ip && n.port == port && n.state == Neighbour::State::reachable &&
                       (n.permanent || now_ms < n.confirmed_ms + timers_.reachable_ms)
                   ? &n
                   : nullptr;
    }
    // A configured entry (static ARP). False when the table is full.
    bool add_permanent(uint16_t port, uint32_t ip, const MacAddr& mac);

    // Periodic work, `now_ms` monotonic. Calls probe(entry) for entries due a probe and
    // expire(entry, failed) just before an entry is removed (failed = never resolved), so the
    // caller can free the held packet and count.
    template <typename Probe, typename Expire>
    void tick(uint64_t now_ms, Probe&& probe, Expire&& expire) {
        tick_slots(now_ms, 0, slot_count(), probe, expire);
    }
    // The same for `count` slots from `from` (a pass in slices, so no call walks the whole table):
    // returns where the next slice starts, slot_count() when the pass is done. An entry that the
    // removal of another moves across the slice's start may be looked at twice or not at all in
    // one pass; each look only acts on times that are due, so the next pass catches up.
    template <typename Probe, typename Expire>
    uint32_t tick_slots(uint64_t now_ms, uint32_t from, uint32_t count, Probe&& probe, Expire&& expire);
    uint32_t slot_count() const { return static_cast<uint32_t>(slots_.size()); }

    // Empties the table, handing every entry to fn first (to free what it holds).
    template <typename Fn>
    void clear(Fn&& fn) {
        for (Neighbour& n : slots_)
            if (n.state != Neighbour::State::free) fn(n), n = Neighbour{};
        used_ = 0;
        ++version_;
        per_port_.clear();
    }

    // Moves on whenever a slot's answer to recall() could change other than by the clock: an entry
    // erased (which may move others), given a new MAC, made reachable or permanent, the table
    // cleared. (An insert takes a free slot, which no sender holds an answer from.) A reachable
    // entry going stale needs no move: it does so only once its reachable time is over, which a
    // sender that kept the entry's MAC checks itself. So a sender may keep a recalled entry's MAC
    // and use it while the version and the clock still vouch for it (a cache hit's reply route:
    // Dataplane::answer_hit_in_place), without reading the entry. (32 bits: wrapping round to a
    // kept value would take 2^32 changes within one reachable time.)
    uint32_t version() const { return version_; }

    uint32_t size() const { return used_; }
    uint32_t count_port(uint16_t port) const { return port < per_port_.size() ? per_port_[port] : 0; }
    uint32_t capacity() const { return max_used_; }  // entries it holds at most
    const NeighbourTimers& timers() const { return timers_; }

private:
    uint32_t slot_of(uint16_t port, uint32_t ip) const;
    Neighbour* find_mut(uint16_t port, uint32_t ip);
    Neighbour* insert(uint16_t port, uint32_t ip);
    void erase(uint32_t slot);

    std::vector<Neighbour> slots_;  // open addressing, linear probing, capacity a power of two
    uint32_t mask_;
    uint32_t last_hit_ = 0;  // slot of the last successful find
    uint32_t used_ = 0;
    uint32_t version_ = 0;  // version()
    std::vector<uint32_t> per_port_;  // entries by port index, kept by insert and erase
    uint32_t max_used_;             // keep the load factor at or under 3/4
    NeighbourTimers timers_;
};

template <typename Probe, typename Expire>
uint32_t NeighbourTable::tick_slots(uint64_t now_ms, uint32_t from, uint32_t count, Probe&& probe, Expire&& expire) {
    const uint32_t end = static_cast<uint32_t>(std::min<uint64_t>(slots_.size(), uint64_t{from} + count));
    for (uint32_t i = from; i < end;) {
        Neighbour& n = slots_[i];
        bool remove = false;
        switch (n.permanent ? Neighbour::State::free : n.state) {
        case Neighbour::State::free: break;
        case Neighbour::State::incomplete:
            if (now_ms >= n.next_probe_ms) {
                if (n.probes_sent >= timers_.probes) {
                    expire(n, true);
                    remove = true;
                } else {
                    ++n.probes_sent;
                    n.next_probe_ms = now_ms + timers_.probe_interval_ms;
                    probe(n);
                }
            }
            break;
        case Neighbour::State::reachable:
            if (now_ms >= n.confirmed_ms + timers_.reachable_ms) n.state = Neighbour::State::stale;
            break;
        case Neighbour::State::stale:
            if (now_ms >= n.confirmed_ms + timers_.stale_ms) {
                expire(n, false);
                remove = true;
            }
            break;
        }
        if (remove)
            erase(i);  // backward shift may move another entry into slot i: look at it again
        else
            ++i;
    }
    return end;
}

}  // namespace fedgate
