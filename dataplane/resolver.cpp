// The resolution fast path: cache hits, pending queries, folding, timeouts and broadcast limits.
#include "dataplane/resolver.hpp"

#include <bit>
#include <stdexcept>

namespace fedgate {
namespace {

constexpr unsigned kSlotBits = 20;  // query ID = generation << kSlotBits | slot
constexpr uint64_t kSlotMask = (uint64_t{1} << kSlotBits) - 1;
constexpr unsigned kTagShift = 56;  // ... with ResolverConfig::query_tag in the top byte
constexpr uint64_t kGenSlotMask = (uint64_t{1} << kTagShift) - 1;
constexpr uint32_t kRequesterBuckets = 1024;

}  // namespace

Resolver::Resolver(const ResolverConfig& cfg, const ResolveCache& cache, ResolverIo& io)
    : cfg_(cfg),
      cache_(cache),
      io_(io),
      total_broadcasts_(cfg.broadcast_rate, cfg.broadcast_burst),
      requester_broadcasts_(kRequesterBuckets, cfg.requester_broadcast_rate, cfg.requester_broadcast_burst) {
    if (cfg_.pending_capacity == 0 || cfg_.pending_capacity > kSlotMask)
        throw std::invalid_argument("pending query capacity must be 1.." + std::to_string(kSlotMask));
    if (cfg_.peer_parties.size() > kMaxPeers)
        throw std::invalid_argument("at most " + std::to_string(kMaxPeers) + " peers");
    slots_ = std::make_unique<Pending[]>(cfg_.pending_capacity);
    free_.reserve(cfg_.pending_capacity);
    for (uint32_t s = cfg_.pending_capacity; s-- > 0;) free_.push_back(s);
    index_mask_ = std::bit_ceil(std::size_t{cfg_.pending_capacity} * 2) - 1;
    index_bits_ = static_cast<unsigned>(std::countr_zero(index_mask_ + 1));
    index_ = std::make_unique<uint32_t[]>(index_mask_ + 1);
    all_peers_ = cfg_.peer_parties.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << cfg_.peer_parties.size()) - 1;
}

void Resolver::set_peers(std::vector<uint16_t>& parties) {
    if (parties.size() > kMaxPeers) return;  // the config allows no more; never on the lcore's path
    const auto remap = [&](uint64_t bits) {
        uint64_t out = 0;
        for (std::size_t i = 0; i < cfg_.peer_parties.size(); ++i) {
            if ((bits & (uint64_t{1} << i)) == 0) continue;
            for (std::size_t j = 0; j < parties.size(); ++j)
                if (parties[j] == cfg_.peer_parties[i]) out |= uint64_t{1} << j;
        }
        return out;
    };
    for (uint32_t s = 0; s < cfg_.pending_capacity; ++s) {
        Pending& p = slots_[s];
        if (p.query_id == 0) continue;
        p.asked = remap(p.asked);
        p.said_no = remap(p.said_no);
    }
    std::swap(cfg_.peer_parties, parties);
    all_peers_ = cfg_.peer_parties.size() == 64 ? ~uint64_t{0} : (uint64_t{1} << cfg_.peer_parties.size()) - 1;
}

int Resolver::peer_index(uint16_t party) const {
    for (std::size_t i = 0; i < cfg_.peer_parties.size(); ++i)
        if (cfg_.peer_parties[i] == party) return static_cast<int>(i);
    return -1;
}

// ---------------------------------------------------------------------------------------------
// The pending index: target -> slot.

std::size_t Resolver::index_home(ProcessId target) const {
    return target.home(index_bits_);
}

uint32_t Resolver::find_pending(ProcessId target) const {
    for (std::size_t i = index_home(target);; i = (i + 1) & index_mask_) {
        const uint32_t v = index_[i];
        if (v == 0) return UINT32_MAX;
        if (slots_[v - 1].target == target) return v - 1;
    }
}

void Resolver::index_insert(uint32_t slot) {
    std::size_t i = index_home(slots_[slot].target);
    while (index_[i] != 0) i = (i + 1) & index_mask_;
    index_[i] = slot + 1;
}

void Resolver::index_erase(uint32_t slot) {
    std::size_t i = index_home(slots_[slot].target);
    while (index_[i] != slot + 1) i = (i + 1) & index_mask_;
    // Backward shift: pull later entries of the run into the hole when their home allows it.
    for (std::size_t j = (i + 1) & index_mask_; index_[j] != 0; j = (j + 1) & index_mask_) {
        const std::size_t home = index_home(slots_[index_[j] - 1].target);
        if (((j - home) & index_mask_) >= ((j - i) & index_mask_)) {
            index_[i] = index_[j];
            i = j;
        }
    }
    index_[i] = 0;
}

// ---------------------------------------------------------------------------------------------

void Resolver::request(const Requester& r, ProcessId target, uint64_t now_ms) {
    counters_.requests.add();
    if (target.value == 0) {
        counters_.bad_requests.add();
        return io_.reply(r, target, ResolveStatus::bad_request, AnswerSource::cache, nullptr);
    }
    if (const CacheAnswer a = cache_answer(target, now_ms); a.entry != nullptr) {
        if (a.entry->kind == CacheKind::negative) {
            counters_.negative_hits.add();
            return io_.reply(r, target, ResolveStatus::not_found, AnswerSource::negative_cache, nullptr);
        }
        counters_.hits.add();
        return io_.reply_hit(r, target, a.source, *a.entry);
    }
    counters_.misses.add();

    // Our own party's processes are all in the cache: a miss there is final.
    if (target.party() == cfg_.party_id) {
        counters_.not_found.add();
        return io_.reply(r, target, ResolveStatus::not_found, AnswerSource::local, nullptr);
    }
    const int owner = target.party() == 0 ? -1 : peer_index(target.party());
    if (target.party() != 0 && owner < 0) {
        // A party we have no peering with: nobody we could ask holds it.
        counters_.not_found.add();
        return io_.reply(r, target, ResolveStatus::not_found, AnswerSource::directed, nullptr);
    }

    if (const uint32_t s = find_pending(target); s != UINT32_MAX) {
        Pending& p = slots_[s];
        if (p.nwaiters == kMaxWaiters) {
            counters_.refused_busy.add();
            return io_.reply(r, target, ResolveStatus::busy, AnswerSource::cache, nullptr);
        }
        p.waiters[p.nwaiters++] = r;
        counters_.folded.add();
        return;
    }

    if (owner < 0 && (cfg_.peer_parties.empty() || !requester_broadcasts_.allow(r.ip, now_ms) ||
                      !total_broadcasts_.allow(now_ms))) {
        counters_.refused_rate.add();
        return io_.reply(r, target, cfg_.peer_parties.empty() ? ResolveStatus::not_found : ResolveStatus::rate_limited,
                         AnswerSource::broadcast, nullptr);
    }
    if (free_.empty()) {
        counters_.refused_busy.add();
        return io_.reply(r, target, ResolveStatus::busy, AnswerSource::cache, nullptr);
    }

    const uint32_t s = free_.back();
    free_.pop_back();
    ++pending_count_;
    Pending& p = slots_[s];
    p.target = target;
    p.query_id = uint64_t{cfg_.query_tag} << kTagShift | (((next_query_gen_++ << kSlotBits) | s) & kGenSlotMask);
    p.nwaiters = 1;
    p.waiters[0] = r;
    p.said_no = 0;
    index_insert(s);
    if (owner >= 0) {
        p.mode = QueryMode::directed;
        p.asked = uint64_t{1} << owner;
        p.deadline_ms = now_ms + cfg_.query_timeout_ms;
        counters_.directed.add();
        io_.query(owner, p.query_id, target, QueryMode::directed);
    } else {
        broadcast(p, now_ms);
    }
}

void Resolver::broadcast(Pending& p, uint64_t now_ms) {
    p.mode = QueryMode::broadcast;
    p.asked = all_peers_;
    p.said_no = 0;
    p.deadline_ms = now_ms + cfg_.query_timeout_ms;
    counters_.broadcast.add();
    // Everyone is asked for exactly the target: a full ID names one process, so after its owner said
    // "not here" another party's process on the same node and local ID is no answer to it (a peer
    // answers only for its own party; a party-0 target stays party 0: "whoever runs it").
    for (std::size_t i = 0; i < cfg_.peer_parties.size(); ++i)
        io_.query(static_cast<int>(i), p.query_id, p.target, QueryMode::broadcast);
}

void Resolver::answer(int peer, uint64_t query_id, ProcessId target, const DmaAddress* record, uint64_t now_ms) {
    const uint64_t slot = query_id & kSlotMask;
    if (peer < 0 || peer >= static_cast<int>(cfg_.peer_parties.size()) || slot >= cfg_.pending_capacity ||
        slots_[slot].query_id != query_id || (slots_[slot].asked & (uint64_t{1} << peer)) == 0) {
        counters_.answers_unmatched.add();  // late, duplicate, or never asked
        return;
    }
    Pending& p = slots_[slot];
    // Directed or broadcast, every peer was asked for the target itself, and echoes it.
    if (target != p.target) {
        counters_.answers_unmatched.add();
        return;
    }
    const uint16_t party = cfg_.peer_parties[static_cast<std::size_t>(peer)];
    if (record != nullptr) {
        // The record must be the process asked for: exactly that ID, or (party 0, owner unknown) the
        // same node and local ID in the answering party, whose real ID the record then names. Anything
        // else is neither relayed nor cached, and is not a "not here" either: the query waits on.
        const ProcessId expect = p.target.party() == 0 ? p.target.with_party(party) : p.target;
        if (record->pid != expect) {
            counters_.answers_unmatched.add();
            return;
        }
        counters_.answered.add();
        io_.learned(p.target, record, party);
        return finish(static_cast<uint32_t>(slot), ResolveStatus::ok,
                      p.mode == QueryMode::directed ? AnswerSource::directed : AnswerSource::broadcast, record);
    }
    p.said_no |= uint64_t{1} << peer;
    if (p.mode == QueryMode::directed) {
        // The owner says it does not hold it: perhaps the ID names the wrong party. Ask everyone,
        // within the first requester's broadcast budget and the overall one.
        if (!requester_broadcasts_.allow(p.waiters[0].ip, now_ms) || !total_broadcasts_.allow(now_ms)) {
            counters_.refused_rate.add();
            return finish(static_cast<uint32_t>(slot), ResolveStatus::rate_limited, AnswerSource::broadcast, nullptr);
        }
        return broadcast(p, now_ms);
    }
    if ((p.said_no & p.asked) == p.asked) {
        counters_.not_found.add();
        io_.learned(p.target, nullptr, 0);
        finish(static_cast<uint32_t>(slot), ResolveStatus::not_found, AnswerSource::broadcast, nullptr);
    }
}

void Resolver::finish(uint32_t slot, ResolveStatus status, AnswerSource source, const DmaAddress* record) {
    Pending& p = slots_[slot];
    for (uint8_t i = 0; i < p.nwaiters; ++i) io_.reply(p.waiters[i], p.target, status, source, record);
    index_erase(slot);
    p.query_id = 0;
    p.nwaiters = 0;
    free_.push_back(slot);
    --pending_count_;
}

void Resolver::expire(uint64_t now_ms) {
    if (pending_count_ == 0) return;
    for (uint32_t s = 0; s < cfg_.pending_capacity; ++s) {
        Pending& p = slots_[s];
        if (p.query_id == 0 || p.deadline_ms > now_ms) continue;
        counters_.timed_out.add();
        finish(s, ResolveStatus::unreachable,
               p.mode == QueryMode::directed ? AnswerSource::directed : AnswerSource::broadcast, nullptr);
    }
}

const CacheEntry* Resolver::lookup_for_peer(ProcessId target, uint64_t now_ms) {
    // Only our own processes, and only their authoritative copies: we never vouch for hearsay.
    const ProcessId id = target.party() == 0 ? target.with_party(cfg_.party_id) : target;
    const CacheEntry* e = id.party() == cfg_.party_id ? cache_.find(id, now_ms) : nullptr;
    if (e != nullptr && e->kind == CacheKind::local) {
        counters_.queries_answered_found.add();
        return e;
    }
    counters_.queries_answered_no.add();
    return nullptr;
}

}  // namespace fedgate
