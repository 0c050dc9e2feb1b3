// `fedgatectl reload`: what the config diff counts as a live change and how it names each one, what
// it refuses (and how), and the data plane's peer-table swap keeping the replay windows of peers
// that did not change.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "controlplane/config.hpp"
#include "controlplane/reload.hpp"
#include "dataplane/dataplane.hpp"

namespace fedgate {
namespace {

// alpha with peer beta, one import and one export, and a [log] table.
const std::string kBase = R"([gateway]
party = "alpha"
party_id = 1
socket = "/tmp/fedgate-reload-test/a.sock"
state_dir = "/tmp/fedgate-reload-test/a"

[eal]
args = ["--no-huge", "--no-shconf"]

[log]
level = "info"

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

[[import]]
cluster = "c1"
proto = "tcp"
port = 8080
peer = "beta"
peer_port = 9000

[[export]]
cluster = "c1"
proto = "tcp"
port = 9000
node = "198.18.1.10:50051"
)";

const std::string kGamma = R"(
[[peer]]
party = "gamma"
party_id = 3
address = "198.19.0.3"
key = "ffeeddccbbaa99887766554433221100"
)";

// kBase with each `from` replaced by its `to` (each must occur), plus `extra` at the end.
Config edited(std::vector<std::pair<std::string, std::string>> edits, const std::string& extra = "") {
    std::string text = kBase;
    for (const auto& [from, to] : edits) {
        const auto at = text.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        if (at != std::string::npos) text.replace(at, from.size(), to);
    }
    return parse_config(text + extra, "next.toml");
}

std::vector<std::string> texts(const ConfigDiff& d) {
    std::vector<std::string> out;
    for (const ReloadChange& c : d.changes) out.push_back(c.text());
    return out;
}

const Config kRunning = parse_config(kBase, "running.toml");

TEST(ConfigDiff, SameFileChangesNothingAndRefusesNothing) {
    const ConfigDiff d = diff_config(kRunning, parse_config(kBase, "next.toml"));
    EXPECT_TRUE(d.refused.empty());
    EXPECT_TRUE(d.changes.empty());
    EXPECT_FALSE(d.peers_changed);
    EXPECT_FALSE(d.log_changed);
}

TEST(ConfigDiff, PeerAddedIsALiveChangeNamedByParty) {
    const ConfigDiff d = diff_config(kRunning, edited({}, kGamma));
    EXPECT_TRUE(d.refused.empty());
    EXPECT_TRUE(d.peers_changed);
    EXPECT_EQ(texts(d), (std::vector<std::string>{"peer gamma added"}));
    EXPECT_EQ(d.changes[0], (ReloadChange{"peer", "gamma", "added"}));
}

TEST(ConfigDiff, PeerKeyAndAddressChangesAreNamed) {
    const ConfigDiff d = diff_config(kRunning, edited({{"00112233445566778899aabbccddeeff", "00112233445566778899aabbccddeef0"},
                                                       {"address = \"198.19.0.2\"", "address = \"198.19.0.22\""}}));
    EXPECT_TRUE(d.refused.empty());
    EXPECT_TRUE(d.peers_changed);
    EXPECT_EQ(texts(d), (std::vector<std::string>{"peer beta changed (key, address)"}));
}

// The steps of a rotation are live changes too: a next key added, made current, dropped.
TEST(ConfigDiff, EachStepOfAKeyRotationIsALivePeerChange) {
    const std::string k1 = "00112233445566778899aabbccddeeff", k2 = "ffeeddccbbaa99887766554433221101";
    const Config step1 = edited({{"key = \"" + k1 + "\"", "key = \"" + k1 + "\"\nnext_key = \"" + k2 + "\""}});
    ConfigDiff d = diff_config(kRunning, step1);
    EXPECT_TRUE(d.peers_changed);
    EXPECT_EQ(texts(d), (std::vector<std::string>{"peer beta changed (next_key added)"}));
    const Config step2 = edited({{"key = \"" + k1 + "\"", "key = \"" + k2 + "\"\nnext_key = \"" + k1 + "\""}});
    d = diff_config(step1, step2);
    EXPECT_TRUE(d.peers_changed);
    EXPECT_EQ(texts(d), (std::vector<std::string>{"peer beta changed (key, next_key)"}));
    const Config step3 = edited({{"key = \"" + k1 + "\"", "key = \"" + k2 + "\""}});
    d = diff_config(step2, step3);
    EXPECT_TRUE(d.peers_changed);
    EXPECT_EQ(texts(d), (std::vector<std::string>{"peer beta changed (next_key removed)"}));
    d = diff_config(step3, step3);
    EXPECT_FALSE(d.peers_changed);
}

TEST(ConfigDiff, PeerRemovedWithItsMappingsListsAllThree) {
    const Config start = parse_config(kBase + kGamma + R"(
[[import]]
cluster = "c2"
proto = "udp"
port = 7000
peer = "gamma"
peer_port = 7001
)", "running.toml");
    const ConfigDiff d = diff_config(start, kRunning);
    EXPECT_TRUE(d.refused.empty());
    EXPECT_TRUE(d.peers_changed);
    EXPECT_EQ(texts(d), (std::vector<std::string>{"peer gamma removed", "import udp/7000 removed"}));
}

TEST(ConfigDiff, AConfigMappingNamingARemovedPeerIsRefusedByTheParserNamingIt) {
    // beta removed but import[0] still names it: the file itself is bad.
    std::string text = kBase;
    const auto at = text.find("[[peer]]");
    text.erase(at, text.find("[[import]]") - at);
    try {
        parse_config(text, "next.toml");
        FAIL() << "parsed";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.key(), "import[0].peer") << e.what();
        EXPECT_NE(std::string(e.what()).find("'beta' is not a configured peer party"), std::string::npos) << e.what();
        EXPECT_TRUE(std::string(e.what()).starts_with("next.toml:")) << e.what();
    }
}

TEST(ConfigDiff, MappingsAddedRemovedAndChangedAreNamedByKindAndPort) {
    const ConfigDiff d = diff_config(kRunning, edited({{"port = 8080", "port = 8081"},
                                                       {"node = \"198.18.1.10:50051\"", "node = \"198.18.1.11:50051\""}}));
    EXPECT_TRUE(d.refused.empty());
    EXPECT_FALSE(d.peers_changed);
    EXPECT_EQ(texts(d), (std::vector<std::string>{"import tcp/8081 added", "import tcp/8080 removed",
                                                  "export tcp/9000 changed"}));
}

TEST(ConfigDiff, LogLevelsAreALiveChangeListingEachLevelSet) {
    const ConfigDiff d = diff_config(kRunning, edited({{"level = \"info\"", "level = \"notice\"\ntypes = { \"fedgate.resolve\" = \"debug\" }"}}));
    EXPECT_TRUE(d.refused.empty());
    EXPECT_TRUE(d.log_changed);
    EXPECT_EQ(texts(d), (std::vector<std::string>{"log fedgate.* set to notice", "log fedgate.resolve set to debug"}));
}

TEST(ConfigDiff, PartyIdChangeIsRefusedNamingSectionAndKey) {
    const ConfigDiff d = diff_config(kRunning, edited({{"party_id = 1", "party_id = 9"}}));
    EXPECT_EQ(d.refused, (std::vector<std::string>{"[gateway] party_id: cannot change while running; restart fedgated"}));
}

TEST(ConfigDiff, EveryRestartOnlyChangeIsRefusedAndEachIsNamed) {
    const ConfigDiff d = diff_config(
        kRunning, edited({{"party = \"alpha\"", "party = \"alpha2\""},
                          {"a.sock", "b.sock"},
                          {"[\"--no-huge\", \"--no-shconf\"]", "[\"--no-huge\", \"--no-shconf\", \"-l\", \"0\"]"},
                          {"address = \"198.18.1.1/24\"", "address = \"198.18.1.2/24\""},
                          {"[log]", "[dataplane]\nmbufs = 4095\n\n[nat]\nport_range = \"20000-30000\"\n\n"
                                    "[resolve]\nquery_timeout_ms = 500\n\n[connect]\nmax_handshakes = 8\n\n"
                                    "[metrics]\nlisten = \"127.0.0.1:9410\"\n\n[log]"}},
                         kGamma));
    EXPECT_EQ(d.refused, (std::vector<std::string>{
                             "[gateway] party: cannot change while running; restart fedgated",
                             "[gateway] socket: cannot change while running; restart fedgated",
                             "[eal] args: cannot change while running; restart fedgated",
                             "[dataplane] mbufs: cannot change while running; restart fedgated",
                             "[[port]] inside: cannot change while running; restart fedgated",
                             "[nat] port_range: cannot change while running; restart fedgated",
                             "[resolve] query_timeout_ms: cannot change while running; restart fedgated",
                             "[connect] max_handshakes: cannot change while running; restart fedgated",
                             "[metrics] listen: cannot change while running; restart fedgated"}));
    // What could change live is still worked out, but a refused reload applies none of it.
    EXPECT_EQ(texts(d), (std::vector<std::string>{"peer gamma added"}));
}

TEST(ConfigDiff, RestartOnlySettingsWrittenOutAtTheirRunningValuesAreNoChange) {
    // The defaults spelled out: identical to the running values, so nothing is refused.
    const ConfigDiff d = diff_config(kRunning, edited({{"[log]", "[nat]\nport_range = \"20000-59999\"\n\n"
                                                                 "[resolve]\nport = 7410\n\n[log]"}}));
    EXPECT_TRUE(d.refused.empty());
    EXPECT_TRUE(d.changes.empty());
}

TEST(ConfigDiff, ChangesJsonCarriesKindNameChangeAndText) {
    const auto j = changes_json({ReloadChange{"peer", "gamma", "added"}});
    EXPECT_EQ(j.dump(), R"([{"kind":"peer","name":"gamma","change":"added","text":"peer gamma added"}])");
}

// ---- the data plane's peer table ----

constexpr uint64_t kSec = 1'000'000'000ull;
constexpr uint64_t kNow = 1'700'000'000ull * kSec;

DpPeer dp_peer(uint32_t addr, uint16_t party, uint8_t key_byte) {
    return DpPeer{addr, party, std::vector<uint8_t>(16, key_byte), key_byte, {}, 0};
}

TEST(PeerTable, UnchangedPeerKeepsItsReplayWindowsAcrossASwap) {
    std::vector<DpPeerState> live = make_peer_table({dp_peer(0x0200a8c0, 2, 1)}, kNow);
    live[0].windows[0].accept(kNow + 5);
    live[0].windows[1].accept(kNow + 7);
    // The reload's new table starts later; beta is unchanged, gamma is new.
    std::vector<DpPeerState> next = make_peer_table({dp_peer(0x0300a8c0, 3, 2), dp_peer(0x0200a8c0, 2, 1)}, kNow + kSec);
    carry_over_replay_windows(live, next);
    // beta: what it sent before the reload is still a replay, and its next message is still fresh.
    EXPECT_EQ(next[1].windows[0].check(kNow + 5, kNow + 10, 30 * kSec), ReplayVerdict::replayed);
    EXPECT_EQ(next[1].windows[1].check(kNow + 7, kNow + 10, 30 * kSec), ReplayVerdict::replayed);
    EXPECT_EQ(next[1].windows[0].check(kNow + 6, kNow + 10, 30 * kSec), ReplayVerdict::ok);
    EXPECT_EQ(next[1].windows[0].highest(), kNow + 5);
    // gamma: a fresh window from the reload's start.
    EXPECT_EQ(next[0].windows[0].highest(), kNow + kSec);
}

TEST(PeerTable, PeerWithANewAddressStartsFreshWindowsAndANewKeyKeepsThem) {
    std::vector<DpPeerState> live = make_peer_table({dp_peer(0x0200a8c0, 2, 1), dp_peer(0x0300a8c0, 3, 2)}, kNow);
    live[0].windows[0].accept(kNow + 5);
    live[1].windows[0].accept(kNow + 5);
    std::vector<DpPeerState> next =
        make_peer_table({dp_peer(0x0200a8c0, 2, 9), dp_peer(0x1300a8c0, 3, 2)}, kNow + kSec);  // new key; new address
    carry_over_replay_windows(live, next);
    // A key rotation must not open a window for replaying what the peer sent before it.
    EXPECT_EQ(next[0].windows[0].highest(), kNow + 5);
    EXPECT_EQ(next[0].windows[0].check(kNow + 5, kNow + 10, 30 * kSec), ReplayVerdict::replayed);
    EXPECT_EQ(next[1].windows[0].highest(), kNow + kSec);
}

TEST(PeerTable, APeerWithANextKeyFindsBothByIdAndSealsUnderTheCurrentOne) {
    DpPeer p = dp_peer(0x0200a8c0, 2, 1);
    p.next_key = std::vector<uint8_t>(16, 2);
    p.next_key_id = 2;
    const std::vector<DpPeerState> t = make_peer_table({p}, kNow);
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(t[0].keys.current_id(), 1);
    EXPECT_EQ(t[0].keys.next_id(), 2);
    EXPECT_NE(t[0].keys.find(1), nullptr);
    EXPECT_NE(t[0].keys.find(2), nullptr);
    EXPECT_EQ(t[0].keys.find(3), nullptr);
}

TEST(PeerTable, MadeTableCarriesEachPeersAddressPartyAndKey) {
    const std::vector<DpPeerState> t = make_peer_table({dp_peer(0x0200a8c0, 2, 1)}, kNow);
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(t[0].cfg.addr, 0x0200a8c0u);
    EXPECT_EQ(t[0].cfg.party, 2);
    EXPECT_EQ(t[0].cfg.key, std::vector<uint8_t>(16, 1));
}

}  // namespace
}  // namespace fedgate
