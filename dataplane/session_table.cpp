// Session table: a fixed pool of sessions, each indexed twice in an open-addressing table (linear
// probing, backward-shift deletion, no tombstones) of the flow keys' hashes, each key checked
// against its session's line.
#include "dataplane/session_table.hpp"

#include <rte_hash_crc.h>

#include <sys/mman.h>

#include <bit>
#include <cstdlib>
#include <functional>
#include <new>
#include <random>
#include <stdexcept>

namespace fedgate {

namespace {

constexpr uint32_t kMaxSessions = 16u << 20;

constexpr std::size_t kHugePage = 2u << 20;

}  // namespace

void* allocate_table_memory(std::size_t bytes) {
    if (bytes == 0) bytes = 1;
    const std::size_t align = bytes >= kHugePage ? kHugePage : 64;
    const std::size_t size = (bytes + align - 1) / align * align;
    void* p = std::aligned_alloc(align, size);
    if (p == nullptr) throw std::bad_alloc();
    // Only a hint: where transparent huge pages are off, this fails and 4 KB pages serve.
    if (align == kHugePage) (void)madvise(p, size, MADV_HUGEPAGE);
    return p;
}

void release_table_memory(void* p) { std::free(p); }

uint32_t SessionTable::random_seed() { return std::random_device{}(); }

SessionTable::SessionTable(uint32_t max_sessions, uint32_t seed, uint32_t window_from_slots) : seed_(seed) {
    if (max_sessions == 0) throw std::invalid_argument("session table: max_sessions must be positive");
    if (max_sessions > kMaxSessions) throw std::invalid_argument("session table: max_sessions above 16M");
    static_assert((uint64_t{kMaxSessions} << 1 | 1) < kEmpty, "a slot's reference holds every session");
    pool_ = FixedArray<Session>(max_sessions);
    cold_ = FixedArray<SessionCold>(max_sessions);
    free_.resize(max_sessions);
    // Popped from the back: hand out index 0 first so a fresh table fills in pool order.
    for (uint32_t i = 0; i < max_sessions; ++i) free_[i] = max_sessions - 1 - i;
    // Two keys per session at a load of at most 3/4, so a probe always meets an empty slot.
    const uint64_t keys = 2ull * max_sessions;
    const uint64_t slots = std::bit_ceil(keys + (keys + 2) / 3);
    slots_ = FixedArray<Slot>(slots);
    mask_ = static_cast<uint32_t>(slots - 1);
    // At least four slots (one session's two keys and a third), so a window ends inside the array.
    if (slots >= window_from_slots) window_end_ = mask_ - (kStopWindow - 2);
}

SessionTable::Hit SessionTable::find(const FlowKey& k) {
    const Slot& s = slots_[slot_of(k, hash_of(k))];
    if (s.ref == kEmpty) return {};
    return {&pool_[session_of(s.ref)], static_cast<uint8_t>(s.ref & 1)};
}

bool SessionTable::contains(const FlowKey& k) const { return slots_[slot_of(k, hash_of(k))].ref != kEmpty; }

uint32_t SessionTable::slot_of_ref(uint32_t h, uint32_t ref) const {
    uint32_t i = h & mask_;
    while (slots_[i].ref != kEmpty && slots_[i].ref != ref) i = (i + 1) & mask_;
    return i;
}

// The session `ref` names must already hold k (keyed()), for lookups of k's hash to check against.
bool SessionTable::index(const FlowKey& k, uint32_t ref) {
    const uint32_t h = hash_of(k);
    Slot& s = slots_[slot_of(k, h)];
    if (s.ref != kEmpty) return false;
    s = Slot{h, ref};
    changed();
    return true;
}

void SessionTable::unindex(uint32_t h, uint32_t ref) {
    uint32_t hole = slot_of_ref(h, ref);
    if (slots_[hole].ref == kEmpty) return;  // not indexed
    changed();
    slots_[hole] = Slot{};
    // Shift later members of the probe chain back so lookups never stop at the hole early.
    for (uint32_t j = (hole + 1) & mask_; slots_[j].ref != kEmpty; j = (j + 1) & mask_) {
        const uint32_t home = slots_[j].hash & mask_;
        // Move j into the hole if its home is not in the cyclic range (hole, j].
        const bool home_between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!home_between) {
            slots_[hole] = slots_[j];
            slots_[j] = Slot{};
            hole = j;
        }
    }
}

Session* SessionTable::insert(const FlowKey& forward, const FlowKey& reverse) {
    // Both keys have one protocol, the session's (the NAT's sessions are TCP or UDP); 0 marks a free
    // session, so a key with it is refused like a full table.
    if (free_.empty() || forward == reverse || forward.proto == 0 || forward.proto != reverse.proto) return nullptr;
    const uint32_t idx = free_.back();
    Session& s = pool_[idx];
    SessionCold& c = cold_[idx];
    s = Session{};
    c = SessionCold{};
    c.key[0] = forward;
    c.key[1] = reverse;
    // The keys as the index checks them (keyed()): each rewrite's addresses and ports are the other
    // key's reversed.
    for (int d = 0; d < 2; ++d) {
        const FlowKey& other = c.key[1 - d];
        s.rw[d].src = other.dst;
        s.rw[d].dst = other.src;
        s.rw[d].sport = other.dport;
        s.rw[d].dport = other.sport;
    }
    s.proto = forward.proto;
    // index() refuses a key already present; undo the first key if the second is refused. Removing
    // the entry just added puts every other slot back where it was (nothing probed past it).
    if (index(forward, idx << 1)) {
        if (index(reverse, idx << 1 | 1)) {
            free_.pop_back();
            ++used_;
            return &s;
        }
        unindex(hash_of(forward), idx << 1);
    }
    s = Session{};
    c = SessionCold{};
    return nullptr;
}

void SessionTable::erase(Session* s) {
    // Defensive: ignore null, foreign pointers and sessions already free (e.g. erased by on_expire).
    if (std::less<const Session*>{}(s, pool_.data()) ||
        !std::less<const Session*>{}(s, pool_.data() + pool_.size()) || !s->in_use())
        return;
    const auto idx = static_cast<uint32_t>(s - pool_.data());
    unindex(hash_of(cold_[idx].key[0]), idx << 1);
    unindex(hash_of(cold_[idx].key[1]), idx << 1 | 1);
    *s = Session{};
    cold_[idx] = SessionCold{};
    free_.push_back(idx);
    --used_;
}

}  // namespace fedgate
