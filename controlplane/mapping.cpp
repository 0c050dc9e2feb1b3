// Mapping checks, JSON and rule building.
#include "controlplane/mapping.hpp"

#include <rte_byteorder.h>

#include <algorithm>

namespace fedgate {
namespace {

void check_common(const std::string& cluster, uint16_t port) {
    if (!valid_name(cluster)) throw MapError("cluster", "'" + cluster + "' must be 1-32 letters, digits, '-' or '_'");
    // A mapped port may lie inside [nat] port_range: session-port allocation skips mapped ones.
    if (port == 0) throw MapError("port", "must be 1..65535");
}

const nlohmann::ordered_json& field(const nlohmann::ordered_json& j, const char* name) {
    if (!j.is_object() || !j.contains(name)) throw MapError(name, "missing");
    return j.at(name);
}

std::string string_field(const nlohmann::ordered_json& j, const char* name) {
    const auto& v = field(j, name);
    if (!v.is_string()) throw MapError(name, "must be a string");
    return v.get<std::string>();
}

std::vector<std::string> string_list(const nlohmann::ordered_json& j, const char* name) {
    std::vector<std::string> out;
    if (!j.contains(name)) return out;
    const auto& v = j.at(name);
    if (!v.is_array()) throw MapError(name, "must be a list of strings");
    for (const auto& e : v) {
        if (!e.is_string()) throw MapError(name, "must be a list of strings");
        out.push_back(e.get<std::string>());
    }
    return out;
}

}  // namespace

const char* proto_name(Proto p) { return p == Proto::tcp ? "tcp" : "udp"; }
const char* source_name(MapSource s) {
    return s == MapSource::config ? "config" : s == MapSource::cli ? "cli" : "auto";
}

std::string mapping_key(const char* kind, Proto proto, uint16_t port) {
    return std::string(kind) + " " + proto_name(proto) + "/" + std::to_string(port);
}

// The resolution service owns its UDP port on the gateway's addresses.
static void check_not_resolve_port(Proto proto, uint16_t port, const Config& c) {
    if (proto == Proto::udp && port == c.resolve.port)
        throw MapError("port", "udp " + std::to_string(port) + " is the resolution service's port ([resolve] port)");
}

void check_mapping(const ImportMapping& m, const Config& c) {
    check_common(m.cluster, m.port);
    check_not_resolve_port(m.proto, m.port, c);
    if (c.peer(m.peer) == nullptr) throw MapError("peer", "'" + m.peer + "' is not a configured peer party");
    if (m.peer_port == 0) throw MapError("peer_port", "must be 1..65535");
    if (m.allow.size() > kMaxImportAllow)
        throw MapError("allow", "at most " + std::to_string(kMaxImportAllow) + " prefixes");
    for (const Ipv4Cidr& a : m.allow)
        if (a.addr != a.network().addr)
            throw MapError("allow", a.str() + " has host bits set (the prefix is " + a.network().str() + ")");
}

void check_mapping(const ExportMapping& m, const Config& c) {
    check_common(m.cluster, m.port);
    check_not_resolve_port(m.proto, m.port, c);
    const bool inside = std::any_of(c.ports.begin(), c.ports.end(), [&](const PortConfig& p) {
        const uint32_t mask = p.address.mask();
        const bool net_or_bcast = p.address.prefix_len < 31 && ((m.node & ~mask) == 0 || (m.node & ~mask) == ~mask);
        return p.role == PortRoleCfg::internal && ((m.node ^ p.address.addr) & mask) == 0 &&
               m.node != p.address.addr && !net_or_bcast;
    });
    if (!inside) throw MapError("node", format_ipv4(m.node) + " is not a node address on an internal port's subnet");
    if (m.node_port == 0) throw MapError("node", "port must be 1..65535");
    if (m.allow_parties.size() > kMaxExportPeers)
        throw MapError("allow_parties", "at most " + std::to_string(kMaxExportPeers) + " parties");
    for (std::size_t i = 0; i < m.allow_parties.size(); ++i) {
        const std::string& p = m.allow_parties[i];
        if (c.peer(p) == nullptr) throw MapError("allow_parties", "'" + p + "' is not a configured peer party");
        if (std::find(m.allow_parties.begin(), m.allow_parties.begin() + static_cast<long>(i), p) !=
            m.allow_parties.begin() + static_cast<long>(i))
            throw MapError("allow_parties", "'" + p + "' is listed twice");
    }
}

nlohmann::ordered_json to_json(const ImportMapping& m, const Config& c) {
    nlohmann::ordered_json allow = nlohmann::ordered_json::array();
    for (const auto& a : m.allow) allow.push_back(a.str());
    const PeerConfig* peer = c.peer(m.peer);
    return {{"kind", "import"},       {"cluster", m.cluster},   {"proto", proto_name(m.proto)},
            {"port", m.port},         {"peer", m.peer},         {"peer_id", peer != nullptr ? peer->party_id : 0},
            {"peer_port", m.peer_port}, {"allow", allow},       {"source", source_name(m.source)}};
}

nlohmann::ordered_json to_json(const ExportMapping& m) {
    return {{"kind", "export"},
            {"cluster", m.cluster},
            {"proto", proto_name(m.proto)},
            {"port", m.port},
            {"node", format_ipv4(m.node) + ":" + std::to_string(m.node_port)},
            {"allow_parties", m.allow_parties},
            {"source", source_name(m.source)}};
}

Proto proto_from_json(const nlohmann::ordered_json& j, const char* name) {
    const std::string p = string_field(j, name);
    if (p == "tcp") return Proto::tcp;
    if (p == "udp") return Proto::udp;
    throw MapError(name, "'" + p + "' must be tcp or udp");
}

uint16_t port_from_json(const nlohmann::ordered_json& j, const char* name) {
    const auto& v = field(j, name);
    if (!v.is_number_unsigned() || v.get<uint64_t>() < 1 || v.get<uint64_t>() > 65535)
        throw MapError(name, "must be an integer 1..65535");
    return v.get<uint16_t>();
}

ImportMapping import_from_json(const nlohmann::ordered_json& j) {
    ImportMapping m;
    m.cluster = string_field(j, "cluster");
    m.proto = proto_from_json(j, "proto");
    m.port = port_from_json(j, "port");
    m.peer = string_field(j, "peer");
    m.peer_port = port_from_json(j, "peer_port");
    for (const std::string& a : string_list(j, "allow")) {
        const auto cidr = parse_cidr(a);
        if (!cidr) throw MapError("allow", "'" + a + "' is not an IPv4 prefix like 198.18.1.0/24");
        m.allow.push_back(cidr->network());
    }
    return m;
}

ExportMapping export_from_json(const nlohmann::ordered_json& j) {
    ExportMapping m;
    m.cluster = string_field(j, "cluster");
    m.proto = proto_from_json(j, "proto");
    m.port = port_from_json(j, "port");
    const std::string node = string_field(j, "node");
    const auto ep = parse_endpoint(node);
    if (!ep) throw MapError("node", "'" + node + "' is not IP:PORT");
    m.node = ep->first;
    m.node_port = ep->second;
    m.allow_parties = string_list(j, "allow_parties");
    return m;
}

ImportRule make_rule(const ImportMapping& m, const Config& c) {
    const PeerConfig& peer = *c.peer(m.peer);
    ImportRule r;
    r.peer_addr = rte_cpu_to_be_32(peer.address);
    r.peer_port = rte_cpu_to_be_16(m.peer_port);
    r.peer_id = peer.party_id;
    r.n_allow = static_cast<uint8_t>(m.allow.size());
    for (std::size_t i = 0; i < m.allow.size(); ++i) {
        const uint32_t mask = m.allow[i].mask();
        r.allow[i] = {rte_cpu_to_be_32(m.allow[i].addr & mask), rte_cpu_to_be_32(mask)};
    }
    return r;
}

ExportRule make_rule(const ExportMapping& m, const Config& c) {
    ExportRule r;
    r.node_addr = rte_cpu_to_be_32(m.node);
    r.node_port = rte_cpu_to_be_16(m.node_port);
    if (m.allow_parties.empty()) {
        for (const PeerConfig& p : c.peers)
            if (r.n_peers < kMaxExportPeers) r.peer_addrs[r.n_peers++] = rte_cpu_to_be_32(p.address);
    } else {
        for (const std::string& name : m.allow_parties) r.peer_addrs[r.n_peers++] = rte_cpu_to_be_32(c.peer(name)->address);
    }
    return r;
}

}  // namespace fedgate
