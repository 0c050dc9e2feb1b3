// Every counter the gateway reports, described once: where it sits in the `stats` (or `status`)
// reply, its Prometheus family, type, help and labels, and how it is read from a data-plane worker or
// from the gateway. The workers are summed in one place (sum_workers) and the JSON and the
// Prometheus text are both rendered from this table, so no key is spelled twice.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fedgate {

class Dataplane;

enum class MetricType : uint8_t { counter, gauge };  // a counter's family gets `_total`
enum class Reply : uint8_t { stats, status };        // which management reply holds the row
// Where the value comes from: each data-plane worker (read by `worker`), the gateway itself (its
// devices, tables and config, read by `gateway`), or a control-thread service's own stats JSON,
// which the table only describes (the row is checked against that JSON, never filled in here).
enum class Source : uint8_t { worker, gateway, control };
// How the workers' values make the gateway's: most add up; a few are the same on every worker
// (a capacity, a table every worker keeps alike) and are the first worker's.
enum class Combine : uint8_t { sum, once };
// Where a row repeats: once; in every entry of the reply's "ports" (labelled port=NAME); in every
// entry of "resolution/exchange/peers" (labelled peer=PARTY).
enum class Scope : uint8_t { gateway, port, peer };
// A row's JSON value is one number, or an object of numbers: one per drop reason (label "reason",
// in drop_reason.hpp's order) or, for a control row, whatever keys the service reports.
enum class Dim : uint8_t { none, drop_reason, keys };

struct Label {
    std::string_view name, value;
};

// What the gateway reads itself for its rows; Commands::stats() fills it in.
struct GatewayReadings {
    struct Device {  // rte_eth_stats of one port
        uint64_t ipackets = 0, opackets = 0, ibytes = 0, obytes = 0, imissed = 0, ierrors = 0, oerrors = 0,
                 rx_nombuf = 0;
    };
    std::vector<Device> devices;  // one per port, in port order
    uint64_t imports = 0, exports = 0;
    uint64_t unmatched_echo_replies = 0;
    uint64_t max_sessions = 0;
    // [cluster]: a gateway alone is active and no member.
    uint64_t cluster_member = 0, cluster_active = 1, store_healthy = 0;
    uint64_t became_active = 0, stepped_down = 0, lease_renewals = 0, store_errors = 0, mapping_refreshes = 0;
    // [cluster] sync: the session-event channel.
    uint64_t session_events_sent = 0, session_events_received = 0, session_events_missed = 0, session_sync_rejected = 0,
             sessions_mirrored = 0, cache_copies_received = 0, cache_records_mirrored = 0;
};

// `port`: the port's index (0 for other scopes); `index`: the drop reason (0 for Dim::none).
using WorkerRead = uint64_t (*)(const Dataplane& worker, std::size_t port, std::size_t index);
using GatewayRead = uint64_t (*)(const GatewayReadings& g, std::size_t port);

struct CounterDesc {
    Reply reply = Reply::stats;
    // '/'-separated path of the object holding `key`: from the reply's top, or from each port's or
    // peer's entry for those scopes. "" is the top (or the entry itself).
    std::string_view section;
    std::string_view key;
    // The Prometheus family (a counter's without `_total`); empty for a JSON-only row: a sum of
    // other rows that would count twice in a query summing the family.
    std::string_view family;
    MetricType type = MetricType::counter;
    std::string_view help;
    std::array<Label, 3> labels{};  // fixed labels after the scope's; unused ones have no name
    Scope scope = Scope::gateway;
    Dim dim = Dim::none;
    std::string_view dim_label;  // the label of a Dim::keys row's keys
    Source source = Source::control;
    Combine combine = Combine::sum;
    bool omit_zero = false;       // JSON lists only non-zero entries of a Dim row (Prometheus: all, zeros too)
    bool needs_resolver = false;  // only while the resolution service runs on the workers
    WorkerRead worker = nullptr;
    GatewayRead gateway = nullptr;
};

// The table, in the order the replies list their keys.
std::span<const CounterDesc> counter_table();

// The workers' rows, summed (or taken once) over the workers: values[row] holds one number per
// port (Scope::port) times one per drop reason (Dim::drop_reason); other rows are left empty.
struct CounterSnapshot {
    std::size_t ports = 0;
    bool resolver = false;  // some worker runs the resolution service
    std::vector<std::vector<uint64_t>> values;

    uint64_t at(std::size_t row, std::size_t port = 0, std::size_t index = 0) const;
};

// How many values a row holds for `ports` ports (1 for a gateway-scope row without a dimension).
std::size_t row_width(const CounterDesc& d, std::size_t ports);

// The one place workers are added up. Every worker has the same ports.
CounterSnapshot sum_workers(std::span<const Dataplane* const> workers);
// Adds `worker` into `into` as sum_workers does (`first`: it is the first worker, for Combine::once).
// Apart from sum_workers so tests can add up snapshots they made themselves.
void add_worker(CounterSnapshot& into, const CounterSnapshot& worker, bool first);

// The rows of `reply` written into `out`: worker rows from `workers`, gateway rows from `g`.
// `out` must already hold its "ports" entries (with their "name"). `control`: the control services'
// sections ({"resolution": {...}}), each copied in where the table first reaches it, so the reply
// keeps the table's order. New objects are appended in table order.
void write_counters(nlohmann::ordered_json& out, Reply reply, const CounterSnapshot& workers, const GatewayReadings& g,
                    const nlohmann::ordered_json& control = nlohmann::ordered_json::object());

// Each row's Prometheus family name as exposed (`_total` added to counters); empty for JSON-only rows.
std::string exposed_family(const CounterDesc& d);

}  // namespace fedgate
