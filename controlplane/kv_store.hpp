// The key-value store a gateway group keeps its shared state in: etcd, spoken to through its v3
// gRPC API, and an in-memory store with the same semantics that the
// election and state-mapping tests drive with their own clock. No consensus of our own: etcd's
// leases, revisions and transactions are the whole of it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace etcdserverpb {  // proto/etcd_rpc.proto
class RangeRequest;
class RangeResponse;
class TxnRequest;
class TxnResponse;
}  // namespace etcdserverpb

namespace fedgate {

// The store could not be asked or could not answer. `reachable`: some endpoint answered at the
// HTTP level (so the store is up but without quorum, or refused the request); false: no endpoint
// could be reached at all (this member may be the one cut off).
class StoreUnavailable : public std::runtime_error {
public:
    StoreUnavailable(const std::string& what, bool reachable) : std::runtime_error(what), reachable_(reachable) {}
    bool reachable() const { return reachable_; }

private:
    bool reachable_;
};

// The store answered and refused the request (a lease that is gone, a bad argument): retrying
// elsewhere would not help.
class StoreRefused : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct KvEntry {
    std::string key, value;
    int64_t create_revision = 0, mod_revision = 0, lease = 0;
};

// How many keys a prefix holds and the newest mod revision among them: any put under the prefix
// raises the revision, any delete lowers the count or (with a put) raises the revision, so an
// unchanged summary means an unchanged prefix.
struct PrefixSummary {
    int64_t count = 0, max_mod_revision = 0;
    bool operator==(const PrefixSummary&) const = default;
};

struct EndpointHealth {
    std::string url;
    std::string state;  // "up", "no quorum" (answers, but says it is unhealthy), "down" (no answer)
};

class KvStore {
public:
    virtual ~KvStore() = default;

    // Leases. keepalive returns the seconds left on the lease, 0 when it is gone (expired or revoked).
    virtual int64_t grant(int64_t ttl_s) = 0;
    virtual int64_t keepalive(int64_t lease) = 0;
    virtual void revoke(int64_t lease) = 0;

    virtual std::optional<KvEntry> get(const std::string& key) = 0;
    // Every key that starts with `prefix`, in key order; `revision` (may be null) gets the store's
    // revision the answer was read at.
    virtual std::vector<KvEntry> range(const std::string& prefix, int64_t* revision = nullptr) = 0;
    // The prefix's summary, without its values (one small answer however many keys it holds).
    virtual PrefixSummary summarize(const std::string& prefix) = 0;
    // Puts in one transaction: all or none.
    virtual void put(const std::vector<std::pair<std::string, std::string>>& kvs, int64_t lease = 0) = 0;
    void put(const std::string& key, const std::string& value, int64_t lease = 0) { put({{key, value}}, lease); }
    virtual void erase(const std::vector<std::string>& keys) = 0;
    // Puts (no lease) and deletes in one transaction: all or none.
    virtual void put_erase(const std::vector<std::pair<std::string, std::string>>& puts,
                           const std::vector<std::string>& erases) = 0;
    // Puts only if the key's mod revision is `expect_mod` (0: only if the key does not exist).
    // Returns the new mod revision, or 0 when the compare failed: then *current (may be null) gets
    // the key as it is (nullopt: absent).
    virtual int64_t put_if(const std::string& key, const std::string& value, int64_t lease, int64_t expect_mod,
                           std::optional<KvEntry>* current) = 0;
    // Deletes the key only while it holds `value`; returns whether it did.
    virtual bool erase_if(const std::string& key, const std::string& value) = 0;

    // Each endpoint's answer to a health check (never throws).
    virtual std::vector<EndpointHealth> health() = 0;
    virtual std::string describe() const = 0;  // the endpoints, for messages
};

// etcd's v3 gRPC API (KV.Range, KV.Txn, Lease.LeaseGrant/LeaseRevoke/LeaseKeepAlive; the subset
// in proto/etcd_rpc.proto), binary keys and values, one HTTP/2 connection per endpoint. Requests
// go to the endpoint that last answered and move on to the next when one cannot serve; every
// request has a deadline, so a store without quorum costs a bounded wait, never a hang. Health
// checks are etcd's HTTP GET /health (libcurl), which says whether the member has quorum. One
// request at a time per object (a mutex): give each thread its own.
class EtcdStore final : public KvStore {
public:
    // `endpoints`: "http://HOST:PORT" (plain) or "https://HOST:PORT" (TLS, the system's roots)
    // URLs. `timeout_ms`: each request's deadline on one endpoint. `budget_ms`: how long one call
    // keeps going round the endpoints (0: one round), so that a change rides out the store
    // electing a new leader.
    explicit EtcdStore(std::vector<std::string> endpoints, long timeout_ms = 1000, long budget_ms = 0);
    ~EtcdStore() override;
    EtcdStore(const EtcdStore&) = delete;
    EtcdStore& operator=(const EtcdStore&) = delete;

    int64_t grant(int64_t ttl_s) override;
    int64_t keepalive(int64_t lease) override;
    void revoke(int64_t lease) override;
    std::optional<KvEntry> get(const std::string& key) override;
    std::vector<KvEntry> range(const std::string& prefix, int64_t* revision = nullptr) override;
    PrefixSummary summarize(const std::string& prefix) override;
    using KvStore::put;
    void put(const std::vector<std::pair<std::string, std::string>>& kvs, int64_t lease = 0) override;
    void erase(const std::vector<std::string>& keys) override;
    void put_erase(const std::vector<std::pair<std::string, std::string>>& puts,
                   const std::vector<std::string>& erases) override;
    int64_t put_if(const std::string& key, const std::string& value, int64_t lease, int64_t expect_mod,
                   std::optional<KvEntry>* current) override;
    bool erase_if(const std::string& key, const std::string& value) override;
    std::vector<EndpointHealth> health() override;
    std::string describe() const override;

    struct Endpoint;  // one endpoint's channel and stubs (etcd_store.cpp)

private:
    // Runs `rpc` on the endpoints in turn, from the one that answered last, in rounds until one
    // answers or the budget is spent; then throws StoreUnavailable naming each endpoint's failure.
    // Throws StoreRefused when an endpoint refuses the request itself. `rpc` returns the gRPC
    // status code (0: done) and fills `message`.
    void call(const char* what, const std::function<int(Endpoint&, long timeout_ms, std::string& message)>& rpc);

    etcdserverpb::RangeResponse range_rpc(const etcdserverpb::RangeRequest& q);
    etcdserverpb::TxnResponse txn_rpc(const etcdserverpb::TxnRequest& q);

    std::vector<std::string> endpoints_;
    long timeout_ms_, budget_ms_;
    std::mutex mu_;
    std::vector<std::unique_ptr<Endpoint>> channels_;  // one per endpoint
    void* curl_ = nullptr;                             // CURL*, for GET /health
    std::size_t current_ = 0;
};

// The same semantics in memory, with the clock passed in: leases expire when `now_ms` passes
// their deadline (checked on every call), and `set_available(false)` makes every call throw as a
// store without quorum would.
class MemStore final : public KvStore {
public:
    explicit MemStore(std::function<uint64_t()> now_ms) : now_ms_(std::move(now_ms)) {}

    // Back up: every lease is extended to a whole TTL from now, as etcd does when it elects a leader.
    void set_available(bool up) {
        std::lock_guard lk(mu_);
        if (up && !available_)
            for (auto& [id, l] : leases_) l.deadline_ms = now_ms_() + static_cast<uint64_t>(l.ttl_s) * 1000;
        available_ = up;
    }
    int64_t revision() const {
        std::lock_guard lk(mu_);
        return revision_;
    }
    // A put or erase of more keys than this is refused, as etcd refuses a transaction over its
    // --max-txn-ops (0: no limit).
    void set_max_txn_ops(std::size_t n) {
        std::lock_guard lk(mu_);
        max_txn_ops_ = n;
    }

    int64_t grant(int64_t ttl_s) override;
    int64_t keepalive(int64_t lease) override;
    void revoke(int64_t lease) override;
    std::optional<KvEntry> get(const std::string& key) override;
    std::vector<KvEntry> range(const std::string& prefix, int64_t* revision = nullptr) override;
    PrefixSummary summarize(const std::string& prefix) override;
    using KvStore::put;
    void put(const std::vector<std::pair<std::string, std::string>>& kvs, int64_t lease = 0) override;
    void erase(const std::vector<std::string>& keys) override;
    void put_erase(const std::vector<std::pair<std::string, std::string>>& puts,
                   const std::vector<std::string>& erases) override;
    int64_t put_if(const std::string& key, const std::string& value, int64_t lease, int64_t expect_mod,
                   std::optional<KvEntry>* current) override;
    bool erase_if(const std::string& key, const std::string& value) override;
    std::vector<EndpointHealth> health() override;
    std::string describe() const override { return "memory"; }

private:
    void enter();  // under mu_: throws when unavailable, expires leases
    void check_txn_size(std::size_t ops) const;  // under mu_: throws as etcd does over --max-txn-ops
    void put_locked(const std::string& key, const std::string& value, int64_t lease);
    void revoke_locked(int64_t lease);

    std::function<uint64_t()> now_ms_;
    mutable std::mutex mu_;
    bool available_ = true;
    std::size_t max_txn_ops_ = 0;
    int64_t revision_ = 1;
    int64_t next_lease_ = 0x1000;
    struct Lease {
        int64_t ttl_s;
        uint64_t deadline_ms;
    };
    std::map<int64_t, Lease> leases_;
    std::map<std::string, KvEntry> kv_;
};

// The first key after every key that starts with `prefix` (etcd's range_end for a prefix).
std::string prefix_end(const std::string& prefix);

}  // namespace fedgate
