// DPDK telemetry: the /fedgate/ commands, and management JSON fitted into rte_tel_data (telemetry.hpp).
#include "controlplane/telemetry.hpp"

#include <rte_telemetry.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>

#include "controlplane/counter_table.hpp"
#include "controlplane/commands.hpp"  // kMaxListed: the most one listing returns
#include "controlplane/log.hpp"

namespace fedgate {
namespace {

using json = nlohmann::ordered_json;

static_assert(RTE_TEL_MAX_STRING_LEN == 128 && RTE_TEL_MAX_DICT_ENTRIES == 256 && RTE_TEL_MAX_ARRAY_ENTRIES == 512,
              "telemetry.hpp documents DPDK 22.11's limits");

constexpr std::size_t kMaxString = RTE_TEL_MAX_STRING_LEN - 1;  // in a dict or an array; keys too
constexpr std::size_t kMaxLoneString = RTE_TEL_MAX_SINGLE_STRING_LEN - 1;
constexpr std::string_view kTruncated = "truncated";
// What `,"truncated":1` adds to an object; every object keeps room for it.
constexpr std::size_t kTruncatedEntry = 1 + 2 + kTruncated.size() + 1 + 1;

bool key_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '/';
}

std::string clean_key(std::string_view k) {
    std::string s(k.substr(0, kMaxString));
    for (char& c : s)
        if (!key_char(c)) c = '_';
    return s.empty() ? "_" : s;
}

// A key for `k` that no earlier entry of `out` has taken.
std::string unique_key(const json& out, std::string_view k) {
    const std::string base = clean_key(k);
    if (!out.contains(base)) return base;
    for (unsigned n = 2;; ++n) {
        const std::string suffix = "_" + std::to_string(n);
        std::string s = base.substr(0, kMaxString - suffix.size()) + suffix;
        if (!out.contains(s)) return s;
    }
}

// Telemetry escapes only quotes, backslashes and \n\r\t, and mishandles bytes above 0x7f: keep to
// printable ASCII, so the size below is exact.
std::string clean_string(std::string_view s, std::size_t max, bool& cut) {
    cut = s.size() > max;
    std::string out(s.substr(0, max));
    for (char& c : out)
        if (c < 0x20 || c > 0x7e) c = '?';
    return out;
}

std::size_t string_bytes(const std::string& s) {
    const auto escaped = std::count_if(s.begin(), s.end(), [](char c) { return c == '"' || c == '\\'; });
    return 2 + s.size() + static_cast<std::size_t>(escaped);
}

// The number telemetry keeps for a scalar, if it keeps one: non-negative integers (u64), booleans as
// 1/0, and negative ones that fit an int (telemetry's other integer type).
std::optional<json> as_number(const json& v) {
    if (v.is_boolean()) return json(v.get<bool>() ? 1U : 0U);
    if (v.is_number_unsigned()) return v;
    if (v.is_number_integer()) {
        const int64_t x = v.get<int64_t>();
        if (x >= 0) return json(static_cast<uint64_t>(x));
        if (x >= INT_MIN) return v;
    }
    return std::nullopt;
}

std::string scalar_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// nlohmann's is_number_integer() is true of unsigned numbers too.
bool is_signed(const json& v) { return v.is_number_integer() && !v.is_number_unsigned(); }

bool truthy(const json& v) {
    return v.is_boolean() ? v.get<bool>() : v.is_number() ? v != 0 : false;
}

struct Piece {
    json value;
    std::size_t bytes = 0;
    bool cut = false;     // something was left out or shortened just now
    bool marked = false;  // an object that says "truncated": 1
};

class Fitter {
public:
    explicit Fitter(std::size_t containers) : containers_(containers) {}

    // `v` in at most `budget` bytes; nothing when not even its smallest form fits.
    std::optional<Piece> value(const json& v, std::size_t budget, bool top) {
        if (v.is_object())
            return object(
                [&](const auto& each) {
                    for (const auto& [k, x] : v.items())
                        if (!each(k, x)) return;
                },
                budget, top);
        if (v.is_array()) return array(v, budget, top);
        if (!top)
            if (std::optional<json> n = as_number(v)) {
                const std::size_t b = n->dump().size();
                if (b > budget) return std::nullopt;
                return Piece{std::move(*n), b, false, false};
            }
        // A top-level reply holds no lone number: it becomes a string, like everything else left.
        Piece p;
        std::string s = clean_string(scalar_text(v), top ? kMaxLoneString : kMaxString, p.cut);
        p.bytes = string_bytes(s);
        if (p.bytes > budget) return std::nullopt;
        p.value = std::move(s);
        return p;
    }

private:
    // `for_each(fn)` calls fn(key, value) for each entry until fn returns false.
    template <typename ForEach>
    std::optional<Piece> object(const ForEach& for_each, std::size_t budget, bool top) {
        if (budget < 2 + kTruncatedEntry || !take_container(top)) return std::nullopt;
        Piece p{json::object(), 2, false, false};
        std::size_t regular = 0;
        bool had_mark = false, mark = false;
        for_each([&](std::string_view k, const json& x) {
            if (k == kTruncated) {  // the source's own flag: kept, and raised if we cut too
                had_mark = true;
                mark |= truthy(x);
                return true;
            }
            if (x.is_null()) return true;
            if (regular == RTE_TEL_MAX_DICT_ENTRIES - 1) {  // the last entry is kept for "truncated"
                p.cut = true;
                return false;
            }
            std::string key = unique_key(p.value, k);
            const std::size_t overhead = (regular != 0 ? 1 : 0) + key.size() + 3;
            if (p.bytes + overhead + kTruncatedEntry >= budget) {
                p.cut = true;
                return false;
            }
            std::optional<Piece> child = value(x, budget - p.bytes - overhead - kTruncatedEntry, false);
            if (!child) {
                p.cut = true;
                return false;
            }
            p.bytes += overhead + child->bytes;
            p.cut |= child->cut;
            mark |= child->cut || child->marked;
            p.value[key] = std::move(child->value);
            ++regular;
            return true;
        });
        mark |= p.cut;
        if (had_mark || mark) {
            p.bytes += (regular != 0 ? 1 : 0) + kTruncatedEntry - 1;
            p.value[std::string(kTruncated)] = mark ? 1U : 0U;
            p.marked = mark;
        }
        return p;
    }

    std::optional<Piece> array(const json& v, std::size_t budget, bool top) {
        // Telemetry nests only arrays of scalars, and only inside dicts: anything else is keyed by index.
        if (std::any_of(v.begin(), v.end(), [](const json& x) { return x.is_structured(); }))
            return object(
                [&](const auto& each) {
                    std::size_t i = 0;
                    for (const json& x : v)
                        if (!each(std::to_string(i++), x)) return;
                },
                budget, top);
        if (budget < 2 || !take_container(top)) return std::nullopt;
        // One type for all: u64 when every element is a non-negative number, int when some are
        // negative and all fit an int, else strings.
        bool u64 = true, i32 = true;
        for (const json& x : v) {
            const std::optional<json> n = as_number(x);
            if (!n) {
                u64 = i32 = false;
                break;
            }
            if (is_signed(*n))
                u64 = false;
            else if (n->get<uint64_t>() > static_cast<uint64_t>(INT_MAX))
                i32 = false;
        }
        Piece p{json::array(), 2, false, false};
        for (const json& x : v) {
            if (p.value.size() == RTE_TEL_MAX_ARRAY_ENTRIES) {
                p.cut = true;
                break;
            }
            json e;
            bool cut = false;
            if (u64)
                e = *as_number(x);
            else if (i32)
                e = json(as_number(x)->get<int64_t>());
            else
                e = clean_string(scalar_text(x), kMaxString, cut);
            const std::size_t b = (p.value.empty() ? 0 : 1) +
                                  (e.is_string() ? string_bytes(e.get_ref<const std::string&>()) : e.dump().size());
            if (p.bytes + b > budget) {
                p.cut = true;
                break;
            }
            p.bytes += b;
            p.cut |= cut;
            p.value.push_back(std::move(e));
        }
        return p;
    }

    // Nested containers are counted; the top one is the rte_tel_data telemetry hands us.
    bool take_container(bool top) {
        if (top) return true;
        if (containers_ == 0) return false;
        --containers_;
        return true;
    }

    std::size_t containers_;
};

// Writes fitted JSON into rte_tel_data. On failure it frees every container it made.
class Writer {
public:
    explicit Writer(std::vector<rte_tel_data*>* owned) : owned_(owned) {}

    int top(const json& v, rte_tel_data* d) {
        int rc;
        if (v.is_object())
            rc = dict(v, d);
        else if (v.is_array())
            rc = array(v, d);
        else
            rc = rte_tel_data_string(d, scalar_text(v).c_str());
        if (rc < 0) {
            for (rte_tel_data* c : made_) rte_tel_data_free(c);
            rte_tel_data_start_dict(d);  // nothing in `d` points at them any more
            return rc;
        }
        if (owned_ != nullptr) owned_->insert(owned_->end(), made_.begin(), made_.end());
        return 0;
    }

private:
    // The rte_tel_data_add_* functions return a positive E2BIG when they shorten a string; fitted
    // JSON never makes them, and it would not be an error anyway.
    int dict(const json& o, rte_tel_data* d) {
        rte_tel_data_start_dict(d);
        for (const auto& [k, x] : o.items()) {
            int rc = -EINVAL;  // not fitted
            if (x.is_structured()) {
                rte_tel_data* c = rte_tel_data_alloc();
                if (c == nullptr) return -ENOMEM;
                made_.push_back(c);
                rc = x.is_object() ? dict(x, c) : array(x, c);
                if (rc >= 0) rc = rte_tel_data_add_dict_container(d, k.c_str(), c, owned_ != nullptr);
            } else if (x.is_string()) {
                rc = rte_tel_data_add_dict_string(d, k.c_str(), x.get_ref<const std::string&>().c_str());
            } else if (x.is_number_unsigned()) {
                rc = rte_tel_data_add_dict_u64(d, k.c_str(), x.get<uint64_t>());
            } else if (x.is_number_integer()) {
                rc = rte_tel_data_add_dict_int(d, k.c_str(), x.get<int>());
            }
            if (rc < 0) return rc;
        }
        return 0;
    }

    static int array(const json& a, rte_tel_data* d) {
        const bool ints = std::any_of(a.begin(), a.end(), is_signed);
        const bool u64 = !ints && !a.empty() && a.front().is_number_unsigned();
        rte_tel_data_start_array(d, ints ? RTE_TEL_INT_VAL : u64 ? RTE_TEL_U64_VAL : RTE_TEL_STRING_VAL);
        for (const json& x : a) {
            int rc = -EINVAL;
            if (ints && x.is_number_integer())
                rc = rte_tel_data_add_array_int(d, x.get<int>());
            else if (u64 && x.is_number_unsigned())
                rc = rte_tel_data_add_array_u64(d, x.get<uint64_t>());
            else if (!ints && !u64 && x.is_string())
                rc = rte_tel_data_add_array_string(d, x.get_ref<const std::string&>().c_str());
            if (rc < 0) return rc;
        }
        return 0;
    }

    std::vector<rte_tel_data*>* owned_;
    std::vector<rte_tel_data*> made_;
};

// ---------------------------------------------------------------------------------------------
// The replies.

json error_reply(const std::string& message) { return fit_for_telemetry(json{{"error", message}}).value; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
    return s;
}

std::optional<std::size_t> parse_offset(std::string_view s) {
    if (s.empty()) return 0;
    std::size_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || v >= kMaxListed) return std::nullopt;
    return v;
}

std::string bad_offset(std::string_view s) {
    return "OFFSET must be an integer 0.." + std::to_string(kMaxListed - 1) + ", not '" + std::string(s) + "'";
}

// The keys of `from` that are present, in the order given.
json pick(const json& from, std::initializer_list<const char*> keys) {
    json out = json::object();
    if (from.is_object())
        for (const char* k : keys)
            if (from.contains(k)) out[k] = from[k];
    return out;
}

// The table's one-number rows of `section` (counter_table.hpp) that `from` (that section) holds, in
// table order; `gauges`: only its gauges with a family (the counts, not the sums of them).
json table_rows(const json& from, std::string_view section, bool gauges) {
    json out = json::object();
    if (!from.is_object()) return out;
    for (const CounterDesc& d : counter_table()) {
        if (d.reply != Reply::stats || d.scope != Scope::gateway || d.dim != Dim::none || d.section != section) continue;
        if (gauges && (d.type != MetricType::gauge || d.family.empty())) continue;
        const std::string k(d.key);
        if (from.contains(k)) out[k] = from[k];
    }
    return out;
}

std::string key_list(const json& o) {
    std::string s;
    for (const auto& [k, v] : o.items()) s += (s.empty() ? "" : ", ") + k;
    return s;
}

// `head`, then a page of `items` (of `total` in all) under `key`: from `offset`, at most
// kTelemetryPage, and only as many as fit whole, each keyed by its index in the whole list.
json page_reply(const json& head, const char* key, const json& items, std::size_t offset, std::size_t total) {
    // Each entry is fitted alone first, so that any cut in the trials below is for want of room.
    std::vector<json> entries;
    for (std::size_t i = offset; items.is_array() && i < items.size() && entries.size() < kTelemetryPage; ++i)
        entries.push_back(fit_for_telemetry(items[i]).value);
    const auto build = [&](std::size_t n) {
        json r = head;
        r["offset"] = offset;
        r["shown"] = n;
        if (offset + n < total) r["next_offset"] = offset + n;
        json page = json::object();
        for (std::size_t i = 0; i < n; ++i) page[std::to_string(offset + i)] = entries[i];
        r[key] = std::move(page);
        return fit_for_telemetry(r);
    };
    TelemetryFit best = build(0);
    for (std::size_t n = 1; n <= entries.size(); ++n) {
        TelemetryFit f = build(n);
        if (f.truncated && n > 1) break;  // no room for entry n: the next page starts with it
        best = std::move(f);
        if (best.truncated) break;  // one entry alone is too big for a reply: shown cut short, and marked
    }
    return std::move(best.value);
}

json stats_reply(std::string_view section, const TelemetryHandler& handler) {
    json s = handler({{"cmd", "stats"}});
    if (section.empty()) return fit_for_telemetry(s).value;
    if (!s.is_object() || !s.contains(section))
        return error_reply("no stats section '" + std::string(section) + "' (" + key_list(s) + ")");
    return fit_for_telemetry(s[std::string(section)]).value;
}

json ports_reply(std::string_view name, const TelemetryHandler& handler) {
    const json status = handler({{"cmd", "status"}});
    const json stats = handler({{"cmd", "stats"}});
    json ports = json::array();
    std::string names;
    for (const json& p : status.value("ports", json::array())) {
        json port = p;
        // The port's traffic counters beside its status; the drops by reason and the device's own
        // counters only when one port is asked for.
        for (const json& c : stats.value("ports", json::array())) {
            if (c.value("name", "") != p.value("name", "")) continue;
            for (const auto& [k, v] : c.items())
                if (k != "name" && (!name.empty() || (k != "drops_by_reason" && k != "hw"))) port[k] = v;
        }
        const std::string n = p.value("name", "");
        if (!name.empty() && n == name) return fit_for_telemetry(port).value;
        names += (names.empty() ? "" : ", ") + n;
        ports.push_back(std::move(port));
    }
    if (!name.empty()) return error_reply("no port named '" + std::string(name) + "' (" + names + ")");
    json r = pick(status, {"party", "party_id"});
    r["count"] = ports.size();
    r["ports"] = std::move(ports);
    return fit_for_telemetry(r).value;
}

json maps_reply(std::size_t offset, const TelemetryHandler& handler) {
    const json m = handler({{"cmd", "map_list"}});
    json items = json::array();
    for (const char* kind : {"imports", "exports"})
        for (const json& x : m.value(kind, json::array())) items.push_back(x);
    const json head = {{"imports", m.value("imports", json::array()).size()},
                       {"exports", m.value("exports", json::array()).size()},
                       {"total", items.size()}};
    return page_reply(head, "mappings", items, offset, items.size());
}

json sessions_reply(std::size_t offset, const TelemetryHandler& handler) {
    const json list = handler({{"cmd", "session_list"}, {"limit", std::min<std::size_t>(offset + kTelemetryPage, kMaxListed)}});
    const json stats = handler({{"cmd", "stats"}});
    const std::size_t total = list.value("total", std::size_t{0});
    json head = {{"total", total}};
    head.update(table_rows(stats.value("nat", json::object()), "nat", false));
    head.erase("sessions");  // the page's own key ("total" counts them)
    return page_reply(head, "sessions", list.value("sessions", json::array()), offset, total);
}

json dir_reply(std::size_t offset, const TelemetryHandler& handler) {
    const json list = handler({{"cmd", "dir_list"}, {"limit", std::min<std::size_t>(offset + kTelemetryPage, kMaxListed)}});
    const json stats = handler({{"cmd", "stats"}});
    const std::size_t total = list.value("total", std::size_t{0});
    json head = {{"total", total}};
    const json cache = stats.value("resolution", json::object()).value("cache", json::object());
    head.update(table_rows(cache, "resolution/cache", true));
    return page_reply(head, "entries", list.value("entries", json::array()), offset, total);
}

// ---------------------------------------------------------------------------------------------
// Registration. Telemetry's client threads call on_command; the handler is swapped under g_mu.

std::shared_mutex g_mu;              // shared by replies in flight; exclusive to change the handler
TelemetryHandler g_handler;          // guarded by g_mu
std::atomic<bool> g_attached{false};  // read first, so that new requests do not hold up a detach
std::once_flag g_registered;

int on_command(const char* cmd, const char* params, rte_tel_data* d) {
    if (!g_attached.load(std::memory_order_acquire)) return -ENODEV;  // telemetry replies null
    std::shared_lock lock(g_mu);
    if (!g_handler) return -ENODEV;
    try {
        return to_tel_data(telemetry_reply(cmd, params != nullptr ? params : "", g_handler), d);
    } catch (...) {  // out of memory: nothing may unwind into telemetry's C
        return -ENOMEM;
    }
}

struct Command {
    const char* name;
    const char* help;  // under RTE_TEL_MAX_STRING_LEN
};

constexpr Command kCommands[] = {
    {"/fedgate/dir",
     "fedgate process directory: counts by kind, 32 entries from OFFSET. Parameter: OFFSET (default 0)"},
    {"/fedgate/maps",
     "fedgate port mappings: counts, 32 from OFFSET (imports, then exports). Parameter: OFFSET (default 0)"},
    {"/fedgate/ports", "fedgate ports: status and counters. Parameter: a port name, for all of its counters"},
    {"/fedgate/sessions", "fedgate NAT sessions: counts, 32 from OFFSET. Parameter: OFFSET (default 0)"},
    {"/fedgate/stats", "fedgate counters, as fedgatectl stats. Parameter: a section (nat, icmp, control, resolution, ...)"},
};
static_assert(std::size(kCommands) == std::size(kTelemetryCommands));
static_assert(std::all_of(std::begin(kCommands), std::end(kCommands), [](const Command& c) {
    return std::char_traits<char>::length(c.help) < RTE_TEL_MAX_STRING_LEN;
}));
static_assert(kTelemetryPage == 32, "the help texts say 32");

void register_commands() {
    for (const Command& c : kCommands)
        if (const int rc = rte_telemetry_register_cmd(c.name, on_command, c.help); rc != 0)
            FG_LOG(WARNING, gateway, "telemetry: cannot register %s: %s", c.name, std::strerror(-rc));
}

}  // namespace

TelemetryFit fit_for_telemetry(const json& in, const TelemetryLimits& limits) {
    Fitter f(limits.max_containers);
    std::optional<Piece> p = f.value(in, limits.max_bytes, true);
    if (!p) return {json::object(), 2, true};  // limits too small for anything
    return {std::move(p->value), p->bytes, p->cut};
}

int to_tel_data(const json& in, rte_tel_data* d, std::vector<rte_tel_data*>* owned) {
    return Writer(owned).top(fit_for_telemetry(in).value, d);
}

json telemetry_reply(std::string_view cmd, std::string_view params, const TelemetryHandler& handler) {
    params = trim(params);
    try {
        if (cmd == "/fedgate/stats") return stats_reply(params, handler);
        if (cmd == "/fedgate/ports") return ports_reply(params, handler);
        const std::optional<std::size_t> offset = parse_offset(params);
        if (cmd == "/fedgate/maps") return offset ? maps_reply(*offset, handler) : error_reply(bad_offset(params));
        if (cmd == "/fedgate/sessions")
            return offset ? sessions_reply(*offset, handler) : error_reply(bad_offset(params));
        if (cmd == "/fedgate/dir") return offset ? dir_reply(*offset, handler) : error_reply(bad_offset(params));
    } catch (const std::exception& e) {
        return error_reply(e.what());
    }
    return error_reply("unknown command '" + std::string(cmd) + "'");
}

void telemetry_attach(TelemetryHandler handler) {
    std::call_once(g_registered, register_commands);
    {
        std::unique_lock lock(g_mu);
        g_handler = std::move(handler);
    }
    g_attached.store(true, std::memory_order_release);
}

void telemetry_detach() {
    g_attached.store(false, std::memory_order_release);
    std::unique_lock lock(g_mu);  // waits for replies in flight
    g_handler = nullptr;
}

}  // namespace fedgate
