// EtcdStore (etcd's v3 gRPC API) against a real three-member etcd: run by etcd_store.sh, which
// brings the store up in namespaces, runs each phase's cases from a client namespace with the
// endpoints in FEDGATE_ETCD_ENDPOINTS (comma-separated), and kills members between phases:
//   Healthy.*   every call of the KvStore interface, its answers checked against what etcdctl
//               then reads (etcd_store.sh), refusals told apart from unavailability;
//   OneDown.*   member 1 killed and listed first: every call still succeeds, on another member;
//   NoQuorum.*  members 1 and 2 killed: changes and quorum reads fail as unavailable, reached;
//               health says "down" for the two and "no quorum" for the third.
// Without FEDGATE_ETCD_ENDPOINTS every case is skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "controlplane/cluster.hpp"
#include "controlplane/kv_store.hpp"

namespace {

using fedgate::EtcdStore;
using fedgate::KvEntry;
using fedgate::StoreRefused;
using fedgate::StoreUnavailable;

std::vector<std::string> endpoints() {
    std::vector<std::string> out;
    const char* env = std::getenv("FEDGATE_ETCD_ENDPOINTS");
    if (env == nullptr) return out;
    std::string s = env;
    for (std::size_t at = 0; at <= s.size();) {
        const std::size_t comma = std::min(s.find(',', at), s.size());
        if (comma > at) out.push_back(s.substr(at, comma - at));
        at = comma + 1;
    }
    return out;
}

// Each test's keys under a prefix of its own, so that the phases and reruns do not meet.
std::string prefix(const std::string& name) {
    const char* run = std::getenv("FEDGATE_ETCD_RUN");
    return "/fedgate-test/" + std::string(run != nullptr ? run : "0") + "/" + name + "/";
}

class EtcdStoreTest : public ::testing::Test {
protected:
    void SetUp() override {
        eps_ = endpoints();
        if (eps_.empty()) GTEST_SKIP() << "FEDGATE_ETCD_ENDPOINTS is not set (etcd_store.sh sets it)";
    }
    std::vector<std::string> eps_;
};

using Healthy = EtcdStoreTest;
using OneDown = EtcdStoreTest;
using NoQuorum = EtcdStoreTest;

TEST_F(Healthy, PutGetRangeAndEraseAreTransactionsWithRevisions) {
    EtcdStore s(eps_);
    const std::string p = prefix("kv");
    // Binary values and keys with every byte value travel as they are.
    std::string binary;
    for (int i = 0; i < 256; ++i) binary.push_back(static_cast<char>(i));
    s.put({{p + "a", "1"}, {p + "b", binary}, {p + "c", "3"}});
    const auto a = s.get(p + "a");
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->value, "1");
    EXPECT_GT(a->mod_revision, 0);
    EXPECT_EQ(a->create_revision, a->mod_revision);
    EXPECT_EQ(s.get(p + "b")->value, binary);
    EXPECT_EQ(s.get(p + "a")->mod_revision, s.get(p + "c")->mod_revision) << "one transaction, one revision";
    EXPECT_FALSE(s.get(p + "nothing").has_value());

    int64_t rev = 0;
    const auto all = s.range(p, &rev);
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(all[0].key, p + "a");
    EXPECT_EQ(all[2].key, p + "c");
    EXPECT_GE(rev, a->mod_revision);

    s.put(p + "a", "2");
    EXPECT_EQ(s.get(p + "a")->value, "2");
    EXPECT_GT(s.get(p + "a")->mod_revision, a->mod_revision);
    EXPECT_EQ(s.get(p + "a")->create_revision, a->create_revision);

    const auto sum = s.summarize(p);
    EXPECT_EQ(sum.count, 3);
    EXPECT_EQ(sum.max_mod_revision, s.get(p + "a")->mod_revision) << "the newest key's revision";

    s.erase({p + "a", p + "b"});
    EXPECT_FALSE(s.get(p + "a").has_value());
    EXPECT_EQ(s.range(p).size(), 1u);
    EXPECT_EQ(s.summarize(p).count, 1);
    EXPECT_EQ(s.summarize(prefix("empty")), (fedgate::PrefixSummary{0, 0}));
    // Nothing to do is no request (and no error).
    s.put(std::vector<std::pair<std::string, std::string>>{});
    s.erase({});
}

TEST_F(Healthy, PutIfComparesTheModRevisionAndSaysWhatIsThere) {
    EtcdStore s(eps_);
    const std::string k = prefix("put_if") + "state";
    std::optional<KvEntry> now;
    const int64_t r1 = s.put_if(k, "one", 0, 0, &now);
    ASSERT_GT(r1, 0) << "absent, as expected";
    EXPECT_EQ(s.put_if(k, "again", 0, 0, &now), 0) << "no longer absent";
    ASSERT_TRUE(now.has_value());
    EXPECT_EQ(now->value, "one");
    EXPECT_EQ(now->mod_revision, r1);
    const int64_t r2 = s.put_if(k, "two", 0, r1, &now);
    EXPECT_GT(r2, r1);
    EXPECT_EQ(s.put_if(k, "stale", 0, r1, &now), 0) << "r1 is no longer the key's revision";
    EXPECT_EQ(now->value, "two");
    EXPECT_EQ(s.get(k)->value, "two");

    EXPECT_FALSE(s.erase_if(k, "one")) << "not while it holds another value";
    EXPECT_TRUE(s.get(k).has_value());
    EXPECT_TRUE(s.erase_if(k, "two"));
    EXPECT_FALSE(s.get(k).has_value());
    EXPECT_GT(s.put_if(k, "three", 0, 0, nullptr), 0) << "absent again";
}

TEST_F(Healthy, LeasesCarryTheirKeysAndAreGoneWhenRevoked) {
    EtcdStore s(eps_);
    const std::string p = prefix("lease");
    const int64_t lease = s.grant(30);
    ASSERT_NE(lease, 0);
    const int64_t left = s.keepalive(lease);
    EXPECT_GT(left, 0);
    EXPECT_LE(left, 30);
    s.put({{p + "x", "1"}, {p + "y", "2"}}, lease);
    EXPECT_EQ(s.get(p + "x")->lease, lease);
    EXPECT_EQ(s.range(p).size(), 2u);
    s.revoke(lease);
    EXPECT_TRUE(s.range(p).empty()) << "a revoked lease takes its keys";
    EXPECT_EQ(s.keepalive(lease), 0) << "gone";
    s.revoke(lease);  // again: nothing, no error
    EXPECT_THROW(s.put(p + "z", "1", lease), StoreRefused) << "a put under a lease that is gone is refused";
}

TEST_F(Healthy, ARequestEtcdRefusesIsRefusedNotUnavailable) {
    EtcdStore s(eps_);
    const std::string p = prefix("refused");
    // etcd takes at most 128 operations in one transaction (--max-txn-ops).
    std::vector<std::pair<std::string, std::string>> many;
    for (int i = 0; i < 200; ++i) many.emplace_back(p + std::to_string(i), "v");
    try {
        s.put(many);
        FAIL() << "200 operations in one transaction were taken";
    } catch (const StoreRefused& e) {
        EXPECT_NE(std::string(e.what()).find("too many operations"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(s.range(p).empty()) << "all or none";
}

TEST_F(Healthy, PutsAndDeletesGoInOneTransaction) {
    EtcdStore s(eps_);
    const std::string p = prefix("put-erase");
    s.put({{p + "old", "1"}, {p + "other", "2"}});
    s.put_erase({{p + "new", "3"}}, {p + "old"});
    const auto all = s.range(p);
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].key, p + "new");
    EXPECT_EQ(all[1].key, p + "other");
    s.put_erase({}, {p + "new", p + "other"});
    EXPECT_TRUE(s.range(p).empty());
}

TEST_F(Healthy, ADirectoryCompactionOverTheStoresTxnLimitGoesInAgainInTransactionsOf128) {
    // [cluster] txn_ops 500 against members left at etcd's --max-txn-ops of 128: 300 processes
    // written one at a time (300 segments), then removed in one write; the deletion of the 300
    // segments that leaves nothing needs is refused once and goes in again in transactions of 128.
    EtcdStore s(eps_);
    const char* run = std::getenv("FEDGATE_ETCD_RUN");
    const fedgate::ClusterKeys keys(std::string("txn-ops-") + (run != nullptr ? run : "0"));
    fedgate::StoreDirectory dir(s, keys, 500);
    std::vector<fedgate::DirectoryStore::Op> ops;
    for (uint32_t i = 1; i <= 300; ++i) {
        fedgate::DmaAddress r;
        r.pid = fedgate::ProcessId::make(1, 2, i);
        r.epoch = 1;
        r.transport = fedgate::Transport::tcp;
        r.ipv4 = 0xC612010A;  // 198.18.1.10
        r.port = static_cast<uint16_t>(7000 + i);
        ops.push_back({false, {r, 0xC612010A, static_cast<uint16_t>(40000 + i)}});
        dir.write(std::span(&ops.back(), 1));
    }
    EXPECT_EQ(s.range(keys.processes()).size(), 300u) << "a segment per write";
    const auto all = dir.load();
    ASSERT_EQ(all.size(), 300u);
    for (const auto& p : all) EXPECT_EQ(p.record.port, 7000 + p.record.pid.local());
    EXPECT_EQ(dir.txn_ops(), 500u);
    for (auto& op : ops) op.remove = true;
    dir.write(ops);
    EXPECT_EQ(dir.txn_ops(), fedgate::StoreDirectory::kStoreDefaultTxnOps);
    EXPECT_TRUE(dir.load().empty());
    EXPECT_TRUE(s.range(keys.processes()).empty()) << "nothing left: the 300, then the removals' own segment";
}

TEST_F(Healthy, AnEndpointWhereNothingListensIsUnavailableAndNotReached) {
    // The store network's bridge address, where nothing listens on that port: refused at once.
    EtcdStore s({"http://198.18.250.1:2399"}, 300);
    try {
        (void)s.get(prefix("nowhere") + "k");
        FAIL() << "an answer from nowhere";
    } catch (const StoreUnavailable& e) {
        EXPECT_FALSE(e.reachable()) << e.what();
        EXPECT_NE(std::string(e.what()).find("198.18.250.1:2399"), std::string::npos) << e.what();
    }
    const auto h = s.health();
    ASSERT_EQ(h.size(), 1u);
    EXPECT_EQ(h[0].state, "down");
}

TEST_F(Healthy, EveryMemberIsUp) {
    EtcdStore s(eps_);
    const auto h = s.health();
    ASSERT_EQ(h.size(), eps_.size());
    for (const auto& e : h) EXPECT_EQ(e.state, "up") << e.url;
}

TEST_F(Healthy, AMillionByteAnswerComesBackWhole) {
    // gRPC's default limit on an answer is 4 MB; a directory range is bigger than that.
    EtcdStore s(eps_);
    const std::string p = prefix("big");
    const std::string v(64 * 1024, 'v');
    for (int t = 0; t < 10; ++t) {
        std::vector<std::pair<std::string, std::string>> kvs;
        for (int i = 0; i < 10; ++i) kvs.emplace_back(p + std::to_string(t * 10 + i), v);
        s.put(kvs);
    }
    const auto all = s.range(p);
    ASSERT_EQ(all.size(), 100u);
    for (const auto& e : all) EXPECT_EQ(e.value.size(), v.size());
    s.erase([&] {
        std::vector<std::string> k;
        for (const auto& e : all) k.push_back(e.key);
        return k;
    }());
}

TEST_F(OneDown, EveryCallStillSucceedsOnAnotherMember) {
    // The dead member is listed first: each call starts there and moves on.
    EtcdStore s(eps_);
    const std::string p = prefix("one_down");
    s.put({{p + "a", "1"}, {p + "b", "2"}});
    EXPECT_EQ(s.get(p + "a")->value, "1");
    EXPECT_EQ(s.range(p).size(), 2u);
    EXPECT_EQ(s.summarize(p).count, 2);
    EXPECT_GT(s.put_if(p + "c", "3", 0, 0, nullptr), 0);
    EXPECT_TRUE(s.erase_if(p + "c", "3"));
    const int64_t lease = s.grant(10);
    EXPECT_GT(s.keepalive(lease), 0);
    s.revoke(lease);
    s.erase({p + "a", p + "b"});
    EXPECT_TRUE(s.range(p).empty());
    const auto h = s.health();
    ASSERT_EQ(h.size(), eps_.size());
    EXPECT_EQ(h[0].state, "down") << h[0].url;
    for (std::size_t i = 1; i < h.size(); ++i) EXPECT_EQ(h[i].state, "up") << h[i].url;
}

TEST_F(NoQuorum, ChangesFailAsUnavailableWithTheStoreReached) {
    EtcdStore s(eps_, 1500);
    const auto t0 = std::chrono::steady_clock::now();
    try {
        s.put(prefix("no_quorum") + "k", "v");
        FAIL() << "a put without quorum succeeded";
    } catch (const StoreUnavailable& e) {
        EXPECT_TRUE(e.reachable()) << "the third member answers, it has no quorum: " << e.what();
        EXPECT_NE(std::string(e.what()).find("cluster store unavailable"), std::string::npos) << e.what();
    }
    // One round over three endpoints, each bounded by its deadline.
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3 * 2 + 2));
    EXPECT_THROW((void)s.get(prefix("no_quorum") + "k"), StoreUnavailable) << "a linearizable read needs quorum too";
    EXPECT_THROW((void)s.grant(5), StoreUnavailable);
    const auto h = s.health();
    ASSERT_EQ(h.size(), eps_.size());
    EXPECT_EQ(h[0].state, "down") << h[0].url;
    EXPECT_EQ(h[1].state, "down") << h[1].url;
    EXPECT_EQ(h[2].state, "no quorum") << h[2].url;
}

}  // namespace
