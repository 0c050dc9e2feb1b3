// The counter table (controlplane/counter_table.hpp): every row lands in the stats JSON with a
// number and in the Prometheus text under its family and type; every key the control services report
// is a row; workers add up exactly. No EAL: worker snapshots are made by hand here (the EAL suite
// sums two real Dataplanes).
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <stdlib.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "controlplane/auto_mapping.hpp"
#include "controlplane/config.hpp"
#include "controlplane/counter_table.hpp"
#include "controlplane/metrics.hpp"
#include "controlplane/portmap_table.hpp"
#include "controlplane/resolution.hpp"
#include "controlplane/roce_translations.hpp"
#include "dataplane/drop_reason.hpp"
#include "dataplane/resolve_cache.hpp"
#include "tests/support/alpha_config.hpp"

namespace fedgate {
namespace {

using json = nlohmann::ordered_json;

// A worker snapshot whose every value is distinct: row r, slot k holds base + r * 1000 + k.
CounterSnapshot fake_worker(std::size_t ports, uint64_t base, bool resolver = true) {
    const auto rows = counter_table();
    CounterSnapshot s;
    s.ports = ports;
    s.resolver = resolver;
    s.values.resize(rows.size());
    for (std::size_t r = 0; r < rows.size(); ++r) {
        s.values[r].resize(row_width(rows[r], ports));
        for (std::size_t k = 0; k < s.values[r].size(); ++k) s.values[r][k] = base + r * 1000 + k;
    }
    return s;
}

GatewayReadings fake_gateway() {
    GatewayReadings g;
    g.devices = {{11, 12, 13, 14, 15, 16, 17, 18}, {21, 22, 23, 24, 25, 26, 27, 28}};
    g.imports = 31, g.exports = 32, g.unmatched_echo_replies = 33, g.max_sessions = 34;
    return g;
}

// The control threads' real stats JSON (ResolutionService with automatic mappings and RoCE on), so a
// key one of them adds without a row fails the walk below.
class CounterTableTest : public ::testing::Test {
protected:
    void SetUp() override {
        char tmpl[] = "/tmp/fedgate-ctr-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        cfg_ = parse_config(test::kAlphaConfig, "ctr.toml");
        table_ = std::make_unique<PortMapTable>(cfg_, view_, nullptr, dir_ + "/mappings.json");
        table_->load(nullptr);
        autos_ = std::make_unique<AutoMappings>(cfg_, *table_);
        DpPortConfig in, ex;
        in.port_id = 0, in.role = PortRole::internal, in.addr = htonl(0xC6120101), in.prefix_len = 24;
        ex.port_id = 1, ex.role = PortRole::external, ex.addr = htonl(0xC6130001), ex.prefix_len = 24;
        roce_ = std::make_unique<RoceTranslations>(4, std::vector<DpPortConfig>{in, ex}, [] {});
        resolution_ = std::make_unique<ResolutionService>(cfg_, cache_, [](uint32_t, uint16_t, std::span<const uint8_t>) {},
                                                          [] {});
        resolution_->set_auto_mappings(autos_.get());
        resolution_->set_roce(roce_.get(), 1024);
    }
    void TearDown() override {
        resolution_.reset();
        std::filesystem::remove_all(dir_);
    }

    // A stats reply as Commands::stats() makes it, from `workers` (already summed).
    json stats(const CounterSnapshot& workers) const {
        json j = {{"ports", json::array({{{"name", "inside"}}, {{"name", "outside"}}})}};
        write_counters(j, Reply::stats, workers, fake_gateway(), {{"resolution", resolution_->stats()}});
        return j;
    }
    json status(const CounterSnapshot& workers) const {
        json j = {{"party", "alpha"}, {"ports", json::array({{{"name", "inside"}}, {{"name", "outside"}}})}};
        write_counters(j, Reply::status, workers, fake_gateway());
        return j;
    }

    std::string dir_;
    Config cfg_;
    PortMapView view_;
    ResolveCache cache_{64};
    std::unique_ptr<PortMapTable> table_;
    std::unique_ptr<AutoMappings> autos_;
    std::unique_ptr<RoceTranslations> roce_;
    std::unique_ptr<ResolutionService> resolution_;
};

const json& member(const json& o, std::string_view key) {
    static const json missing;
    if (!o.is_object()) return missing;
    const auto it = o.find(key);
    return it == o.end() ? missing : *it;
}

const json& at_path(const json& from, std::string_view section) {
    const json* o = &from;
    while (!section.empty()) {
        const std::size_t slash = section.find('/');
        o = &member(*o, section.substr(0, slash));
        section = slash == std::string_view::npos ? std::string_view{} : section.substr(slash + 1);
    }
    return *o;
}

// The entries a row lives in: the reply itself, each port's entry or each peer's.
std::vector<const json*> holders(const CounterDesc& d, const json& reply) {
    std::vector<const json*> out;
    if (d.scope == Scope::gateway) {
        out.push_back(&reply);
    } else {
        const json& list = d.scope == Scope::port ? member(reply, "ports") : at_path(reply, "resolution/exchange/peers");
        for (const json& e : list) out.push_back(&e);
    }
    return out;
}

std::string where(const CounterDesc& d) {
    return std::string(d.reply == Reply::stats ? "stats " : "status ") +
           (d.scope == Scope::port ? "ports[]/" : d.scope == Scope::peer ? "peers[]/" : "") + std::string(d.section) +
           (d.section.empty() ? "" : "/") + std::string(d.key);
}

TEST_F(CounterTableTest, EveryRowIsInItsReplyWithANumber) {
    const json st = stats(fake_worker(2, 1)), su = status(fake_worker(2, 1));
    ASSERT_EQ(at_path(st, "resolution/exchange/peers").size(), 1u);  // so the peer rows are walked
    for (const CounterDesc& d : counter_table()) {
        const json& reply = d.reply == Reply::stats ? st : su;
        const auto hs = holders(d, reply);
        ASSERT_FALSE(hs.empty()) << where(d);
        for (const json* h : hs) {
            const json& v = member(at_path(*h, d.section), d.key);
            if (d.dim == Dim::none) {
                EXPECT_TRUE(v.is_number_unsigned()) << where(d) << " is " << v.dump();
                continue;
            }
            ASSERT_TRUE(v.is_object()) << where(d) << " is " << v.dump();
            for (const auto& [k, x] : v.items()) EXPECT_TRUE(x.is_number_unsigned()) << where(d) << "/" << k;
            if (d.dim == Dim::drop_reason) {
                EXPECT_EQ(v.size(), kDropReasonCount) << where(d);  // no value is 0 here
            }
        }
    }
}

// The other way: every number in the data-plane sections, the control services' sections and the
// port entries is a row (labels like a port's "name" and a peer's "party" aside).
TEST_F(CounterTableTest, EveryNumberInTheRepliesIsARow) {
    std::set<std::string> rows;
    for (const CounterDesc& d : counter_table()) rows.insert(where(d));
    std::vector<std::string> missing;
    const auto walk = [&](auto&& self, const json& o, const std::string& prefix, const std::string& path) -> void {
        for (const auto& [k, v] : o.items()) {
            const std::string p = path.empty() ? k : path + "/" + k;
            if (v.is_number()) {
                if (rows.count(prefix + p) == 0) missing.push_back(prefix + p);
            } else if (v.is_object()) {
                if (rows.count(prefix + p) != 0) continue;  // a Dim row: an object of numbers
                self(self, v, prefix, p);
            } else if (v.is_array() && p == "resolution/exchange/peers") {
                for (const json& e : v) self(self, e, "stats peers[]/", "");
            }
        }
    };
    const json st = stats(fake_worker(2, 1));
    for (const auto& [k, v] : st.items()) {
        if (k == "ports") {
            for (const json& p : v) walk(walk, p, "stats ports[]/", "");
        } else if (v.is_object()) {
            walk(walk, json{{k, v}}, "stats ", "");
        } else {
            missing.push_back("stats " + k);
        }
    }
    EXPECT_TRUE(missing.empty()) << "not in the counter table: " << ::testing::PrintToString(missing);
}

TEST_F(CounterTableTest, ResolveRowsOnlyWhileAWorkerRunsTheResolver) {
    EXPECT_TRUE(stats(fake_worker(2, 1, true))["resolution"].contains("resolve"));
    const json off = stats(fake_worker(2, 1, false));
    EXPECT_FALSE(off["resolution"].contains("resolve"));
    EXPECT_TRUE(off["resolution"].contains("directory"));  // the control threads' sections stay
}

TEST_F(CounterTableTest, RepliesKeepTheirSectionOrder) {
    const json st = stats(fake_worker(2, 1));
    std::vector<std::string> keys;
    for (const auto& [k, v] : st.items()) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"ports", "drops_by_reason", "arp", "icmp", "neighbour", "loop", "nat", "maps",
                                              "cluster", "control", "resolution"}));
    keys.clear();
    for (const auto& [k, v] : st["resolution"].items()) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"directory", "cache", "exchange", "handshakes", "auto_mappings", "roce",
                                              "resolve"}));
}

// Each family appears in the text with its TYPE, and a sample for each row, in the row's labels.
TEST_F(CounterTableTest, EveryFamilyIsInThePrometheusTextWithItsType) {
    const json st = stats(fake_worker(2, 1)), su = status(fake_worker(2, 1));
    const std::string text = render_prometheus(st, su);
    for (const CounterDesc& d : counter_table()) {
        const std::string f = exposed_family(d);
        if (f.empty()) continue;
        const std::string type = d.type == MetricType::counter ? "counter" : "gauge";
        EXPECT_NE(text.find("\n# TYPE " + f + " " + type + "\n"), std::string::npos) << f;
        std::string labels;
        if (d.scope == Scope::port) labels += "port=\"inside\"";
        if (d.scope == Scope::peer) labels += "peer=\"beta\"";
        for (const Label& l : d.labels)
            if (!l.name.empty()) labels += (labels.empty() ? "" : ",") + std::string(l.name) + "=\"" + std::string(l.value) + "\"";
        if (d.dim == Dim::drop_reason) labels += (labels.empty() ? "" : ",") + std::string("reason=\"") + std::string(kDropReasonNames[0]) + "\"";
        if (d.dim == Dim::keys) labels += (labels.empty() ? "" : ",") + std::string(d.dim_label) + "=\"";
        const std::string sample = "\n" + f + (labels.empty() ? " " : "{" + labels);
        EXPECT_NE(text.find(sample), std::string::npos) << "no sample " << sample.substr(1) << " for " << where(d);
    }
}

TEST(CounterTable, RowsOfOneFamilyAgreeAndNoTwoRowsShareAPlace) {
    static const std::regex name("^fedgate_[a-z0-9_]+$");
    std::map<std::string, const CounterDesc*> families;
    std::set<std::string> places, samples;
    for (const CounterDesc& d : counter_table()) {
        EXPECT_TRUE(places.insert(where(d)).second) << where(d) << " twice";
        EXPECT_FALSE(d.key.empty());
        EXPECT_FALSE(d.help.empty()) << where(d);
        EXPECT_EQ(d.source == Source::worker, d.worker != nullptr) << where(d);
        EXPECT_EQ(d.source == Source::gateway, d.gateway != nullptr) << where(d);
        if (d.family.empty()) continue;
        EXPECT_TRUE(std::regex_match(std::string(d.family), name)) << d.family;
        EXPECT_FALSE(d.family.ends_with("_total")) << d.family << ": the renderer adds _total to counters";
        const auto [it, fresh] = families.emplace(std::string(d.family), &d);
        if (!fresh) {
            EXPECT_EQ(it->second->type, d.type) << d.family;
            EXPECT_EQ(it->second->help, d.help) << d.family;
            EXPECT_EQ(it->second->scope, d.scope) << d.family;
        }
        std::string sample = std::string(d.family);
        for (const Label& l : d.labels) sample += "," + std::string(l.name) + "=" + std::string(l.value);
        EXPECT_TRUE(samples.insert(sample).second) << sample << ": two rows would make the same sample";
    }
    EXPECT_GT(families.size(), 90u);
}

TEST(CounterTable, WorkersAddUpExactlyAndOnceRowsAreTheFirstWorkers) {
    const CounterSnapshot a = fake_worker(2, 1), b = fake_worker(2, 500'000'000);
    CounterSnapshot sum;
    add_worker(sum, a, true);
    add_worker(sum, b, false);
    const auto rows = counter_table();
    std::size_t once = 0;
    for (std::size_t r = 0; r < rows.size(); ++r) {
        ASSERT_EQ(sum.values[r].size(), row_width(rows[r], 2));
        for (std::size_t k = 0; k < sum.values[r].size(); ++k) {
            const uint64_t want = rows[r].combine == Combine::once ? a.values[r][k] : a.values[r][k] + b.values[r][k];
            EXPECT_EQ(sum.values[r][k], want) << where(rows[r]) << " slot " << k;
        }
        once += rows[r].combine == Combine::once;
    }
    EXPECT_EQ(once, 2u);  // neighbour entries, gateway-wide and per port
    // A worker with other ports cannot be added.
    EXPECT_THROW(add_worker(sum, fake_worker(3, 1), false), std::invalid_argument);
}

TEST(CounterTable, ASnapshotReadsByPortAndReason) {
    const auto rows = counter_table();
    std::size_t drops = rows.size();
    for (std::size_t r = 0; r < rows.size(); ++r)
        if (rows[r].scope == Scope::port && rows[r].dim == Dim::drop_reason) drops = r;
    ASSERT_LT(drops, rows.size());
    const CounterSnapshot s = fake_worker(2, 1);
    EXPECT_EQ(s.at(drops, 1, 3), 1 + drops * 1000 + kDropReasonCount + 3);
    EXPECT_EQ(s.at(drops, 5, 0), 0u);  // no such port
}

}  // namespace
}  // namespace fedgate
