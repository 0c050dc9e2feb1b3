// The config a running gateway goes by: as it started, as the last reload (`fedgatectl reload`,
// SIGHUP) left it, and the reload that moves from one to the next. What a reload may change is
// decided in reload.hpp; this applies it to the gateway's parts, or refuses it changing nothing.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "controlplane/config.hpp"

namespace fedgate {

class PortMapTable;
class ResolutionService;

// [log]: the levels it names, after the EAL has registered its types. Throws std::runtime_error
// naming a type that no registered one matches.
void apply_log_config(const LogSettings& l);

class LiveConfig {
public:
    // What a reload applies a new config to: the gateway's parts, attached once start-up has made
    // them and before anything can ask for a reload.
    struct Targets {
        // Gives every worker the peer table of `c`; throws MgmtError when a worker does not take it.
        std::function<void(const Config& c)> set_worker_peers;
        PortMapTable* table = nullptr;
        ResolutionService* resolution = nullptr;
        std::function<uint64_t()> now_ms;      // the lcore's clock
        std::function<std::string()> summary;  // systemd's status line once a reload is over
    };

    // `started` is the config as the gateway started, which outlives this.
    explicit LiveConfig(const Config& started);
    LiveConfig(const LiveConfig&) = delete;
    LiveConfig& operator=(const LiveConfig&) = delete;

    void attach(Targets targets);

    // The config as the last reload left it. Only peers, mappings and log levels ever differ from
    // the config as started; a reader that needs them takes this snapshot, which never changes under it.
    std::shared_ptr<const Config> snapshot() const;

    // `fedgatectl reload`: re-reads the config's source and applies its peers, mappings and log
    // levels, or refuses the whole file (a parse error, or a change only a restart can make)
    // changing nothing. Throws MgmtError with the reason when it refuses.
    nlohmann::ordered_json reload();

private:
    // As started. A reload refuses any change to what the running gateway was built from, so every
    // field but peers, mappings and [log] stays true; those are read from snapshot().
    const Config& cfg_;
    Targets to_;
    mutable std::mutex live_mu_;
    std::shared_ptr<const Config> live_;  // under live_mu_
    std::mutex reload_mu_;                // one reload at a time
};

}  // namespace fedgate
