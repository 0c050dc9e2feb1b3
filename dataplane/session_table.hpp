// NAT sessions of one data-plane lcore: a pool of sessions, each indexed under both directions' flow
// keys (as the packets arrive), with idle expiry by an incremental sweep. Single writer (the lcore);
// allocation only at construction; no EAL needed (unit tests use it directly).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include <rte_hash_crc.h>
#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif
#if defined(__SSE4_1__)
#include <smmintrin.h>
#endif

#include "dataplane/table_memory.hpp"

namespace fedgate {

// CRC32-C of a 64-bit word. Where the build targets SSE4.2 (DPDK's x86 builds do), the instruction
// itself: rte_hash_crc_8byte() tests at every call which one DPDK picked at start-up. Elsewhere
// DPDK's pick; the value is the same either way.
inline uint32_t crc32c_u64(uint64_t v, uint32_t init) {
#if defined(__SSE4_2__)
    return static_cast<uint32_t>(_mm_crc32_u64(init, v));
#else
    return rte_hash_crc_8byte(v, init);
#endif
}

// A flow as a packet arrives: addresses and ports in network byte order. 16 bytes, no padding bits
// left undefined (pad is zero), so it hashes and compares as raw bytes.
struct FlowKey {
    uint32_t src = 0, dst = 0;
    uint16_t sport = 0, dport = 0;
    uint8_t proto = 0;
    uint8_t pad[3] = {0, 0, 0};

    bool operator==(const FlowKey& o) const {
        return src == o.src && dst == o.dst && sport == o.sport && dport == o.dport && proto == o.proto;
    }
};
static_assert(sizeof(FlowKey) == 16);

// What to do to a packet of one direction, fixed when the session is made (VPP NAT44-ED style): the
// new addresses and ports, where it goes, and the checksum deltas, so the fast path is a lookup and
// a few stores.
struct NatRewrite {
    uint32_t src = 0, dst = 0;      // network order
    uint16_t sport = 0, dport = 0;  // network order
    uint32_t next_hop = 0;          // network order
    uint16_t out_port = 0;          // the gateway's port index
    uint16_t neigh = 0;             // the next hop's neighbour entry (NeighbourTable::memo_of), 0: none yet
    uint16_t l3_delta = 0;          // one's-complement sum to add to the IPv4 header checksum (TTL - 1 included)
    uint16_t l4_delta = 0;          // ... to the TCP/UDP checksum (pseudo-header and ports)

    // Where the packet goes, (next_hop, out_port, neigh), as one word: packets whose words are
    // equal leave by the same neighbour entry, told in one compare.
    uint64_t hop_word() const {
        uint64_t w;
        std::memcpy(&w, reinterpret_cast<const unsigned char*>(this) + offsetof(NatRewrite, next_hop), sizeof w);
        return w;
    }
};
static_assert(offsetof(NatRewrite, out_port) == offsetof(NatRewrite, next_hop) + 4 &&
              offsetof(NatRewrite, neigh) == offsetof(NatRewrite, next_hop) + 6, "hop_word() reads the three");

// One cache line holds everything a packet of either direction reads or writes once the index has
// pointed at it: both rewrites (the other direction's out_port is the port a packet must arrive on;
// each remembers its next hop's neighbour entry, so the MAC is found without a lookup), the idle
// clock and the TCP state, and both keys, implied: a NAT session's replies come from where its
// packets went, so rw[d]'s addresses and ports are key[1 - d]'s reversed (SessionTable::insert()
// writes them so, and they never change), and with `proto` that is the key the index's hash-only
// slots are checked against. What only creation, expiry
// and listings need is a SessionCold in an array of its own (SessionTable::cold()): with the two in
// one 128-byte record, the hot lines of a table's sessions lay a line apart, and the CPU's
// adjacent-line prefetch brought the cold line in beside every hot one a lookup reached.
struct alignas(64) Session {
    NatRewrite rw[2];    // applied to packets matching key[0] / key[1]
    uint64_t last_seen_ms = 0;
    uint32_t timeout_ms = 0;  // idle timeout now in force (by protocol and TCP state)
    uint8_t tcp_fin = 0;      // bit d: FIN seen from direction d
    bool tcp_rst = false;
    bool replied = false;     // a packet has come back (direction 1): the flow is established
    uint8_t proto = 0;        // both keys' protocol; 0: the session is free
    bool in_use() const { return proto != 0; }
};
// A session's cold fields: creation, expiry, listings.
struct SessionCold {
    FlowKey key[2];           // [0]: the direction that opened it; [1]: the replies
    uint16_t alloc_port = 0;  // the port this session took from a pool (network order), 0 if none
    uint8_t alloc_pool = 0;   // which pool it came from (the NAT's own numbering)
    uint8_t kind = 0;         // the NAT's own tag (import or export)
};
// Both parts of a session, copied out for a listing.
struct SessionInfo : Session, SessionCold {
    SessionInfo() = default;
    SessionInfo(const Session& s, const SessionCold& c) : Session(s), SessionCold(c) {}
};
static_assert(sizeof(NatRewrite) == 24);
static_assert(sizeof(Session) == 64, "the hot fields fill exactly one cache line");
static_assert(sizeof(SessionCold) == 36);

class SessionTable {
    struct Slot;  // the index's (below)

public:
    struct Hit {
        Session* session = nullptr;  // null: no session has this key
        uint8_t dir = 0;             // which of the session's keys matched
    };

    // `seed`: the flow hash's; by default a random one per table (per start of the daemon), so
    // nobody can craft flows that collide on purpose.
    // An index of `window_from_slots` slots or more searches a hash's first slots at once
    // (first_stop()); the default is 1 MB of index, which a max_sessions of 24,577 or more gets.
    static constexpr uint32_t kWindowFromSlots = 1u << 17;
    explicit SessionTable(uint32_t max_sessions, uint32_t seed = random_seed(), uint32_t window_from_slots = kWindowFromSlots);
    static uint32_t random_seed();
    uint32_t seed() const { return seed_; }

    Hit find(const FlowKey& k);
    bool contains(const FlowKey& k) const;

    // Batched lookups (a burst at a time, so the cache misses of several packets overlap): hash()
    // a key and prefetch its home slot; once that line is in, prefetch_session() finds the first
    // slot with the key's hash and prefetches the session it points at; then find_hinted(k, hint)
    // checks the key against that session's line, from cache. The prefetches never change the outcome.
    uint32_t hash(const FlowKey& k) const {
        const uint32_t h = hash_of(k);
        // Eight slots to a line, none across two. first_stop() reads the home slot and the three
        // after it at once in a large index (a smaller one walks them one at a time, mostly no
        // further than the next): where they run into the next line, that line too (elsewhere the
        // second prefetch is of the same line). The third's address without the wrap to the
        // first: past the last slots it is up to three slots past the array, which a prefetch may
        // name (it never faults), and one addressing mode.
        const Slot* const home = &slots_[h & mask_];
        __builtin_prefetch(home);
        __builtin_prefetch(home + kStopWindow - 1);
        return h;
    }
    // Returns a hint for find_hinted(k, hint), `h` being hash(k): what the index holds for the hash
    // now (the first slot's reference with that hash, or none) and the index's epoch, which every
    // change of a slot moves on.
    uint64_t prefetch_session(uint32_t h) const { return session_prefetcher()(h); }
    // prefetch_session() for a pass over a burst's hashes, with the index's fields read once, not
    // again for every packet (the pass's stores may alias them, and GCC reloads them): valid while
    // no slot changes, so for a pass that changes nothing in the table.
    class SessionPrefetcher {
    public:
        uint64_t operator()(uint32_t h) const { return windowed() ? prefetch<true>(h) : prefetch<false>(h); }
        // Whether the index is searched with first_stop()'s window: for a pass instantiated for
        // each search, told once (the loop of each is then the one it would be alone).
        bool windowed() const { return window_end_ != 0; }
        template <bool kWindow>
        uint64_t prefetch(uint32_t h) const {
            const uint32_t ref = slots_[first_stop<kWindow>(slots_, mask_, window_end_, h)].ref;
            if (ref != kEmpty) __builtin_prefetch(&pool_[session_of(ref)]);
            return static_cast<uint64_t>(ref) << 32 | epoch_;
        }

    private:
        friend class SessionTable;
        SessionPrefetcher(const Slot* slots, const Session* pool, uint32_t mask, uint32_t window_end, uint32_t epoch)
            : slots_(slots), pool_(pool), mask_(mask), window_end_(window_end), epoch_(epoch) {}
        const Slot* slots_;
        const Session* pool_;
        uint32_t mask_, window_end_, epoch_;
    };
    SessionPrefetcher session_prefetcher() const { return {slots_.data(), pool_.data(), mask_, window_end_, epoch_}; }
    // The session and direction a hint from prefetch_session() names, while it is current (no slot
    // changed since): the first slot's with the key's hash, or none where no slot has it (or the
    // hint is stale). What find_hinted() checks the key against; for tests of the prefetch itself,
    // whose hints find_hinted() would otherwise correct unseen.
    Hit named_by(uint64_t hint) {
        const uint32_t ref = static_cast<uint32_t>(hint >> 32);
        if (static_cast<uint32_t>(hint) != epoch_ || ref == kEmpty) return {};
        return {&pool_[session_of(ref)], static_cast<uint8_t>(ref & 1)};
    }
    // As find(k), from the hint prefetch_session(hash(k)) gave: while no slot has changed since, the
    // hint's session is checked against the key (keyed()) and the index not read again; where it is
    // stale, or points at another key of the same hash, the key is looked up afresh, so a hint never
    // changes the outcome. `hint` must be from k's hash.
    Hit find_hinted(const FlowKey& k, uint64_t hint) {
        return find_hinted_by(hint, &k, [&k]() -> const FlowKey& { return k; });
    }
    // The same, from the key's fields where they lie (`fields`: laid out as a FlowKey up to its
    // protocol, as a FastPacket is), the key made by key_of() only for a lookup afresh: the fast
    // path's packets compare their own fields and build no key on the stack.
    template <typename KeyOf>
    [[gnu::always_inline]] Hit find_hinted_by(uint64_t hint, const void* fields, KeyOf&& key_of) {
        if (static_cast<uint32_t>(hint) != epoch_) [[unlikely]]
            return find(key_of());
        const uint32_t ref = static_cast<uint32_t>(hint >> 32);
        if (ref == kEmpty) return {};  // no slot has the key's hash: nor the key
        Session& s = pool_[session_of(ref)];
        if (!keyed_at(s, ref, static_cast<const unsigned char*>(fields))) [[unlikely]]
            return find(key_of());  // another key's slot with the same hash first
        return {&s, static_cast<uint8_t>(ref & 1)};
    }
    // A session's cold part (its keys, its pool port, the NAT's tag). `s` is one of this table's.
    SessionCold& cold(const Session* s) { return cold_[static_cast<std::size_t>(s - pool_.data())]; }
    const SessionCold& cold(const Session* s) const { return cold_[static_cast<std::size_t>(s - pool_.data())]; }

    // Makes a session indexed under both keys, in use (proto set) with each rewrite's addresses and
    // ports the other key's reversed (see Session) and everything else zeroed, or returns null when
    // the table is full, either key is already indexed or the protocol is 0 (nothing changes then).
    // The rewrites' addresses and ports must stay as they are: the index checks keys against them.
    Session* insert(const FlowKey& forward, const FlowKey& reverse);
    void erase(Session* s);

    // Looks at up to `budget` sessions from where the last sweep stopped, wrapping around; each
    // whose last_seen_ms + timeout_ms <= now_ms is passed to on_expire(Session&, const SessionCold&)
    // and then erased.
    // Returns how many expired.
    template <typename OnExpire>
    uint32_t sweep(uint64_t now_ms, uint32_t budget, OnExpire&& on_expire);

    // Visits sessions in pool order from index `from` (visit(const Session&, const SessionCold&)),
    // until visit returns false or the pool ends.
    // Returns the index to continue from (capacity() when done).
    template <typename Visit>
    uint32_t visit(uint32_t from, Visit&& visit) const;

    uint32_t size() const { return used_; }
    uint32_t capacity() const { return static_cast<uint32_t>(pool_.size()); }

private:
    // A slot holds a key's hash and where it points, not the key: 8 bytes, eight to a cache line, so
    // the index is half the size it was with the key in the slot (at 64K sessions 2 MB, which the
    // core's L2 can hold, against 4). A walk compares hashes; the key itself is checked against the
    // session's line (keyed()), which the packet reads for its rewrite anyway. The full 32-bit hash
    // is kept, so another key's slot in the walk is taken for this one's about once in 2^32, and
    // the hash also gives a slot's home when a deletion shifts it back (nothing computed again).
    struct Slot {
        uint32_t hash = 0;      // the key's hash_of(); its home slot is hash & mask_
        uint32_t ref = kEmpty;  // session index << 1 | direction
    };
    static_assert(sizeof(Slot) == 8);
    static constexpr uint32_t kEmpty = UINT32_MAX;
    static constexpr uint64_t addrs_of(const FlowKey& k) { return static_cast<uint64_t>(k.dst) << 32 | k.src; }
    // Both ports as one word, in the key's memory order (one 4-byte load where a key's ports sit
    // side by side, as in a FastPacket or the TCP/UDP header); the hash and the slots use it alike.
    static uint32_t ports_of(const FlowKey& k) {
        static_assert(offsetof(FlowKey, dport) == offsetof(FlowKey, sport) + 2);
        uint32_t w;
        std::memcpy(&w, &k.sport, sizeof w);
        return w;
    }
    static constexpr uint32_t session_of(uint32_t ref) { return ref >> 1; }
    // The first slot from h's home (h & mask) that holds hash h or is empty: where prefetch_session()
    // stops. In an index of kWindowFromSlots or more (window_end_ set), the home slot and the three
    // after it are compared at once where they lie before the array's end (homes below
    // `window_end`), two slots to a 16-byte compare: at the index's load of a half (the load at
    // the benchmarks' sizes; at most three quarters) the walk stops among them about nine times
    // in ten. A loop of one slot a step ends after a varying number of turns, which the CPU
    // mispredicts, and where the slots' lines come from beyond the core's own caches it cannot
    // run on to the next packets' loads meanwhile: at 64K
    // flows the window forwarded 6-9% more packets a second (nat_bench.sh, paired, both orders).
    // Where the index is the core's, the loop's few instructions are worth more (the window cost
    // 2-6% at 1K flows). Past the window, near the end and in a smaller index, one slot at a time.
    static constexpr uint32_t kStopWindow = 4;
    template <bool kWindow>
    static uint32_t first_stop(const Slot* slots, uint32_t mask, [[maybe_unused]] uint32_t window_end, uint32_t h) {
        uint32_t i = h & mask;
#if defined(__SSE4_1__)
        if (kWindow && i < window_end) [[likely]] {
            static_assert(offsetof(Slot, hash) == 0 && offsetof(Slot, ref) == 4 && kStopWindow == 4);
            // Lane by lane, as the slots lie: a hash, a reference, a hash, a reference.
            const __m128i stop = _mm_blend_epi16(_mm_set1_epi32(static_cast<int>(h)), _mm_set1_epi32(static_cast<int>(kEmpty)), 0xcc);
            const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(slots + i));
            const __m128i second = _mm_loadu_si128(reinterpret_cast<const __m128i*>(slots + i + 2));
            // Bit 2k: slot i+k has hash h; bit 2k+1: it is empty. The lowest is the walk's stop.
            const unsigned stops = static_cast<unsigned>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(first, stop)))) |
                                   static_cast<unsigned>(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(second, stop)))) << 4;
            if (stops != 0) [[likely]]
                return i + (static_cast<uint32_t>(std::countr_zero(stops)) >> 1);
            i = (i + kStopWindow) & mask;
        }
#endif
        while (slots[i].ref != kEmpty && slots[i].hash != h) i = (i + 1) & mask;
        return i;
    }
    // Whether the key at `k` (a FlowKey's layout up to its protocol) is the key of the direction
    // `ref` names of session `s` (in use): the other direction's rewrite reversed, and the
    // session's protocol. Addresses as one word and ports as another, as they lie, each compared
    // with the rewrite's turned end for end (the halves of a word swap places whatever the byte order).
    static bool keyed_at(const Session& s, uint32_t ref, const unsigned char* k) {
        const NatRewrite& other = s.rw[(ref & 1) ^ 1];
        static_assert(offsetof(NatRewrite, dst) == offsetof(NatRewrite, src) + 4 &&
                      offsetof(NatRewrite, dport) == offsetof(NatRewrite, sport) + 2);
        uint64_t addrs, key_addrs;
        uint32_t ports, key_ports;
        std::memcpy(&addrs, &other.src, sizeof addrs);
        std::memcpy(&ports, &other.sport, sizeof ports);
        std::memcpy(&key_addrs, k + offsetof(FlowKey, src), sizeof key_addrs);
        std::memcpy(&key_ports, k + offsetof(FlowKey, sport), sizeof key_ports);
        // One test of all three differences, not three branches: GCC laid out the match as the
        // branch taken and kept the ports' words on the stack across it.
        return ((std::rotl(addrs, 32) ^ key_addrs) | (std::rotl(ports, 16) ^ key_ports) | (s.proto ^ k[offsetof(FlowKey, proto)])) == 0;
    }
    static bool keyed(const Session& s, uint32_t ref, const FlowKey& k) {
        return keyed_at(s, ref, reinterpret_cast<const unsigned char*>(&k));
    }

    // CRC32-C of the key as two 64-bit words from the table's seed, then one multiply by a 64-bit
    // odd constant, keeping the product's upper half: CRC is linear in its input, so flows that
    // differ in a few bits crowd into fewer home slots without a nonlinear step (250 nodes' ports
    // toward three mapped ports: 737 of 4096 slots where a random function fills 906), and the
    // upper half depends on every bit of the CRC (the lower bits of a product only on the lower
    // bits). It spreads those flows as a random function would, as the two-multiply xorshift
    // finaliser it replaced did, with a third of its latency, which the burst's first pass waits
    // on (1K flows: 39.0-39.2 Mpps against 36.8-38.1, alternated). Inline: the batched path
    // hashes a burst at once.
    uint32_t hash_of(const FlowKey& k) const {
        const uint64_t addrs = addrs_of(k);
        const uint64_t rest = static_cast<uint64_t>(k.proto) << 32 | ports_of(k);
        const uint32_t h = crc32c_u64(rest, crc32c_u64(addrs, seed_));
        return static_cast<uint32_t>((uint64_t{h} * 0x9e3779b97f4a7c15ull) >> 32);
    }
    uint32_t seed_;
    // first_stop(): homes below it are searched four slots at once; 0: none. Here, in the padding
    // before pool_, so that the members after the table in a Nat keep their places.
    uint32_t window_end_ = 0;
    uint32_t slot_of(const FlowKey& k, uint32_t h) const;  // the slot holding k, or the empty slot ending its chain
    uint32_t slot_of_ref(uint32_t h, uint32_t ref) const;  // the slot holding ref (its key's hash h), or the empty one
    bool index(const FlowKey& k, uint32_t ref);
    void unindex(uint32_t h, uint32_t ref);

    FixedArray<Session> pool_;
    FixedArray<SessionCold> cold_;  // cold_[i]: pool_[i]'s
    std::vector<uint32_t> free_;  // stack of free pool indices
    FixedArray<Slot> slots_;      // open addressing, linear probing, backward-shift deletion
    uint32_t mask_ = 0;
    uint32_t used_ = 0;
    uint32_t cursor_ = 0;         // where the next sweep starts
    // Moved on by every change of a slot (index, unindex), so a hint from before it is known stale;
    // 31 bits, so no epoch is all ones (an absent hint, Nat::kNoFlowHash, carries that).
    uint32_t epoch_ = 0;
    void changed() { epoch_ = (epoch_ + 1) & 0x7fffffffu; }
};

// Inline: the burst loop's prefetch pass runs it for every packet.
inline uint32_t SessionTable::slot_of(const FlowKey& k, uint32_t h) const {
    uint32_t i = h & mask_;
    for (; slots_[i].ref != kEmpty; i = (i + 1) & mask_)
        if (slots_[i].hash == h && keyed(pool_[session_of(slots_[i].ref)], slots_[i].ref, k)) break;
    return i;
}

template <typename OnExpire>
uint32_t SessionTable::sweep(uint64_t now_ms, uint32_t budget, OnExpire&& on_expire) {
    uint32_t expired = 0;
    const uint32_t n = capacity();
    for (uint32_t i = 0; i < budget && i < n; ++i) {
        const uint32_t at = cursor_;
        Session& s = pool_[at];
        cursor_ = cursor_ + 1 == n ? 0 : cursor_ + 1;
        if (s.in_use() && s.last_seen_ms + s.timeout_ms <= now_ms) {
            on_expire(s, std::as_const(cold_[at]));
            erase(&s);
            ++expired;
        }
    }
    return expired;
}

template <typename Visit>
uint32_t SessionTable::visit(uint32_t from, Visit&& visit) const {
    for (uint32_t i = from; i < capacity(); ++i)
        if (pool_[i].in_use() && !visit(pool_[i], cold_[i])) return i + 1;
    return capacity();
}

}  // namespace fedgate
