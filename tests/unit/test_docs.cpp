// The README is part of the contract: its example config must load and show the real defaults, and
// its drop-reason table must list exactly the reasons the data plane counts, with the same words.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "controlplane/config.hpp"
#include "dataplane/drop_reason.hpp"

namespace fedgate {
namespace {

std::string readme() {
    std::ifstream in(FEDGATE_SOURCE_DIR "/README.md");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string example_config(const std::string& md) {
    const auto section = md.find("## Configuration");
    const auto start = md.find("```toml\n", section);
    const auto end = md.find("```", start + 8);
    if (section == std::string::npos || start == std::string::npos || end == std::string::npos) return {};
    return md.substr(start + 8, end - start - 8);
}

TEST(Docs, ReadmeExampleConfigLoadsAndShowsTheRealDefaults) {
    const std::string text = example_config(readme());
    ASSERT_FALSE(text.empty()) << "README.md has no ```toml block under ## Configuration";
    const Config c = parse_config(text, "README.md");
    EXPECT_EQ(c.party, "alpha");
    EXPECT_EQ(c.socket, kDefaultSocket);
    EXPECT_EQ(c.state_dir, kDefaultStateDir);
    ASSERT_EQ(c.ports.size(), 2u);
    ASSERT_EQ(c.peers.size(), 1u);
    // The [dataplane] table says "defaults shown": hold it to that.
    const DataplaneSettings d;
    EXPECT_EQ(c.dataplane.idle_spin, d.idle_spin);
    EXPECT_EQ(c.dataplane.idle_polls_before_sleep, d.idle_polls_before_sleep);
    EXPECT_EQ(c.dataplane.idle_sleep_max_us, d.idle_sleep_max_us);
    EXPECT_EQ(c.dataplane.mbufs, d.mbufs);
    EXPECT_EQ(c.dataplane.neighbour_capacity, d.neighbour_capacity);
    EXPECT_EQ(c.dataplane.neighbour_reachable_s, d.neighbour_reachable_s);
    EXPECT_EQ(c.dataplane.neighbour_stale_s, d.neighbour_stale_s);
    EXPECT_EQ(c.dataplane.arp_probe_interval_ms, d.arp_probe_interval_ms);
    EXPECT_EQ(c.dataplane.arp_probes, d.arp_probes);
    // So does [nat].
    const NatSettings n;
    EXPECT_EQ(c.nat.port_lo, n.port_lo);
    EXPECT_EQ(c.nat.port_hi, n.port_hi);
    EXPECT_EQ(c.nat.max_sessions, n.max_sessions);
    EXPECT_EQ(c.nat.tcp_established_s, n.tcp_established_s);
    EXPECT_EQ(c.nat.tcp_transitory_s, n.tcp_transitory_s);
    EXPECT_EQ(c.nat.tcp_closing_s, n.tcp_closing_s);
    EXPECT_EQ(c.nat.udp_s, n.udp_s);
    // And [resolve].
    const ResolveSettings r;
    EXPECT_EQ(c.resolve.port, r.port);
    EXPECT_EQ(c.resolve.announce, r.announce);
    EXPECT_EQ(c.resolve.cache_capacity, r.cache_capacity);
    EXPECT_EQ(c.resolve.pending_queries, r.pending_queries);
    EXPECT_EQ(c.resolve.query_timeout_ms, r.query_timeout_ms);
    EXPECT_EQ(c.resolve.negative_ttl_ms, r.negative_ttl_ms);
    EXPECT_EQ(c.resolve.answer_ttl_s, r.answer_ttl_s);
    EXPECT_EQ(c.resolve.heartbeat_ms, r.heartbeat_ms);
    EXPECT_EQ(c.resolve.heartbeat_timeout_ms, r.heartbeat_timeout_ms);
    EXPECT_EQ(c.resolve.broadcast_rate, r.broadcast_rate);
    EXPECT_EQ(c.resolve.broadcast_burst, r.broadcast_burst);
    EXPECT_EQ(c.resolve.requester_broadcast_rate, r.requester_broadcast_rate);
    EXPECT_EQ(c.resolve.requester_broadcast_burst, r.requester_broadcast_burst);
    EXPECT_EQ(c.resolve.sync_interval_ms, r.sync_interval_ms);
    EXPECT_EQ(c.resolve.max_clock_skew_ms, r.max_clock_skew_ms);
    EXPECT_EQ(c.resolve.announce_window, r.announce_window);
    EXPECT_EQ(c.resolve.retransmit_ms, r.retransmit_ms);
    EXPECT_EQ(c.imports.size(), 1u);
    EXPECT_EQ(c.exports.size(), 1u);
}

TEST(Docs, ReadmeDropReasonTableMatchesTheCode) {
    const std::string md = readme();
    std::size_t rows = 0;
    std::istringstream lines(md);
    for (std::string line; std::getline(lines, line);)
        if (line.rfind("| `", 0) == 0 && line.find("` | ") != std::string::npos) ++rows;
    for (std::size_t i = 0; i < kDropReasonCount; ++i) {
        const std::string row =
            "| `" + std::string(kDropReasonNames[i]) + "` | " + std::string(kDropReasonHelp[i]) + " |";
        EXPECT_NE(md.find(row), std::string::npos) << "README.md lacks the row: " << row;
    }
    EXPECT_EQ(rows, kDropReasonCount) << "README.md lists reasons the code does not have";
}

}  // namespace
}  // namespace fedgate
