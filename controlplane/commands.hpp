// The management commands: each request that fedgatectl (the management socket), DPDK telemetry and
// the metrics endpoint make of a running gateway, dispatched by name, answered from the gateway's
// parts or handed to the part that owns the command (port maps, capture, reload, the group).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "controlplane/config.hpp"
#include "dataplane/dataplane.hpp"
#include "drivers/port.hpp"

struct rte_ether_addr;

namespace fedgate {

class CaptureService;
class ClusterService;
class LiveConfig;
class Pinger;
class PortMapTable;
class ResolutionService;

// The most entries one listing request (session_list, dir_list) returns; telemetry pages within it.
inline constexpr uint32_t kMaxListed = 100'000;
// How long a request waits for a data-plane worker to take and answer it.
inline constexpr auto kRequestTimeout = std::chrono::seconds(5);

std::string mac_str(const rte_ether_addr& a);  // "02:00:00:00:00:01"

class Commands {
public:
    // Hands `r` to worker `w` and waits until it is done; throws MgmtError if it takes too long.
    using AskWorker = std::function<std::unique_ptr<DpRequest>(std::unique_ptr<DpRequest> r,
                                                               std::chrono::milliseconds timeout, std::size_t w)>;

    // What the commands read and ask: the gateway's parts as its start-up made them. Each outlives
    // the Commands.
    struct Parts {
        const Config& cfg;  // as started; peers come from live
        LiveConfig& live;
        const std::vector<PortHandle>& ports;  // ports[i] is cfg.ports[i], brought up
        std::vector<const Dataplane*> workers;  // workers[0] takes injected packets; the counter table sums them
        const std::vector<unsigned>& dp_lcores;  // worker i runs on dp_lcores[i]
        std::chrono::steady_clock::time_point started;
        PortMapTable* table;
        ResolutionService* resolution;
        CaptureService* capture;
        ClusterService* cluster;  // null unless [cluster] names a store
        Pinger* pinger;
        AskWorker ask_worker;
        std::function<uint64_t()> now_ms;  // the lcore's clock
    };

    explicit Commands(Parts parts);

    // One management request (already parsed); returns the result object or throws with a message.
    nlohmann::ordered_json handle(const nlohmann::ordered_json& request);
    // The status and stats replies, which the metrics endpoint renders too.
    nlohmann::ordered_json status() const;
    nlohmann::ordered_json stats() const;

private:
    nlohmann::ordered_json ping(const nlohmann::ordered_json& request);
    nlohmann::ordered_json session_list(const nlohmann::ordered_json& request);
    nlohmann::ordered_json resolve(const nlohmann::ordered_json& request);
    nlohmann::ordered_json dir(const nlohmann::ordered_json& request);
    nlohmann::ordered_json conn_list(const nlohmann::ordered_json& request);
    nlohmann::ordered_json log_level(const nlohmann::ordered_json& request);

    Parts p_;
};

}  // namespace fedgate
