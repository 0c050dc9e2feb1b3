// A party's group of gateways: the in-memory store's semantics (leases, revisions, transactions),
// the election on it driven by a test clock (one active, takeover after the active's lease ends,
// a clean resign hands over at once, no demotion while the store has no quorum), the mappings kept
// as one store key with compare-and-swap (a change on one member applies on the other; a lost race
// retries; a store without quorum refuses the change naming the store), and [cluster] in the config.
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "controlplane/cluster.hpp"
#include "controlplane/config.hpp"
#include "controlplane/election.hpp"
#include "controlplane/kv_store.hpp"
#include "controlplane/portmap_table.hpp"
#include "dataplane/portmap.hpp"
#include "controlplane/resolution.hpp"
#include "controlplane/store_writers.hpp"
#include "dataplane/dataplane.hpp"
#include "dataplane/resolve_cache.hpp"
#include "tests/support/alpha_config.hpp"
#include "tests/support/fake_gateway.hpp"

namespace {

using fedgate::ClusterKeys;
using fedgate::Election;
using fedgate::ElectionSettings;
using fedgate::KvEntry;
using fedgate::MemStore;
using fedgate::StoreUnavailable;
using json = nlohmann::ordered_json;

struct Clock {
    uint64_t ms = 1'000'000;
    std::function<uint64_t()> fn() {
        return [this] { return ms; };
    }
};

TEST(PrefixEnd, IsTheFirstKeyAfterThePrefix) {
    EXPECT_EQ(fedgate::prefix_end("/fedgate/alpha/members/"), "/fedgate/alpha/members0");
    EXPECT_EQ(fedgate::prefix_end(std::string("a\xff", 2)), "b");
}

TEST(MemStore, LeasesExpireWithTheirKeysAndRevisionsCount) {
    Clock c;
    MemStore s(c.fn());
    const int64_t lease = s.grant(2);
    s.put("k1", "v1", lease);
    s.put("k2", "v2");
    const int64_t rev = s.revision();
    EXPECT_EQ(s.get("k1")->value, "v1");
    EXPECT_EQ(s.get("k1")->lease, lease);
    c.ms += 1500;
    EXPECT_EQ(s.keepalive(lease), 2);  // renewed: 2 s from now
    c.ms += 1500;
    EXPECT_TRUE(s.get("k1").has_value());
    c.ms += 600;
    EXPECT_FALSE(s.get("k1").has_value()) << "the lease ran out 2 s after its last keepalive";
    EXPECT_TRUE(s.get("k2").has_value());
    EXPECT_GT(s.revision(), rev);
    EXPECT_EQ(s.keepalive(lease), 0);
    EXPECT_THROW(s.put("k3", "v", lease), fedgate::StoreRefused);
}

TEST(MemStore, PutIfComparesTheModRevision) {
    Clock c;
    MemStore s(c.fn());
    std::optional<KvEntry> cur;
    const int64_t r1 = s.put_if("k", "a", 0, 0, &cur);
    ASSERT_GT(r1, 0);
    EXPECT_EQ(s.put_if("k", "b", 0, 0, &cur), 0) << "exists: a create must fail";
    ASSERT_TRUE(cur.has_value());
    EXPECT_EQ(cur->value, "a");
    const int64_t r2 = s.put_if("k", "b", 0, r1, &cur);
    EXPECT_GT(r2, r1);
    EXPECT_EQ(s.put_if("k", "c", 0, r1, &cur), 0) << "stale revision";
    EXPECT_FALSE(s.erase_if("k", "a"));
    EXPECT_TRUE(s.erase_if("k", "b"));
    EXPECT_FALSE(s.get("k").has_value());
    s.set_available(false);
    try {
        s.get("k");
        ADD_FAILURE() << "did not throw";
    } catch (const StoreUnavailable& e) {
        EXPECT_TRUE(e.reachable());
    }
}

// Two members on one store, stepped by hand.
struct Group : ::testing::Test {
    Clock clock;
    MemStore store{clock.fn()};
    ClusterKeys keys{"alpha"};
    std::unique_ptr<Election> a, b;
    void SetUp() override {
        a = std::make_unique<Election>(store, keys, ElectionSettings{"gw-a", 2, R"({"member":"gw-a"})"});
        b = std::make_unique<Election>(store, keys, ElectionSettings{"gw-b", 2, R"({"member":"gw-b"})"});
    }
    // Both step every 200 ms for `ms` (b only when `b_alive`, a only when `a_alive`).
    void run(uint64_t ms, bool a_alive = true, bool b_alive = true) {
        for (uint64_t t = 0; t < ms; t += 200) {
            clock.ms += 200;
            if (a_alive) a->step(clock.ms, 1'700'000'000'000 + clock.ms);
            if (b_alive) b->step(clock.ms, 1'700'000'000'000 + clock.ms);
        }
    }
};

TEST_F(Group, TheFirstMemberIsActiveAndTheOtherStandsByWithBothListed) {
    run(200);
    EXPECT_TRUE(a->active());
    EXPECT_FALSE(b->active());
    EXPECT_EQ(a->leader(), "gw-a");
    EXPECT_EQ(b->leader(), "gw-a");
    run(10'000);  // leases kept alive: nothing changes
    EXPECT_TRUE(a->active());
    EXPECT_FALSE(b->active());
    EXPECT_EQ(a->became_active(), 1u);
    EXPECT_GE(a->lease_renewals(), 10'000u / 800 - 1) << "a keepalive every third of the TTL, on the first round after it";
    ASSERT_EQ(b->members().size(), 2u);
    EXPECT_EQ(b->members()[0].key, keys.member("gw-a"));
    EXPECT_EQ(b->members()[1].value, R"({"member":"gw-b"})");
    EXPECT_FALSE(b->last_failover().has_value());
}

TEST_F(Group, WhenTheActiveStopsTheStandbyTakesOverAfterTheLeaseAndRecordsTheFailover) {
    run(1000);
    ASSERT_TRUE(a->active());
    // a is killed: it never steps again. b must not take over before a's lease can have ended...
    uint64_t waited = 0;
    while (!b->active() && waited < 10'000) {
        run(200, false, true);
        waited += 200;
    }
    ASSERT_TRUE(b->active());
    EXPECT_GE(waited, 1400u) << "took over while the old lease was still alive";
    EXPECT_LE(waited, 2200u) << "the lease is 2 s: takeover is due within a round after it";
    ASSERT_TRUE(b->last_failover().has_value());
    EXPECT_EQ(b->last_failover()->from, "gw-a");
    EXPECT_EQ(b->last_failover()->to, "gw-b");
    EXPECT_EQ(b->members().size(), 1u) << "a's member key went with its lease";
    // a comes back (a restart under the same name would too): it finds b active and stands by.
    run(600);
    EXPECT_FALSE(a->active());
    EXPECT_EQ(a->leader(), "gw-b");
    EXPECT_EQ(a->stepped_down(), 1u) << "a noticed its lease had expired";
    ASSERT_TRUE(a->last_failover().has_value()) << "every member shows the group's last failover";
    EXPECT_EQ(a->last_failover()->to, "gw-b");
}

TEST_F(Group, AResignHandsOverWithinOneRound) {
    run(400);
    ASSERT_TRUE(a->active());
    a->resign();
    EXPECT_FALSE(a->active());
    run(200, false, true);
    EXPECT_TRUE(b->active());
}

TEST_F(Group, WithoutQuorumTheActiveStaysActiveAndNobodyTakesOver) {
    run(400);
    ASSERT_TRUE(a->active());
    store.set_available(false);
    run(10'000);
    EXPECT_TRUE(a->active()) << "the store answers without quorum: the active keeps the role";
    EXPECT_FALSE(b->active());
    EXPECT_FALSE(a->store_ok());
    EXPECT_NE(a->last_error().find("unavailable"), std::string::npos) << a->last_error();
    EXPECT_GT(a->store_errors(), 0u);
    // Quorum returns: the store extends every lease when it elects a leader, and the same member goes on.
    store.set_available(true);
    run(1000);
    EXPECT_TRUE(a->active());
    EXPECT_FALSE(b->active());
    EXPECT_TRUE(a->store_ok());
}

// A store in front of another, passing every call on after gate(); the stand-ins below change
// one thing each.
class Forwarding : public fedgate::KvStore {
public:
    explicit Forwarding(fedgate::KvStore& real) : real_(real) {}
    int64_t grant(int64_t t) override { return gate(), real_.grant(t); }
    int64_t keepalive(int64_t l) override { return gate(), real_.keepalive(l); }
    void revoke(int64_t l) override { gate(), real_.revoke(l); }
    std::optional<KvEntry> get(const std::string& k) override { return gate(), real_.get(k); }
    std::vector<KvEntry> range(const std::string& p, int64_t* r) override { return gate(), real_.range(p, r); }
    fedgate::PrefixSummary summarize(const std::string& p) override { return gate(), real_.summarize(p); }
    using KvStore::put;
    void put(const std::vector<std::pair<std::string, std::string>>& kvs, int64_t l) override { gate(), real_.put(kvs, l); }
    void erase(const std::vector<std::string>& k) override { gate(), real_.erase(k); }
    void put_erase(const std::vector<std::pair<std::string, std::string>>& p, const std::vector<std::string>& e) override {
        gate(), real_.put_erase(p, e);
    }
    int64_t put_if(const std::string& k, const std::string& v, int64_t l, int64_t e, std::optional<KvEntry>* c) override {
        return gate(), real_.put_if(k, v, l, e, c);
    }
    bool erase_if(const std::string& k, const std::string& v) override { return gate(), real_.erase_if(k, v); }
    std::vector<fedgate::EndpointHealth> health() override { return real_.health(); }
    std::string describe() const override { return "forwarding"; }

protected:
    virtual void gate() {}
    fedgate::KvStore& real_;
};

// A store no endpoint of which answers, for longer than the lease: this member may be the one cut
// off, so it stops being active.
class Unreachable final : public Forwarding {
public:
    using Forwarding::Forwarding;
    bool down = false;

private:
    void gate() override {
        if (down) throw StoreUnavailable("cluster store unavailable (connection refused)", false);
    }
};

TEST_F(Group, CutOffFromEveryEndpointLongerThanTheLeaseTheActiveStepsDown) {
    Unreachable cut(store);
    a = std::make_unique<Election>(cut, keys, ElectionSettings{"gw-a", 2, "{}"});
    run(400);
    ASSERT_TRUE(a->active());
    cut.down = true;
    run(800);
    EXPECT_TRUE(a->active()) << "early in the lease it keeps the role";
    run(2000);
    EXPECT_FALSE(a->active());
    EXPECT_TRUE(b->active()) << "b, which still reaches the store, took over";
}

TEST_F(Group, ARestartedMemberEndsItsPreviousLifesLeaseAndTakesOverAtOnce) {
    run(400);
    ASSERT_TRUE(a->active());
    b.reset();
    // gw-a restarts: a new Election under the same name while the old lease is alive.
    a = std::make_unique<Election>(store, keys, ElectionSettings{"gw-a", 2, "{}"});
    clock.ms += 200;
    a->step(clock.ms, clock.ms);
    EXPECT_FALSE(a->active()) << "the key is its previous life's";
    clock.ms += 200;
    a->step(clock.ms, clock.ms);
    EXPECT_TRUE(a->active()) << "that lease was revoked, so the key was free on the next round";
}

// ---- mappings in the store -------------------------------------------------------------------

// The tests' usual alpha, with a config mapping, as a member of a group.
const std::string kBase = std::string(fedgate::test::kAlphaConfig) + R"(
[[import]]
cluster = "c1"
proto = "tcp"
port = 8080
peer = "beta"
peer_port = 9000
)";
const std::string kConfig = kBase + R"(
[cluster]
etcd = ["http://198.18.250.11:2379", "http://198.18.250.12:2379"]
member = "gw-a"
lease_ttl_s = 3
)";

struct Member {
    fedgate::PortMapView view;
    std::unique_ptr<fedgate::StoreMapState> state_ptr;
    fedgate::StoreMapState* state;
    std::unique_ptr<fedgate::PortMapTable> table;
    Member(const fedgate::Config& cfg, fedgate::KvStore& store) {
        auto st = std::make_unique<fedgate::StoreMapState>(store, ClusterKeys("alpha").mappings());
        state = st.get();
        table = std::make_unique<fedgate::PortMapTable>(cfg, view, nullptr, std::move(st));
        table->load(nullptr);
    }
    bool imports(uint16_t port) { return view.import_rule(fedgate::L4Proto::tcp, htons(port)) != nullptr; }
    json add(uint16_t port, uint16_t peer_port) {
        return table->handle({{"cmd", "map_add"}, {"kind", "import"}, {"cluster", "c2"}, {"proto", "tcp"},
                              {"port", port}, {"peer", "beta"}, {"peer_port", peer_port}});
    }
};

TEST(ClusterMappings, AChangeOnOneMemberAppliesOnTheOtherAfterItsRefresh) {
    Clock c;
    MemStore store(c.fn());
    const fedgate::Config cfg = fedgate::parse_config(kConfig, "test.toml");
    Member a(cfg, store), b(cfg, store);
    EXPECT_TRUE(a.imports(8080));
    EXPECT_TRUE(b.imports(8080));
    a.add(8081, 9001);
    EXPECT_TRUE(a.imports(8081));
    EXPECT_FALSE(b.imports(8081)) << "b has not looked yet";
    EXPECT_NE(store.get(ClusterKeys("alpha").mappings())->mod_revision, b.state->revision());
    b.table->load(nullptr);
    EXPECT_TRUE(b.imports(8081));
    EXPECT_EQ(store.get(ClusterKeys("alpha").mappings())->mod_revision, b.state->revision());
    // b deletes the config's mapping: a learns that too, and a's own change is kept.
    b.table->handle({{"cmd", "map_del"}, {"kind", "import"}, {"proto", "tcp"}, {"port", 8080u}});
    a.table->load(nullptr);
    EXPECT_FALSE(a.imports(8080));
    EXPECT_TRUE(a.imports(8081));
}

TEST(ClusterMappings, ALostRaceRereadsAndRetriesSoNeitherChangeIsLost) {
    Clock c;
    MemStore store(c.fn());
    const fedgate::Config cfg = fedgate::parse_config(kConfig, "test.toml");
    Member a(cfg, store), b(cfg, store);
    a.add(8081, 9001);
    b.add(8082, 9002);  // b's revision is stale: its write fails the compare, it re-reads, retries
    EXPECT_TRUE(b.imports(8081));
    EXPECT_TRUE(b.imports(8082));
    a.table->load(nullptr);
    EXPECT_TRUE(a.imports(8082));
    const json list = a.table->list(std::nullopt);
    EXPECT_EQ(list.dump().find("8082") != std::string::npos, true);
    // The same port from both: the second is refused as mapped, after the re-read.
    try {
        a.add(8083, 9003);
        b.add(8083, 9004);
        ADD_FAILURE() << "b mapped a port a had mapped";
    } catch (const fedgate::MapError& e) {
        EXPECT_EQ(e.field(), "port") << e.what();
    }
}

TEST(ClusterMappings, WithoutQuorumAChangeIsRefusedNamingTheStoreAndNothingChanges) {
    Clock c;
    MemStore store(c.fn());
    const fedgate::Config cfg = fedgate::parse_config(kConfig, "test.toml");
    Member a(cfg, store);
    store.set_available(false);
    try {
        a.add(8081, 9001);
        ADD_FAILURE() << "accepted without a store";
    } catch (const fedgate::MapError& e) {
        EXPECT_EQ(e.field(), "store");
        EXPECT_NE(std::string(e.what()).find("cluster store unavailable"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(a.imports(8081));
    EXPECT_TRUE(a.imports(8080)) << "what it had keeps forwarding";
    store.set_available(true);
    a.add(8081, 9001);
    EXPECT_TRUE(a.imports(8081));
}

// The client sends a change again when the answer to the first try was lost (a timeout, another
// endpoint): the compare then fails against its own write. That is the change made, not a conflict.
class LostAnswer final : public Forwarding {
public:
    using Forwarding::Forwarding;
    bool lose_next = false;
    int64_t put_if(const std::string& k, const std::string& v, int64_t l, int64_t e, std::optional<KvEntry>* c) override {
        const int64_t first = real_.put_if(k, v, l, e, c);
        if (!lose_next) return first;
        lose_next = false;
        return real_.put_if(k, v, l, e, c);  // the retry the client made after losing the answer
    }
};

TEST(ClusterMappings, AChangeSentAgainAfterALostAnswerIsTakenAsMadeNotAsAConflict) {
    Clock c;
    MemStore store(c.fn());
    LostAnswer lossy(store);
    const fedgate::Config cfg = fedgate::parse_config(kConfig, "test.toml");
    Member a(cfg, lossy), b(cfg, store);
    lossy.lose_next = true;
    const json r = a.add(8081, 9001);
    EXPECT_EQ(r["port"], 8081) << r.dump();
    EXPECT_TRUE(a.imports(8081));
    EXPECT_EQ(a.state->revision(), store.get(ClusterKeys("alpha").mappings())->mod_revision);
    a.add(8082, 9002);  // the next change goes on from there, no conflict
    b.table->load(nullptr);
    EXPECT_TRUE(b.imports(8081));
    EXPECT_TRUE(b.imports(8082));
}

// ---- the directory in the store -------------------------------------------------------------

fedgate::DmaAddress node_record(uint32_t local, uint32_t epoch = 1) {
    fedgate::DmaAddress r;
    r.pid = fedgate::ProcessId::make(1, 2, local);
    r.epoch = epoch;
    r.transport = fedgate::Transport::tcp;
    r.ipv4 = 0xC612010A;  // 198.18.1.10
    r.port = 7000;
    return r;
}

TEST(StoreDirectory, KeepsEachProcessesLastOpInBatchesAndReadsThemBack) {
    Clock c;
    MemStore store(c.fn());
    fedgate::StoreDirectory dir(store, ClusterKeys("alpha"));
    std::vector<fedgate::DirectoryStore::Op> ops;
    for (uint32_t i = 1; i <= 150; ++i) ops.push_back({false, {node_record(i), 0xC612010A, static_cast<uint16_t>(40000 + i)}});
    ops.push_back({true, {node_record(7), 0, 0}});      // registered, then gone: gone
    ops.push_back({true, {node_record(8), 0, 0}});
    ops.push_back({false, {node_record(8, 2), 0xC612010A, 41000}});  // gone, then back with a new epoch: back
    const int64_t before = store.revision();
    dir.write(ops);
    EXPECT_LE(store.revision() - before, 4) << "150 puts and a delete in transactions of 64, not one each";
    const auto all = dir.load();
    ASSERT_EQ(all.size(), 149u);
    const auto eight = std::find_if(all.begin(), all.end(), [](const auto& p) { return p.record.pid.local() == 8; });
    ASSERT_NE(eight, all.end());
    EXPECT_EQ(eight->record, node_record(8, 2));
    EXPECT_EQ(eight->control_port, 41000);
    EXPECT_EQ(eight->source, 0xC612010Au);
    EXPECT_TRUE(std::none_of(all.begin(), all.end(), [](const auto& p) { return p.record.pid.local() == 7; }));
    EXPECT_FALSE(fedgate::StoreDirectory::decode("{\"record\":\"00\"}").has_value());
    EXPECT_FALSE(fedgate::StoreDirectory::decode("not json").has_value());
}

using Ops = std::vector<fedgate::DirectoryStore::Op>;

Ops ops_for(uint32_t from, uint32_t n, bool remove) {
    Ops ops;
    for (uint32_t i = from; i < from + n; ++i)
        ops.push_back({remove, {node_record(i), 0xC612010A, static_cast<uint16_t>(40000 + i % 20000)}});
    return ops;
}

std::size_t keys_under(MemStore& store, const std::string& prefix) { return store.range(prefix).size(); }

// Each write as one segment (one key, one transaction); a segment nothing needs any more deleted,
// in transactions of up to txn_ops keys, and 128 once the store refused txn_ops.
TEST(StoreDirectory, WritesEachBatchAsOneSegmentAndDeletesWhatNothingNeedsInTransactionsOfTxnOps) {
    Clock c;
    MemStore store(c.fn());
    const std::string at = ClusterKeys("alpha").processes();
    fedgate::StoreDirectory dir(store, ClusterKeys("alpha"), 500);
    EXPECT_EQ(dir.txn_ops(), 500u);
    int64_t before = store.revision();
    dir.write(ops_for(1, 1200, false));
    EXPECT_EQ(store.revision() - before, 1) << "1,200 registrations in one transaction";
    EXPECT_EQ(keys_under(store, at), 1u) << "as one key";
    before = store.revision();
    dir.write(ops_for(2001, 5000, false));
    EXPECT_EQ(store.revision() - before, 2) << "5,000 in segments of 4,096 and 904, a transaction each";
    EXPECT_EQ(keys_under(store, at), 3u);
    for (uint32_t i = 10001; i <= 11200; ++i) dir.write(ops_for(i, 1, false));
    EXPECT_EQ(keys_under(store, at), 1203u) << "a write, a segment";
    EXPECT_EQ(dir.load().size(), 7400u);
    before = store.revision();
    dir.write(ops_for(10001, 1200, true));
    EXPECT_EQ(store.revision() - before, 5)
        << "the removals' segment, then the 1,200 it left unneeded in transactions of 500, 500 and 200, then "
           "the removals' own (no segment holds those processes any more)";
    EXPECT_EQ(keys_under(store, at), 3u) << "nothing of the 1,200 processes left";
    EXPECT_EQ(dir.load().size(), 6200u);

    // The store takes at most 300 (its --max-txn-ops lower than txn_ops): the deletions are refused
    // once, then go in transactions of 128, and so do the later ones.
    store.set_max_txn_ops(300);
    for (uint32_t i = 20001; i <= 20400; ++i) dir.write(ops_for(i, 1, false));
    before = store.revision();
    dir.write(ops_for(20001, 400, true));
    EXPECT_EQ(dir.txn_ops(), fedgate::StoreDirectory::kStoreDefaultTxnOps);
    EXPECT_EQ(store.revision() - before, 6) << "the removals, 400 deletions in 128, 128, 128 and 16, the removals' own";
    EXPECT_EQ(keys_under(store, at), 3u);

    // Below 128 there is nothing to fall back to: the deletions wait (the write itself is in), a
    // directory that reads the store again finds them and makes them with its first write.
    store.set_max_txn_ops(100);
    for (uint32_t i = 30001; i <= 30200; ++i) dir.write(ops_for(i, 1, false));
    EXPECT_NO_THROW(dir.write(ops_for(30001, 200, true)));
    EXPECT_EQ(keys_under(store, at), 204u) << "nothing deleted";
    EXPECT_EQ(dir.load().size(), 6200u) << "and yet the removed processes are gone";
    store.set_max_txn_ops(0);
    fedgate::StoreDirectory fresh(store, ClusterKeys("alpha"), 500);
    fresh.write(ops_for(40001, 1, false));
    EXPECT_EQ(keys_under(store, at), 4u) << "the three, and the new process's";
    EXPECT_EQ(fresh.load().size(), 6201u);
}

// A removal hides a process's older registrations, so its segment stays while any of them does;
// one that hides nothing goes.
TEST(StoreDirectory, ASegmentGoesOnlyOnceNothingInItIsNeeded) {
    Clock c;
    MemStore store(c.fn());
    const std::string at = ClusterKeys("alpha").processes();
    fedgate::StoreDirectory dir(store, ClusterKeys("alpha"));
    const auto pids = [&](fedgate::DirectoryStore& d) {
        std::vector<uint32_t> out;
        for (const auto& p : d.load()) out.push_back(p.record.pid.local());
        return out;
    };
    dir.write(Ops{{false, {node_record(1), 1, 1}}, {false, {node_record(2), 1, 2}}});  // S1
    dir.write(Ops{{false, {node_record(1, 2), 1, 1}}});                                 // S2: 1 again
    EXPECT_EQ(keys_under(store, at), 2u) << "S1 still holds 2";
    dir.write(Ops{{true, {node_record(1, 2), 0, 0}}});  // S3: 1 gone; S2 unneeded
    EXPECT_EQ(keys_under(store, at), 2u) << "S1 and S3: S3 hides S1's 1";
    EXPECT_EQ(pids(dir), std::vector<uint32_t>{2});
    fedgate::StoreDirectory other(store, ClusterKeys("alpha"));  // another member: reads the store
    EXPECT_EQ(pids(other), std::vector<uint32_t>{2});
    other.write(Ops{{true, {node_record(2), 0, 0}}});  // S4: 2 gone; S1, then S3 and S4 unneeded
    EXPECT_EQ(keys_under(store, at), 0u);
    EXPECT_TRUE(dir.load().empty());
    // A key of the earlier layout (a process's JSON record) reads as one registration and goes
    // once a segment supersedes it.
    store.put(at + "0001000200000009", fedgate::StoreDirectory::encode({node_record(9), 1, 9}));
    EXPECT_EQ(pids(other), std::vector<uint32_t>{9});
    fedgate::StoreDirectory third(store, ClusterKeys("alpha"));
    third.write(Ops{{false, {node_record(9, 3), 1, 9}}});
    ASSERT_EQ(keys_under(store, at), 1u);
    EXPECT_EQ(store.range(at)[0].key.rfind(at + "seg-", 0), 0u) << "the earlier key went";
    EXPECT_EQ(third.load().at(0).record.epoch, 3u);
}

// Random writes from several members in turn, some refused by a store without quorum: what load()
// reads is each process's newest change the store took, and no segment in the store could go
// without changing that.
TEST(StoreDirectory, AnyRunOfWritesReadsBackTheNewestOfEachProcessAndLeavesNoSegmentNothingNeeds) {
    Clock c;
    MemStore store(c.fn());
    const std::string at = ClusterKeys("alpha").processes();
    std::vector<std::unique_ptr<fedgate::StoreDirectory>> members;
    std::vector<std::shared_ptr<fedgate::SegmentIndex>> indexes;
    for (int i = 0; i < 3; ++i) {
        indexes.push_back(std::make_shared<fedgate::SegmentIndex>());
        members.push_back(std::make_unique<fedgate::StoreDirectory>(store, ClusterKeys("alpha"), 4, indexes.back()));
    }
    std::size_t last_writer = 0;
    std::map<uint32_t, fedgate::StoredProcess> model;
    std::mt19937 rng(7);
    const auto as_map = [](const std::vector<fedgate::StoredProcess>& v) {
        std::map<uint32_t, fedgate::StoredProcess> m;
        for (const auto& p : v) m[p.record.pid.local()] = p;
        return m;
    };
    for (int round = 0; round < 400; ++round) {
        const std::size_t who = rng() % 5 == 0 ? rng() % members.size() : last_writer;
        if (who != last_writer) {  // a takeover: the new active reads the store first (ClusterService)
            std::lock_guard lk(indexes[who]->mu);
            indexes[who]->invalidate();
            last_writer = who;
        }
        fedgate::StoreDirectory& d = *members[who];
        Ops ops;
        const uint32_t n = 1 + rng() % 6;
        for (uint32_t k = 0; k < n; ++k) {
            const uint32_t local = 1 + rng() % 16;
            ops.push_back({rng() % 3 == 0, {node_record(local, 1 + rng() % 1000), 0xC612010A, static_cast<uint16_t>(rng())}});
        }
        const bool down = rng() % 10 == 0;
        store.set_available(!down);
        if (down) {
            EXPECT_THROW(d.write(ops), StoreUnavailable);
            store.set_available(true);
            continue;
        }
        d.write(ops);
        for (const auto& op : ops) {
            if (op.remove)
                model.erase(op.process.record.pid.local());
            else
                model[op.process.record.pid.local()] = op.process;
        }
        const auto all = store.range(at);
        const auto read = as_map(d.load());
        ASSERT_EQ(read.size(), model.size()) << "round " << round;
        for (const auto& [local, p] : model) {
            ASSERT_TRUE(read.contains(local)) << "round " << round << ": 1.2." << local;
            EXPECT_EQ(read.at(local).record, p.record);
            EXPECT_EQ(read.at(local).control_port, p.control_port);
        }
        // After a write the active member knows every segment: each one left holds a process's
        // newest entry that is a registration, or a removal that hides a registration elsewhere.
        std::map<uint32_t, std::pair<int64_t, bool>> newest;  // process -> (revision, removed)
        std::map<uint32_t, int> registered;                   // process -> segments registering it
        std::vector<std::vector<fedgate::DirectoryStore::Op>> segs;
        for (const KvEntry& e : all) {
            segs.push_back(*fedgate::StoreDirectory::decode_segment(e.value));
            for (const auto& op : segs.back()) {
                auto& n = newest[op.process.record.pid.local()];
                if (e.mod_revision >= n.first) n = {e.mod_revision, op.remove};
                if (!op.remove) ++registered[op.process.record.pid.local()];
            }
        }
        for (std::size_t k = 0; k < all.size(); ++k) {
            bool needed = false;
            for (const auto& op : segs[k]) {
                const uint32_t local = op.process.record.pid.local();
                if (newest[local].first != all[k].mod_revision) continue;
                needed = needed || !op.remove || registered[local] > 0;
            }
            EXPECT_TRUE(needed) << "round " << round << ": " << all[k].key << " is left in the store, and nothing needs it";
        }
    }
}

// The member's writer threads share one index: concurrent writes of different processes leave
// the newest of each, and the segments they superseded are gone.
TEST(StoreDirectory, WritersSharingAnIndexCompactWhatEachOtherSuperseded) {
    Clock c;
    MemStore store(c.fn());
    const std::string at = ClusterKeys("alpha").processes();
    auto index = std::make_shared<fedgate::SegmentIndex>();
    std::vector<std::unique_ptr<fedgate::StoreDirectory>> w;
    for (int i = 0; i < 4; ++i) w.push_back(std::make_unique<fedgate::StoreDirectory>(store, ClusterKeys("alpha"), 128, index));
    // Each process first in a segment with the other writers' (written by writer 0), then again on
    // its own writer, then removed there: nothing of anything is left.
    w[0]->write(ops_for(1, 400, false));
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (uint32_t i = 1 + t * 100; i <= 100 + t * 100; ++i) {
                auto again = ops_for(i, 1, false);
                again[0].process.record.epoch = 2;
                w[t]->write(again);
            }
            for (uint32_t i = 1 + t * 100; i <= 100 + t * 100; i += 10) w[t]->write(ops_for(i, 10, true));
        });
    for (auto& th : threads) th.join();
    EXPECT_TRUE(w[0]->load().empty());
    EXPECT_EQ(keys_under(store, at), 0u);
    std::lock_guard lk(index->mu);
    EXPECT_EQ(index->segments(), 0u);
    EXPECT_EQ(index->processes(), 0u);
}

// A member that becomes active reads the store (a takeover's load): the index of its writers is
// rebuilt from that read, so its first write need not read the store again, and compacts what the
// member before it left.
TEST(StoreDirectory, ATakeoversReadServesTheFirstWritesIndex) {
    struct Counting final : Forwarding {
        using Forwarding::Forwarding;
        int ranges = 0;
        std::vector<KvEntry> range(const std::string& p, int64_t* r) override { return ++ranges, real_.range(p, r); }
    };
    Clock c;
    MemStore store(c.fn());
    const std::string at = ClusterKeys("alpha").processes();
    fedgate::StoreDirectory before(store, ClusterKeys("alpha"));  // the member that was active
    before.write(ops_for(1, 10, false));
    before.write(ops_for(11, 10, false));
    Counting counted(store);
    auto index = std::make_shared<fedgate::SegmentIndex>();
    fedgate::StoreDirectory taker(counted, ClusterKeys("alpha"), 128, index), writer(counted, ClusterKeys("alpha"), 128, index);
    EXPECT_EQ(taker.load().size(), 20u);
    EXPECT_EQ(counted.ranges, 1);
    writer.write(ops_for(1, 10, true));  // the first segment's processes gone: it goes, and so do the removals
    EXPECT_EQ(counted.ranges, 1) << "the write read the store again";
    EXPECT_EQ(keys_under(store, at), 1u);
    EXPECT_EQ(taker.load().size(), 10u);
}

// Segments read from the store are checked whole: a bad one reads as nothing, never a crash.
TEST(StoreDirectory, ASegmentThatIsNotOneReadsAsNothing) {
    const std::string good = fedgate::StoreDirectory::encode_segment(ops_for(1, 3, false));
    ASSERT_EQ(good.size(), 4 + 3 * fedgate::StoreDirectory::kEntryBytes);
    const auto back = fedgate::StoreDirectory::decode_segment(good);
    ASSERT_TRUE(back.has_value());
    ASSERT_EQ(back->size(), 3u);
    EXPECT_EQ((*back)[2].process.record, node_record(3));
    EXPECT_EQ((*back)[2].process.control_port, 40003);
    EXPECT_EQ((*back)[2].process.source, 0xC612010Au);
    EXPECT_FALSE(fedgate::StoreDirectory::decode_segment(good.substr(0, good.size() - 1)).has_value()) << "cut short";
    std::string bad = good;
    bad[0] = 'X';
    EXPECT_FALSE(fedgate::StoreDirectory::decode_segment(bad).has_value()) << "not the magic";
    bad = good;
    bad[4] = 2;
    EXPECT_FALSE(fedgate::StoreDirectory::decode_segment(bad).has_value()) << "neither registration nor removal";
    EXPECT_FALSE(fedgate::StoreDirectory::decode_segment("").has_value());
    EXPECT_FALSE(fedgate::StoreDirectory::decode_segment("{").has_value());
    std::mt19937 rng(3);
    for (int i = 0; i < 2000; ++i) {
        std::string v = good;
        v[rng() % v.size()] = static_cast<char>(rng());
        if (rng() % 4 == 0) v.resize(rng() % (v.size() + 1));
        const auto r = fedgate::StoreDirectory::decode_segment(v);  // no crash, whatever it says
        if (r) {
            EXPECT_LE(r->size(), 3u);
        }
    }
}

TEST(StoreDirectory, ItsVersionChangesWithEveryChangeToTheProcessesAndOnlyThen) {
    Clock c;
    MemStore store(c.fn());
    fedgate::StoreDirectory dir(store, ClusterKeys("alpha"));
    std::set<std::string> seen{dir.version()};
    const auto changed = [&] { return seen.insert(dir.version()).second; };
    std::vector<fedgate::DirectoryStore::Op> ops{{false, {node_record(1), 0xC612010A, 40001}},
                                                 {false, {node_record(2), 0xC612010A, 40002}}};
    dir.write(ops);
    EXPECT_TRUE(changed()) << "two added";
    store.put(ClusterKeys("alpha").mappings(), "{}");
    store.put(ClusterKeys("beta").processes() + "x", "y");
    EXPECT_FALSE(changed()) << "keys outside alpha's processes";
    dir.write(std::vector<fedgate::DirectoryStore::Op>{{false, {node_record(1, 2), 0xC612010A, 40001}}});
    EXPECT_TRUE(changed()) << "one replaced (same count)";
    dir.write(std::vector<fedgate::DirectoryStore::Op>{{true, {node_record(1, 2), 0, 0}}});
    EXPECT_TRUE(changed()) << "one removed";
    // One removed and another added at once: the count is back where it was, the revision is not.
    dir.write(std::vector<fedgate::DirectoryStore::Op>{{true, {node_record(2), 0, 0}}, {false, {node_record(3), 0xC612010A, 40003}}});
    EXPECT_TRUE(changed()) << "one removed, one added";
    const fedgate::PrefixSummary sum = store.summarize(ClusterKeys("alpha").processes());
    EXPECT_EQ(sum.count, 1);
    const auto all = store.range(ClusterKeys("alpha").processes());
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(sum.max_mod_revision, all[0].mod_revision);
}

TEST(StoreDirectory, ACopyCarriesTheVersionOfItsOwnReadSoAnAddedThenRemovedProcessIsNoticed) {
    Clock c;
    MemStore store(c.fn());
    fedgate::StoreDirectory dir(store, ClusterKeys("alpha"));
    dir.write(std::vector<fedgate::DirectoryStore::Op>{{false, {node_record(1), 0xC612010A, 40001}}});
    const std::string before = dir.version();  // a standby asks: changed since its last copy
    dir.write(std::vector<fedgate::DirectoryStore::Op>{{false, {node_record(2), 0xC612010A, 40002}}});  // meanwhile
    std::string v;
    EXPECT_EQ(dir.load(&v).size(), 2u);  // its copy holds 1.2.2
    EXPECT_EQ(v, dir.version());
    dir.write(std::vector<fedgate::DirectoryStore::Op>{{true, {node_record(2), 0, 0}}});  // and 1.2.2 is gone
    EXPECT_EQ(dir.version(), before) << "the store is back where the question found it";
    EXPECT_NE(dir.version(), v) << "but not where the copy was read: a takeover reads the store";
}

// The resolution service of a group's member: a registration is answered only once the store took
// it; a store that cannot take it gets the process store_unavailable and the registration undone;
// a member that takes over holds what the store held.
struct MemberDirectory : ::testing::Test {
    Clock clock;
    MemStore store{clock.fn()};
    fedgate::StoreDirectory dir{store, ClusterKeys("alpha")};
    fedgate::Config cfg = fedgate::parse_config(kConfig, "test.toml");
    fedgate::ResolveCache cache{64};
    std::vector<std::pair<uint16_t, std::vector<uint8_t>>> sent;  // (port, datagram)
    std::unique_ptr<fedgate::ResolutionService> svc;
    void SetUp() override {
        svc = std::make_unique<fedgate::ResolutionService>(
            cfg, cache, [this](uint32_t, uint16_t port, std::span<const uint8_t> d) { sent.emplace_back(port, std::vector<uint8_t>(d.begin(), d.end())); },
            [] {});
        svc->set_directory_store(&dir);
    }
    void reg(uint32_t local, uint64_t id) {
        fedgate::RegisterBody b{};
        fedgate::encode(node_record(local), b.record);
        const auto m = fedgate::testing::message(fedgate::MsgType::reg, id, b);
        svc->on_message(0xC612010A, 7001, m, clock.ms);
    }
    // The status of each reply sent so far, in order.
    std::vector<fedgate::RegStatus> replies() const {
        std::vector<fedgate::RegStatus> out;
        for (const auto& [port, d] : sent) {
            fedgate::ParsedMsg m;
            if (fedgate::parse_message(d, m) != fedgate::WireError::ok || m.header.type != fedgate::MsgType::reg_reply) continue;
            fedgate::RegReplyBody r;
            std::memcpy(&r, m.body.data(), sizeof r);
            out.push_back(static_cast<fedgate::RegStatus>(r.status));
        }
        return out;
    }
};

TEST_F(MemberDirectory, ARegistrationIsAnsweredOnlyOnceTheStoreHasIt) {
    reg(1, 11);
    reg(2, 12);
    EXPECT_TRUE(replies().empty()) << "answered before the store had it";
    EXPECT_TRUE(dir.load().empty());
    svc->flush(clock.ms);
    EXPECT_EQ(dir.load().size(), 2u);
    EXPECT_EQ(replies(), (std::vector<fedgate::RegStatus>{fedgate::RegStatus::ok, fedgate::RegStatus::ok}));
    EXPECT_TRUE(cache.find(fedgate::ProcessId::make(1, 2, 1), clock.ms) != nullptr) << "in the cache once stored";
}

TEST_F(MemberDirectory, WithoutAStoreTheProcessHearsStoreUnavailableAndIsNotRegistered) {
    store.set_available(false);
    reg(3, 13);
    svc->flush(clock.ms);
    EXPECT_EQ(replies(), (std::vector<fedgate::RegStatus>{fedgate::RegStatus::store_unavailable}));
    EXPECT_THROW(svc->dir_show(fedgate::ProcessId::make(1, 2, 3), clock.ms), std::runtime_error) << "taken back";
    EXPECT_EQ(svc->stats()["directory"]["store_failures"], 1u);
    store.set_available(true);
    reg(3, 14);  // the client tries again
    svc->flush(clock.ms);
    EXPECT_EQ(replies().back(), fedgate::RegStatus::ok);
}

TEST_F(MemberDirectory, AMemberThatTakesOverHoldsWhatTheStoreHeld) {
    reg(4, 15);
    reg(5, 16);
    svc->flush(clock.ms);
    // Another member of the group, which stood by until now.
    fedgate::ResolveCache cache2{64};
    fedgate::ResolutionService other(cfg, cache2, [](uint32_t, uint16_t, std::span<const uint8_t>) {}, [] {});
    other.set_directory_store(&dir);
    EXPECT_EQ(other.take_over(clock.ms), 2u);
    EXPECT_TRUE(cache2.find(fedgate::ProcessId::make(1, 2, 5), clock.ms) != nullptr);
    EXPECT_EQ(other.stats()["directory"]["local"], 2u);
    EXPECT_EQ(other.take_over(clock.ms), 0u) << "what it holds already is not taken twice";
}

// A directory store that counts its full reads.
struct CountingDirectory final : fedgate::DirectoryStore {
    explicit CountingDirectory(fedgate::DirectoryStore& real) : real(real) {}
    void write(std::span<const Op> ops) override { real.write(ops); }
    std::vector<fedgate::StoredProcess> load(std::string* v) override { return ++loads, real.load(v); }
    std::string version() override { return real.version(); }
    fedgate::DirectoryStore& real;
    int loads = 0;
};

// Another member of the group, standing by, that reads the store through a CountingDirectory.
struct Standby {
    explicit Standby(MemberDirectory& group)
        : counting(group.dir), svc(group.cfg, cache, [](uint32_t, uint16_t, std::span<const uint8_t>) {}, [] {}) {
        svc.set_directory_store(&counting);
    }
    CountingDirectory counting;
    fedgate::ResolveCache cache{64};
    fedgate::ResolutionService svc;
};

TEST_F(MemberDirectory, AStandbysWarmCopyIsTakenUpWithoutReadingTheStoreWhileItIsCurrent) {
    reg(4, 15);
    reg(5, 16);
    svc->flush(clock.ms);
    Standby sb(*this);
    auto& [counting, cache2, other] = sb;
    std::string v;
    auto copy = counting.load(&v);
    EXPECT_EQ(v, counting.version()) << "the copy's version is the store's";
    other.warm(std::move(copy), v);
    EXPECT_EQ(other.stats()["directory"]["warm"], 2u);
    EXPECT_EQ(other.stats()["directory"]["local"], 0u) << "a warm copy is not the directory yet";
    EXPECT_EQ(other.take_over(clock.ms), 2u);
    EXPECT_EQ(counting.loads, 1) << "taken from the warm copy, not read again";
    EXPECT_EQ(other.stats()["directory"]["taken_over_warm"], 1u);
    EXPECT_EQ(other.stats()["directory"]["warm"], 0u) << "used up";
    EXPECT_TRUE(cache2.find(fedgate::ProcessId::make(1, 2, 5), clock.ms) != nullptr);
}

TEST_F(MemberDirectory, AWarmCopyTheStoreHasMovedOnFromIsNotUsed) {
    reg(4, 15);
    svc->flush(clock.ms);
    Standby sb(*this);
    auto& [counting, cache2, other] = sb;
    std::string v;
    auto copy = counting.load(&v);
    other.warm(std::move(copy), v);
    reg(6, 17);  // registered at the active after the standby's copy
    svc->flush(clock.ms);
    EXPECT_EQ(other.take_over(clock.ms), 2u) << "the store read again: 1.2.6 is there too";
    EXPECT_EQ(counting.loads, 2);
    EXPECT_EQ(other.stats()["directory"]["taken_over_warm"], 0u);
    EXPECT_TRUE(cache2.find(fedgate::ProcessId::make(1, 2, 6), clock.ms) != nullptr);
}

// A standby's warm cache ([cluster] sync): the active's remote records (what queries learned,
// what peers announced) and their version, taken into a standby's cache in place of its own
// remote records; a local record is never replaced.
TEST_F(MemberDirectory, AStandbyTakesTheActivesRemoteRecordsIntoItsCache) {
    const auto learn = [&](uint32_t local) {
        fedgate::ResolveEvent ev{};
        ev.key = fedgate::ProcessId::make(2, 7, local);
        ev.record.pid = ev.key;
        ev.record.epoch = 1;
        ev.record.transport = fedgate::Transport::tcp;
        ev.record.ipv4 = 0xC6120214;
        ev.record.port = 7000;
        ev.owner_party = 2;
        svc->on_event(ev, clock.ms);
    };
    const auto [v0, none] = *svc->remote_cache(clock.ms);
    EXPECT_TRUE(none.empty());
    EXPECT_NE(v0, 0u) << "0 is what a standby that holds nothing asks with";
    learn(1);
    learn(2);
    reg(4, 15);
    svc->flush(clock.ms);
    const auto [v1, records] = *svc->remote_cache(clock.ms);
    EXPECT_NE(v1, v0) << "what queries learn changes the version";
    ASSERT_EQ(records.size(), 2u) << "remote records only, not the local 1.2.4";
    for (const fedgate::CacheRecord& r : records) {
        EXPECT_EQ(r.kind, fedgate::CacheKind::answered);
        EXPECT_EQ(r.owner_party, 2u);
        EXPECT_EQ(r.ttl_ms, cfg.resolve.answer_ttl_s * 1000) << "an answer's time left goes with it";
    }
    EXPECT_EQ(svc->remote_cache(clock.ms)->first, v1) << "unchanged while nothing changes";
    EXPECT_FALSE(svc->remote_cache(clock.ms, v1)) << "nothing copied for a standby that holds this version";
    EXPECT_TRUE(svc->remote_cache(clock.ms, v0)) << "but for one that holds an older one";

    Standby sb(*this);
    fedgate::CacheRecord stale = records[0];
    stale.key = stale.record.pid = fedgate::ProcessId::make(2, 7, 9);
    stale.kind = fedgate::CacheKind::announced;
    stale.ttl_ms = 0;
    EXPECT_EQ(sb.svc.warm_cache({stale}, clock.ms), 1u);
    EXPECT_EQ(sb.svc.warm_cache(records, clock.ms), 2u);
    EXPECT_EQ(sb.cache.find(fedgate::ProcessId::make(2, 7, 9), clock.ms), nullptr) << "the older copy's record is gone";
    const fedgate::CacheEntry* e = sb.cache.find(fedgate::ProcessId::make(2, 7, 2), clock.ms);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->kind, fedgate::CacheKind::answered);
    EXPECT_EQ(e->record, records[0].record.pid == e->key ? records[0].record : records[1].record);
    EXPECT_EQ(sb.cache.find(fedgate::ProcessId::make(2, 7, 2), clock.ms + cfg.resolve.answer_ttl_s * 1000 + 1), nullptr)
        << "and it expires when it would have at the active";

    fedgate::CacheRecord hearsay = records[0];
    hearsay.key = hearsay.record.pid = fedgate::ProcessId::make(1, 2, 4);
    svc->warm_cache({hearsay}, clock.ms);
    ASSERT_NE(cache.find(fedgate::ProcessId::make(1, 2, 4), clock.ms), nullptr);
    EXPECT_EQ(cache.find(fedgate::ProcessId::make(1, 2, 4), clock.ms)->kind, fedgate::CacheKind::local)
        << "a local record is never replaced by a copy";
}

// A directory store whose writes wait at a gate the test opens, and that records how many were in
// flight at once and what each carried.
struct GatedDirectory final : fedgate::DirectoryStore {
    explicit GatedDirectory(fedgate::DirectoryStore& real) : real(real) {}
    void write(std::span<const Op> ops) override {
        std::unique_lock lk(mu);
        writes.emplace_back(ops.begin(), ops.end());
        max_in_flight = std::max(max_in_flight, ++in_flight);
        cv.notify_all();
        cv.wait(lk, [&] { return open; });
        --in_flight;
        lk.unlock();
        real.write(ops);
    }
    std::vector<fedgate::StoredProcess> load(std::string* v) override { return real.load(v); }
    std::string version() override { return real.version(); }
    void release() {
        std::lock_guard lk(mu);
        open = true;
        cv.notify_all();
    }
    std::size_t started() {
        std::lock_guard lk(mu);
        return writes.size();
    }
    std::vector<std::vector<Op>> seen() {
        std::lock_guard lk(mu);
        return writes;
    }
    fedgate::DirectoryStore& real;
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
    int in_flight = 0, max_in_flight = 0;
    std::vector<std::vector<Op>> writes;
};

// A member whose registrations go into the store on writer threads (as fedgated's do).
struct MemberWithWriters : MemberDirectory {
    GatedDirectory gate1{dir}, gate2{dir};
    std::atomic<int> rings{0};
    void SetUp() override {
        MemberDirectory::SetUp();
        svc->set_directory_writers(std::make_unique<fedgate::StoreWriters>(
                                       std::vector<fedgate::DirectoryStore*>{&gate1, &gate2}, [this] { ++rings; }),
                                   128);
    }
    void TearDown() override {
        gate1.release();
        gate2.release();
        svc->stop_directory_writers();
    }
    void dereg(uint32_t local, uint64_t id) {
        fedgate::ProcessRefBody b{};
        fedgate::store_be64(b.pid, fedgate::ProcessId::make(1, 2, local).value);
        fedgate::store_be32(b.epoch, 1);
        const auto m = fedgate::testing::message(fedgate::MsgType::deregister, id, b);
        svc->on_message(0xC612010A, 7001, m, clock.ms);
    }
    // Waits (5 s at most) until `n` writes have started, on either writer.
    bool writes_start(std::size_t n) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (gate1.started() + gate2.started() < n) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            std::this_thread::yield();
        }
        return true;
    }
    // Flushes until `n` replies were sent (5 s at most): the writers finish on their own threads.
    bool replies_reach(std::size_t n) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (replies().size() < n) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            svc->flush(clock.ms);
            std::this_thread::yield();
        }
        return true;
    }
};

TEST_F(MemberWithWriters, WritesGoOutWithoutBlockingAndSeveralAreInFlightAtOnce) {
    reg(1, 11);
    svc->flush(clock.ms);  // returns at once, its write waiting at a gate
    ASSERT_TRUE(writes_start(1));
    reg(2, 12);
    svc->flush(clock.ms);
    ASSERT_TRUE(writes_start(2)) << "the second registration waited for the first's write";
    EXPECT_EQ(gate1.started(), 1u);
    EXPECT_EQ(gate2.started(), 1u);
    EXPECT_TRUE(replies().empty()) << "answered before the store had it";
    EXPECT_EQ(svc->staged(), 0u);
    reg(3, 13);
    svc->flush(clock.ms);  // both writers busy: it waits here
    EXPECT_EQ(svc->staged(), 1u);
    gate1.release();
    gate2.release();
    ASSERT_TRUE(replies_reach(3));
    EXPECT_EQ(replies(), std::vector<fedgate::RegStatus>(3, fedgate::RegStatus::ok));
    EXPECT_EQ(dir.load().size(), 3u);
    EXPECT_GE(rings.load(), 2) << "each finished write rings the doorbell";
    EXPECT_TRUE(cache.find(fedgate::ProcessId::make(1, 2, 3), clock.ms) != nullptr);
}

TEST_F(MemberWithWriters, AProcessesChangesAreNeverInTwoWritesAtOnce) {
    reg(1, 11);
    svc->flush(clock.ms);
    ASSERT_TRUE(writes_start(1));
    dereg(1, 12);  // gone here at once; its removal waits for the registration's write
    reg(2, 13);
    svc->flush(clock.ms);
    ASSERT_TRUE(writes_start(2));
    for (GatedDirectory* g : {&gate1, &gate2})
        for (const auto& w : g->seen())
            for (const auto& op : w)
                EXPECT_FALSE(op.remove) << "the removal went out while the registration's write was in flight";
    EXPECT_EQ(svc->staged(), 1u) << "the removal is held";
    EXPECT_TRUE(replies().empty());
    gate1.release();
    gate2.release();
    ASSERT_TRUE(replies_reach(3));
    const auto stored = dir.load();
    ASSERT_EQ(stored.size(), 1u) << "the store kept the process that left";
    EXPECT_EQ(stored[0].record.pid, fedgate::ProcessId::make(1, 2, 2));
}

TEST_F(MemberWithWriters, AWriteTheStoreRefusesTakesItsRegistrationsBack) {
    gate1.release();
    gate2.release();
    store.set_available(false);
    reg(3, 13);
    ASSERT_TRUE(replies_reach(1));
    EXPECT_EQ(replies(), (std::vector<fedgate::RegStatus>{fedgate::RegStatus::store_unavailable}));
    EXPECT_THROW(svc->dir_show(fedgate::ProcessId::make(1, 2, 3), clock.ms), std::runtime_error) << "taken back";
    EXPECT_EQ(svc->stats()["directory"]["store_failures"], 1u);
}

// With two writes out, small ones wait for them: what is staged goes out once it fills a batch of
// ResolutionService::kBusyBatch, or when a write comes back. Fewer, bigger writes: a write costs
// the store and the member's writer threads about the same whatever it carries.
struct MemberWithThreeWriters : MemberDirectory {
    GatedDirectory gate1{dir}, gate2{dir}, gate3{dir};
    void SetUp() override {
        MemberDirectory::SetUp();
        svc->set_directory_writers(std::make_unique<fedgate::StoreWriters>(
                                       std::vector<fedgate::DirectoryStore*>{&gate1, &gate2, &gate3}, [] {}),
                                   fedgate::StoreDirectory::kSegmentEntries);
    }
    void TearDown() override {
        for (GatedDirectory* g : {&gate1, &gate2, &gate3}) g->release();
        svc->stop_directory_writers();
    }
    std::size_t started() { return gate1.started() + gate2.started() + gate3.started(); }
};

TEST_F(MemberWithThreeWriters, WithTwoWritesOutTheNextWaitsUntilItFillsABatch) {
    reg(1, 1);
    svc->flush(clock.ms);
    reg(2, 2);
    svc->flush(clock.ms);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (started() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    ASSERT_EQ(started(), 2u) << "the first two go out at once, a write each";
    const uint32_t batch = static_cast<uint32_t>(fedgate::ResolutionService::kBusyBatch);
    for (uint32_t i = 0; i + 1 < batch; ++i) reg(100 + i, 100 + i);
    svc->flush(clock.ms);
    EXPECT_EQ(svc->staged(), batch - 1) << "a third writer is idle, and yet a small write waits";
    reg(99, 99);
    svc->flush(clock.ms);
    while (started() < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    ASSERT_EQ(started(), 3u);
    EXPECT_EQ(svc->staged(), 0u);
    EXPECT_EQ(gate3.seen().at(0).size() + gate2.seen().at(0).size() + gate1.seen().at(0).size(), batch + 2u)
        << "the full batch in one write";
    // Fewer than two writes out again: what is staged goes, however little.
    reg(3, 3);
    svc->flush(clock.ms);
    EXPECT_EQ(svc->staged(), 1u);
    std::vector<GatedDirectory*> small;  // the writers holding the first two registrations
    for (GatedDirectory* g : {&gate1, &gate2, &gate3})
        if (g->seen().at(0).size() == 1) small.push_back(g);
    ASSERT_EQ(small.size(), 2u);
    small[0]->release();  // three out, one back: two still out
    while (replies().empty() && std::chrono::steady_clock::now() < deadline) svc->flush(clock.ms);
    svc->flush(clock.ms);
    EXPECT_EQ(svc->staged(), 1u) << "two writes still out";
    small[1]->release();
    while (svc->staged() != 0 && std::chrono::steady_clock::now() < deadline) svc->flush(clock.ms);
    EXPECT_EQ(svc->staged(), 0u);
}

// ---- config ----------------------------------------------------------------------------------

std::string with_cluster(const std::string& section) { return kBase + "\n" + section + "\n"; }

std::string config_error(const std::string& text) {
    try {
        fedgate::parse_config(text, "test.toml");
    } catch (const fedgate::ConfigError& e) {
        return e.what();
    }
    return "";
}

TEST(ClusterConfig, ReadsEndpointsMemberAndLease) {
    const fedgate::Config cfg = fedgate::parse_config(kConfig, "test.toml");
    ASSERT_TRUE(cfg.cluster.enabled());
    EXPECT_EQ(cfg.cluster.etcd.size(), 2u);
    EXPECT_EQ(cfg.cluster.member, "gw-a");
    EXPECT_EQ(cfg.cluster.lease_ttl_s, 3u);
    EXPECT_EQ(cfg.cluster.txn_ops, fedgate::kDefaultTxnOps) << "etcd's default --max-txn-ops";
    EXPECT_EQ(fedgate::parse_config(with_cluster("[cluster]\netcd = [\"http://h:2379\"]\nmember = \"m\"\ntxn_ops = 1024"), "t")
                  .cluster.txn_ops,
              1024u);
    const fedgate::Config alone = fedgate::parse_config(with_cluster(""), "test.toml");
    EXPECT_FALSE(alone.cluster.enabled()) << "no [cluster]: alone, as before";
    const fedgate::Config dflt =
        fedgate::parse_config(with_cluster("[cluster]\netcd = [\"http://198.18.250.11:2379\"]\nmember = \"m\""), "t");
    EXPECT_EQ(dflt.cluster.lease_ttl_s, fedgate::kDefaultLeaseTtlS);
    EXPECT_FALSE(dflt.cluster.sync) << "no sync key: no session events";
    const fedgate::Config sync = fedgate::parse_config(
        with_cluster("[cluster]\netcd = [\"http://198.18.250.11:2379\"]\nmember = \"m\"\nsync = \"198.18.250.21:7960\"\n"
                     "sync_key = \"9c3e51a07d2b48f6a1e03c5d7b9f2e64\""),
        "t");
    ASSERT_TRUE(sync.cluster.sync);
    EXPECT_EQ(sync.cluster.sync_text(), "198.18.250.21:7960");
    EXPECT_EQ(sync.cluster.sync_key.size(), 16u);
}

// The sync channel's datagrams carry an HMAC under the members' shared key: sync without one is
// refused, and so is a key without sync (a config that says more than it does).
TEST(ClusterConfig, SyncNeedsAKeyAndAKeyNeedsSync) {
    const std::string base = "[cluster]\netcd = [\"http://198.18.250.11:2379\"]\nmember = \"m\"\n";
    std::string e = config_error(with_cluster(base + "sync = \"198.18.250.21:7960\""));
    EXPECT_NE(e.find("cluster.sync_key"), std::string::npos) << e;
    EXPECT_NE(e.find("missing (required)"), std::string::npos) << e;
    e = config_error(with_cluster(base + "sync_key = \"9c3e51a07d2b48f6a1e03c5d7b9f2e64\""));
    EXPECT_NE(e.find("cluster.sync_key"), std::string::npos) << e;
    EXPECT_NE(e.find("is given without sync"), std::string::npos) << e;
    e = config_error(with_cluster(base + "sync = \"198.18.250.21:7960\"\nsync_key = \"abcd\""));
    EXPECT_NE(e.find("at least 16 are needed"), std::string::npos) << e;
    e = config_error(with_cluster(base + "sync = \"198.18.250.21:7960\"\nsync_key_id = 3\nsync_key = \"9c3e51a07d2b48f6a1e03c5d7b9f2e64\""));
    EXPECT_NE(e.find("sync_key_id"), std::string::npos) << "one key, no IDs: " << e;
}

TEST(ClusterConfig, ABadSyncAddressIsNamed) {
    const auto with_sync = [](const std::string& v) {
        return config_error(with_cluster("[cluster]\netcd = [\"http://h:2379\"]\nmember = \"m\"\nsync = \"" + v + "\""));
    };
    for (const char* bad : {"198.18.250.21", "198.18.250.21:0", "host:7960", "198.18.250.21:70000"}) {
        const std::string e = with_sync(bad);
        EXPECT_NE(e.find("cluster.sync"), std::string::npos) << bad << ": " << e;
        EXPECT_NE(e.find(std::string("'") + bad + "' is not IP:PORT"), std::string::npos) << bad << ": " << e;
    }
    for (const char* bad : {"0.0.0.0:7960", "224.0.0.1:7960", "255.255.255.255:7960"}) {
        const std::string e = with_sync(bad);
        EXPECT_NE(e.find("is not a unicast address"), std::string::npos) << bad << ": " << e;
    }
}

TEST(ClusterConfig, BadValuesAreNamed) {
    EXPECT_NE(config_error(with_cluster("[cluster]\netcd = []\nmember = \"m\"")).find("cluster.etcd"), std::string::npos);
    const std::string bad_url = config_error(with_cluster("[cluster]\netcd = [\"198.18.250.11:2379\"]\nmember = \"m\""));
    EXPECT_NE(bad_url.find("'198.18.250.11:2379' must start with http://"), std::string::npos) << bad_url;
    const std::string path = config_error(with_cluster("[cluster]\netcd = [\"http://h:2379/v3\"]\nmember = \"m\""));
    EXPECT_NE(path.find("has no valid port"), std::string::npos) << path;
    const std::string no_member = config_error(with_cluster("[cluster]\netcd = [\"http://h:2379\"]"));
    EXPECT_NE(no_member.find("cluster.member"), std::string::npos) << no_member;
    const std::string bad_member = config_error(with_cluster("[cluster]\netcd = [\"http://h:2379\"]\nmember = \"a b\""));
    EXPECT_NE(bad_member.find("'a b' must be"), std::string::npos) << bad_member;
    const std::string ttl = config_error(with_cluster("[cluster]\netcd = [\"http://h:2379\"]\nmember = \"m\"\nlease_ttl_s = 1"));
    EXPECT_NE(ttl.find("cluster.lease_ttl_s"), std::string::npos) << ttl;
    for (const char* bad : {"0", "10001", "\"many\""}) {
        const std::string txn = config_error(with_cluster(std::string("[cluster]\netcd = [\"http://h:2379\"]\nmember = \"m\"\ntxn_ops = ") + bad));
        EXPECT_NE(txn.find("cluster.txn_ops"), std::string::npos) << bad << ": " << txn;
    }
    const std::string unknown = config_error(with_cluster("[cluster]\netcd = [\"http://h:2379\"]\nmember = \"m\"\nleader = 1"));
    EXPECT_NE(unknown.find("leader"), std::string::npos) << unknown;
}

}  // namespace
