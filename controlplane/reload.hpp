// `fedgatectl reload`: what a re-read config changes against the running one — what can be applied
// live (peers, mappings, log levels) and what is refused because only a restart can change it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "controlplane/config.hpp"

namespace fedgate {

// One change a reload applies, as the reply lists it.
struct ReloadChange {
    std::string kind;    // "peer", "import", "export", "log"
    std::string name;    // party; "tcp/8080"; log type or "fedgate.*"
    std::string change;  // "added", "removed", "changed (key, address)", "set to debug"
    std::string text() const;  // "peer gamma added", "import tcp/8080 removed", "log fedgate.resolve set to debug"
    bool operator==(const ReloadChange&) const = default;
};

struct ConfigDiff {
    // Settings that differ and cannot change while running, each "[section] key: cannot change
    // while running; restart fedgated". Any at all refuses the whole reload.
    std::vector<std::string> refused;
    std::vector<ReloadChange> changes;  // peers, then config mappings, then log levels
    bool peers_changed = false;
    bool log_changed = false;
};

// `running` against `next` (a config already parsed and checked in full).
ConfigDiff diff_config(const Config& running, const Config& next);

// The reply's "changes" array.
nlohmann::ordered_json changes_json(const std::vector<ReloadChange>& changes);

}  // namespace fedgate
