// DPDK telemetry for fedgate: the /fedgate/... commands beside DPDK's own (/ethdev/...), answered
// from the management requests, and the conversion of their JSON into what rte_tel_data can hold.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <string_view>
#include <vector>

struct rte_tel_data;

namespace fedgate {

// What DPDK 22.11 telemetry can carry. Dict names, strings and entry counts come from
// rte_telemetry.h; the reply size from MAX_OUTPUT_LEN in its telemetry.c (16 KB for the whole
// `{"<command>":...}` reply; what does not fit is left out silently, so fedgate never sends more).
inline constexpr std::size_t kTelemetryMaxOutput = 16 * 1024;
// Less the `{"<command>":` wrapper (commands are shorter than 56) and slack.
inline constexpr std::size_t kTelemetryReplyBudget = kTelemetryMaxOutput - 128;
// Every nested dict or array is one malloc'd rte_tel_data of about 66 KB: a cap on them bounds a
// reply's memory (about 8 MB) whatever the JSON looks like.
inline constexpr std::size_t kTelemetryMaxContainers = 128;
// Entries per page of /fedgate/maps, /fedgate/sessions and /fedgate/dir (fewer when 16 KB is full).
inline constexpr std::size_t kTelemetryPage = 32;

struct TelemetryLimits {
    std::size_t max_bytes = kTelemetryReplyBudget;
    std::size_t max_containers = kTelemetryMaxContainers;
};

struct TelemetryFit {
    // Only what rte_tel_data holds: objects whose keys are [A-Za-z0-9_/] (at most 256 entries),
    // arrays of one scalar type (non-negative integers, or 32-bit integers, or strings; at most
    // 512), strings of at most 127 characters of printable ASCII, non-negative or 32-bit integers.
    nlohmann::ordered_json value;
    std::size_t bytes = 0;   // the JSON text telemetry writes for `value`
    bool truncated = false;  // something was left out or cut short
};

// Fits `in` into telemetry's limits:
// - other characters in keys become '_' (a clash gets "_2", "_3", ...); strings are cut to 127
//   characters (8191 for a lone top-level string), other than printable ASCII becomes '?';
// - booleans become 1/0 (as DPDK's own commands report flags), numbers that are neither
//   non-negative nor 32-bit and fractional numbers become strings, nulls are left out;
// - an array holding objects or arrays becomes an object keyed "0", "1", ... (telemetry nests
//   arrays only inside objects, and holds no array of objects); mixed scalars become strings;
// - entries past 255 in an object, 512 in an array, the byte budget or the container cap are
//   left out, and every object from the top down to a cut says so with "truncated": 1.
// Fitting what was fitted changes nothing (and reports no truncation).
TelemetryFit fit_for_telemetry(const nlohmann::ordered_json& in, const TelemetryLimits& limits = {});

// Fits `in` and writes it into `d` (a dict for an object). Returns 0, or a negative errno with
// nothing left allocated. Nested containers are handed to telemetry, which frees them once it has
// written the reply; with `owned` they are kept and listed there for the caller to free instead.
int to_tel_data(const nlohmann::ordered_json& in, rte_tel_data* d, std::vector<rte_tel_data*>* owned = nullptr);

// A management request in, its result out (Commands::handle); throws with a message on error.
using TelemetryHandler = std::function<nlohmann::ordered_json(const nlohmann::ordered_json& request)>;

// The reply to one /fedgate/ command (`params`: what followed the comma), built from management
// results and already fitted. Unknown commands and bad parameters get {"error": "..."}.
//   /fedgate/stats[,SECTION]   fedgatectl stats, or one of its sections (nat, icmp, resolution, ...)
//   /fedgate/ports[,NAME]      each port's status and traffic counters; with NAME, all of that port's
//   /fedgate/maps[,OFFSET]     counts, and kTelemetryPage mappings from OFFSET (imports, then exports)
//   /fedgate/sessions[,OFFSET] counts, and kTelemetryPage sessions from OFFSET
//   /fedgate/dir[,OFFSET]      counts by kind, and kTelemetryPage directory entries from OFFSET
// A page says "offset", "shown" and, while more remain, "next_offset"; its entries are keyed by
// their index in the whole list.
nlohmann::ordered_json telemetry_reply(std::string_view cmd, std::string_view params, const TelemetryHandler& handler);

// The commands, in the order `/` lists them.
inline constexpr std::string_view kTelemetryCommands[] = {"/fedgate/dir", "/fedgate/maps", "/fedgate/ports",
                                                          "/fedgate/sessions", "/fedgate/stats"};

// Registers the /fedgate/ commands with rte_telemetry (once per process: telemetry cannot
// unregister) and answers them with `handler` until telemetry_detach(). Telemetry calls plain C
// functions without user data, so there is one attached handler per process.
void telemetry_attach(TelemetryHandler handler);
// Stops answering (commands then reply null) and waits for replies in flight: after it returns,
// no callback touches what the handler reaches. Idempotent.
void telemetry_detach();

}  // namespace fedgate
