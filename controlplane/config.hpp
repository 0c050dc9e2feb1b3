// The gateway's configuration: one TOML file, parsed and checked in full before anything starts.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fedgate {

// Defaults, named, so the docs and the code agree on them.
inline constexpr const char* kDefaultSocket = "/run/fedgate/fedgated.sock";
inline constexpr const char* kDefaultStateDir = "/var/lib/fedgate";
inline constexpr uint32_t kDefaultMbufs = 8191;
inline constexpr uint32_t kDefaultIdleSleepMaxUs = 200;
inline constexpr uint32_t kDefaultIdlePollsBeforeSleep = 256;
inline constexpr uint32_t kDefaultNeighbourCapacity = 4096;
inline constexpr uint32_t kDefaultNeighbourReachableS = 30;
inline constexpr uint32_t kDefaultNeighbourStaleS = 300;
inline constexpr uint32_t kDefaultArpProbeIntervalMs = 500;
inline constexpr uint32_t kDefaultArpProbes = 3;

struct Ipv4Cidr {
    uint32_t addr = 0;  // host byte order
    uint8_t prefix_len = 0;
    std::string str() const;
};

enum class PortRoleCfg { internal, external };

struct PortConfig {
    std::string name;
    PortRoleCfg role = PortRoleCfg::internal;
    std::string device;
    Ipv4Cidr address;
    std::optional<uint32_t> next_hop;  // host byte order
};

struct PeerConfig {
    std::string party;
    uint16_t party_id = 0;
    uint32_t address = 0;  // host byte order
    std::vector<uint8_t> key;
};

struct DataplaneSettings {
    bool idle_spin = false;
    uint32_t idle_sleep_max_us = kDefaultIdleSleepMaxUs;
    uint32_t idle_polls_before_sleep = kDefaultIdlePollsBeforeSleep;
    uint32_t mbufs = kDefaultMbufs;
    uint32_t neighbour_capacity = kDefaultNeighbourCapacity;
    uint32_t neighbour_reachable_s = kDefaultNeighbourReachableS;
    uint32_t neighbour_stale_s = kDefaultNeighbourStaleS;
    uint32_t arp_probe_interval_ms = kDefaultArpProbeIntervalMs;
    uint32_t arp_probes = kDefaultArpProbes;
};

struct Config {
    std::string source;  // the file it came from
    std::string party;
    uint16_t party_id = 0;
    std::string socket = kDefaultSocket;
    std::string state_dir = kDefaultStateDir;
    std::vector<std::string> eal_args;
    DataplaneSettings dataplane;
    std::vector<PortConfig> ports;
    std::vector<PeerConfig> peers;
};

// "FILE:LINE:COL: KEY: WHAT" — everything a person needs to find and fix the line.
class ConfigError : public std::runtime_error {
public:
    ConfigError(std::string file, std::string key, std::string what, uint32_t line = 0, uint32_t column = 0);
    const std::string& file() const { return file_; }
    const std::string& key() const { return key_; }

private:
    std::string file_, key_;
};

Config load_config_file(const std::string& path);
// `source_name` stands in for the file name in errors.
Config parse_config(const std::string& text, const std::string& source_name);

// Parsers shared with the CLI and tests. Return nullopt on bad input.
std::optional<uint32_t> parse_ipv4(const std::string& s);  // host byte order
std::optional<Ipv4Cidr> parse_cidr(const std::string& s);
std::string format_ipv4(uint32_t host_order);

}  // namespace fedgate
