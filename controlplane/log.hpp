// fedgate's rte_log types, and reading and setting log levels by name. One logger for the whole
// daemon: DPDK's.
#pragma once

#include <rte_log.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fedgate {

struct LogTypes {
    int gateway = RTE_LOGTYPE_USER1;
    int dataplane = RTE_LOGTYPE_USER2;
    int mgmt = RTE_LOGTYPE_USER3;
    int resolve = RTE_LOGTYPE_USER4;
    int connect = RTE_LOGTYPE_USER5;
    int metrics = RTE_LOGTYPE_USER6;
};

// The names log_types() registers; the config checks fedgate.* names against them.
inline constexpr std::array<std::string_view, 6> kFedgateLogTypes{
    "fedgate.gateway", "fedgate.dataplane", "fedgate.mgmt", "fedgate.resolve", "fedgate.connect", "fedgate.metrics"};

// rte_log's levels by name, index = level - 1 (RTE_LOG_EMERG is 1, RTE_LOG_DEBUG 8).
inline constexpr std::array<std::string_view, 8> kLogLevelNames{"emerg",  "alert", "crit", "err",
                                                                "warning", "notice", "info", "debug"};
static_assert(RTE_LOG_EMERG == 1 && RTE_LOG_DEBUG == 8, "kLogLevelNames follows rte_log's numbering");

// Names, levels and patterns are inline: the config (and its fuzz target) read them without the
// rest of this file.

// "emerg" -> 1 ... "debug" -> 8; nullopt for anything else.
inline std::optional<uint32_t> parse_log_level(std::string_view name) {
    for (std::size_t i = 0; i < kLogLevelNames.size(); ++i)
        if (kLogLevelNames[i] == name) return static_cast<uint32_t>(i + 1);
    return std::nullopt;
}

// 1..8 -> its name; "level N" otherwise.
inline std::string log_level_name(uint32_t level) {
    if (level >= 1 && level <= kLogLevelNames.size()) return std::string(kLogLevelNames[level - 1]);
    return "level " + std::to_string(level);
}

// "emerg, alert, ..., debug": for error messages.
inline std::string log_level_list() {
    std::string s;
    for (std::string_view n : kLogLevelNames) s += (s.empty() ? "" : ", ") + std::string(n);
    return s;
}

inline bool is_glob(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

// A log type name or fnmatch glob: 1-64 of [A-Za-z0-9_.-] and the glob characters * ? [ ].
inline bool valid_log_pattern(std::string_view s) {
    if (s.empty() || s.size() > 64) return false;
    for (char c : s) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                        c == '.' || c == '-' || c == '*' || c == '?' || c == '[' || c == ']';
        if (!ok) return false;
    }
    return true;
}

// Registers every type of kFedgateLogTypes (idempotent).
const LogTypes& log_types();

struct LogTypeLevel {
    std::string type;
    uint32_t level;  // 1..8
};

// Every type registered with rte_log, in registration order, with its current level.
std::vector<LogTypeLevel> log_type_levels();

// Whether `pattern` (an exact name or a glob) names at least one registered type.
bool log_pattern_matches(std::string_view pattern);

// Sets `level` on every registered type `pattern` names (an exact name, or a glob such as
// "fedgate.*"). Returns the types it matched with their level before the change; an empty result
// means it named none, and nothing changed.
std::vector<LogTypeLevel> set_log_level(std::string_view pattern, uint32_t level);

}  // namespace fedgate

#define FG_LOG(level, type, fmt, ...) \
    rte_log(RTE_LOG_##level, ::fedgate::log_types().type, "fedgate.%s: " fmt "\n", #type, ##__VA_ARGS__)
