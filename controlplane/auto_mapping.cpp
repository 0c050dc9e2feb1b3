// Automatic import and export mappings for the tcp transport of the connection handshake.
#include "controlplane/auto_mapping.hpp"

#include "controlplane/log.hpp"

namespace fedgate {

AutoMappings::AutoMappings(const Config& cfg, PortMapTable& table)
    : cfg_(cfg), table_(table), next_(cfg.connect.auto_port_lo) {}

template <typename Add>
std::optional<uint16_t> AutoMappings::allocate(const char* kind, Add add) {
    const uint16_t lo = cfg_.connect.auto_port_lo, hi = cfg_.connect.auto_port_hi;
    // A port someone else takes between the look and the add is looked past; a range a person
    // fills at the same time ends the loop (each turn either returns or finds a port taken).
    for (uint32_t tries = 0; tries <= uint32_t{hi} - lo; ++tries) {
        const auto port = table_.free_port(kind, Proto::tcp, lo, hi, next_);
        if (!port) break;
        next_ = static_cast<uint16_t>(*port == hi ? lo : *port + 1);
        try {
            add(*port);
            return *port;
        } catch (const MapError& e) {
            if (table_.taken(kind, Proto::tcp, *port)) continue;  // someone took it just now
            // Checked like any mapping: a refusal here is not about the port, so another port will not help.
            ++counters_.refused;
            FG_LOG(WARNING, gateway, "automatic %s mapping refused: %s", kind, e.what());
            return std::nullopt;
        }
    }
    ++counters_.ports_exhausted;
    return std::nullopt;
}

void AutoMappings::process_registered(const DmaAddress& r) {
    const auto it = exports_.find(r.pid.value);
    if (r.transport != Transport::tcp || r.port == 0) {
        if (it != exports_.end()) process_left(r.pid);
        return;
    }
    if (it != exports_.end()) {
        if (it->second.node == r.ipv4 && it->second.node_port == r.port) return;
        process_left(r.pid);  // it moved: a new endpoint gets a new port
    }
    const auto port = allocate("export", [&](uint16_t p) {
        ExportMapping m;
        m.cluster = kAutoCluster;
        m.proto = Proto::tcp;
        m.port = p;
        m.node = r.ipv4;
        m.node_port = r.port;
        table_.add_automatic(m);
    });
    if (!port) return;
    exports_[r.pid.value] = Export{*port, r.ipv4, r.port};
    ++counters_.exports_made;
}

void AutoMappings::process_left(ProcessId pid) {
    if (const auto it = exports_.find(pid.value); it != exports_.end()) {
        table_.remove_automatic("export", Proto::tcp, it->second.port);
        exports_.erase(it);
        ++counters_.exports_removed;
    }
    for (auto it = imports_.begin(); it != imports_.end();) {
        const auto next = std::next(it);
        if (it->second.users.erase(pid.value) != 0 && it->second.users.empty()) remove_import(it);
        it = next;
    }
}

void AutoMappings::peer_process_left(ProcessId pid) {
    for (auto it = imports_.begin(); it != imports_.end();) {
        const auto next = std::next(it);
        if (it->second.target == pid) remove_import(it);
        it = next;
    }
}

std::size_t AutoMappings::peer_removed(uint16_t party) {
    std::size_t n = 0;
    for (auto it = imports_.begin(); it != imports_.end();) {
        const auto next = std::next(it);
        if (it->first.first == party) {
            remove_import(it);
            ++n;
        }
        it = next;
    }
    return n;
}

void AutoMappings::remove_import(std::map<ImportKey, Import>::iterator it) {
    table_.remove_automatic("import", Proto::tcp, it->second.port);
    imports_.erase(it);
    ++counters_.imports_removed;
}

std::optional<uint16_t> AutoMappings::exported_port(ProcessId pid) const {
    const auto it = exports_.find(pid.value);
    if (it == exports_.end()) return std::nullopt;
    return it->second.port;
}

std::optional<uint16_t> AutoMappings::import_port(const PeerConfig& peer, uint16_t peer_port, ProcessId target,
                                                  ProcessId initiator) {
    const ImportKey key{peer.party_id, peer_port};
    if (auto it = imports_.find(key); it != imports_.end()) {
        it->second.users.insert(initiator.value);
        it->second.target = target;
        return it->second.port;
    }
    const auto port = allocate("import", [&](uint16_t p) {
        ImportMapping m;
        m.cluster = kAutoCluster;
        m.proto = Proto::tcp;
        m.port = p;
        m.peer = peer.party;
        m.peer_port = peer_port;
        table_.add_automatic(m);
    });
    if (!port) return std::nullopt;
    imports_[key] = Import{*port, target, {initiator.value}};
    ++counters_.imports_made;
    return port;
}

nlohmann::ordered_json AutoMappings::stats() const {
    const AutoMappingCounters& c = counters_;
    return {{"exports", exports_.size()},         {"imports", imports_.size()},
            {"exports_made", c.exports_made},     {"exports_removed", c.exports_removed},
            {"imports_made", c.imports_made},     {"imports_removed", c.imports_removed},
            {"ports_exhausted", c.ports_exhausted}, {"refused", c.refused}};
}

}  // namespace fedgate
