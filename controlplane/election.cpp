// Which member of a gateway group is active: the election on a store lease.
#include "controlplane/election.hpp"

namespace fedgate {

nlohmann::ordered_json failover_json(const Failover& f) {
    return {{"from", f.from}, {"to", f.to}, {"at_unix_ms", f.at_unix_ms}};
}

std::optional<Failover> failover_from(const std::string& text) {
    const auto j = nlohmann::json::parse(text, nullptr, false);
    if (!j.is_object()) return std::nullopt;
    try {
        return Failover{j.at("from").get<std::string>(), j.at("to").get<std::string>(), j.at("at_unix_ms").get<uint64_t>()};
    } catch (const nlohmann::json::exception&) {
        return std::nullopt;
    }
}

Election::Election(KvStore& store, const ClusterKeys& keys, ElectionSettings s)
    : store_(store), keys_(keys), s_(std::move(s)) {}

void Election::demote(const char* why) {
    if (!active_) return;
    active_ = false;
    ++stepped_down_;
    last_error_ = std::string("stepped down: ") + why;
}

void Election::keep_lease(uint64_t now_ms) {
    const uint64_t ttl_ms = static_cast<uint64_t>(s_.lease_ttl_s) * 1000;
    if (lease_ != 0 && now_ms - last_sent_ms_ >= ttl_ms / 3) {
        last_sent_ms_ = now_ms;
        if (store_.keepalive(lease_) > 0) {
            last_ok_ms_ = now_ms;
            ++renewals_;
        } else {
            // Expired (we were away longer than the TTL) or revoked: whatever held it is gone,
            // the leader key with it.
            demote("the lease expired");
            lease_ = 0;
            registered_ = false;
        }
    }
    if (lease_ == 0) {
        lease_ = store_.grant(s_.lease_ttl_s);
        last_sent_ms_ = last_ok_ms_ = now_ms;
        registered_ = false;
    }
    if (!registered_) {
        store_.put(keys_.member(s_.member), s_.info, lease_);
        registered_ = true;
    }
}

void Election::campaign(uint64_t unix_ms) {
    std::optional<KvEntry> cur;
    if (store_.put_if(keys_.leader(), s_.member, lease_, 0, &cur) != 0) {
        active_ = true;
        ++became_active_;
        if (!leader_.empty() && leader_ != s_.member) {
            failover_ = Failover{leader_, s_.member, unix_ms};
            store_.put(keys_.failover(), failover_json(*failover_).dump());
        }
        leader_ = s_.member;
        return;
    }
    if (!cur) return;  // gone between the compare and the read: the next round tries again
    leader_ = cur->value;
    // Our own name under another lease: a previous life of this member that did not resign.
    // Member names are unique in a group, so that lease is ours to end, which frees the key now
    // rather than after its TTL.
    if (cur->value == s_.member && cur->lease != lease_ && cur->lease != 0) store_.revoke(cur->lease);
}

void Election::check_leader() {
    const auto cur = store_.get(keys_.leader());
    if (cur && cur->value == s_.member && cur->lease == lease_) return;
    demote("the leader key is no longer ours");
    leader_ = cur ? cur->value : "";
}

void Election::step(uint64_t now_ms, uint64_t unix_ms) {
    try {
        keep_lease(now_ms);
        if (active_)
            check_leader();
        else
            campaign(unix_ms);
        // What only the status shows, every half second; the campaign goes on every round.
        if (last_read_ms_ == 0 || now_ms - last_read_ms_ >= 500 || became_active_ != reads_at_) {
            members_ = store_.range(keys_.members());
            if (const auto f = store_.get(keys_.failover())) {
                if (auto parsed = failover_from(f->value)) failover_ = std::move(parsed);
            }
            last_read_ms_ = now_ms;
            reads_at_ = became_active_;
        }
        store_ok_ = true;
        unreachable_ = false;
    } catch (const StoreUnavailable& e) {
        store_ok_ = false;
        ++store_errors_;
        last_error_ = e.what();
        unreachable_ = !e.reachable();
        // The active member stays active while the store answers without quorum: no other member
        // can take the leader key then either, and the store extends leases when its quorum
        // returns. Cut off from every endpoint, though, this member may be the one cut off: where
        // a quorum still is, its lease ends a TTL after the last keepalive the store took, and
        // another member takes over. Step down before that (at three quarters of it).
        if (active_ && unreachable_ && now_ms - last_ok_ms_ > static_cast<uint64_t>(s_.lease_ttl_s) * 750)
            demote("no store endpoint answered for most of the lease");
    } catch (const StoreRefused& e) {
        // The store refused what we asked with this lease: it is gone. Start over with a new one.
        ++store_errors_;
        last_error_ = e.what();
        demote("the store no longer knows our lease");
        lease_ = 0;
        registered_ = false;
    }
}

void Election::resign() {
    try {
        if (active_) store_.erase_if(keys_.leader(), s_.member);
        if (lease_ != 0) store_.revoke(lease_);
    } catch (const std::exception&) {  // the lease ends by itself after its TTL
    }
    if (active_) ++stepped_down_;
    active_ = false;
    lease_ = 0;
    registered_ = false;
}

}  // namespace fedgate
