// Port mappings the gateway makes itself so that the tcp transport works across parties (source
// "auto" in `fedgatectl map list`). A process that registers a tcp endpoint is exported on a port
// of [connect] auto_ports of the external address; when one of our processes connects to a peer's
// process, the peer's exported port is imported on a port of the same range of our internal
// address. Exports go when their process leaves; imports when the target leaves (its party
// withdraws it) or when the last of our processes that used it leaves.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "controlplane/portmap_table.hpp"
#include "proto/resolve_wire.hpp"

namespace fedgate {

inline constexpr const char* kAutoCluster = "auto";

struct AutoMappingCounters {
    uint64_t exports_made = 0, exports_removed = 0, imports_made = 0, imports_removed = 0, ports_exhausted = 0,
             refused = 0;
};

class AutoMappings {
public:
    AutoMappings(const Config& cfg, PortMapTable& table);

    // A local process registered (or re-registered): a tcp record gets its endpoint exported; the
    // same endpoint keeps its port, a changed one moves. Other transports: nothing (a roce_v2
    // record's GID and QPN pass through unchanged; the parties' RDMA fabric is routed).
    void process_registered(const DmaAddress& record);
    // A local process left: its export goes, and it stops using any import.
    void process_left(ProcessId pid);
    // A peer's process left (withdrawn by its party): imports that reach it go.
    void peer_process_left(ProcessId pid);
    // A reload removed the peer party: imports that reach its processes go. Returns how many.
    std::size_t peer_removed(uint16_t party);

    std::optional<uint16_t> exported_port(ProcessId pid) const;
    // The internal port through which `initiator` reaches the peer party's exported `peer_port`
    // (serving `target`); made on first use. Empty when no port is free.
    std::optional<uint16_t> import_port(const PeerConfig& peer, uint16_t peer_port, ProcessId target, ProcessId initiator);

    nlohmann::ordered_json stats() const;
    const AutoMappingCounters& counters() const { return counters_; }

private:
    struct Export {
        uint16_t port = 0;
        uint32_t node = 0;
        uint16_t node_port = 0;
    };
    struct Import {
        uint16_t port = 0;
        ProcessId target;
        std::set<uint64_t> users;  // our initiators
    };
    using ImportKey = std::pair<uint16_t, uint16_t>;  // peer party, peer port

    // Tries free ports of the range round-robin with `add`; the first it takes wins.
    template <typename Add>
    std::optional<uint16_t> allocate(const char* kind, Add add);
    void remove_import(std::map<ImportKey, Import>::iterator it);

    const Config& cfg_;
    PortMapTable& table_;
    uint16_t next_ = 0;
    std::unordered_map<uint64_t, Export> exports_;
    std::map<ImportKey, Import> imports_;
    AutoMappingCounters counters_;
};

}  // namespace fedgate
