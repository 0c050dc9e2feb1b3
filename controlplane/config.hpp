// The gateway's configuration: one TOML file, parsed and checked in full before anything starts.
#pragma once

#include <array>
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
// Frames waiting for the control threads (registrations, handshakes, ...): a burst beyond it is dropped.
inline constexpr uint32_t kDefaultPuntRing = 4096;
inline constexpr uint32_t kDefaultIdleSleepMaxUs = 200;
inline constexpr uint32_t kMaxWorkersCfg = 16;  // the data plane's kMaxWorkers
inline constexpr uint32_t kDefaultIdlePollsBeforeSleep = 4;
inline constexpr uint32_t kDefaultIdleYieldUs = 300;
inline constexpr uint32_t kDefaultNeighbourCapacity = 4096;
inline constexpr uint32_t kDefaultNeighbourReachableS = 30;
inline constexpr uint32_t kDefaultNeighbourStaleS = 300;
inline constexpr uint32_t kDefaultArpProbeIntervalMs = 500;
inline constexpr uint32_t kDefaultArpProbes = 3;

// Host-order netmask of a prefix length.
constexpr uint32_t ipv4_mask(uint8_t prefix_len) { return prefix_len == 0 ? 0 : ~uint32_t{0} << (32 - prefix_len); }

struct Ipv4Cidr {
    uint32_t addr = 0;  // host byte order
    uint8_t prefix_len = 0;
    std::string str() const;
    uint32_t mask() const { return ipv4_mask(prefix_len); }
    Ipv4Cidr network() const { return {addr & mask(), prefix_len}; }  // host bits cleared
    bool operator==(const Ipv4Cidr&) const = default;
};

enum class PortRoleCfg { internal, external };

struct PortConfig {
    std::string name;
    PortRoleCfg role = PortRoleCfg::internal;
    std::string device;
    Ipv4Cidr address;
    std::optional<uint32_t> next_hop;  // host byte order
    std::vector<std::pair<uint32_t, std::array<uint8_t, 6>>> static_neighbours;  // host-order IP, MAC
    bool operator==(const PortConfig&) const = default;
};

struct PeerConfig {
    std::string party;
    uint16_t party_id = 0;
    uint32_t address = 0;  // host byte order
    std::vector<uint8_t> key;  // the current key: messages to the peer are sealed with it
    std::string key_file;      // where the key was read from (key_file or key_credential); empty: inline
    uint8_t key_id = 0;        // 1-255: key_id, or derived from the key
    // During a rotation, the next key, accepted beside the current one (empty: none).
    std::vector<uint8_t> next_key;
    std::string next_key_file;
    uint8_t next_key_id = 0;
    bool operator==(const PeerConfig&) const = default;
};

enum class Proto : uint8_t { tcp = 0, udp = 1 };  // same numbering as the data plane's L4Proto
const char* proto_name(Proto p);

// Where a mapping came from: the config file, fedgatectl at run time, or made by the gateway itself.
enum class MapSource : uint8_t { config, cli, automatic };
const char* source_name(MapSource s);

// Import (on this party's gateway): internal-address:port -> peer party's external address:peer_port.
struct ImportMapping {
    std::string cluster;
    Proto proto = Proto::tcp;
    uint16_t port = 0;
    std::string peer;
    uint16_t peer_port = 0;
    std::vector<Ipv4Cidr> allow;  // local source prefixes; empty: any node
    MapSource source = MapSource::config;
    bool operator==(const ImportMapping&) const = default;
};

// Export: external-address:port -> node:node_port, for the listed peer parties (empty: every peer).
struct ExportMapping {
    std::string cluster;
    Proto proto = Proto::tcp;
    uint16_t port = 0;
    uint32_t node = 0;  // host byte order
    uint16_t node_port = 0;
    std::vector<std::string> allow_parties;
    MapSource source = MapSource::config;
    bool operator==(const ExportMapping&) const = default;
};

inline constexpr uint16_t kDefaultNatPortLo = 20000;
inline constexpr uint16_t kDefaultNatPortHi = 59999;
inline constexpr uint32_t kDefaultMaxSessions = 262144;
inline constexpr uint32_t kDefaultTcpEstablishedS = 7440;  // RFC 5382: 2 h 4 min
inline constexpr uint32_t kDefaultTcpTransitoryS = 240;    // SYN only, or after FIN/RST
inline constexpr uint32_t kDefaultUdpS = 300;
inline constexpr uint32_t kDefaultTcpClosingS = 10;          // after FIN both ways, or RST

struct NatSettings {
    uint16_t port_lo = kDefaultNatPortLo;  // the gateway allocates session ports from [lo, hi],
    uint16_t port_hi = kDefaultNatPortHi;  // skipping ports that mappings serve
    uint32_t max_sessions = kDefaultMaxSessions;
    uint32_t tcp_established_s = kDefaultTcpEstablishedS;
    uint32_t tcp_transitory_s = kDefaultTcpTransitoryS;
    uint32_t udp_s = kDefaultUdpS;
    uint32_t tcp_closing_s = kDefaultTcpClosingS;
    bool operator==(const NatSettings&) const = default;
};

struct DataplaneSettings {
    bool idle_spin = false;
    uint32_t workers = 1;  // data-plane workers, each on its own EAL worker lcore
    uint32_t idle_sleep_max_us = kDefaultIdleSleepMaxUs;
    uint32_t idle_polls_before_sleep = kDefaultIdlePollsBeforeSleep;
    uint32_t idle_yield_us = kDefaultIdleYieldUs;
    uint32_t mbufs = kDefaultMbufs;
    uint32_t punt_ring = kDefaultPuntRing;  // a power of two
    uint32_t neighbour_capacity = kDefaultNeighbourCapacity;
    uint32_t neighbour_reachable_s = kDefaultNeighbourReachableS;
    uint32_t neighbour_stale_s = kDefaultNeighbourStaleS;
    uint32_t arp_probe_interval_ms = kDefaultArpProbeIntervalMs;
    uint32_t arp_probes = kDefaultArpProbes;
    bool operator==(const DataplaneSettings&) const = default;
};

inline constexpr uint16_t kDefaultResolvePortCfg = 7410;  // same as the wire's kDefaultResolvePort
inline constexpr uint32_t kDefaultCacheCapacity = 262144;
inline constexpr uint32_t kDefaultPendingQueriesCfg = 1024;
inline constexpr uint32_t kDefaultQueryTimeoutMsCfg = 1000;
inline constexpr uint32_t kDefaultNegativeTtlMs = 2000;
inline constexpr uint32_t kDefaultAnswerTtlS = 60;  // for answered records whose own ttl is 0
inline constexpr uint32_t kDefaultHeartbeatMs = 1000;
inline constexpr uint32_t kDefaultHeartbeatTimeoutMs = 5000;
inline constexpr uint32_t kDefaultBroadcastRateCfg = 200;
// A peer's messages whose MAC the data plane checks, per second and at once: far above what the
// announce stream and queries need, far below what a flood from the peer's address could cost
// (an HMAC-SHA256 check is about a microsecond).
inline constexpr uint32_t kDefaultPeerVerifyRate = 20'000;
inline constexpr uint32_t kDefaultPeerVerifyBurst = 2'000;
inline constexpr uint32_t kDefaultBroadcastBurstCfg = 50;
inline constexpr uint32_t kDefaultRequesterBroadcastRateCfg = 20;
inline constexpr uint32_t kDefaultRequesterBroadcastBurstCfg = 10;
inline constexpr uint32_t kDefaultSyncIntervalMs = 1000;
inline constexpr uint32_t kDefaultMaxClockSkewMs = 30000;
inline constexpr uint32_t kDefaultAnnounceWindow = 64;
inline constexpr uint32_t kDefaultRetransmitMs = 200;

// [resolve]: the process directory and address-resolution service.
struct ResolveSettings {
    uint16_t port = kDefaultResolvePortCfg;  // UDP, on the gateway's own addresses (internal and external)
    bool announce = true;                    // pre-exchange local records with every peer
    uint32_t cache_capacity = kDefaultCacheCapacity;  // local + remote + negative records held at once
    uint32_t pending_queries = kDefaultPendingQueriesCfg;
    uint32_t query_timeout_ms = kDefaultQueryTimeoutMsCfg;
    uint32_t negative_ttl_ms = kDefaultNegativeTtlMs;
    uint32_t answer_ttl_s = kDefaultAnswerTtlS;
    uint32_t heartbeat_ms = kDefaultHeartbeatMs;                 // asked of compute processes
    uint32_t heartbeat_timeout_ms = kDefaultHeartbeatTimeoutMs;  // silent this long: expired
    uint32_t broadcast_rate = kDefaultBroadcastRateCfg;          // per second, all requesters
    uint32_t broadcast_burst = kDefaultBroadcastBurstCfg;
    uint32_t requester_broadcast_rate = kDefaultRequesterBroadcastRateCfg;  // per second, per requester
    uint32_t requester_broadcast_burst = kDefaultRequesterBroadcastBurstCfg;
    uint32_t peer_verify_rate = kDefaultPeerVerifyRate;    // MAC checks per second per peer (0: no limit)
    uint32_t peer_verify_burst = kDefaultPeerVerifyBurst;
    uint32_t sync_interval_ms = kDefaultSyncIntervalMs;   // stream keepalive to each peer
    uint32_t max_clock_skew_ms = kDefaultMaxClockSkewMs;  // peer messages older or newer are refused
    uint32_t announce_window = kDefaultAnnounceWindow;    // announce messages in flight per peer
    uint32_t retransmit_ms = kDefaultRetransmitMs;        // first retransmission timeout (doubles)
    bool operator==(const ResolveSettings&) const = default;
};

inline constexpr uint16_t kDefaultAutoPortLo = 61000;
inline constexpr uint16_t kDefaultAutoPortHi = 61999;
inline constexpr uint32_t kDefaultHandshakeTimeoutMs = 10000;
inline constexpr uint32_t kDefaultMaxHandshakes = 4096;
inline constexpr uint32_t kDefaultRdmaMaxConnectionsCfg = 16384;
inline constexpr uint32_t kDefaultRdmaIdleSCfg = 300;

// [connect]: the connection handshake the gateway relays, and the port mappings it makes itself
// for the tcp transport.
struct ConnectSettings {
    uint16_t auto_port_lo = kDefaultAutoPortLo;  // automatic mappings take ports from [lo, hi],
    uint16_t auto_port_hi = kDefaultAutoPortHi;  // on the external address (exports) and internal (imports)
    uint32_t handshake_timeout_ms = kDefaultHandshakeTimeoutMs;  // a relayed handshake not done by then fails;
                                                                 // finished ones stay listed this long
    uint32_t max_handshakes = kDefaultMaxHandshakes;  // relayed handshakes held at once
    // RDMA between parties: connections translated at once (virtual QPNs per gateway side), and how
    // long a translation stays without a packet either way (0: until its processes leave).
    uint32_t rdma_max_connections = kDefaultRdmaMaxConnectionsCfg;
    uint32_t rdma_idle_s = kDefaultRdmaIdleSCfg;
    bool operator==(const ConnectSettings&) const = default;
};

inline constexpr uint16_t kDefaultMetricsPort = 9410;  // the example's; [metrics] listen has no default

// [log]: rte_log levels, by name (1 emerg .. 8 debug, rte_log's numbering).
struct LogSettings {
    std::optional<uint32_t> level;  // every fedgate.* type; absent: info, or what the EAL args set
    // "types": a type name or glob -> level, applied after `level` in this order: globs, then exact
    // names, so a name given exactly wins. fedgate.* names are checked here; others (lib.eal,
    // pmd.net.*) when the EAL has registered them, at start-up.
    std::vector<std::pair<std::string, uint32_t>> types;
    bool operator==(const LogSettings&) const = default;
};

// [metrics]: the Prometheus endpoint; off unless listen is set.
struct MetricsSettings {
    std::optional<std::pair<uint32_t, uint16_t>> listen;  // host-order IPv4, port
    std::string listen_text() const;                      // "IP:PORT", or "" when off
    bool operator==(const MetricsSettings&) const = default;
};

// [cluster]: a group of gateways for one party on an etcd store; absent (no endpoints): the
// gateway is alone and keeps its state file, as always.
inline constexpr uint32_t kDefaultLeaseTtlS = 2;  // etcd's shortest lease with its default election timing
inline constexpr uint32_t kDefaultTxnOps = 128;    // etcd's default --max-txn-ops
inline constexpr uint32_t kMaxTxnOps = 10000;
struct ClusterSettings {
    std::vector<std::string> etcd;  // endpoint URLs, "http://IP:PORT"
    std::string member;             // this gateway's name in the group
    uint32_t lease_ttl_s = kDefaultLeaseTtlS;
    // The most operations one transaction of directory writes carries: at most the store's
    // --max-txn-ops. Registrations in flight go into the store in batches of up to this many.
    uint32_t txn_ops = kDefaultTxnOps;
    // Where this member sends and takes session events (a kernel UDP socket on the management
    // network, host-order IPv4 and port); none: no session events.
    std::optional<std::pair<uint32_t, uint16_t>> sync;
    std::string sync_text() const;  // "IP:PORT", or "" when off
    // The members' shared key for the sync channel's HMAC (sync_key_file, sync_key_credential or
    // sync_key; required with sync), and the file it came from (empty: inline).
    std::vector<uint8_t> sync_key;
    std::string sync_key_file;
    bool enabled() const { return !etcd.empty(); }
    std::string endpoints_text() const;  // "URL,URL,..." 
    bool operator==(const ClusterSettings&) const = default;
};

struct Config {
    std::vector<std::string> warnings;  // not errors, but an operator should hear of them (--check prints them)
    std::string source;  // the file it came from
    std::string party;
    uint16_t party_id = 0;
    std::string socket = kDefaultSocket;
    std::string state_dir = kDefaultStateDir;
    std::vector<std::string> eal_args;
    DataplaneSettings dataplane;
    std::vector<PortConfig> ports;
    std::vector<PeerConfig> peers;
    NatSettings nat;
    ResolveSettings resolve;
    ConnectSettings connect;
    LogSettings log;
    MetricsSettings metrics;
    ClusterSettings cluster;
    std::vector<ImportMapping> imports;
    std::vector<ExportMapping> exports;

    const PeerConfig* peer(const std::string& party) const;
    const PortConfig* port(PortRoleCfg role) const;  // the first port with that role
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
// "IP:PORT" -> (host-order address, port); nullopt on anything else.
std::optional<std::pair<uint32_t, uint16_t>> parse_endpoint(const std::string& s);
std::string format_endpoint(uint32_t host_order, uint16_t port);  // "IP:PORT", parse_endpoint's inverse
std::optional<uint16_t> parse_port(const std::string& s);
bool valid_name(const std::string& s);
// A store endpoint as [cluster] etcd takes it: "http://HOST:PORT" or "https://HOST:PORT", nothing
// after the port. Returns what is wrong with it, or "" when it is fine.
std::string endpoint_url_problem(const std::string& url);  // party, port and cluster names: 1-32 of [A-Za-z0-9_-]

}  // namespace fedgate
