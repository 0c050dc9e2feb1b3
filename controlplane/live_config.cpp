// The running config and its reload: the snapshot readers take, and the steps that apply a new one.
#include "controlplane/live_config.hpp"

#include <stdexcept>

#include "controlplane/log.hpp"
#include "controlplane/mapping.hpp"
#include "controlplane/mgmt_server.hpp"
#include "controlplane/portmap_table.hpp"
#include "controlplane/reload.hpp"
#include "controlplane/resolution.hpp"
#include "controlplane/service.hpp"

namespace fedgate {

void apply_log_config(const LogSettings& l) {
    if (l.level) set_log_level("fedgate.*", *l.level);
    for (const auto& [type, level] : l.types)
        if (set_log_level(type, level).empty())
            throw std::runtime_error("log.types.\"" + type + "\": no registered log type " +
                                     (is_glob(type) ? "matches it" : "has that name") +
                                     " (fedgatectl log list shows them on a running gateway)");
}

LiveConfig::LiveConfig(const Config& started) : cfg_(started), live_(std::make_shared<const Config>(started)) {}

void LiveConfig::attach(Targets targets) { to_ = std::move(targets); }

std::shared_ptr<const Config> LiveConfig::snapshot() const {
    std::lock_guard lk(live_mu_);
    return live_;
}

// Order matters: each step that can fail comes before anything that cannot be undone. The lcore's
// peer table first (undone by swapping the old one back), then the port maps (which change nothing
// when they fail), then what cannot fail: the announce streams, the snapshot, the log levels.
nlohmann::ordered_json LiveConfig::reload() {
    std::lock_guard serial(reload_mu_);
    // systemd sees the reload (RELOADING=1), and READY=1 again when it is over, applied or refused.
    service::reloading("reloading " + cfg_.source);
    struct Ready {
        const Targets& to;
        ~Ready() { service::ready(to.summary()); }
    } ready_again{to_};
    const std::shared_ptr<const Config> running = snapshot();
    const auto refuse = [&](const std::string& why) {
        FG_LOG(WARNING, gateway, "reload of %s refused: %s", cfg_.source.c_str(), why.c_str());
        return MgmtError("reload refused, nothing changed: " + why);
    };
    std::shared_ptr<const Config> next;
    try {
        next = std::make_shared<const Config>(load_config_file(cfg_.source));
    } catch (const ConfigError& e) {
        throw refuse(e.what());
    }
    const ConfigDiff diff = diff_config(*running, *next);
    if (!diff.refused.empty()) {
        std::string all;
        for (const std::string& r : diff.refused) all += (all.empty() ? "" : "; ") + r;
        throw refuse(all);
    }
    if (diff.log_changed)
        for (const auto& [type, level] : next->log.types)
            if (!log_pattern_matches(type))
                throw refuse(cfg_.source + ": log.types.\"" + type + "\": no registered log type " +
                             (is_glob(type) ? "matches it" : "has that name") + " (fedgatectl log list shows them)");

    if (diff.peers_changed) {
        try {
            to_.set_worker_peers(*next);
        } catch (const MgmtError& e) {
            throw refuse(std::string("the data plane did not take the new peers: ") + e.what());
        }
    }
    std::vector<std::string> dropped;
    try {
        to_.table->reload(next, &dropped);
    } catch (const MapError& e) {
        if (diff.peers_changed) to_.set_worker_peers(*running);
        throw refuse(std::string("port maps: ") + e.what());
    }
    if (diff.peers_changed) to_.resolution->reload(next, to_.now_ms());
    {
        std::lock_guard lk(live_mu_);
        live_ = next;
    }
    if (diff.log_changed) apply_log_config(next->log);
    for (const ReloadChange& c : diff.changes) FG_LOG(NOTICE, gateway, "reload: %s", c.text().c_str());
    for (const std::string& d : dropped) FG_LOG(NOTICE, gateway, "reload: %s", d.c_str());
    nlohmann::ordered_json dropped_json = nlohmann::ordered_json::array();
    for (const std::string& d : dropped) dropped_json.push_back(d);
    return {{"config", cfg_.source}, {"changes", changes_json(diff.changes)}, {"dropped", dropped_json}};
}

}  // namespace fedgate
