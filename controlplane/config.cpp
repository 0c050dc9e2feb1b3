// Config loading with toml++: every value is type- and range-checked, unknown keys are errors, and
// each error names the file, line, key and what is wrong.
#include "controlplane/config.hpp"

#include "controlplane/log.hpp"  // level and type names; header-only
#include "controlplane/mapping.hpp"
#include "dataplane/peer_auth.hpp"  // key IDs and fingerprints

#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

namespace fedgate {

namespace {

std::string where(const std::string& file, uint32_t line, uint32_t column) {
    std::ostringstream o;
    o << file;
    if (line != 0) o << ':' << line << ':' << column;
    return o.str();
}

}  // namespace

ConfigError::ConfigError(std::string file, std::string key, std::string what, uint32_t line, uint32_t column)
    : std::runtime_error(where(file, line, column) + ": " + (key.empty() ? "" : key + ": ") + what),
      file_(std::move(file)),
      key_(std::move(key)) {}

std::optional<uint32_t> parse_ipv4(const std::string& s) {
    in_addr a{};
    if (inet_pton(AF_INET, s.c_str(), &a) != 1) return std::nullopt;
    return ntohl(a.s_addr);
}

std::string format_ipv4(uint32_t host_order) {
    char buf[INET_ADDRSTRLEN];
    const in_addr a{htonl(host_order)};
    inet_ntop(AF_INET, &a, buf, sizeof buf);
    return buf;
}

std::optional<Ipv4Cidr> parse_cidr(const std::string& s) {
    const auto slash = s.find('/');
    if (slash == std::string::npos) return std::nullopt;
    const auto ip = parse_ipv4(s.substr(0, slash));
    const std::string len = s.substr(slash + 1);
    if (!ip || len.empty() || len.size() > 2 || !std::all_of(len.begin(), len.end(), ::isdigit)) return std::nullopt;
    const int n = std::stoi(len);
    if (n < 1 || n > 32) return std::nullopt;
    return Ipv4Cidr{*ip, static_cast<uint8_t>(n)};
}

bool valid_name(const std::string& s) {
    return !s.empty() && s.size() <= 32 && std::all_of(s.begin(), s.end(), [](char c) {
               return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
           });
}

std::optional<uint16_t> parse_port(const std::string& s) {
    if (s.empty() || s.size() > 5 || !std::all_of(s.begin(), s.end(), ::isdigit)) return std::nullopt;
    const int v = std::stoi(s);
    if (v < 1 || v > 65535) return std::nullopt;
    return static_cast<uint16_t>(v);
}

std::optional<std::pair<uint32_t, uint16_t>> parse_endpoint(const std::string& s) {
    const auto colon = s.rfind(':');
    if (colon == std::string::npos) return std::nullopt;
    const auto ip = parse_ipv4(s.substr(0, colon));
    const auto port = parse_port(s.substr(colon + 1));
    if (!ip || !port) return std::nullopt;
    return std::make_pair(*ip, *port);
}

std::string format_endpoint(uint32_t host_order, uint16_t port) {
    return format_ipv4(host_order) + ":" + std::to_string(port);
}

const PeerConfig* Config::peer(const std::string& party) const {
    for (const PeerConfig& p : peers)
        if (p.party == party) return &p;
    return nullptr;
}

const PortConfig* Config::port(PortRoleCfg role) const {
    for (const PortConfig& p : ports)
        if (p.role == role) return &p;
    return nullptr;
}

std::string ClusterSettings::sync_text() const {
    return sync ? format_endpoint(sync->first, sync->second) : std::string();
}

std::string MetricsSettings::listen_text() const {
    return listen ? format_endpoint(listen->first, listen->second) : std::string();
}

std::string Ipv4Cidr::str() const { return format_ipv4(addr) + "/" + std::to_string(prefix_len); }

namespace {


// Reads one table, remembering the dotted path for errors. Given the table's keys, it refuses any
// other key at once, so a typo is reported as the typo rather than as the key it misses.
class TableReader {
public:
    TableReader(const std::string& file, const toml::table& t, std::string path,
                std::initializer_list<const char*> keys = {})
        : file_(file), t_(t), path_(std::move(path)) {
        if (keys.size() == 0) return;
        for (const auto& [k, v] : t_) {
            const std::string key(k.str());
            if (std::none_of(keys.begin(), keys.end(), [&](const char* known) { return key == known; })) {
                std::string known_list;
                for (const char* known : keys) known_list += (known_list.empty() ? "" : ", ") + std::string(known);
                throw ConfigError(file_, full(key), "unknown key (known here: " + known_list + ")",
                                  v.source().begin.line, v.source().begin.column);
            }
        }
    }

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        const toml::node* n = t_.get(key);
        const auto& src = n != nullptr ? n->source() : t_.source();
        throw ConfigError(file_, full(key), what, src.begin.line, src.begin.column);
    }

    std::string full(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

    std::optional<std::string> string(const std::string& key, bool required) {
        const toml::node* n = t_.get(key);
        if (n == nullptr) {
            if (required) fail(key, "missing (required)");
            return std::nullopt;
        }
        if (!n->is_string()) fail(key, "must be a string");
        return n->as_string()->get();
    }

    std::optional<int64_t> integer(const std::string& key, bool required, int64_t min, int64_t max) {
        const toml::node* n = t_.get(key);
        if (n == nullptr) {
            if (required) fail(key, "missing (required)");
            return std::nullopt;
        }
        if (!n->is_integer()) fail(key, "must be an integer");
        const int64_t v = n->as_integer()->get();
        if (v < min || v > max)
            fail(key, std::to_string(v) + " is out of range " + std::to_string(min) + ".." + std::to_string(max));
        return v;
    }

    void boolean(const std::string& key, bool& out) {
        const toml::node* n = t_.get(key);
        if (n == nullptr) return;
        if (!n->is_boolean()) fail(key, "must be true or false");
        out = n->as_boolean()->get();
    }

    void uint(const std::string& key, uint32_t& out, int64_t min, int64_t max) {
        if (auto v = integer(key, false, min, max)) out = static_cast<uint32_t>(*v);
    }

    std::vector<std::string> string_list(const std::string& key, bool required) {
        const toml::node* n = t_.get(key);
        std::vector<std::string> out;
        if (n == nullptr) {
            if (required) fail(key, "missing (required)");
            return out;
        }
        const toml::array* a = n->as_array();
        if (a == nullptr) fail(key, "must be a list of strings");
        for (const toml::node& e : *a) {
            if (!e.is_string()) fail(key, "must be a list of strings");
            out.push_back(e.as_string()->get());
        }
        return out;
    }

private:
    const std::string& file_;
    const toml::table& t_;
    std::string path_;
};

std::vector<uint8_t> parse_hex(const std::string& s) {
    std::vector<uint8_t> out;
    if (s.size() % 2 != 0) return {};
    for (std::size_t i = 0; i < s.size(); i += 2) {
        if (!std::isxdigit(static_cast<unsigned char>(s[i])) || !std::isxdigit(static_cast<unsigned char>(s[i + 1])))
            return {};
        out.push_back(static_cast<uint8_t>(std::stoi(s.substr(i, 2), nullptr, 16)));
    }
    return out;
}

const toml::table& sub_table(TableReader& r, const toml::table& root, const std::string& key, bool required,
                             const toml::table& empty) {
    const toml::node* n = root.get(key);
    if (n == nullptr) {
        if (required) r.fail(key, "missing table [" + key + "] (required)");
        return empty;
    }
    if (!n->is_table()) r.fail(key, "must be a table [" + key + "]");
    return *n->as_table();
}

// [[name]] arrays: each element a table.
std::vector<const toml::table*> table_array(TableReader& r, const toml::table& root, const std::string& key) {
    std::vector<const toml::table*> out;
    const toml::node* n = root.get(key);
    if (n == nullptr) return out;
    const toml::array* a = n->as_array();
    if (a == nullptr) r.fail(key, "must be an array of tables [[" + key + "]]");
    for (const toml::node& e : *a) {
        if (!e.is_table()) r.fail(key, "must be an array of tables [[" + key + "]]");
        out.push_back(e.as_table());
    }
    return out;
}

void read_gateway(const std::string& file, const toml::table& t, Config& c) {
    TableReader r(file, t, "gateway", {"party", "party_id", "socket", "state_dir"});
    c.party = *r.string("party", true);
    if (!valid_name(c.party)) r.fail("party", "'" + c.party + "' must be 1-32 letters, digits, '-' or '_'");
    c.party_id = static_cast<uint16_t>(*r.integer("party_id", true, 1, 65535));
    if (auto s = r.string("socket", false)) c.socket = *s;
    if (c.socket.empty() || c.socket[0] != '/') r.fail("socket", "'" + c.socket + "' must be an absolute path");
    if (c.socket.size() >= 108) r.fail("socket", "path longer than a Unix socket allows (107 bytes)");
    if (auto s = r.string("state_dir", false)) c.state_dir = *s;
    if (c.state_dir.empty() || c.state_dir[0] != '/')
        r.fail("state_dir", "'" + c.state_dir + "' must be an absolute path");
}

void read_dataplane(const std::string& file, const toml::table& t, DataplaneSettings& d) {
    TableReader r(file, t, "dataplane",
                  {"workers", "idle", "idle_sleep_max_us", "idle_polls_before_sleep", "idle_yield_us", "mbufs", "punt_ring", "neighbour_capacity",
                   "neighbour_reachable_s", "neighbour_stale_s", "arp_probe_interval_ms", "arp_probes"});
    if (auto idle = r.string("idle", false)) {
        if (*idle == "spin")
            d.idle_spin = true;
        else if (*idle == "backoff")
            d.idle_spin = false;
        else
            r.fail("idle", "'" + *idle + "' must be \"backoff\" or \"spin\"");
    }
    r.uint("workers", d.workers, 1, kMaxWorkersCfg);
    r.uint("idle_sleep_max_us", d.idle_sleep_max_us, 1, 100'000);
    r.uint("idle_polls_before_sleep", d.idle_polls_before_sleep, 1, 1'000'000);
    r.uint("idle_yield_us", d.idle_yield_us, 0, 100'000);
    r.uint("mbufs", d.mbufs, 1023, 1 << 22);
    r.uint("punt_ring", d.punt_ring, 256, 1 << 22);
    if ((d.punt_ring & (d.punt_ring - 1)) != 0)
        r.fail("punt_ring", std::to_string(d.punt_ring) + " is not a power of two (a DPDK ring's size): 4096, 65536, ...");
    r.uint("neighbour_capacity", d.neighbour_capacity, 16, 1 << 20);
    r.uint("neighbour_reachable_s", d.neighbour_reachable_s, 1, 86'400);
    r.uint("neighbour_stale_s", d.neighbour_stale_s, 1, 86'400);
    r.uint("arp_probe_interval_ms", d.arp_probe_interval_ms, 10, 60'000);
    r.uint("arp_probes", d.arp_probes, 1, 100);
    if (d.neighbour_stale_s < d.neighbour_reachable_s)
        r.fail("neighbour_stale_s", "must not be below neighbour_reachable_s");
}

PortConfig read_port(const std::string& file, const toml::table& t, std::size_t i) {
    TableReader r(file, t, "port[" + std::to_string(i) + "]",
                  {"name", "role", "device", "address", "next_hop", "static_neighbours"});
    PortConfig p;
    p.name = *r.string("name", true);
    if (!valid_name(p.name)) r.fail("name", "'" + p.name + "' must be 1-32 letters, digits, '-' or '_'");
    const std::string role = *r.string("role", true);
    if (role == "internal")
        p.role = PortRoleCfg::internal;
    else if (role == "external")
        p.role = PortRoleCfg::external;
    else
        r.fail("role", "'" + role + "' must be \"internal\" or \"external\"");
    p.device = *r.string("device", true);
    if (p.device.empty()) r.fail("device", "must not be empty (a vdev such as net_af_packet0,iface=eth1 or a PCI address)");
    const std::string addr = *r.string("address", true);
    const auto cidr = parse_cidr(addr);
    if (!cidr) r.fail("address", "'" + addr + "' is not an IPv4 address with prefix length, like 198.18.1.1/24");
    if (cidr->prefix_len > 31) r.fail("address", "'" + addr + "' leaves the port no neighbours: use a prefix of /31 or shorter");
    const uint32_t m = cidr->mask();
    if (cidr->prefix_len < 31 && ((cidr->addr & ~m) == 0 || (cidr->addr & ~m) == ~m))
        r.fail("address", "'" + addr + "' is the network or broadcast address of its subnet");
    p.address = *cidr;
    if (auto nh = r.string("next_hop", false)) {
        const auto ip = parse_ipv4(*nh);
        if (!ip) r.fail("next_hop", "'" + *nh + "' is not an IPv4 address");
        if (((*ip ^ cidr->addr) & m) != 0) r.fail("next_hop", "'" + *nh + "' is not inside " + addr);
        if (*ip == cidr->addr) r.fail("next_hop", "'" + *nh + "' is the port's own address");
        p.next_hop = *ip;
    }
    // "IP MAC" pairs: fixed ARP entries, e.g. for a next hop that does not answer ARP.
    for (const std::string& entry : r.string_list("static_neighbours", false)) {
        const auto space = entry.find(' ');
        const auto ip = parse_ipv4(entry.substr(0, space));
        std::array<uint8_t, 6> mac{};
        unsigned b[6];
        char tail;
        const bool mac_ok = space != std::string::npos &&
                            std::sscanf(entry.c_str() + space + 1, "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2],
                                        &b[3], &b[4], &b[5], &tail) == 6;
        if (!ip || !mac_ok) r.fail("static_neighbours", "'" + entry + "' must be \"IP MAC\", like \"198.19.0.254 02:00:00:00:00:01\"");
        if (((*ip ^ cidr->addr) & m) != 0) r.fail("static_neighbours", format_ipv4(*ip) + " is not inside " + addr);
        for (int k = 0; k < 6; ++k) mac[k] = static_cast<uint8_t>(b[k]);
        if (mac[0] & 1) r.fail("static_neighbours", "'" + entry + "': the MAC is a group address");
        p.static_neighbours.emplace_back(*ip, mac);
    }
    return p;
}

// The keys printed in the README, the example config, the man pages and the operator's guide: an
// operator who copies an example must not end up with a key everybody has.
bool is_published_key(const std::vector<uint8_t>& key) {
    static const char* const kPublished[] = {
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",  // README, fedgate.toml.example
        "5c0e1f7a9b2d4e6f8a1c3e5f7b9d2a4c6e8f1a3c5e7b9d2f4a6c8e1b3d5f7a9c",  // docs/operators-guide.md
    };
    for (const char* hex : kPublished)
        if (parse_hex(hex) == key) return true;
    return false;
}

// A key kept like a secret: a regular file, owned by root (or by the user the daemon runs as), that
// neither group nor others may read or write. Its text is the key in hex (whitespace around it is
// ignored).
std::string read_key_file(const TableReader& r, const std::string& key, const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) r.fail(key, "cannot read " + path + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) r.fail(key, path + " is not a regular file");
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    if ((st.st_mode & 077) != 0)
        r.fail(key, path + " has mode " + mode + ": a key must not be open to group or others (chmod 600 " + path + ")");
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
        r.fail(key, path + " is owned by uid " + std::to_string(st.st_uid) + ", not root (chown root " + path + ")");
    std::ifstream in(path);
    std::stringstream ss;
    if (!in || !(ss << in.rdbuf())) r.fail(key, "cannot read " + path + ": " + std::strerror(errno));
    std::string text = ss.str();
    const auto space = [](unsigned char ch) { return std::isspace(ch) != 0; };
    text.erase(text.begin(), std::find_if_not(text.begin(), text.end(), space));
    text.erase(std::find_if_not(text.rbegin(), text.rend(), space).base(), text.end());
    return text;
}

// One of a peer's keys: from a file (<prefix>key_file), a systemd credential (<prefix>key_credential:
// a file the unit's LoadCredential= put in $CREDENTIALS_DIRECTORY) or inline (<prefix>key, with a
// warning), at most one of them; its ID from <prefix>key_id or derived from the key. Nothing given:
// nullopt, unless `required`.
struct ReadKey {
    std::vector<uint8_t> bytes;
    std::string file;
    uint8_t id = 0;
    std::string from;  // the config key it came from, for messages
};
std::optional<ReadKey> read_peer_key(TableReader& r, const std::string& file, const std::string& where,
                                     const std::string& prefix, bool required, std::vector<std::string>& warnings) {
    const std::string k_inline = prefix + "key", k_file = prefix + "key_file", k_cred = prefix + "key_credential";
    const auto inline_key = r.string(k_inline, false);
    const auto key_file = r.string(k_file, false);
    const auto credential = r.string(k_cred, false);
    const auto id = r.integer(prefix + "key_id", false, 1, 255);
    const int sources = (inline_key ? 1 : 0) + (key_file ? 1 : 0) + (credential ? 1 : 0);
    if (sources == 0) {
        if (id) r.fail(prefix + "key_id", "is given without " + k_file + ", " + k_cred + " or " + k_inline);
        if (!required) return std::nullopt;
        r.fail(k_inline, "missing (required): give " + k_file + " (a file of hex, mode 0600, owned by root), " + k_cred +
                             " or " + k_inline);
    }
    if (sources > 1) r.fail(inline_key ? k_inline : k_file, "give one of " + k_inline + ", " + k_file + " and " + k_cred);
    ReadKey out;
    std::string text;
    if (key_file) {
        out.from = k_file;
        if (key_file->empty()) r.fail(out.from, "must not be empty");
        std::filesystem::path path(*key_file);
        if (path.is_relative()) path = std::filesystem::path(file).parent_path() / path;  // beside the config
        out.file = path.lexically_normal().string();
        text = read_key_file(r, out.from, out.file);
    } else if (credential) {
        out.from = k_cred;
        const char* dir = std::getenv("CREDENTIALS_DIRECTORY");
        if (credential->empty() || credential->find('/') != std::string::npos)
            r.fail(out.from, "'" + *credential + "' must be a credential's name (LoadCredential=NAME:PATH)");
        if (dir == nullptr || *dir == '\0')
            r.fail(out.from, "$CREDENTIALS_DIRECTORY is not set: run under systemd with LoadCredential=" + *credential +
                                 ":/etc/fedgate/keys/...");
        out.file = std::string(dir) + "/" + *credential;
        text = read_key_file(r, out.from, out.file);
    } else {
        out.from = k_inline;
        text = *inline_key;
        warnings.push_back(file + ": " + where + "." + k_inline + ": the key is inline in the config; " +
                           "keep it in a " + k_file + " (mode 0600, owned by root) or a systemd credential (" + k_cred + ")");
    }
    if (text.empty()) r.fail(out.from, "must not be empty (hex, at least 16 bytes)");
    out.bytes = parse_hex(text);
    if (out.bytes.empty()) r.fail(out.from, "must be an even number of hex digits");
    if (out.bytes.size() < 16) r.fail(out.from, "is " + std::to_string(out.bytes.size()) + " bytes; at least 16 are needed");
    if (is_published_key(out.bytes))
        r.fail(out.from, "is the example key printed in fedgate's documentation, which anyone can read: make one "
                         "(openssl rand -hex 32) and give the same to the peer");
    out.id = id ? static_cast<uint8_t>(*id) : derived_key_id(out.bytes);
    return out;
}

PeerConfig read_peer(const std::string& file, const toml::table& t, std::size_t i, std::vector<std::string>& warnings) {
    TableReader r(file, t, "peer[" + std::to_string(i) + "]",
                  {"party", "party_id", "address", "key", "key_file", "key_credential", "key_id", "next_key",
                   "next_key_file", "next_key_credential", "next_key_id"});
    PeerConfig p;
    p.party = *r.string("party", true);
    if (!valid_name(p.party)) r.fail("party", "'" + p.party + "' must be 1-32 letters, digits, '-' or '_'");
    p.party_id = static_cast<uint16_t>(*r.integer("party_id", true, 1, 65535));
    const std::string addr = *r.string("address", true);
    const auto ip = parse_ipv4(addr);
    if (!ip) r.fail("address", "'" + addr + "' is not an IPv4 address");
    p.address = *ip;
    const std::string where = "peer[" + std::to_string(i) + "]";
    ReadKey cur = *read_peer_key(r, file, where, "", true, warnings);
    p.key = std::move(cur.bytes);
    p.key_file = std::move(cur.file);
    p.key_id = cur.id;
    // The next key of a rotation: accepted beside the current one until the peer has moved to it.
    if (auto next = read_peer_key(r, file, where, "next_", false, warnings)) {
        if (next->bytes == p.key) r.fail(next->from, "is the same key as " + cur.from + "; give the new key here");
        if (next->id == p.key_id)
            r.fail(next->from, "has key ID " + std::to_string(next->id) + ", the same as " + cur.from +
                                   "'s: set next_key_id (or key_id) to tell them apart; both peers must use the same IDs");
        p.next_key = std::move(next->bytes);
        p.next_key_file = std::move(next->file);
        p.next_key_id = next->id;
    }
    return p;
}

void read_nat(const std::string& file, const toml::table& t, NatSettings& n) {
    TableReader r(file, t, "nat",
                  {"port_range", "max_sessions", "tcp_established_s", "tcp_transitory_s", "tcp_closing_s", "udp_s"});
    if (auto range = r.string("port_range", false)) {
        const auto dash = range->find('-');
        const auto lo = dash == std::string::npos ? std::nullopt : parse_port(range->substr(0, dash));
        const auto hi = dash == std::string::npos ? std::nullopt : parse_port(range->substr(dash + 1));
        if (!lo || !hi || *lo > *hi || *hi - *lo < 1023 || *lo < 1024)
            r.fail("port_range", "'" + *range + "' must be LO-HI within 1024-65535, at least 1024 ports");
        n.port_lo = *lo;
        n.port_hi = *hi;
    }
    r.uint("max_sessions", n.max_sessions, 1024, 16 << 20);
    r.uint("tcp_established_s", n.tcp_established_s, 60, 86'400 * 7);
    r.uint("tcp_transitory_s", n.tcp_transitory_s, 1, 86'400);
    r.uint("udp_s", n.udp_s, 1, 86'400);
    r.uint("tcp_closing_s", n.tcp_closing_s, 1, 86'400);
}

void read_resolve(const std::string& file, const toml::table& t, ResolveSettings& s) {
    TableReader r(file, t, "resolve",
                  {"port", "announce", "cache_capacity", "pending_queries", "query_timeout_ms", "negative_ttl_ms",
                   "answer_ttl_s", "heartbeat_ms", "heartbeat_timeout_ms", "broadcast_rate", "broadcast_burst",
                   "requester_broadcast_rate", "requester_broadcast_burst", "peer_verify_rate", "peer_verify_burst",
                   "sync_interval_ms", "max_clock_skew_ms",
                   "announce_window", "retransmit_ms"});
    if (auto p = r.integer("port", false, 1, 65535)) s.port = static_cast<uint16_t>(*p);
    r.boolean("announce", s.announce);
    r.uint("cache_capacity", s.cache_capacity, 16, 1 << 24);
    r.uint("pending_queries", s.pending_queries, 1, 1 << 16);
    r.uint("query_timeout_ms", s.query_timeout_ms, 10, 60'000);
    r.uint("negative_ttl_ms", s.negative_ttl_ms, 0, 3'600'000);
    r.uint("answer_ttl_s", s.answer_ttl_s, 1, 86'400);
    r.uint("heartbeat_ms", s.heartbeat_ms, 10, 3'600'000);
    r.uint("heartbeat_timeout_ms", s.heartbeat_timeout_ms, 20, 86'400'000);
    r.uint("broadcast_rate", s.broadcast_rate, 0, 1'000'000);
    r.uint("broadcast_burst", s.broadcast_burst, 1, 1'000'000);
    r.uint("requester_broadcast_rate", s.requester_broadcast_rate, 0, 1'000'000);
    r.uint("requester_broadcast_burst", s.requester_broadcast_burst, 1, 1'000'000);
    r.uint("peer_verify_rate", s.peer_verify_rate, 0, 10'000'000);
    r.uint("peer_verify_burst", s.peer_verify_burst, 1, 10'000'000);
    r.uint("sync_interval_ms", s.sync_interval_ms, 10, 3'600'000);
    r.uint("max_clock_skew_ms", s.max_clock_skew_ms, 100, 86'400'000);
    r.uint("announce_window", s.announce_window, 1, 4096);
    r.uint("retransmit_ms", s.retransmit_ms, 1, 60'000);
    if (s.heartbeat_timeout_ms <= s.heartbeat_ms)
        r.fail("heartbeat_timeout_ms", "must be above heartbeat_ms (" + std::to_string(s.heartbeat_ms) + ")");
}

void read_connect(const std::string& file, const toml::table& t, ConnectSettings& s) {
    TableReader r(file, t, "connect",
                  {"auto_ports", "handshake_timeout_ms", "max_handshakes", "rdma_max_connections", "rdma_idle_s"});
    if (auto range = r.string("auto_ports", false)) {
        const auto dash = range->find('-');
        const auto lo = dash == std::string::npos ? std::nullopt : parse_port(range->substr(0, dash));
        const auto hi = dash == std::string::npos ? std::nullopt : parse_port(range->substr(dash + 1));
        if (!lo || !hi || *lo > *hi || *lo < 1024)
            r.fail("auto_ports", "'" + *range + "' must be LO-HI within 1024-65535");
        s.auto_port_lo = *lo;
        s.auto_port_hi = *hi;
    }
    r.uint("handshake_timeout_ms", s.handshake_timeout_ms, 100, 600'000);
    r.uint("max_handshakes", s.max_handshakes, 1, 1 << 20);
    r.uint("rdma_max_connections", s.rdma_max_connections, 1, 1 << 20);
    r.uint("rdma_idle_s", s.rdma_idle_s, 0, 7 * 24 * 3600);
}

void read_log(const std::string& file, const toml::table& t, LogSettings& s) {
    TableReader r(file, t, "log", {"level", "types"});
    const auto level_of = [&](const std::string& key, const std::string& v) {
        const auto l = parse_log_level(v);
        if (!l) r.fail(key, "'" + v + "' is not a log level (" + log_level_list() + ")");
        return *l;
    };
    if (auto l = r.string("level", false)) s.level = level_of("level", *l);
    const toml::node* n = t.get("types");
    if (n == nullptr) return;
    if (!n->is_table()) r.fail("types", "must be a table of log type = \"level\", like { \"fedgate.resolve\" = \"debug\" }");
    std::vector<std::pair<std::string, uint32_t>> globs, names;
    for (const auto& [k, value] : *n->as_table()) {
        const std::string type(k.str());
        const toml::node& v = value;  // a plain reference: lambdas cannot capture structured bindings (clang 14)
        // Named as written in TOML: log.types."fedgate.resolve".
        const auto fail = [&](const std::string& what) {
            throw ConfigError(file, "log.types.\"" + type + "\"", what, v.source().begin.line, v.source().begin.column);
        };
        if (!valid_log_pattern(type))
            fail("not a log type name or glob (1-64 of letters, digits, '_', '.', '-', '*', '?', '[]')");
        if (!v.is_string()) fail("must be a level string (" + log_level_list() + ")");
        const auto l = parse_log_level(v.as_string()->get());
        if (!l) fail("'" + v.as_string()->get() + "' is not a log level (" + log_level_list() + ")");
        // fedgate's own types are known now; a typo in one would otherwise go unnoticed until start-up.
        if (!is_glob(type) && type.starts_with("fedgate.") &&
            std::find(kFedgateLogTypes.begin(), kFedgateLogTypes.end(), type) == kFedgateLogTypes.end()) {
            std::string known;
            for (std::string_view f : kFedgateLogTypes) known += (known.empty() ? "" : ", ") + std::string(f);
            fail("not a fedgate log type (" + known + ")");
        }
        (is_glob(type) ? globs : names).emplace_back(type, *l);
    }
    s.types = std::move(globs);
    s.types.insert(s.types.end(), names.begin(), names.end());
}

void read_metrics(const std::string& file, const toml::table& t, MetricsSettings& s) {
    TableReader r(file, t, "metrics", {"listen"});
    const auto listen = r.string("listen", false);
    if (!listen || listen->empty()) return;  // off
    const auto ep = parse_endpoint(*listen);
    if (!ep)
        r.fail("listen", "'" + *listen + "' is not IP:PORT, like 127.0.0.1:" + std::to_string(kDefaultMetricsPort) +
                             " (an empty string or no key: off)");
    if ((ep->first >> 28) == 0xe || ep->first == UINT32_MAX)
        r.fail("listen", "'" + *listen + "' is not a unicast address (or 0.0.0.0 for every address)");
    s.listen = ep;
}

void read_cluster(const std::string& file, const toml::table& t, ClusterSettings& s, std::vector<std::string>& warnings) {
    TableReader r(file, t, "cluster",
                  {"etcd", "member", "lease_ttl_s", "txn_ops", "sync", "sync_key", "sync_key_file", "sync_key_credential"});
    if (t.empty()) return;  // no [cluster]: alone
    // Types first, so a wrong one is named before a missing key is.
    (void)r.string("member", false);
    (void)r.string("sync", false);
    for (const char* k : {"sync_key", "sync_key_file", "sync_key_credential"}) (void)r.string(k, false);
    r.uint("lease_ttl_s", s.lease_ttl_s, 2, 60);
    r.uint("txn_ops", s.txn_ops, 1, kMaxTxnOps);
    s.etcd = r.string_list("etcd", true);
    if (s.etcd.empty()) r.fail("etcd", "needs at least one endpoint URL, like \"http://198.18.250.11:2379\" (no [cluster] section: a gateway alone)");
    for (const std::string& url : s.etcd)
        if (const std::string why = endpoint_url_problem(url); !why.empty()) r.fail("etcd", "'" + url + "' " + why);
    s.member = *r.string("member", true);
    if (!valid_name(s.member)) r.fail("member", "'" + s.member + "' must be 1-32 of A-Z a-z 0-9 _ -");
    const auto sync = r.string("sync", false);
    if (!sync || sync->empty()) {  // no session events
        if (read_peer_key(r, file, "cluster", "sync_", false, warnings)) r.fail("sync_key", "is given without sync");
        return;
    }
    const auto ep = parse_endpoint(*sync);
    if (!ep || ep->second == 0)
        r.fail("sync", "'" + *sync + "' is not IP:PORT, like 198.18.250.21:7960 (this member's address on the "
                       "management network; no key: no session events)");
    if (ep->first == 0 || (ep->first >> 28) == 0xe || ep->first == UINT32_MAX)
        r.fail("sync", "'" + *sync + "' is not a unicast address: the other members send to it");
    s.sync = ep;
    // Every datagram between the members carries an HMAC-SHA256 under this key: a standby takes the
    // active's records into its cache, so a forged one must not get there.
    ReadKey key = *read_peer_key(r, file, "cluster", "sync_", true, warnings);
    s.sync_key = std::move(key.bytes);
    s.sync_key_file = std::move(key.file);
}

Proto read_proto(TableReader& r) {
    const std::string p = *r.string("proto", true);
    if (p == "tcp") return Proto::tcp;
    if (p == "udp") return Proto::udp;
    r.fail("proto", "'" + p + "' must be \"tcp\" or \"udp\"");
}

// Checks one mapping against the config; a refusal is reported at the key it names.
template <typename M>
void check_at(TableReader& r, const M& m, const Config& c) {
    try {
        check_mapping(m, c);
    } catch (const MapError& e) {
        r.fail(e.field(), std::string(e.what()).substr(e.field().size() + 2));
    }
}

ImportMapping read_import(const std::string& file, const toml::table& t, std::size_t i, const Config& c) {
    TableReader r(file, t, "import[" + std::to_string(i) + "]", {"cluster", "proto", "port", "peer", "peer_port", "allow"});
    ImportMapping m;
    m.cluster = *r.string("cluster", true);
    m.proto = read_proto(r);
    m.port = static_cast<uint16_t>(*r.integer("port", true, 1, 65535));
    m.peer = *r.string("peer", true);
    m.peer_port = static_cast<uint16_t>(*r.integer("peer_port", true, 1, 65535));
    for (const std::string& a : r.string_list("allow", false)) {
        const auto cidr = parse_cidr(a);
        if (!cidr) r.fail("allow", "'" + a + "' is not an IPv4 prefix like 198.18.1.0/24");
        m.allow.push_back(cidr->network());
    }
    check_at(r, m, c);
    return m;
}

ExportMapping read_export(const std::string& file, const toml::table& t, std::size_t i, const Config& c) {
    TableReader r(file, t, "export[" + std::to_string(i) + "]", {"cluster", "proto", "port", "node", "allow_parties"});
    ExportMapping m;
    m.cluster = *r.string("cluster", true);
    m.proto = read_proto(r);
    m.port = static_cast<uint16_t>(*r.integer("port", true, 1, 65535));
    const std::string node = *r.string("node", true);
    const auto ep = parse_endpoint(node);
    if (!ep) r.fail("node", "'" + node + "' is not IP:PORT, like 198.18.2.10:8080");
    m.node = ep->first;
    m.node_port = ep->second;
    m.allow_parties = r.string_list("allow_parties", false);
    check_at(r, m, c);
    return m;
}

void read_mappings(const std::string& file, TableReader& top, const toml::table& root, Config& c) {
    const auto imports = table_array(top, root, "import");
    for (std::size_t i = 0; i < imports.size(); ++i) {
        c.imports.push_back(read_import(file, *imports[i], i, c));
        for (std::size_t j = 0; j < i; ++j)
            if (c.imports[j].proto == c.imports[i].proto && c.imports[j].port == c.imports[i].port)
                TableReader(file, *imports[i], "import[" + std::to_string(i) + "]")
                    .fail("port", std::string(proto_name(c.imports[i].proto)) + "/" + std::to_string(c.imports[i].port) +
                                      " is already mapped by import[" + std::to_string(j) + "]");
    }
    const auto exports = table_array(top, root, "export");
    for (std::size_t i = 0; i < exports.size(); ++i) {
        c.exports.push_back(read_export(file, *exports[i], i, c));
        for (std::size_t j = 0; j < i; ++j)
            if (c.exports[j].proto == c.exports[i].proto && c.exports[j].port == c.exports[i].port)
                TableReader(file, *exports[i], "export[" + std::to_string(i) + "]")
                    .fail("port", std::string(proto_name(c.exports[i].proto)) + "/" + std::to_string(c.exports[i].port) +
                                      " is already mapped by export[" + std::to_string(j) + "]");
    }
}

void check_whole(const std::string& file, const toml::table& root, Config& c) {
    TableReader r(file, root, "");
    const auto port_tables = table_array(r, root, "port");
    const auto fail_at = [&](const std::string& key, std::size_t i, const std::string& what) {
        TableReader(file, *port_tables[i], "port[" + std::to_string(i) + "]").fail(key, what);
    };
    if (c.ports.empty()) r.fail("port", "at least one [[port]] with role \"internal\" and one with \"external\" are required");
    std::size_t external = 0, internal = 0;
    for (std::size_t i = 0; i < c.ports.size(); ++i) {
        const PortConfig& p = c.ports[i];
        (p.role == PortRoleCfg::external ? external : internal)++;
        for (std::size_t j = 0; j < i; ++j) {
            const PortConfig& q = c.ports[j];
            if (q.name == p.name) fail_at("name", i, "'" + p.name + "' is already the name of port[" + std::to_string(j) + "]");
            // Devices are told apart by name ("net_tap0" in "net_tap0,iface=x"), not by their arguments.
            if (q.device.substr(0, q.device.find(',')) == p.device.substr(0, p.device.find(',')))
                fail_at("device", i, "'" + p.device + "' names the same device as port '" + q.name + "'");
            const uint32_t m = ipv4_mask(std::min(p.address.prefix_len, q.address.prefix_len));
            if (((p.address.addr ^ q.address.addr) & m) == 0)
                fail_at("address", i, p.address.str() + " overlaps " + q.address.str() + " of port '" + q.name + "'");
        }
    }
    if (external != 1) r.fail("port", "exactly one [[port]] must have role \"external\" (found " + std::to_string(external) + ")");
    if (internal == 0) r.fail("port", "at least one [[port]] must have role \"internal\"");
    if (std::count_if(c.ports.begin(), c.ports.end(), [](const PortConfig& p) { return p.next_hop.has_value(); }) > 1)
        r.fail("port", "only one port may have a next_hop (the default route)");

    const auto peer_tables = table_array(r, root, "peer");
    for (std::size_t i = 0; i < c.peers.size(); ++i) {
        TableReader pr(file, *peer_tables[i], "peer[" + std::to_string(i) + "]");
        const PeerConfig& p = c.peers[i];
        if (p.party == c.party || p.party_id == c.party_id)
            pr.fail(p.party == c.party ? "party" : "party_id", "a peer cannot be this gateway's own party");
        for (std::size_t j = 0; j < i; ++j) {
            if (c.peers[j].party == p.party) pr.fail("party", "'" + p.party + "' is listed twice");
            if (c.peers[j].party_id == p.party_id) pr.fail("party_id", std::to_string(p.party_id) + " is listed twice");
            if (c.peers[j].address == p.address) pr.fail("address", format_ipv4(p.address) + " is listed twice");
        }
    }
    if (c.peers.size() > 64) r.fail("peer", "at most 64 peers (found " + std::to_string(c.peers.size()) + ")");
    if (c.resolve.port >= c.nat.port_lo && c.resolve.port <= c.nat.port_hi) {
        const toml::table empty;
        TableReader(file, sub_table(r, root, "resolve", false, empty), "resolve")
            .fail("port", std::to_string(c.resolve.port) + " lies inside nat.port_range " + std::to_string(c.nat.port_lo) +
                              "-" + std::to_string(c.nat.port_hi) + ", which session ports come from");
    }
    const toml::table empty;
    if (c.metrics.listen)
        for (const PortConfig& p : c.ports)
            if (p.address.addr == c.metrics.listen->first)
                TableReader(file, sub_table(r, root, "metrics", false, empty), "metrics")
                    .fail("listen", format_ipv4(p.address.addr) + " is port '" + p.name +
                                        "' of the data plane, which the kernel does not see; the endpoint is a "
                                        "kernel socket in the gateway's network namespace: use one of its own "
                                        "addresses, such as 127.0.0.1");
    const ConnectSettings& k = c.connect;
    const auto fail_connect = [&](const std::string& what) {
        TableReader(file, sub_table(r, root, "connect", false, empty), "connect").fail("auto_ports", what);
    };
    const std::string range = std::to_string(k.auto_port_lo) + "-" + std::to_string(k.auto_port_hi);
    if (k.auto_port_lo <= c.nat.port_hi && k.auto_port_hi >= c.nat.port_lo)
        fail_connect(range + " overlaps nat.port_range " + std::to_string(c.nat.port_lo) + "-" +
                     std::to_string(c.nat.port_hi) + ", which session ports come from");
}

}  // namespace

Config parse_config(const std::string& text, const std::string& source_name) {
    toml::table root;
    try {
        root = toml::parse(text, source_name);
    } catch (const toml::parse_error& e) {
        throw ConfigError(source_name, "", std::string(e.description()), e.source().begin.line, e.source().begin.column);
    }
    Config c;
    c.source = source_name;
    TableReader top(source_name, root, "",
                    {"gateway", "eal", "dataplane", "nat", "resolve", "connect", "log", "metrics", "cluster", "port", "peer",
                     "import", "export"});
    const toml::table empty;
    read_gateway(source_name, sub_table(top, root, "gateway", true, empty), c);
    {
        TableReader eal(source_name, sub_table(top, root, "eal", true, empty), "eal", {"args"});
        c.eal_args = eal.string_list("args", true);
    }
    read_dataplane(source_name, sub_table(top, root, "dataplane", false, empty), c.dataplane);
    const auto ports = table_array(top, root, "port");
    for (std::size_t i = 0; i < ports.size(); ++i) c.ports.push_back(read_port(source_name, *ports[i], i));
    const auto peers = table_array(top, root, "peer");
    for (std::size_t i = 0; i < peers.size(); ++i) c.peers.push_back(read_peer(source_name, *peers[i], i, c.warnings));
    read_nat(source_name, sub_table(top, root, "nat", false, empty), c.nat);
    read_resolve(source_name, sub_table(top, root, "resolve", false, empty), c.resolve);
    read_connect(source_name, sub_table(top, root, "connect", false, empty), c.connect);
    read_log(source_name, sub_table(top, root, "log", false, empty), c.log);
    read_metrics(source_name, sub_table(top, root, "metrics", false, empty), c.metrics);
    read_cluster(source_name, sub_table(top, root, "cluster", false, empty), c.cluster, c.warnings);
    check_whole(source_name, root, c);
    read_mappings(source_name, top, root, c);  // after the ports and peers they refer to are checked
    return c;
}

std::string ClusterSettings::endpoints_text() const {
    std::string s;
    for (const auto& e : etcd) s += (s.empty() ? "" : ",") + e;
    return s;
}

std::string endpoint_url_problem(const std::string& url) {
    std::string rest;
    if (url.starts_with("http://"))
        rest = url.substr(7);
    else if (url.starts_with("https://"))
        rest = url.substr(8);
    else
        return "must start with http:// or https://";
    const auto colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0) return "must name a host and a port, like http://198.18.250.11:2379";
    const std::string host = rest.substr(0, colon), port = rest.substr(colon + 1);
    if (host.find_first_of("/?#@ ") != std::string::npos) return "has a path or user part: give only scheme://HOST:PORT";
    if (!parse_port(port) || *parse_port(port) == 0) return "has no valid port after the host (1-65535)";
    return "";
}

Config load_config_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw ConfigError(path, "", "cannot open: " + std::string(std::strerror(errno)));
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_config(ss.str(), path);
}

}  // namespace fedgate
