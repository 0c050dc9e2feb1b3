// The port-map table: config and run-time mappings published to the data plane's view, conflicts and
// bad fields refused with nothing changed, the state file written before a change is acknowledged,
// and a new table over the same state file and config coming back with the same mappings.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "controlplane/config.hpp"
#include "controlplane/mapping.hpp"
#include "controlplane/portmap_table.hpp"
#include "dataplane/portmap.hpp"

namespace {

using fedgate::ExportMapping;
using fedgate::ImportMapping;
using fedgate::L4Proto;
using fedgate::MapError;
using fedgate::PortMapView;
using fedgate::Proto;
using json = nlohmann::ordered_json;

// Two peers on the external subnet; one config import (tcp/8080 -> beta:9000, from 198.18.1.0/24
// only) and one config export (tcp/9000 -> 198.18.1.10:50051, for beta only).
const std::string kConfig = R"([gateway]
party = "alpha"
party_id = 1

[eal]
args = []

[[port]]
name = "inside"
role = "internal"
device = "net_tap0"
address = "198.18.1.1/24"

[[port]]
name = "outside"
role = "external"
device = "net_tap1"
address = "198.19.0.1/24"

[[peer]]
party = "beta"
party_id = 2
address = "198.19.0.2"
key = "00112233445566778899aabbccddeeff"

[[peer]]
party = "gamma"
party_id = 3
address = "198.19.0.3"
key = "ffeeddccbbaa99887766554433221100"

[[import]]
cluster = "c1"
proto = "tcp"
port = 8080
peer = "beta"
peer_port = 9000
allow = ["198.18.1.0/24"]

[[export]]
cluster = "c1"
proto = "tcp"
port = 9000
node = "198.18.1.10:50051"
allow_parties = ["beta"]
)";

constexpr uint32_t kBeta = 0xC6130002;   // 198.19.0.2
constexpr uint32_t kGamma = 0xC6130003;  // 198.19.0.3

ImportMapping import_of(const std::string& cluster, Proto proto, uint16_t port, const std::string& peer,
                        uint16_t peer_port, std::vector<std::string> allow = {}) {
    ImportMapping m;
    m.cluster = cluster;
    m.proto = proto;
    m.port = port;
    m.peer = peer;
    m.peer_port = peer_port;
    for (const std::string& a : allow) m.allow.push_back(*fedgate::parse_cidr(a));
    return m;
}

ExportMapping export_of(const std::string& cluster, Proto proto, uint16_t port, const std::string& node,
                        std::vector<std::string> allow_parties = {}) {
    ExportMapping m;
    m.cluster = cluster;
    m.proto = proto;
    m.port = port;
    const auto ep = fedgate::parse_endpoint(node);
    m.node = ep->first;
    m.node_port = ep->second;
    m.allow_parties = std::move(allow_parties);
    return m;
}

std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// Runs `f`, which must throw MapError naming `field`; returns what() ("" when it did not).
template <typename F>
std::string map_error(F&& f, const std::string& field) {
    try {
        f();
    } catch (const MapError& e) {
        EXPECT_EQ(e.field(), field) << e.what();
        return e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "threw something other than MapError: " << e.what();
        return "";
    }
    ADD_FAILURE() << "did not throw (wanted MapError on '" << field << "')";
    return "";
}

class PortMapTableTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::string tmpl = (std::filesystem::temp_directory_path() / "fedgate-portmap-test-XXXXXX").string();
        ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
        dir_ = tmpl;
        state_ = dir_ + "/mappings.json";
    }
    void TearDown() override {
        table_.reset();
        std::filesystem::remove_all(dir_);
    }

    // A fresh view and table over `state_file` (state_ when empty), loaded; its warnings in warnings_.
    fedgate::PortMapTable& open(const std::string& state_file = "") {
        table_.reset();
        view_ = std::make_unique<PortMapView>();
        table_ = std::make_unique<fedgate::PortMapTable>(cfg_, *view_, nullptr, state_file.empty() ? state_ : state_file);
        warnings_.clear();
        table_->load(&warnings_);
        return *table_;
    }

    const fedgate::ImportRule* import_at(Proto p, uint16_t port) const {
        return view_->import_rule(p == Proto::tcp ? L4Proto::tcp : L4Proto::udp, htons(port));
    }
    const fedgate::ExportRule* export_at(Proto p, uint16_t port) const {
        return view_->export_rule(p == Proto::tcp ? L4Proto::tcp : L4Proto::udp, htons(port));
    }

    json state() const { return json::parse(slurp(state_)); }

    // Every import and export slot that is set, as "import tcp/8080" etc., to show nothing else moved.
    std::vector<std::string> published() const {
        std::vector<std::string> out;
        for (Proto p : {Proto::tcp, Proto::udp})
            for (uint32_t port = 1; port <= 65535; ++port) {
                if (import_at(p, static_cast<uint16_t>(port)) != nullptr)
                    out.push_back(fedgate::mapping_key("import", p, static_cast<uint16_t>(port)));
                if (export_at(p, static_cast<uint16_t>(port)) != nullptr)
                    out.push_back(fedgate::mapping_key("export", p, static_cast<uint16_t>(port)));
            }
        return out;
    }

    const fedgate::Config cfg_ = fedgate::parse_config(kConfig, "test.toml");
    std::string dir_, state_;
    std::unique_ptr<PortMapView> view_;
    std::unique_ptr<fedgate::PortMapTable> table_;
    std::vector<std::string> warnings_;
};

const json kConfigImportJson = json::parse(R"({"kind": "import", "cluster": "c1", "proto": "tcp", "port": 8080,
    "peer": "beta", "peer_id": 2, "peer_port": 9000, "allow": ["198.18.1.0/24"], "source": "config"})");
const json kConfigExportJson = json::parse(R"({"kind": "export", "cluster": "c1", "proto": "tcp", "port": 9000,
    "node": "198.18.1.10:50051", "allow_parties": ["beta"], "source": "config"})");

// ---- loading ----

TEST_F(PortMapTableTest, LoadPublishesConfigMappings) {
    fedgate::PortMapTable& t = open();
    EXPECT_TRUE(warnings_.empty());

    const fedgate::ImportRule* i = import_at(Proto::tcp, 8080);
    ASSERT_NE(i, nullptr);
    EXPECT_EQ(i->peer_addr, htonl(kBeta));
    EXPECT_EQ(i->peer_port, htons(9000));
    EXPECT_EQ(i->peer_id, 2);
    ASSERT_EQ(i->n_allow, 1);
    EXPECT_EQ(i->allow[0].net, htonl(0xC6120100u));
    EXPECT_EQ(i->allow[0].mask, htonl(0xFFFFFF00u));
    EXPECT_TRUE(i->allows(htonl(0xC6120105u)));   // 198.18.1.5
    EXPECT_FALSE(i->allows(htonl(0xC6120205u)));  // 198.18.2.5

    const fedgate::ExportRule* e = export_at(Proto::tcp, 9000);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->node_addr, htonl(0xC612010Au));  // 198.18.1.10
    EXPECT_EQ(e->node_port, htons(50051));
    ASSERT_EQ(e->n_peers, 1);
    EXPECT_EQ(e->peer_addrs[0], htonl(kBeta));
    EXPECT_TRUE(e->allows(htonl(kBeta)));
    EXPECT_FALSE(e->allows(htonl(kGamma)));

    EXPECT_EQ(published(), (std::vector<std::string>{"import tcp/8080", "export tcp/9000"}));
    EXPECT_EQ(t.import_count(), 1u);
    EXPECT_EQ(t.export_count(), 1u);
    EXPECT_EQ(t.list(std::nullopt), (json{{"imports", json::array({kConfigImportJson})},
                                          {"exports", json::array({kConfigExportJson})}}));
}

// ---- adding at run time ----

TEST_F(PortMapTableTest, AddImportIsPublishedListedAndOnDiskWhenAddReturns) {
    fedgate::PortMapTable& t = open();
    const json got = t.add(import_of("c2", Proto::udp, 7000, "gamma", 7001, {"198.18.1.0/25", "10.0.0.0/8"}));

    const json want = json::parse(R"({"kind": "import", "cluster": "c2", "proto": "udp", "port": 7000, "peer": "gamma",
        "peer_id": 3, "peer_port": 7001, "allow": ["198.18.1.0/25", "10.0.0.0/8"], "source": "cli"})");
    EXPECT_EQ(got, want);
    const json on_disk = state();
    EXPECT_EQ(on_disk, (json{{"version", 1}, {"added", json::array({want})}, {"deleted", json::array()}}));
    EXPECT_FALSE(std::filesystem::exists(state_ + ".tmp"));

    const fedgate::ImportRule* i = import_at(Proto::udp, 7000);
    ASSERT_NE(i, nullptr);
    EXPECT_EQ(i->peer_addr, htonl(kGamma));
    EXPECT_EQ(i->peer_port, htons(7001));
    EXPECT_EQ(i->peer_id, 3);
    ASSERT_EQ(i->n_allow, 2);
    EXPECT_EQ(i->allow[1].net, htonl(0x0A000000u));
    EXPECT_EQ(i->allow[1].mask, htonl(0xFF000000u));
    EXPECT_TRUE(i->allows(htonl(0x0A090909u)));
    EXPECT_FALSE(i->allows(htonl(0xC6120181u)));  // 198.18.1.129: outside the /25
    EXPECT_EQ(import_at(Proto::tcp, 7000), nullptr);

    EXPECT_EQ(t.list(std::nullopt)["imports"], json::array({kConfigImportJson, want}));
    EXPECT_EQ(t.import_count(), 2u);
}

TEST_F(PortMapTableTest, AddExportIsPublishedListedAndOnDiskWhenAddReturns) {
    fedgate::PortMapTable& t = open();
    const json got = t.add(export_of("c2", Proto::tcp, 9001, "198.18.1.20:443"));

    const json want = json::parse(R"({"kind": "export", "cluster": "c2", "proto": "tcp", "port": 9001,
        "node": "198.18.1.20:443", "allow_parties": [], "source": "cli"})");
    EXPECT_EQ(got, want);
    EXPECT_EQ(state(), (json{{"version", 1}, {"added", json::array({want})}, {"deleted", json::array()}}));

    // No allow_parties: every configured peer may reach it.
    const fedgate::ExportRule* e = export_at(Proto::tcp, 9001);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->node_addr, htonl(0xC6120114u));
    EXPECT_EQ(e->node_port, htons(443));
    ASSERT_EQ(e->n_peers, 2);
    EXPECT_EQ(e->peer_addrs[0], htonl(kBeta));
    EXPECT_EQ(e->peer_addrs[1], htonl(kGamma));
    EXPECT_EQ(import_at(Proto::tcp, 9001), nullptr);

    EXPECT_EQ(t.list(std::nullopt)["exports"], json::array({kConfigExportJson, want}));
    EXPECT_EQ(t.export_count(), 2u);
}

TEST_F(PortMapTableTest, FreePortSearchesFromTheHintToTheTopThenWrapsToTheBottom) {
    fedgate::PortMapTable& t = open();
    // Export tcp 9000 is the config's; hold 9001..9003 and 9005 too: 9004 and 9006.. are free.
    for (uint16_t p : {9001, 9002, 9003, 9005}) t.add(export_of("c2", Proto::tcp, p, "198.18.1.20:443"));
    EXPECT_EQ(t.free_port("export", Proto::tcp, 9000, 9006, 9000), 9004);
    EXPECT_EQ(t.free_port("export", Proto::tcp, 9000, 9006, 9005), 9006);
    EXPECT_EQ(t.free_port("export", Proto::tcp, 9000, 9005, 9005), 9004) << "past the top: from the bottom";
    EXPECT_EQ(t.free_port("export", Proto::tcp, 9000, 9003, 9002), std::nullopt) << "all held";
    EXPECT_EQ(t.free_port("export", Proto::tcp, 9000, 9003, 1), std::nullopt) << "a hint outside the range";
    EXPECT_EQ(t.free_port("export", Proto::udp, 9000, 9003, 9002), 9002) << "udp holds none of them";
    EXPECT_EQ(t.free_port("import", Proto::tcp, 9000, 9003, 9001), 9001) << "nor do imports";
    EXPECT_EQ(t.free_port("export", Proto::tcp, 9006, 9000, 9006), std::nullopt) << "an empty range";
}

TEST_F(PortMapTableTest, ImportAndExportMayShareAProtoAndPort) {
    fedgate::PortMapTable& t = open();
    t.add(export_of("c2", Proto::tcp, 8080, "198.18.1.20:80", {"gamma"}));
    t.add(import_of("c2", Proto::tcp, 9000, "gamma", 9000));
    t.add(import_of("c2", Proto::udp, 8080, "gamma", 8080));
    EXPECT_EQ(published(), (std::vector<std::string>{"import tcp/8080", "export tcp/8080", "import tcp/9000",
                                                     "export tcp/9000", "import udp/8080"}));
}

// Session-port allocation skips mapped ports, so a mapping may use a port inside [nat] port_range.
TEST_F(PortMapTableTest, PortsInsideTheNatRangeMayBeMapped) {
    fedgate::PortMapTable& t = open();
    t.add(import_of("c2", Proto::tcp, 50051, "beta", 50051));
    t.add(export_of("c2", Proto::tcp, 20000, "198.18.1.20:50051"));
    EXPECT_NE(import_at(Proto::tcp, 50051), nullptr);
    EXPECT_NE(export_at(Proto::tcp, 20000), nullptr);
    EXPECT_EQ(state()["added"].size(), 2u);
}

// ---- refusals change nothing ----

TEST_F(PortMapTableTest, ConflictingAddsAreRefusedOnPortAndChangeNothing) {
    fedgate::PortMapTable& t = open();
    t.add(import_of("c2", Proto::udp, 7000, "gamma", 7001));
    t.add(export_of("c2", Proto::udp, 7000, "198.18.1.20:53"));
    const std::string bytes = slurp(state_);
    const json listed = t.list(std::nullopt);
    const auto views = published();
    const fedgate::ImportRule* cfg_import = import_at(Proto::tcp, 8080);
    const fedgate::ImportRule* cli_import = import_at(Proto::udp, 7000);
    const fedgate::ExportRule* cfg_export = export_at(Proto::tcp, 9000);
    const fedgate::ExportRule* cli_export = export_at(Proto::udp, 7000);

    EXPECT_EQ(map_error([&] { t.add(import_of("c3", Proto::tcp, 8080, "gamma", 1)); }, "port"),
              "port: import tcp/8080 is already mapped (cluster c1)");
    EXPECT_EQ(map_error([&] { t.add(import_of("c3", Proto::udp, 7000, "beta", 2)); }, "port"),
              "port: import udp/7000 is already mapped (cluster c2)");
    EXPECT_EQ(map_error([&] { t.add(export_of("c3", Proto::tcp, 9000, "198.18.1.30:1")); }, "port"),
              "port: export tcp/9000 is already mapped (cluster c1)");
    EXPECT_EQ(map_error([&] { t.add(export_of("c3", Proto::udp, 7000, "198.18.1.30:1")); }, "port"),
              "port: export udp/7000 is already mapped (cluster c2)");

    EXPECT_EQ(slurp(state_), bytes);
    EXPECT_EQ(t.list(std::nullopt), listed);
    EXPECT_EQ(published(), views);
    EXPECT_EQ(import_at(Proto::tcp, 8080), cfg_import);
    EXPECT_EQ(import_at(Proto::udp, 7000), cli_import);
    EXPECT_EQ(export_at(Proto::tcp, 9000), cfg_export);
    EXPECT_EQ(export_at(Proto::udp, 7000), cli_export);
    EXPECT_EQ(import_at(Proto::udp, 7000)->peer_addr, htonl(kGamma));
    EXPECT_EQ(export_at(Proto::udp, 7000)->node_addr, htonl(0xC6120114u));
}

TEST_F(PortMapTableTest, BadFieldsAreRefusedByNameAndChangeNothing) {
    fedgate::PortMapTable& t = open();
    const json listed = t.list(std::nullopt);
    const auto views = published();

    EXPECT_EQ(map_error([&] { t.add(import_of("c2", Proto::tcp, 7000, "delta", 7001)); }, "peer"),
              "peer: 'delta' is not a configured peer party");
    EXPECT_EQ(map_error([&] { t.add(import_of("c2", Proto::tcp, 0, "beta", 7001)); }, "port"), "port: must be 1..65535");
    EXPECT_EQ(map_error([&] { t.add(import_of("bad cluster", Proto::tcp, 7000, "beta", 7001)); }, "cluster"),
              "cluster: 'bad cluster' must be 1-32 letters, digits, '-' or '_'");
    EXPECT_EQ(map_error([&] { t.add(import_of("c2", Proto::tcp, 7000, "beta", 0)); }, "peer_port"),
              "peer_port: must be 1..65535");
    EXPECT_EQ(map_error([&] { t.add(export_of("c2", Proto::tcp, 7000, "198.18.2.10:80")); }, "node"),
              "node: 198.18.2.10 is not a node address on an internal port's subnet");
    EXPECT_EQ(map_error([&] { t.add(export_of("c2", Proto::tcp, 7000, "198.18.1.1:80")); }, "node"),
              "node: 198.18.1.1 is not a node address on an internal port's subnet");
    EXPECT_EQ(map_error([&] { t.add(export_of("c2", Proto::tcp, 7000, "198.19.0.2:80")); }, "node"),
              "node: 198.19.0.2 is not a node address on an internal port's subnet");
    EXPECT_EQ(map_error([&] { t.add(export_of("c2", Proto::tcp, 0, "198.18.1.10:80")); }, "port"), "port: must be 1..65535");
    EXPECT_EQ(map_error([&] { t.add(export_of("c2", Proto::tcp, 7000, "198.18.1.10:80", {"beta", "delta"})); },
                        "allow_parties"),
              "allow_parties: 'delta' is not a configured peer party");

    std::vector<std::string> nine(9, "10.0.0.0/8");
    EXPECT_EQ(map_error([&] { t.add(import_of("c2", Proto::tcp, 7000, "beta", 7001, nine)); }, "allow"),
              "allow: at most 8 prefixes");

    EXPECT_FALSE(std::filesystem::exists(state_));
    EXPECT_EQ(t.list(std::nullopt), listed);
    EXPECT_EQ(published(), views);
}

// ---- removing ----

TEST_F(PortMapTableTest, RemoveByKeyUnpublishesAndUpdatesTheFile) {
    fedgate::PortMapTable& t = open();
    const json added = t.add(import_of("c2", Proto::udp, 7000, "gamma", 7001));
    t.add(export_of("c2", Proto::udp, 7000, "198.18.1.20:53"));
    ASSERT_NE(import_at(Proto::udp, 7000), nullptr);

    EXPECT_EQ(t.remove("import", Proto::udp, 7000), (json{{"deleted", json::array({added})}}));
    EXPECT_EQ(import_at(Proto::udp, 7000), nullptr);
    EXPECT_NE(export_at(Proto::udp, 7000), nullptr);  // the export on the same port stays
    EXPECT_EQ(t.list(std::nullopt)["imports"], json::array({kConfigImportJson}));
    const json on_disk = state();
    ASSERT_EQ(on_disk["added"].size(), 1u);
    EXPECT_EQ(on_disk["added"][0]["kind"], "export");
    EXPECT_EQ(on_disk["deleted"], json::array());
}

TEST_F(PortMapTableTest, RemovingWhatIsNotMappedIsRefused) {
    fedgate::PortMapTable& t = open();
    const auto views = published();
    EXPECT_EQ(map_error([&] { t.remove("import", Proto::tcp, 9000); }, "port"), "port: import tcp/9000 is not mapped");
    EXPECT_EQ(map_error([&] { t.remove("export", Proto::udp, 9000); }, "port"), "port: export udp/9000 is not mapped");
    EXPECT_EQ(map_error([&] { t.remove("both", Proto::tcp, 8080); }, "kind"), "kind: 'both' must be import or export");
    EXPECT_EQ(map_error([&] { t.remove_cluster("c9", std::nullopt); }, "cluster"), "cluster: 'c9' has no mappings");
    EXPECT_EQ(map_error([&] { t.remove_cluster("c1", std::string("sideways")); }, "kind"),
              "kind: 'sideways' must be import or export");
    EXPECT_EQ(published(), views);
    EXPECT_FALSE(std::filesystem::exists(state_));
}

TEST_F(PortMapTableTest, RemovedConfigMappingStaysRemovedInANewTable) {
    {
        fedgate::PortMapTable& t = open();
        EXPECT_EQ(t.remove("export", Proto::tcp, 9000), (json{{"deleted", json::array({kConfigExportJson})}}));
        EXPECT_EQ(export_at(Proto::tcp, 9000), nullptr);
        EXPECT_EQ(state(), (json{{"version", 1},
                                 {"added", json::array()},
                                 {"deleted", json::array({json{{"kind", "export"}, {"proto", "tcp"}, {"port", 9000}}})}}));
    }
    fedgate::PortMapTable& again = open();
    EXPECT_TRUE(warnings_.empty());
    EXPECT_EQ(export_at(Proto::tcp, 9000), nullptr);
    EXPECT_NE(import_at(Proto::tcp, 8080), nullptr);
    EXPECT_EQ(again.list(std::nullopt), (json{{"imports", json::array({kConfigImportJson})}, {"exports", json::array()}}));
}

TEST_F(PortMapTableTest, ConfigKeyRemovedThenReusedAtRunTimeComesBackAsTheRunTimeMapping) {
    {
        fedgate::PortMapTable& t = open();
        t.remove("import", Proto::tcp, 8080);
        t.add(import_of("c7", Proto::tcp, 8080, "gamma", 1234));
    }
    fedgate::PortMapTable& again = open();
    EXPECT_TRUE(warnings_.empty());
    const fedgate::ImportRule* i = import_at(Proto::tcp, 8080);
    ASSERT_NE(i, nullptr);
    EXPECT_EQ(i->peer_addr, htonl(kGamma));
    EXPECT_EQ(i->peer_port, htons(1234));
    ASSERT_EQ(again.list(std::nullopt)["imports"].size(), 1u);
    EXPECT_EQ(again.list(std::nullopt)["imports"][0]["cluster"], "c7");
    EXPECT_EQ(again.list(std::nullopt)["imports"][0]["source"], "cli");
}

// ---- restart loses no mapping ----

TEST_F(PortMapTableTest, RunTimeAdditionsComeBackInANewTable) {
    json before;
    {
        fedgate::PortMapTable& t = open();
        t.add(import_of("c2", Proto::udp, 7000, "gamma", 7001, {"198.18.1.128/25"}));
        t.add(export_of("c2", Proto::tcp, 9001, "198.18.1.20:443", {"gamma"}));
        t.add(export_of("c3", Proto::udp, 9001, "198.18.1.21:53"));
        before = t.list(std::nullopt);
    }
    fedgate::PortMapTable& again = open();
    EXPECT_TRUE(warnings_.empty());
    EXPECT_EQ(again.list(std::nullopt), before);
    EXPECT_EQ(published(), (std::vector<std::string>{"import tcp/8080", "export tcp/9000", "export tcp/9001",
                                                     "import udp/7000", "export udp/9001"}));
    const fedgate::ImportRule* i = import_at(Proto::udp, 7000);
    ASSERT_NE(i, nullptr);
    EXPECT_EQ(i->peer_addr, htonl(kGamma));
    EXPECT_EQ(i->peer_port, htons(7001));
    ASSERT_EQ(i->n_allow, 1);
    EXPECT_EQ(i->allow[0].net, htonl(0xC6120180u));
    EXPECT_EQ(i->allow[0].mask, htonl(0xFFFFFF80u));
    const fedgate::ExportRule* e = export_at(Proto::tcp, 9001);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->node_addr, htonl(0xC6120114u));
    EXPECT_EQ(e->node_port, htons(443));
    ASSERT_EQ(e->n_peers, 1);
    EXPECT_EQ(e->peer_addrs[0], htonl(kGamma));
    const fedgate::ExportRule* u = export_at(Proto::udp, 9001);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->n_peers, 2);
}

// ---- clusters ----

TEST_F(PortMapTableTest, RemoveClusterTakesExactlyThatClustersMappingsOfBothKinds) {
    fedgate::PortMapTable& t = open();
    const json i2 = t.add(import_of("c2", Proto::tcp, 7000, "beta", 7000));
    const json e2 = t.add(export_of("c2", Proto::udp, 7000, "198.18.1.20:53"));
    const json i3 = t.add(import_of("c3", Proto::udp, 7001, "gamma", 7001));

    EXPECT_EQ(t.remove_cluster("c2", std::nullopt), (json{{"deleted", json::array({i2, e2})}}));
    EXPECT_EQ(published(), (std::vector<std::string>{"import tcp/8080", "export tcp/9000", "import udp/7001"}));
    EXPECT_EQ(t.list(std::nullopt), (json{{"imports", json::array({kConfigImportJson, i3})},
                                          {"exports", json::array({kConfigExportJson})}}));
    EXPECT_EQ(state()["added"], json::array({i3}));
    EXPECT_EQ(state()["deleted"], json::array());
}

TEST_F(PortMapTableTest, RemoveClusterWithAKindTakesOnlyThatKind) {
    fedgate::PortMapTable& t = open();
    const json e1 = t.add(export_of("c1", Proto::udp, 7000, "198.18.1.20:53"));

    EXPECT_EQ(t.remove_cluster("c1", std::string("export")),
              (json{{"deleted", json::array({kConfigExportJson, e1})}}));
    EXPECT_EQ(published(), (std::vector<std::string>{"import tcp/8080"}));
    EXPECT_EQ(state(), (json{{"version", 1},
                             {"added", json::array()},
                             {"deleted", json::array({json{{"kind", "export"}, {"proto", "tcp"}, {"port", 9000}}})}}));

    EXPECT_EQ(t.remove_cluster("c1", std::string("import")), (json{{"deleted", json::array({kConfigImportJson})}}));
    EXPECT_TRUE(published().empty());
    EXPECT_EQ(map_error([&] { t.remove_cluster("c1", std::string("import")); }, "cluster"),
              "cluster: 'c1' has no mappings of kind import");
}

TEST_F(PortMapTableTest, ListFiltersByCluster) {
    fedgate::PortMapTable& t = open();
    const json i2 = t.add(import_of("c2", Proto::tcp, 7000, "beta", 7000));
    const json e2 = t.add(export_of("c2", Proto::udp, 7000, "198.18.1.20:53"));
    EXPECT_EQ(t.list(std::string("c2")), (json{{"imports", json::array({i2})}, {"exports", json::array({e2})}}));
    EXPECT_EQ(t.list(std::string("c1")), (json{{"imports", json::array({kConfigImportJson})},
                                               {"exports", json::array({kConfigExportJson})}}));
    EXPECT_EQ(t.list(std::string("c9")), (json{{"imports", json::array()}, {"exports", json::array()}}));
}

// ---- reload ----

// kConfig with `from` replaced by `to` (each must occur), parsed as the reloaded file.
std::shared_ptr<const fedgate::Config> edited(const std::string& from, const std::string& to) {
    std::string text = kConfig;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return std::make_shared<const fedgate::Config>(fedgate::parse_config(text, "test.toml"));
}

TEST_F(PortMapTableTest, ReloadReplacesConfigMappingsAndKeepsRunTimeAndAutomaticOnes) {
    fedgate::PortMapTable& t = open();
    const json cli = t.add(import_of("c2", Proto::udp, 7000, "gamma", 7001));
    t.add_automatic(export_of("auto", Proto::tcp, 61000, "198.18.1.30:4000"));
    const std::string state_before = slurp(state_);
    std::vector<std::string> dropped;
    t.reload(edited("port = 8080", "port = 8081"), &dropped);
    EXPECT_TRUE(dropped.empty());
    EXPECT_EQ(published(), (std::vector<std::string>{"import tcp/8081", "export tcp/9000", "export tcp/61000",
                                                     "import udp/7000"}));
    EXPECT_EQ(t.list(std::string("c2")), (json{{"imports", json::array({cli})}, {"exports", json::array()}}));
    EXPECT_EQ(slurp(state_), state_before);  // nothing run-time changed: the state file is untouched
}

TEST_F(PortMapTableTest, ReloadKeepsConfigMappingsDeletedAtRunTimeDeleted) {
    fedgate::PortMapTable& t = open();
    t.remove("export", Proto::tcp, 9000);
    std::vector<std::string> dropped;
    t.reload(edited("port = 8080", "port = 8081"), &dropped);
    EXPECT_EQ(published(), (std::vector<std::string>{"import tcp/8081"}));
}

TEST_F(PortMapTableTest, ReloadDropsRunTimeAndAutomaticMappingsOfARemovedPeerAndSaysSo) {
    fedgate::PortMapTable& t = open();
    t.add(import_of("c2", Proto::udp, 7000, "gamma", 7001));
    t.add(export_of("c2", Proto::tcp, 9100, "198.18.1.40:80", {"gamma"}));
    t.add(import_of("c2", Proto::udp, 7002, "beta", 7003));
    t.add_automatic(import_of("auto", Proto::tcp, 61001, "gamma", 61500));
    std::vector<std::string> dropped;
    t.reload(edited(R"([[peer]]
party = "gamma"
party_id = 3
address = "198.19.0.3"
key = "ffeeddccbbaa99887766554433221100"
)", ""), &dropped);
    EXPECT_EQ(dropped, (std::vector<std::string>{
                           "cli mapping import udp/7000 dropped: peer: 'gamma' is not a configured peer party",
                           "auto mapping import tcp/61001 dropped: peer: 'gamma' is not a configured peer party",
                           "cli mapping export tcp/9100 dropped: allow_parties: 'gamma' is not a configured peer party"}));
    EXPECT_EQ(published(), (std::vector<std::string>{"import tcp/8080", "export tcp/9000", "import udp/7002"}));
    // The state file lost them too, and later checks read the new config.
    ASSERT_EQ(state()["added"].size(), 1u);
    EXPECT_EQ(state()["added"][0]["port"], 7002);
    EXPECT_EQ(map_error([&] { t.add(import_of("c3", Proto::udp, 7010, "gamma", 1)); }, "peer"),
              "peer: 'gamma' is not a configured peer party");
}

TEST_F(PortMapTableTest, ReloadRepublishesRulesWithAPeersNewAddress) {
    fedgate::PortMapTable& t = open();
    ASSERT_NE(import_at(Proto::tcp, 8080), nullptr);
    EXPECT_EQ(import_at(Proto::tcp, 8080)->peer_addr, htonl(kBeta));
    t.reload(edited("address = \"198.19.0.2\"", "address = \"198.19.0.12\""), nullptr);
    EXPECT_EQ(import_at(Proto::tcp, 8080)->peer_addr, htonl(0xC613000C));
    EXPECT_EQ(export_at(Proto::tcp, 9000)->peer_addrs[0], htonl(0xC613000C));
}

TEST_F(PortMapTableTest, ReloadGivesTheConfigsPortToTheConfigAndDropsTheRunTimeMapping) {
    fedgate::PortMapTable& t = open();
    t.add(import_of("c2", Proto::udp, 7000, "gamma", 7001));
    std::vector<std::string> dropped;
    t.reload(edited("proto = \"tcp\"\nport = 8080", "proto = \"udp\"\nport = 7000"), &dropped);
    EXPECT_EQ(dropped, (std::vector<std::string>{"cli mapping import udp/7000 dropped: the config maps that port now"}));
    EXPECT_EQ(import_at(Proto::udp, 7000)->peer_addr, htonl(kBeta));
    EXPECT_EQ(state()["added"], json::array());
}

// taken() answers from an index of the lists, kept apart from them: it must say exactly what is
// published after every kind of change.
TEST_F(PortMapTableTest, TakenSaysExactlyWhatIsMappedAfterEveryKindOfChange) {
    fedgate::PortMapTable& t = open();
    const auto taken_all = [&] {
        std::vector<std::string> out;
        for (Proto p : {Proto::tcp, Proto::udp})
            for (uint32_t port = 1; port <= 65535; ++port)
                for (const char* kind : {"import", "export"})
                    if (t.taken(kind, p, static_cast<uint16_t>(port)))
                        out.push_back(fedgate::mapping_key(kind, p, static_cast<uint16_t>(port)));
        return out;
    };
    const auto agree = [&](const char* step) {
        std::vector<std::string> a = taken_all(), b = published();
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        EXPECT_EQ(a, b) << "after " << step;
    };
    agree("load");
    t.add(import_of("c2", Proto::udp, 7000, "gamma", 7001));
    t.add_automatic(export_of("auto", Proto::tcp, 61000, "198.18.1.30:4000"));
    t.add_automatic(import_of("auto", Proto::tcp, 61001, "gamma", 61500));
    agree("adds");
    EXPECT_TRUE(t.taken("export", Proto::tcp, 61000));
    EXPECT_FALSE(t.taken("import", Proto::tcp, 61000)) << "an export's port is not an import's";
    EXPECT_FALSE(t.taken("export", Proto::udp, 61000)) << "nor another protocol's";
    EXPECT_THROW(t.add_automatic(export_of("auto", Proto::tcp, 61000, "198.18.1.31:4000")), fedgate::MapError);
    EXPECT_TRUE(t.remove_automatic("export", Proto::tcp, 61000));
    agree("remove_automatic");
    EXPECT_FALSE(t.taken("export", Proto::tcp, 61000));
    t.add_automatic(export_of("auto", Proto::tcp, 61000, "198.18.1.31:4000"));  // free again
    t.remove("import", Proto::udp, 7000);
    agree("remove");
    std::vector<std::string> dropped;
    t.reload(edited("port = 8080", "port = 8081"), &dropped);
    agree("reload");
    EXPECT_FALSE(t.taken("import", Proto::tcp, 8080));
    EXPECT_TRUE(t.taken("import", Proto::tcp, 8081));
}

// free_port looks from a cursor, wraps round to the range's start, and looks only at its kind.
TEST_F(PortMapTableTest, FreePortLooksFromTheCursorAndWraps) {
    fedgate::PortMapTable& t = open();
    t.add_automatic(export_of("auto", Proto::tcp, 61000, "198.18.1.30:4000"));
    t.add_automatic(export_of("auto", Proto::tcp, 61002, "198.18.1.31:4000"));
    t.add_automatic(export_of("auto", Proto::tcp, 61003, "198.18.1.32:4000"));
    EXPECT_EQ(t.free_port("export", Proto::tcp, 61000, 61003, 61000), 61001);
    EXPECT_EQ(t.free_port("export", Proto::tcp, 61000, 61003, 61002), 61001) << "wraps from the end to the start";
    EXPECT_EQ(t.free_port("export", Proto::tcp, 61000, 61003, 7), 61001) << "a cursor outside the range starts at lo";
    EXPECT_EQ(t.free_port("import", Proto::tcp, 61000, 61003, 61000), 61000) << "an export's port is not an import's";
    EXPECT_EQ(t.free_port("export", Proto::udp, 61000, 61003, 61000), 61000) << "nor another protocol's";
    t.add_automatic(export_of("auto", Proto::tcp, 61001, "198.18.1.33:4000"));
    EXPECT_EQ(t.free_port("export", Proto::tcp, 61000, 61003, 61000), std::nullopt) << "all four held";
    EXPECT_EQ(t.free_port("export", Proto::tcp, 61000, 61004, 61001), 61004);
    EXPECT_EQ(t.free_port("export", Proto::tcp, 61001, 61000, 61000), std::nullopt) << "an empty range";
    EXPECT_TRUE(t.remove_automatic("export", Proto::tcp, 61002));
    EXPECT_EQ(t.free_port("export", Proto::tcp, 61000, 61003, 61003), 61002);
}

// ---- management requests ----

TEST_F(PortMapTableTest, HandleAddsListsAndDeletes) {
    fedgate::PortMapTable& t = open();
    // Host bits in an allowed prefix are cleared.
    const json i = t.handle(json::parse(R"({"cmd": "map_add", "kind": "import", "cluster": "c2", "proto": "udp",
        "port": 7000, "peer": "gamma", "peer_port": 7001, "allow": ["198.18.1.9/24"]})"));
    EXPECT_EQ(i, json::parse(R"({"kind": "import", "cluster": "c2", "proto": "udp", "port": 7000, "peer": "gamma",
        "peer_id": 3, "peer_port": 7001, "allow": ["198.18.1.0/24"], "source": "cli"})"));
    const json e = t.handle(json::parse(R"({"cmd": "map_add", "kind": "export", "cluster": "c2", "proto": "tcp",
        "port": 9001, "node": "198.18.1.20:443", "allow_parties": ["beta"]})"));
    EXPECT_EQ(e, json::parse(R"({"kind": "export", "cluster": "c2", "proto": "tcp", "port": 9001,
        "node": "198.18.1.20:443", "allow_parties": ["beta"], "source": "cli"})"));
    EXPECT_NE(import_at(Proto::udp, 7000), nullptr);
    EXPECT_NE(export_at(Proto::tcp, 9001), nullptr);
    EXPECT_EQ(state()["added"], json::array({i, e}));

    EXPECT_EQ(t.handle(json::parse(R"({"cmd": "map_list", "cluster": "c2"})")),
              (json{{"imports", json::array({i})}, {"exports", json::array({e})}}));
    EXPECT_EQ(t.handle(json::parse(R"({"cmd": "map_list"})")), t.list(std::nullopt));

    EXPECT_EQ(t.handle(json::parse(R"({"cmd": "map_del", "kind": "import", "proto": "udp", "port": 7000})")),
              (json{{"deleted", json::array({i})}}));
    EXPECT_EQ(import_at(Proto::udp, 7000), nullptr);
    EXPECT_EQ(t.handle(json::parse(R"({"cmd": "map_del", "cluster": "c1", "kind": "import"})")),
              (json{{"deleted", json::array({kConfigImportJson})}}));
    EXPECT_EQ(t.handle(json::parse(R"({"cmd": "map_del", "cluster": "c2"})")), (json{{"deleted", json::array({e})}}));
    EXPECT_EQ(published(), (std::vector<std::string>{"export tcp/9000"}));
}

TEST_F(PortMapTableTest, HandleRefusesBadRequestsByField) {
    fedgate::PortMapTable& t = open();
    const auto views = published();
    const auto refused = [&](const std::string& req, const std::string& field) {
        return map_error([&] { t.handle(json::parse(req)); }, field);
    };
    EXPECT_EQ(refused(R"({"cmd": "map_add", "kind": "import", "cluster": "c2", "proto": "sctp", "port": 7000,
        "peer": "beta", "peer_port": 7001})", "proto"), "proto: 'sctp' must be tcp or udp");
    EXPECT_EQ(refused(R"({"cmd": "map_add", "kind": "import", "cluster": "c2", "proto": "tcp", "port": "7000",
        "peer": "beta", "peer_port": 7001})", "port"), "port: must be an integer 1..65535");
    EXPECT_EQ(refused(R"({"cmd": "map_add", "kind": "import", "cluster": "c2", "proto": "tcp", "port": 70000,
        "peer": "beta", "peer_port": 7001})", "port"), "port: must be an integer 1..65535");
    EXPECT_EQ(refused(R"({"cmd": "map_add", "kind": "import", "cluster": "c2", "proto": "tcp", "port": 7000,
        "peer_port": 7001})", "peer"), "peer: missing");
    EXPECT_EQ(refused(R"({"cmd": "map_add", "kind": "import", "cluster": "c2", "proto": "tcp", "port": 7000,
        "peer": "delta", "peer_port": 7001})", "peer"), "peer: 'delta' is not a configured peer party");
    EXPECT_EQ(refused(R"({"cmd": "map_add", "kind": "import", "cluster": "c2", "proto": "tcp", "port": 7000,
        "peer": "beta", "peer_port": 7001, "allow": ["198.18.1.0"]})", "allow"),
              "allow: '198.18.1.0' is not an IPv4 prefix like 198.18.1.0/24");
    EXPECT_EQ(refused(R"({"cmd": "map_add", "kind": "import", "cluster": "c2", "proto": "tcp", "port": 8080,
        "peer": "beta", "peer_port": 7001})", "port"), "port: import tcp/8080 is already mapped (cluster c1)");
    EXPECT_EQ(refused(R"({"cmd": "map_add", "kind": "export", "cluster": "c2", "proto": "tcp", "port": 7000,
        "node": "198.18.1.20"})", "node"), "node: '198.18.1.20' is not IP:PORT");
    EXPECT_EQ(refused(R"({"cmd": "map_add", "kind": "export", "cluster": "c2", "proto": "tcp", "port": 7000,
        "node": "198.18.9.20:80"})", "node"), "node: 198.18.9.20 is not a node address on an internal port's subnet");
    EXPECT_EQ(refused(R"({"cmd": "map_add", "kind": "export", "cluster": "c2", "proto": "tcp", "port": 7000,
        "node": "198.18.1.20:80", "allow_parties": "beta"})", "allow_parties"),
              "allow_parties: must be a list of strings");
    EXPECT_EQ(refused(R"({"cmd": "map_add", "cluster": "c2", "proto": "tcp", "port": 7000})", "kind"),
              "kind: must be import or export");
    EXPECT_EQ(refused(R"({"cmd": "map_add", "kind": "both", "cluster": "c2"})", "kind"),
              "kind: must be import or export");
    EXPECT_EQ(refused(R"({"cmd": "map_del", "proto": "tcp", "port": 8080})", "kind"), "kind: missing (or give cluster)");
    EXPECT_EQ(refused(R"({"cmd": "map_del", "kind": "import", "proto": "udp", "port": 8080})", "port"),
              "port: import udp/8080 is not mapped");
    EXPECT_EQ(refused(R"({"cmd": "map_del", "cluster": "c9"})", "cluster"), "cluster: 'c9' has no mappings");
    EXPECT_EQ(refused(R"({"cmd": "map_list", "cluster": 5})", "cluster"), "cluster: must be a string");
    EXPECT_EQ(refused(R"({"cmd": "map_frob"})", "cmd"), "cmd: 'map_frob' is not a mapping command");

    EXPECT_EQ(published(), views);
    EXPECT_FALSE(std::filesystem::exists(state_));
}

// ---- the state file ----

TEST_F(PortMapTableTest, StateThatNoLongerFitsTheConfigIsDroppedWithAWarning) {
    write_file(state_, R"({"version": 1,
  "added": [
    {"kind": "import", "cluster": "c2", "proto": "tcp", "port": 7000, "peer": "delta", "peer_port": 7001, "source": "cli"},
    {"kind": "import", "cluster": "c2", "proto": "udp", "port": 7000, "peer": "gamma", "peer_port": 7001, "source": "cli"},
    {"kind": "export", "cluster": "c2", "proto": "tcp", "port": 9000, "node": "198.18.1.20:80", "source": "cli"}
  ],
  "deleted": []})");
    fedgate::PortMapTable& t = open();

    ASSERT_EQ(warnings_.size(), 2u);
    EXPECT_NE(warnings_[0].find("'delta' is not a configured peer party"), std::string::npos) << warnings_[0];
    EXPECT_NE(warnings_[0].find(state_), std::string::npos) << warnings_[0];
    EXPECT_NE(warnings_[1].find("export tcp/9000"), std::string::npos) << warnings_[1];
    EXPECT_EQ(import_at(Proto::tcp, 7000), nullptr);
    ASSERT_NE(import_at(Proto::udp, 7000), nullptr);
    EXPECT_EQ(export_at(Proto::tcp, 9000)->node_addr, htonl(0xC612010Au));  // the config's, not the state file's
    EXPECT_EQ(t.import_count(), 2u);
    EXPECT_EQ(t.export_count(), 1u);
}

TEST_F(PortMapTableTest, CorruptStateFileIsAnError) {
    write_file(state_, "{\"version\": 1, \"added\": [");
    view_ = std::make_unique<PortMapView>();
    fedgate::PortMapTable t(cfg_, *view_, nullptr, state_);
    std::vector<std::string> warnings;
    const std::string what = map_error([&] { t.load(&warnings); }, "state");
    EXPECT_NE(what.find(state_), std::string::npos) << what;
    EXPECT_EQ(import_at(Proto::tcp, 8080), nullptr);
}

TEST_F(PortMapTableTest, StateFileOfAnotherVersionIsAnError) {
    write_file(state_, R"({"version": 2, "added": [], "deleted": []})");
    view_ = std::make_unique<PortMapView>();
    fedgate::PortMapTable t(cfg_, *view_, nullptr, state_);
    std::vector<std::string> warnings;
    const std::string what = map_error([&] { t.load(&warnings); }, "state");
    EXPECT_NE(what.find("version 1"), std::string::npos) << what;
}

TEST_F(PortMapTableTest, UnwritableStateDirRefusesChangesAndChangesNothing) {
    write_file(dir_ + "/not-a-dir", "x");
    const std::string bad_state = dir_ + "/not-a-dir/mappings.json";
    fedgate::PortMapTable& t = open(bad_state);
    EXPECT_TRUE(warnings_.empty());
    const json listed = t.list(std::nullopt);
    const auto views = published();

    map_error([&] { t.add(import_of("c2", Proto::tcp, 7000, "beta", 7001)); }, "state");
    map_error([&] { t.add(export_of("c2", Proto::tcp, 7000, "198.18.1.20:80")); }, "state");
    map_error([&] { t.remove("import", Proto::tcp, 8080); }, "state");
    map_error([&] { t.remove_cluster("c1", std::nullopt); }, "state");

    EXPECT_EQ(t.list(std::nullopt), listed);
    EXPECT_EQ(published(), views);
    EXPECT_EQ(t.import_count(), 1u);
    EXPECT_EQ(t.export_count(), 1u);
    EXPECT_EQ(slurp(dir_ + "/not-a-dir"), "x");
}

}  // namespace

// The free-port search a word at a time agrees with a port-by-port scan: random fills, every
// density, ranges across word edges, a range of one port, and none free.
TEST(PortBits, NextClearIsTheFirstFreePortInTheRangeAsAScanFindsIt) {
    std::mt19937 rng(20261204);
    for (int round = 0; round < 400; ++round) {
        fedgate::PortBits bits;
        std::vector<bool> naive(65536, false);
        const uint32_t density = rng() % 101;  // percent held
        const uint32_t base = rng() % 65536, span = rng() % 3000;
        for (uint32_t p = base; p < std::min<uint32_t>(65536, base + span); ++p)
            if (rng() % 100 < density) {
                bits.set(static_cast<uint16_t>(p));
                naive[p] = true;
            }
        for (int q = 0; q < 50; ++q) {
            const uint32_t a = rng() % 65536, b = std::min<uint32_t>(65535, a + rng() % 400);
            int want = -1;
            for (uint32_t p = a; p <= b; ++p)
                if (!naive[p]) {
                    want = static_cast<int>(p);
                    break;
                }
            ASSERT_EQ(bits.next_clear(static_cast<uint16_t>(a), static_cast<uint16_t>(b)), want) << a << ".." << b;
        }
    }
    fedgate::PortBits all;
    for (uint32_t p = 0; p < 65536; ++p) all.set(static_cast<uint16_t>(p));
    EXPECT_EQ(all.next_clear(0, 65535), -1);
    all.reset(65535);
    EXPECT_EQ(all.next_clear(0, 65535), 65535);
    EXPECT_EQ(all.next_clear(65535, 65535), 65535);
    EXPECT_EQ(all.next_clear(100, 65534), -1);
    all.reset(64);
    EXPECT_EQ(all.next_clear(0, 64), 64);
    EXPECT_EQ(all.next_clear(0, 63), -1);
    EXPECT_TRUE(all.test(63));
    EXPECT_FALSE(all.test(64));
}
