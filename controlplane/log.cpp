// Registration of fedgate's log types with rte_log, and levels by name for the config and fedgatectl.
#include "controlplane/log.hpp"

#include <fnmatch.h>

#include <cstdio>
#include <cstdlib>

namespace fedgate {

const LogTypes& log_types() {
    static const LogTypes types = [] {
        LogTypes t;
        const auto reg = [](std::string_view name, int fallback) {
            const int id = rte_log_register_type_and_pick_level(std::string(name).c_str(), RTE_LOG_INFO);
            return id < 0 ? fallback : id;
        };
        t.gateway = reg(kFedgateLogTypes[0], t.gateway);
        t.dataplane = reg(kFedgateLogTypes[1], t.dataplane);
        t.mgmt = reg(kFedgateLogTypes[2], t.mgmt);
        t.resolve = reg(kFedgateLogTypes[3], t.resolve);
        t.connect = reg(kFedgateLogTypes[4], t.connect);
        t.metrics = reg(kFedgateLogTypes[5], t.metrics);
        return t;
    }();
    return types;
}

namespace {

// rte_log has no getter for a type's name; rte_log_list_types prints them, one a line.
std::vector<std::string> registered_names() {
    char* buf = nullptr;
    std::size_t len = 0;
    FILE* f = open_memstream(&buf, &len);
    if (f == nullptr) return {};
    rte_log_list_types(f, "");
    std::fclose(f);
    std::vector<std::string> names;
    std::string_view rest(buf, len);
    while (!rest.empty()) {
        const std::size_t nl = rest.find('\n');
        std::string_view line = rest.substr(0, nl);
        rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
        if (!line.empty()) names.emplace_back(line);
    }
    std::free(buf);
    return names;
}

}  // namespace

std::vector<LogTypeLevel> log_type_levels() {
    std::vector<LogTypeLevel> out;
    for (std::string& name : registered_names()) {
        // The name is registered already, so this returns its id and registers nothing.
        const int id = rte_log_register(name.c_str());
        if (id < 0) continue;
        const int level = rte_log_get_level(static_cast<uint32_t>(id));
        if (level < 0) continue;
        out.push_back({std::move(name), static_cast<uint32_t>(level)});
    }
    return out;
}

bool log_pattern_matches(std::string_view pattern) {
    const std::string pat(pattern);
    const bool glob = is_glob(pattern);
    for (const LogTypeLevel& t : log_type_levels())
        if (glob ? fnmatch(pat.c_str(), t.type.c_str(), 0) == 0 : t.type == pattern) return true;
    return false;
}

std::vector<LogTypeLevel> set_log_level(std::string_view pattern, uint32_t level) {
    std::vector<LogTypeLevel> changed;
    if (level < RTE_LOG_EMERG || level > RTE_LOG_DEBUG) return changed;
    const std::string pat(pattern);
    const bool glob = is_glob(pattern);
    // Matched types one by one rather than rte_log_set_level_pattern, which also keeps every
    // pattern it is given for types registered later: a run-time change applies to what exists.
    for (LogTypeLevel& t : log_type_levels()) {
        if (glob ? fnmatch(pat.c_str(), t.type.c_str(), 0) != 0 : t.type != pattern) continue;
        const int id = rte_log_register(t.type.c_str());
        if (id < 0 || rte_log_set_level(static_cast<uint32_t>(id), level) != 0) continue;
        changed.push_back(std::move(t));
    }
    return changed;
}

}  // namespace fedgate
