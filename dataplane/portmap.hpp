// The port-map tables as the data plane reads them: one slot per (protocol, port) holding a pointer
// to an immutable rule. Lcores read with one acquire load; control threads publish a new rule with
// one release store and free the old one only after every lcore has passed a quiescent state (RCU).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

namespace fedgate {

enum class L4Proto : uint8_t { tcp = 0, udp = 1 };
inline constexpr std::size_t kL4Protos = 2;

inline constexpr std::size_t kMaxImportAllow = 8;  // source prefixes per import rule
inline constexpr std::size_t kMaxExportPeers = 16; // peer gateways per export rule

// Import (on A): internal-address:P -> peer gateway's external address:Q. Network byte order.
struct ImportRule {
    uint32_t peer_addr = 0;
    uint16_t peer_port = 0;
    uint16_t peer_id = 0;  // party ID, host order, for counters and listings
    uint8_t n_allow = 0;   // 0: any node on the internal port's subnet
    struct Prefix {
        uint32_t net = 0, mask = 0;
    } allow[kMaxImportAllow];

    bool allows(uint32_t src) const {
        if (n_allow == 0) return true;
        for (uint8_t i = 0; i < n_allow; ++i)
            if ((src & allow[i].mask) == allow[i].net) return true;
        return false;
    }
};

// Export (on B): external-address:Q -> node:R, only from the listed peer gateways. Network order.
struct ExportRule {
    uint32_t node_addr = 0;
    uint16_t node_port = 0;
    uint8_t n_peers = 0;
    uint32_t peer_addrs[kMaxExportPeers] = {};

    bool allows(uint32_t src) const {
        for (uint8_t i = 0; i < n_peers; ++i)
            if (peer_addrs[i] == src) return true;
        return false;
    }
};

class PortMapView {
public:
    PortMapView() : import_(new Slots<ImportRule>()), export_(new Slots<ExportRule>()) {}

    // Lcore side. `port` in network byte order, as read from the packet.
    const ImportRule* import_rule(L4Proto p, uint16_t port) const {
        return (*import_)[static_cast<std::size_t>(p)][port].load(std::memory_order_acquire);
    }
    const ExportRule* export_rule(L4Proto p, uint16_t port) const {
        return (*export_)[static_cast<std::size_t>(p)][port].load(std::memory_order_acquire);
    }

    // Control side (one writer at a time). Returns the rule replaced, which the caller frees after
    // an RCU grace period.
    const ImportRule* publish(L4Proto p, uint16_t port, const ImportRule* r) {
        return (*import_)[static_cast<std::size_t>(p)][port].exchange(r, std::memory_order_acq_rel);
    }
    const ExportRule* publish(L4Proto p, uint16_t port, const ExportRule* r) {
        return (*export_)[static_cast<std::size_t>(p)][port].exchange(r, std::memory_order_acq_rel);
    }

private:
    template <typename R>
    using Slots = std::array<std::array<std::atomic<const R*>, 65536>, kL4Protos>;
    std::unique_ptr<Slots<ImportRule>> import_;  // indexed by the port's network-order value
    std::unique_ptr<Slots<ExportRule>> export_;
};

}  // namespace fedgate
