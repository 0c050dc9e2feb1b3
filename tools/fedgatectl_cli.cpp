// fedgatectl's commands: one table of {name, synopsis, options, handler} and the dispatcher around it.
#include "tools/fedgatectl_cli.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "controlplane/config.hpp"  // kDefaultSocket, shared with fedgated; header-only constants
#include "proto/resolve_wire.hpp"  // process IDs; DPDK-free
#include "tools/bash_completion.hpp"
#include "tools/command_table.hpp"
#include "tools/mgmt_client.hpp"

namespace fedgate {
namespace {

namespace po = boost::program_options;
using Json = nlohmann::ordered_json;
using namespace std::chrono_literals;
using cli::in_quotes;
using cli::join;
using cli::need;
using cli::opt;
using cli::UsageError;

constexpr std::string_view kProg = "fedgatectl";
constexpr cli::Program kProgram{kProg, "[--socket PATH] [--json]"};
constexpr const char* kSocketEnv = "FEDGATE_SOCKET";  // overrides kDefaultSocket as --socket's default
constexpr std::chrono::milliseconds kCallTimeout = 10s;  // for a daemon that accepts and then hangs
constexpr int kPingCountMin = 1;
constexpr int kPingCountMax = 100;
constexpr int kPingCountDefault = 3;
constexpr int kPingTimeoutMsMin = 1;
constexpr int kPingTimeoutMsMax = 60'000;
constexpr int kPingTimeoutMsDefault = 1000;

// The daemon answered ok:false: exit 1 with its message.
struct RefusedError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Invocation {
    std::string socket;
    bool json = false;
    const po::variables_map& vm;
    std::ostream& out;
    std::ostream& err;  // diagnostics, and what capture -w - says (its standard output carries the capture)
};

// {name, operands, option synopsis, summary, examples, options, handler}; see command_table.hpp.
using Command = cli::Command<Invocation>;

void ping_options(po::options_description&, po::options_description&, po::positional_options_description&);
void map_add_import_options(po::options_description&, po::options_description&,
                            po::positional_options_description&);
void map_add_export_options(po::options_description&, po::options_description&,
                            po::positional_options_description&);
void map_del_options(po::options_description&, po::options_description&, po::positional_options_description&);
void map_list_options(po::options_description&, po::options_description&, po::positional_options_description&);
void session_list_options(po::options_description&, po::options_description&,
                          po::positional_options_description&);
void dir_list_options(po::options_description&, po::options_description&, po::positional_options_description&);
void pid_operand(po::options_description&, po::options_description&, po::positional_options_description&);
void help_options(po::options_description&, po::options_description&, po::positional_options_description&);
int run_dir_list(const Invocation&);
void conn_list_options(po::options_description&, po::options_description&, po::positional_options_description&);
int run_conn_list(const Invocation&);
int run_dir_show(const Invocation&);
int run_resolve(const Invocation&);
int run_status(const Invocation&);
int run_stats(const Invocation&);
int run_ping(const Invocation&);
int run_map_add_import(const Invocation&);
int run_map_add_export(const Invocation&);
int run_map_del(const Invocation&);
int run_map_list(const Invocation&);
int run_map_nft(const Invocation&);
int run_session_list(const Invocation&);
int run_help(const Invocation&);
void log_level_operands(po::options_description&, po::options_description&, po::positional_options_description&);
int run_log_level(const Invocation&);
int run_log_list(const Invocation&);
int run_reload(const Invocation&);
int run_cluster_status(const Invocation&);
void capture_options(po::options_description&, po::options_description&, po::positional_options_description&);
int run_capture(const Invocation&);
int run_completion(const Invocation&);

constexpr std::array kCommands{
    Command{{"status", "", "", "show the party, its ports with address and link, and its peers",
            "fedgatectl status", nullptr}, run_status},
    Command{{"stats", "", "", "show packet, drop, ARP, ICMP, neighbour and poll-loop counters",
            "fedgatectl stats --json", nullptr}, run_stats},
    Command{{"ping", "ADDR", "[--count N] [--timeout-ms MS]",
            "send ICMP echo requests to ADDR from the gateway's data plane",
            "fedgatectl ping 198.19.0.2 --count 5", ping_options}, run_ping},
    Command{{"map add import", "",
            "--cluster C --proto tcp|udp --port P --peer PARTY --peer-port Q [--allow CIDR]...",
            "map local port P to peer party PARTY's exported port Q",
            "fedgatectl map add import --cluster c1 --proto tcp --port 8080 --peer beta --peer-port 9000 "
            "--allow 198.18.1.0/24",
            map_add_import_options}, run_map_add_import},
    Command{{"map add export", "", "--cluster C --proto tcp|udp --port Q --node IP:PORT [--allow-party PARTY]...",
            "deliver external port Q to a local node, from the listed peer parties only",
            "fedgatectl map add export --cluster c1 --proto tcp --port 9000 --node 198.18.2.10:80 "
            "--allow-party alpha",
            map_add_export_options}, run_map_add_export},
    Command{{"map del", "[import|export]", "(--proto tcp|udp --port P | --cluster C)",
            "delete one mapping by kind, protocol and port, or a cluster's mappings (of one kind if given)",
            "fedgatectl map del import --proto tcp --port 8080\nfedgatectl map del --cluster c1 export",
            map_del_options}, run_map_del},
    Command{{"map list", "", "[--cluster C]", "list import and export mappings, of every cluster or of one",
            "fedgatectl map list\nfedgatectl map list --cluster c1 --json", map_list_options}, run_map_list},
    Command{{"map nft", "", "[--cluster C]",
            "print nftables rules that let a node dial peers' external address:port for the imports",
            "fedgatectl map nft --cluster c1 > fedgate.nft   # then on a node: nft -f fedgate.nft",
            map_list_options}, run_map_nft},
    Command{{"session list", "", "[--limit N]", "list the data plane's NAT sessions",
            "fedgatectl session list --limit 50", session_list_options}, run_session_list},
    Command{{"dir list", "", "[--local | --remote] [--limit N]",
            "list the process directory: local processes, and records peers announced or queries taught",
            "fedgatectl dir list\nfedgatectl dir list --remote --json", dir_list_options}, run_dir_list},
    Command{{"dir show", "PID", "", "show one process's DMA address record and where it came from",
            "fedgatectl dir show 2.7.42", pid_operand}, run_dir_show},
    Command{{"resolve", "PID", "",
            "resolve a process ID the way a compute process would (cache, directed query or broadcast)",
            "fedgatectl resolve 2.7.42\nfedgatectl resolve 0.7.42 --json   # party 0: owner unknown",
            pid_operand}, run_resolve},
    Command{{"capture", "", "--port NAME -w FILE|- [--count N] [--filter EXPR] [--duration S] [--snaplen N]",
            "write what a port receives and sends, with each packet's direction, to a pcapng file or a pipe "
            "(tcpdump, tshark and Wireshark read it)",
            "fedgatectl capture --port internal --count 10 --filter icmp -w /tmp/ping.pcapng\n"
            "fedgatectl capture --port external --duration 30 --filter 'udp port 7410' -w resolve.pcapng\n"
            "fedgatectl capture --port internal --count 4 --filter icmp -w - | tshark -r -",
            capture_options}, run_capture},
    Command{{"conn list", "", "[--limit N]",
            "list connection handshakes this gateway relays, in flight and finished, with their stage",
            "fedgatectl conn list\nfedgatectl conn list --json", conn_list_options}, run_conn_list},
    Command{{"log level", "TYPE LEVEL", "",
            "set the log level of a log type, or of every type a glob matches (fedgate.*, lib.eal)",
            "fedgatectl log level fedgate.resolve debug\nfedgatectl log level 'fedgate.*' info",
            log_level_operands}, run_log_level},
    Command{{"log list", "", "", "list the registered log types and their levels",
            "fedgatectl log list", nullptr}, run_log_list},
    Command{{"reload", "", "",
            "re-read the config file and apply changed peers, mappings and log levels, or refuse it whole",
            "fedgatectl reload\nfedgatectl reload --json", nullptr}, run_reload},
    Command{{"cluster status", "", "",
            "show this gateway's group ([cluster]): its members, which one is active, the lease, the "
            "store's health and the last failover",
            "fedgatectl cluster status\nfedgatectl cluster status --json", nullptr}, run_cluster_status},
    Command{{"completion bash", "", "",
            "print a bash completion script for fedgatectl's commands and options (installed in "
            "share/bash-completion/completions)",
            "source <(fedgatectl completion bash)", nullptr}, run_completion},
    Command{{"help", "[COMMAND]", "", "show help for every command, or for one", "fedgatectl help ping",
            help_options}, run_help},
};

// Words that start several commands; `help WORD` and `WORD --help` explain the group.
struct Group {
    std::string_view name;
    std::string_view about;
};

constexpr std::array kGroups{
    Group{"map",
          "The port-map tables. An import mapping sends what local nodes send to the gateway's internal\n"
          "address:P to a peer party's exported port Q; an export mapping delivers what allowed peer\n"
          "parties send to the gateway's external address:Q to a local node. A cluster ID groups\n"
          "mappings. Changes are saved in the state directory before they are acknowledged."},
    Group{"session", "The NAT sessions that mapped traffic has opened in the data plane."},
    Group{"dir",
          "The process directory: compute processes registered with this gateway (local), and the\n"
          "DMA address records of other parties' processes that their gateways announced or that\n"
          "queries taught this gateway (remote), with brief \"not found\" entries. Process IDs are\n"
          "PARTY.NODE.LOCAL (or 0xHEX); party 0 means the owner is unknown."},
    Group{"conn",
          "Connection handshakes (REQ, REP, RTU) between compute processes that this gateway relays:\n"
          "outbound (the initiator is ours), inbound (the target is ours) or local (both). A handshake\n"
          "stays listed for [connect] handshake_timeout_ms after it finishes or fails."},
    Group{"log",
          "The daemon's rte_log types (fedgate.gateway, fedgate.resolve, lib.eal, ...) and their levels:\n"
          "emerg, alert, crit, err, warning, notice, info, debug. A change lasts until fedgated stops;\n"
          "the config's [log] table sets them at start."},
    Group{"cluster",
          "A party's group of gateways on an etcd store ([cluster] in the config): one member is active\n"
          "(it holds the leader key under its lease), the others stand by. Mappings added on any member\n"
          "are kept in the store and apply on every member. A gateway without [cluster] is alone."},
};

// ---- text helpers ----------------------------------------------------------------------------

const Json& member(const Json& obj, const char* key) {
    static const Json missing;
    if (!obj.is_object())
        return missing;
    auto it = obj.find(key);
    return it == obj.end() ? missing : *it;
}

// A reply value as text whatever its type; "-" when missing, so a daemon that adds or drops a
// field never breaks the human output.
std::string text(const Json& v) {
    if (v.is_null())
        return "-";
    if (v.is_string())
        return v.get<std::string>();
    if (v.is_boolean())
        return v.get<bool>() ? "yes" : "no";
    return v.dump();
}

std::string field(const Json& obj, const char* key) { return text(member(obj, key)); }

std::string uptime_text(const Json& v) {
    if (!v.is_number())
        return text(v);
    const long long s = static_cast<long long>(v.get<double>());
    char buf[48];
    if (s < 60)
        std::snprintf(buf, sizeof buf, "%llds", s);
    else if (s < 3600)
        std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
    else if (s < 86400)
        std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s % 3600 / 60);
    else
        std::snprintf(buf, sizeof buf, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
    return buf;
}

std::string list_text(const Json& v) {
    if (!v.is_array())
        return text(v);
    if (v.empty())
        return "none";
    std::vector<std::string> parts;
    for (const auto& e : v)
        parts.push_back(text(e));
    return join(parts, ",");
}

std::string ms_text(double ms) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", ms);
    return buf;
}

bool is_number_cell(const std::string& s) {
    if (s == "-")
        return true;  // a missing counter sits in a number column
    size_t i = s.starts_with('-') ? 1 : 0;
    if (i == s.size())
        return false;
    int dots = 0;
    for (; i < s.size(); ++i) {
        if (s[i] == '.')
            ++dots;
        else if (s[i] < '0' || s[i] > '9')
            return false;
    }
    return dots <= 1;
}

// Column-aligned text like `ip`: two spaces between columns, number columns right-aligned, an
// optional indented note line under a row.
class Table {
public:
    explicit Table(bool header, std::string indent = {}) : header_(header), indent_(std::move(indent)) {}

    void row(std::vector<std::string> cells, std::string note = {}) {
        rows_.push_back({std::move(cells), std::move(note)});
    }

    void print(std::ostream& out) const {
        size_t ncols = 0;
        for (const auto& r : rows_)
            ncols = std::max(ncols, r.cells.size());
        std::vector<size_t> width(ncols, 0);
        std::vector<bool> right(ncols, true), body(ncols, false);
        for (size_t i = 0; i < rows_.size(); ++i) {
            for (size_t c = 0; c < rows_[i].cells.size(); ++c) {
                width[c] = std::max(width[c], rows_[i].cells[c].size());
                if (i == 0 && header_)
                    continue;
                body[c] = true;
                right[c] = right[c] && is_number_cell(rows_[i].cells[c]);
            }
        }
        for (const auto& r : rows_) {
            std::string line = indent_;
            for (size_t c = 0; c < r.cells.size(); ++c) {
                const std::string& cell = r.cells[c];
                const size_t pad = width[c] - cell.size();
                if (c > 0)
                    line += "  ";
                if (right[c] && body[c])
                    line.append(pad, ' ').append(cell);
                else
                    line.append(cell).append(pad, ' ');
            }
            while (line.ends_with(' '))
                line.pop_back();
            out << line << "\n";
            if (!r.note.empty())
                out << indent_ << "    " << r.note << "\n";
        }
    }

private:
    struct Row {
        std::vector<std::string> cells;
        std::string note;
    };
    bool header_;
    std::string indent_;
    std::vector<Row> rows_;
};

// `key value` rows for an object's members, nested objects flattened as `outer.inner`.
void add_members(Table& t, const Json& obj, const std::string& prefix = {}) {
    for (const auto& el : obj.items()) {
        if (el.value().is_object())
            add_members(t, el.value(), prefix + el.key() + ".");
        else if (el.value().is_array())
            t.row({prefix + el.key(), list_text(el.value())});
        else
            t.row({prefix + el.key(), text(el.value())});
    }
}

// The members of `obj` not in `known`, as "key value" pieces.
std::vector<std::string> extra_members(const Json& obj, std::initializer_list<std::string_view> known) {
    std::vector<std::string> out;
    if (!obj.is_object())
        return out;
    for (const auto& el : obj.items()) {
        if (std::find(known.begin(), known.end(), el.key()) == known.end())
            out.push_back(el.key() + " " + (el.value().is_array() ? list_text(el.value()) : text(el.value())));
    }
    return out;
}

// ---- usage and help --------------------------------------------------------------------------

po::options_description global_options() {
    po::options_description d("global options");
    d.add_options()
        ("socket", po::value<std::string>()->value_name("PATH"), "fedgated's management socket (see below)")
        ("json,j", po::bool_switch(), "print the daemon's result as JSON (2-space indent)")
        ("help,h", po::bool_switch(), "show help and exit")
        ("version", po::bool_switch(), "print fedgatectl's version and exit (fedgated's: fedgatectl status)");
    return d;
}

void print_socket_default(std::ostream& out) {
    out << "PATH defaults to $" << kSocketEnv << " if set, else " << kDefaultSocket << ".\n";
}

void print_help(std::ostream& out) {
    out << "fedgatectl: control a running fedgated through its management socket\n\n";
    cli::print_commands(out, kProgram, kCommands);
    out << "\n" << global_options();
    print_socket_default(out);
    cli::print_all_examples(out, kCommands);
    cli::print_help_hint(out, kProgram);
    out << "Exit status: 0 success; 1 fedgated unreachable or refused the request (ping: no reply);\n"
        << "2 bad command line (nothing was sent).\n";
}

// `with_globals` false leaves the global options out, for a group that prints them once at the end.
void print_command_help(std::ostream& out, const cli::CommandText& c, bool with_globals = true) {
    const po::options_description globals = global_options();
    cli::print_usage_and_options(out, kProgram, c, with_globals ? &globals : nullptr);
    if (with_globals)
        print_socket_default(out);
    cli::print_command_examples(out, c);
}

// Help for `topic`: one command (exact name), or every command whose name starts with the words of
// `topic`, under the group's description, with the global options once at the end. False when no
// command matches.
bool print_topic_help(std::ostream& out, const std::string& topic) {
    if (const Command* c = cli::command_named(kCommands, topic)) {
        print_command_help(out, *c);
        return true;
    }
    std::vector<const Command*> matches;
    for (const auto& c : kCommands)
        if (std::string_view(c.name).starts_with(topic + " "))
            matches.push_back(&c);
    if (matches.empty())
        return false;
    for (const auto& g : kGroups)
        if (g.name == topic)
            out << g.about << "\n\n";
    for (size_t i = 0; i < matches.size(); ++i) {
        if (i > 0)
            out << "\n";
        print_command_help(out, *matches[i], false);
    }
    out << "\n" << global_options();
    print_socket_default(out);
    return true;
}

int usage_error(std::ostream& err, const std::string& what, const cli::CommandText* c) {
    return cli::usage_error(err, kProgram, kCommands, what, c);
}

// ---- talking to the daemon -------------------------------------------------------------------

Json call(const Invocation& inv, const Json& request, std::chrono::milliseconds timeout = kCallTimeout,
          int pass_fd = -1) {
    MgmtReply reply = mgmt_call(inv.socket, request, timeout, pass_fd);
    if (!reply.ok)
        throw RefusedError(reply.error);
    return std::move(reply.result);
}

void print_json(std::ostream& out, const Json& result) {
    out << result.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
}

// ---- status ----------------------------------------------------------------------------------

std::string link_text(const Json& link) {
    if (!link.is_object())
        return "link -";
    const Json& up = member(link, "up");
    if (!up.is_boolean())
        return "link " + text(up);
    if (!up.get<bool>())
        return "link down";
    std::string s = "link up";
    const Json& speed = member(link, "speed_mbps");
    if (speed.is_number() && speed.get<double>() > 0)
        s += " " + speed.dump() + "Mb/s";
    const Json& duplex = member(link, "duplex");
    if (duplex.is_string())
        s += " " + duplex.get<std::string>();
    return s;
}

void print_status(std::ostream& out, const Json& r) {
    out << "party " << field(r, "party") << " (id " << field(r, "party_id") << ")  version "
        << field(r, "version") << "  pid " << field(r, "pid") << "  up " << uptime_text(member(r, "uptime_s"))
        << "  dataplane lcores " << list_text(member(r, "dataplane_lcores")) << "  idle " << field(r, "idle")
        << "\n";

    const Json& ports = member(r, "ports");
    if (ports.is_array() && !ports.empty()) {
        Table t(false);
        for (const auto& p : ports) {
            const Json& hop = member(p, "next_hop");
            std::vector<std::string> note{"port " + field(p, "port_id"), "driver " + field(p, "driver"),
                                          "next hop " + (hop.is_null() ? std::string("none") : text(hop)),
                                          "neighbours " + field(p, "neighbours")};
            // The offloads that are on, by name ("offloads rss,tx_checksum"), or "none".
            if (const Json& off = member(p, "offloads"); off.is_object()) {
                std::vector<std::string> on;
                for (const auto& el : off.items())
                    if (el.value().is_boolean() && el.value().get<bool>()) on.push_back(el.key());
                note.push_back("offloads " + (on.empty() ? std::string("none") : join(on, ",")));
            }
            for (auto& e : extra_members(p, {"name", "role", "port_id", "device", "driver", "address",
                                             "next_hop", "mac", "link", "neighbours", "offloads"}))
                note.push_back(std::move(e));
            t.row({field(p, "name"), field(p, "role"), field(p, "address"), field(p, "mac"),
                   link_text(member(p, "link")), field(p, "device")},
                  join(note, "  "));
        }
        t.print(out);
    } else {
        out << "ports none\n";
    }

    const Json& peers = member(r, "peers");
    if (peers.is_array() && !peers.empty()) {
        Table t(false);
        for (const auto& p : peers) {
            std::vector<std::string> cells{"peer", field(p, "party"), "id " + field(p, "party_id"),
                                           field(p, "address")};
            // "key 17 1a2b:3c4d:5e6f:7081  next 42 ...  last 17": what two operators read to each other.
            const Json& keys = member(p, "keys");
            if (keys.is_array())
                for (const auto& k : keys)
                    cells.push_back((field(k, "role") == "current" ? std::string("key ") : field(k, "role") + " ") +
                                    field(k, "id") + " " + field(k, "fingerprint"));
            if (member(p, "last_key_id").is_number()) cells.push_back("last " + field(p, "last_key_id"));
            for (auto& e : extra_members(p, {"party", "party_id", "address", "keys", "last_key_id"}))
                cells.push_back(std::move(e));
            t.row(std::move(cells));
        }
        t.print(out);
    } else {
        out << "peers none\n";
    }
}

int run_status(const Invocation& inv) {
    Json r = call(inv, {{"cmd", "status"}});
    if (inv.json)
        print_json(inv.out, r);
    else
        print_status(inv.out, r);
    return 0;
}

// ---- stats -----------------------------------------------------------------------------------

bool nonzero(const Json& v) { return v.is_number() ? v.get<double>() != 0 : !v.is_null(); }

void print_drop_reasons(std::ostream& out, const Json& r, const Json& ports) {
    // Reasons that are non-zero anywhere, in the daemon's order.
    std::vector<std::string> reasons;
    auto collect = [&](const Json& by_reason) {
        if (!by_reason.is_object())
            return;
        for (const auto& el : by_reason.items())
            if (nonzero(el.value()) && std::find(reasons.begin(), reasons.end(), el.key()) == reasons.end())
                reasons.push_back(el.key());
    };
    collect(member(r, "drops_by_reason"));
    bool per_port = false;
    if (ports.is_array())
        for (const auto& p : ports) {
            per_port = per_port || member(p, "drops_by_reason").is_object();
            collect(member(p, "drops_by_reason"));
        }
    if (reasons.empty()) {
        out << "drops by reason  none\n";
        return;
    }
    Table t(true);
    std::vector<std::string> head{"drops by reason", "total"};
    if (per_port)
        for (const auto& p : ports)
            head.push_back(field(p, "name"));
    t.row(std::move(head));
    for (const auto& reason : reasons) {
        std::vector<std::string> row{reason, text(member(member(r, "drops_by_reason"), reason.c_str()))};
        if (per_port)
            for (const auto& p : ports) {
                const Json& v = member(member(p, "drops_by_reason"), reason.c_str());
                row.push_back(v.is_null() && member(p, "drops_by_reason").is_object() ? "0" : text(v));
            }
        t.row(std::move(row));
    }
    t.print(out);
}

// The port table's columns: these first under short headings, then any other number a port
// entry holds under its own key, so a counter the daemon adds shows up without a CLI change.
constexpr std::pair<const char*, const char*> kPortColumns[] = {
    {"rx_packets", "rx pkts"}, {"rx_bytes", "rx bytes"}, {"tx_packets", "tx pkts"}, {"tx_bytes", "tx bytes"},
    {"drops", "drops"}};

void print_stats(std::ostream& out, const Json& r) {
    const Json& ports = member(r, "ports");
    std::vector<std::pair<std::string, std::string>> columns(std::begin(kPortColumns), std::end(kPortColumns));
    if (ports.is_array())
        for (const auto& p : ports)
            for (const auto& el : p.items())
                if (el.value().is_number() &&
                    std::none_of(columns.begin(), columns.end(), [&](const auto& c) { return c.first == el.key(); }))
                    columns.emplace_back(el.key(), el.key());
    Table traffic(true);
    std::vector<std::string> head{"port"};
    for (const auto& c : columns)
        head.push_back(c.second);
    traffic.row(std::move(head));
    std::vector<std::string> hw_keys;
    if (ports.is_array())
        for (const auto& p : ports) {
            std::vector<std::string> row{field(p, "name")};
            for (const auto& c : columns)
                row.push_back(field(p, c.first.c_str()));
            traffic.row(std::move(row));
            const Json& hw = member(p, "hw");
            if (hw.is_object())
                for (const auto& el : hw.items())
                    if (std::find(hw_keys.begin(), hw_keys.end(), el.key()) == hw_keys.end())
                        hw_keys.push_back(el.key());
        }
    traffic.print(out);

    if (!hw_keys.empty()) {
        Table hw(true);
        std::vector<std::string> head{"port (hw)"};
        head.insert(head.end(), hw_keys.begin(), hw_keys.end());
        hw.row(std::move(head));
        for (const auto& p : ports) {
            std::vector<std::string> row{field(p, "name")};
            for (const auto& k : hw_keys)
                row.push_back(field(member(p, "hw"), k.c_str()));
            hw.row(std::move(row));
        }
        out << "\n";
        hw.print(out);
    }

    out << "\n";
    print_drop_reasons(out, r, ports);

    // Every other section, whatever it holds, so new counters show up without a CLI change.
    Table loose(false);
    bool any_loose = false;
    for (const auto& el : r.items()) {
        if (el.key() == "ports" || el.key() == "drops_by_reason")
            continue;
        if (el.value().is_object()) {
            out << "\n" << el.key() << "\n";
            Table t(false, "  ");
            add_members(t, el.value());
            if (el.value().empty())
                out << "  none\n";
            t.print(out);
        } else {
            loose.row({el.key(), el.value().is_array() ? list_text(el.value()) : text(el.value())});
            any_loose = true;
        }
    }
    if (any_loose) {
        out << "\n";
        loose.print(out);
    }
}

int run_stats(const Invocation& inv) {
    Json r = call(inv, {{"cmd", "stats"}});
    if (inv.json)
        print_json(inv.out, r);
    else
        print_stats(inv.out, r);
    return 0;
}

// ---- ping ------------------------------------------------------------------------------------

void ping_options(po::options_description& visible, po::options_description& hidden,
                  po::positional_options_description& positional) {
    visible.add_options()
        ("count", po::value<int>()->default_value(kPingCountDefault)->value_name("N"),
         "echo requests to send, 1..100")
        ("timeout-ms", po::value<int>()->default_value(kPingTimeoutMsDefault)->value_name("MS"),
         "how long to wait for each reply, 1..60000");
    hidden.add_options()("addr", po::value<std::string>(), "IPv4 address to ping");
    positional.add("addr", 1);
}

int run_ping(const Invocation& inv) {
    if (!inv.vm.count("addr"))
        throw UsageError("ping: missing ADDR (the IPv4 address to ping)");
    const std::string dst = inv.vm["addr"].as<std::string>();
    in_addr parsed{};
    if (::inet_pton(AF_INET, dst.c_str(), &parsed) != 1)
        throw UsageError("ping: '" + dst + "' is not an IPv4 address (want a dotted quad such as 198.19.0.2)");
    const int count = inv.vm["count"].as<int>();
    if (count < kPingCountMin || count > kPingCountMax)
        throw UsageError("ping: --count must be 1..100, got " + std::to_string(count));
    const int timeout_ms = inv.vm["timeout-ms"].as<int>();
    if (timeout_ms < kPingTimeoutMsMin || timeout_ms > kPingTimeoutMsMax)
        throw UsageError("ping: --timeout-ms must be 1..60000, got " + std::to_string(timeout_ms));

    const Json request{{"cmd", "ping"}, {"dst", dst}, {"count", count}, {"timeout_ms", timeout_ms}};
    Json r = call(inv, request, kCallTimeout + std::chrono::milliseconds(count) * timeout_ms);

    const Json& rtts = member(r, "rtt_ms");
    int replies = 0;
    double min = 0, max = 0, sum = 0;
    if (rtts.is_array())
        for (const auto& v : rtts)
            if (v.is_number()) {
                const double ms = v.get<double>();
                min = replies == 0 ? ms : std::min(min, ms);
                max = replies == 0 ? ms : std::max(max, ms);
                sum += ms;
                ++replies;
            }
    const Json& sent_v = member(r, "sent");
    const Json& received_v = member(r, "received");
    const long long sent = sent_v.is_number() ? sent_v.get<long long>() : (rtts.is_array() ? rtts.size() : 0);
    const long long received = received_v.is_number() ? received_v.get<long long>() : replies;

    if (inv.json) {
        print_json(inv.out, r);
    } else {
        const std::string from = member(r, "dst").is_string() ? member(r, "dst").get<std::string>() : dst;
        inv.out << "ping " << from << " from " << field(r, "src") << " port " << field(r, "port") << "\n";
        if (rtts.is_array())
            for (size_t i = 0; i < rtts.size(); ++i) {
                if (rtts[i].is_number())
                    inv.out << "reply from " << from << ": seq=" << i + 1 << " time=" << ms_text(rtts[i].get<double>())
                            << " ms\n";
                else
                    inv.out << "no reply: seq=" << i + 1 << "\n";
            }
        const long long loss = sent > 0 ? (sent - received) * 100 / sent : 0;
        inv.out << sent << " sent, " << received << " received, " << loss << "% loss\n";
        if (replies > 0)
            inv.out << "rtt min/avg/max " << ms_text(min) << "/" << ms_text(sum / replies) << "/" << ms_text(max)
                    << " ms\n";
    }
    return received > 0 ? 0 : 1;
}

// ---- map and session -------------------------------------------------------------------------

constexpr int kPortMin = 1;
constexpr int kPortMax = 65535;
constexpr int kSessionLimitMin = 1;
constexpr int kSessionLimitMax = 100'000;
constexpr const char* kSessionLimitDefault = "1000";
constexpr size_t kNameMax = 32;

// Numbers are read as strings and checked here so that every bad value gets the same one-line
// message naming the option: digits only (no sign, spaces, hex or fraction), within lo..hi.
std::optional<int> parse_int(const std::string& s, int lo, int hi) {
    if (s.empty() || s.size() > 9 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    const int v = std::stoi(s);
    if (v < lo || v > hi)
        return std::nullopt;
    return v;
}

// Cluster and party names: 1-32 of [A-Za-z0-9_-].
bool valid_name(const std::string& s) {
    return !s.empty() && s.size() <= kNameMax && std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
}

std::optional<uint32_t> parse_ipv4(const std::string& s) {  // host order; dotted quad only
    in_addr a{};
    if (::inet_pton(AF_INET, s.c_str(), &a) != 1)
        return std::nullopt;
    return ntohl(a.s_addr);
}

std::string ipv4_text(uint32_t host_order) {
    const in_addr a{htonl(host_order)};
    char buf[INET_ADDRSTRLEN];
    return ::inet_ntop(AF_INET, &a, buf, sizeof buf) ? buf : "?";
}

std::vector<std::string> opt_list(const Invocation& inv, const char* name) {
    if (!inv.vm.count(name))
        return {};
    return inv.vm[name].as<std::vector<std::string>>();
}

// Each check takes the command's name for the message and the option's value; a missing
// mandatory option is "CMD: missing --OPTION (...)" (cli::need).

std::string check_proto(std::string_view cmd, const std::string& v) {
    if (v != "tcp" && v != "udp")
        throw UsageError(std::string(cmd) + ": --proto must be tcp or udp, got " + in_quotes(v));
    return v;
}

int check_port(std::string_view cmd, const char* option, const std::string& v) {
    auto port = parse_int(v, kPortMin, kPortMax);
    if (!port)
        throw UsageError(std::string(cmd) + ": --" + option + " must be an integer 1..65535, got " + in_quotes(v));
    return *port;
}

std::string check_name(std::string_view cmd, const char* option, const std::string& v) {
    if (!valid_name(v))
        throw UsageError(std::string(cmd) + ": --" + option +
                         " must be 1-32 characters of A-Z a-z 0-9 _ -, got " + in_quotes(v));
    return v;
}

// A.B.C.D/N with N in 1..32 and no host bits set.
std::string check_cidr(std::string_view cmd, const std::string& v) {
    const size_t slash = v.find('/');
    const auto addr = slash == std::string::npos ? std::nullopt : parse_ipv4(v.substr(0, slash));
    const auto len = slash == std::string::npos ? std::nullopt : parse_int(v.substr(slash + 1), 1, 32);
    if (!addr || !len)
        throw UsageError(std::string(cmd) + ": --allow must be an IPv4 prefix A.B.C.D/1..32 such as 198.18.1.0/24, got " +
                         in_quotes(v));
    const uint32_t mask = *len == 32 ? 0xffffffffu : ~(0xffffffffu >> *len);
    if ((*addr & ~mask) != 0)
        throw UsageError(std::string(cmd) + ": --allow " + v + " has host bits set (the prefix is " +
                         ipv4_text(*addr & mask) + "/" + std::to_string(*len) + ")");
    return v;
}

std::string check_node(std::string_view cmd, const std::string& v) {
    const size_t colon = v.rfind(':');
    if (colon == std::string::npos || !parse_ipv4(v.substr(0, colon)) ||
        !parse_int(v.substr(colon + 1), kPortMin, kPortMax))
        throw UsageError(std::string(cmd) + ": --node must be IP:PORT (port 1..65535) such as 198.18.2.10:80, got " +
                         in_quotes(v));
    return v;
}

std::string check_kind(std::string_view cmd, const std::string& v) {
    if (v != "import" && v != "export")
        throw UsageError(std::string(cmd) + ": KIND must be import or export, got " + in_quotes(v));
    return v;
}

void add_cluster_proto_port(po::options_description& visible, const char* port_help) {
    visible.add_options()
        ("cluster", po::value<std::string>()->value_name("C"), "cluster ID: 1-32 of A-Z a-z 0-9 _ -")
        ("proto", po::value<std::string>()->value_name("tcp|udp"), "protocol")
        ("port", po::value<std::string>()->value_name("P"), port_help);
}

void map_add_import_options(po::options_description& visible, po::options_description&,
                            po::positional_options_description&) {
    add_cluster_proto_port(visible, "mapped port on the gateway's internal address, 1..65535");
    visible.add_options()
        ("peer", po::value<std::string>()->value_name("PARTY"), "the peer party that exports the port")
        ("peer-port", po::value<std::string>()->value_name("Q"), "the port the peer exports, 1..65535")
        ("allow", po::value<std::vector<std::string>>()->value_name("CIDR"),
         "local source prefix allowed to use the mapping, such as 198.18.1.0/24; repeatable; none given: "
         "any local node");
}

void map_add_export_options(po::options_description& visible, po::options_description&,
                            po::positional_options_description&) {
    add_cluster_proto_port(visible, "port on the gateway's external address, 1..65535");
    visible.add_options()
        ("node", po::value<std::string>()->value_name("IP:PORT"), "the local node and port to deliver to")
        ("allow-party", po::value<std::vector<std::string>>()->value_name("PARTY"),
         "peer party allowed to reach the port; repeatable; none given: every configured peer");
}

void map_del_options(po::options_description& visible, po::options_description& hidden,
                     po::positional_options_description& positional) {
    visible.add_options()
        ("proto", po::value<std::string>()->value_name("tcp|udp"), "protocol of the mapping to delete")
        ("port", po::value<std::string>()->value_name("P"), "its port (import: mapped port; export: external port)")
        ("cluster", po::value<std::string>()->value_name("C"),
         "delete every mapping of cluster C instead (only imports or exports if KIND is given)");
    hidden.add_options()("kind", po::value<std::string>(), "import or export");
    positional.add("kind", 1);
}

void map_list_options(po::options_description& visible, po::options_description&,
                      po::positional_options_description&) {
    visible.add_options()("cluster", po::value<std::string>()->value_name("C"), "only the mappings of cluster C");
}

void session_list_options(po::options_description& visible, po::options_description&,
                          po::positional_options_description&) {
    visible.add_options()("limit", po::value<std::string>()->default_value(kSessionLimitDefault)->value_name("N"),
                          "list at most N sessions, 1..100000");
}

// "import c1 tcp/8080 -> beta:9000", "export c1 tcp/9000 -> 198.18.2.10:80"
std::string mapping_line(const Json& m) {
    const std::string kind = field(m, "kind");
    const std::string target =
        kind == "export" ? field(m, "node") : field(m, "peer") + ":" + field(m, "peer_port");
    return kind + " " + field(m, "cluster") + " " + field(m, "proto") + "/" + field(m, "port") + " -> " + target;
}

// A list of prefixes or parties; `empty` says what an empty list means (for both kinds, "any":
// any local node, any configured peer party).
std::string allow_text(const Json& v, const char* empty) {
    if (v.is_array() && v.empty())
        return empty;
    return list_text(v);
}

int print_added(const Invocation& inv, const Json& r) {
    if (inv.json)
        print_json(inv.out, r);
    else
        inv.out << "added " << mapping_line(r) << "\n";
    return 0;
}

int run_map_add_import(const Invocation& inv) {
    constexpr std::string_view cmd = "map add import";
    Json req = Json::object();
    req["cmd"] = "map_add";
    req["kind"] = "import";
    req["cluster"] = check_name(cmd, "cluster", need(inv.vm, cmd, "cluster", "the cluster ID"));
    req["proto"] = check_proto(cmd, need(inv.vm, cmd, "proto", "tcp or udp"));
    req["port"] = check_port(cmd, "port", need(inv.vm, cmd, "port", "the mapped port"));
    req["peer"] = check_name(cmd, "peer", need(inv.vm, cmd, "peer", "the peer party"));
    req["peer_port"] = check_port(cmd, "peer-port", need(inv.vm, cmd, "peer-port", "the peer's exported port"));
    Json allow = Json::array();
    for (const auto& a : opt_list(inv, "allow"))
        allow.push_back(check_cidr(cmd, a));
    req["allow"] = std::move(allow);
    return print_added(inv, call(inv, req));
}

int run_map_add_export(const Invocation& inv) {
    constexpr std::string_view cmd = "map add export";
    Json req = Json::object();
    req["cmd"] = "map_add";
    req["kind"] = "export";
    req["cluster"] = check_name(cmd, "cluster", need(inv.vm, cmd, "cluster", "the cluster ID"));
    req["proto"] = check_proto(cmd, need(inv.vm, cmd, "proto", "tcp or udp"));
    req["port"] = check_port(cmd, "port", need(inv.vm, cmd, "port", "the external port"));
    req["node"] = check_node(cmd, need(inv.vm, cmd, "node", "the local node as IP:PORT"));
    Json parties = Json::array();
    for (const auto& p : opt_list(inv, "allow-party"))
        parties.push_back(check_name(cmd, "allow-party", p));
    req["allow_parties"] = std::move(parties);
    return print_added(inv, call(inv, req));
}

int run_map_del(const Invocation& inv) {
    constexpr std::string_view cmd = "map del";
    const auto kind = opt(inv.vm, "kind");
    if (kind)
        check_kind(cmd, *kind);
    const auto cluster = opt(inv.vm, "cluster");
    const auto proto = opt(inv.vm, "proto");
    const auto port = opt(inv.vm, "port");

    Json req = Json::object();
    req["cmd"] = "map_del";
    if (cluster) {
        if (proto)
            throw UsageError(std::string(cmd) + ": --proto cannot be combined with --cluster (delete by port or by "
                                                "cluster, not both)");
        if (port)
            throw UsageError(std::string(cmd) + ": --port cannot be combined with --cluster (delete by port or by "
                                                "cluster, not both)");
        req["cluster"] = check_name(cmd, "cluster", *cluster);
        if (kind)
            req["kind"] = *kind;
    } else {
        if (!kind && !proto && !port)
            throw UsageError(std::string(cmd) + ": give KIND --proto --port, or --cluster C");
        if (!kind)
            throw UsageError(std::string(cmd) + ": missing KIND (import or export) before --proto and --port");
        if (!proto)
            throw UsageError(std::string(cmd) + ": missing --proto (tcp or udp), or give --cluster C");
        if (!port)
            throw UsageError(std::string(cmd) + ": missing --port, or give --cluster C");
        req["kind"] = *kind;
        req["proto"] = check_proto(cmd, *proto);
        req["port"] = check_port(cmd, "port", *port);
    }

    Json r = call(inv, req);
    if (inv.json) {
        print_json(inv.out, r);
        return 0;
    }
    const Json& deleted = member(r, "deleted");
    const size_t n = deleted.is_array() ? deleted.size() : 0;
    inv.out << "deleted " << n << (n == 1 ? " mapping" : " mappings") << "\n";
    if (deleted.is_array())
        for (const auto& m : deleted)
            inv.out << "  " << mapping_line(m) << "\n";
    return 0;
}

void print_mappings(std::ostream& out, const char* title, const Json& list, bool imports) {
    out << title << "\n";
    if (!list.is_array() || list.empty()) {
        out << "  none\n";
        return;
    }
    Table t(true, "  ");
    if (imports)
        t.row({"cluster", "proto", "port", "", "peer:port", "allow", "source"});
    else
        t.row({"cluster", "proto", "port", "", "node", "allow parties", "source"});
    for (const auto& m : list) {
        if (imports)
            t.row({field(m, "cluster"), field(m, "proto"), field(m, "port"), "->",
                   field(m, "peer") + ":" + field(m, "peer_port"), allow_text(member(m, "allow"), "any"),
                   field(m, "source")});
        else
            t.row({field(m, "cluster"), field(m, "proto"), field(m, "port"), "->", field(m, "node"),
                   allow_text(member(m, "allow_parties"), "any"), field(m, "source")});
    }
    t.print(out);
}

int run_map_list(const Invocation& inv) {
    Json req = Json::object();
    req["cmd"] = "map_list";
    if (auto cluster = opt(inv.vm, "cluster"))
        req["cluster"] = check_name("map list", "cluster", *cluster);
    Json r = call(inv, req);
    if (inv.json) {
        print_json(inv.out, r);
        return 0;
    }
    print_mappings(inv.out, "imports", member(r, "imports"), true);
    inv.out << "\n";
    print_mappings(inv.out, "exports", member(r, "exports"), false);
    return 0;
}

int run_map_nft(const Invocation& inv) {
    Json req = Json::object();
    req["cmd"] = "map_nft";
    if (auto cluster = opt(inv.vm, "cluster"))
        req["cluster"] = check_name("map nft", "cluster", *cluster);
    Json r = call(inv, req);
    if (inv.json) {
        print_json(inv.out, r);
        return 0;
    }
    inv.out << text(member(r, "ruleset"));
    return 0;
}

// 1.5 -> "1.5s", 7440 -> "7440s"
std::string seconds_text(const Json& v) {
    if (!v.is_number())
        return text(v);
    const double s = v.get<double>();
    char buf[32];
    if (s == static_cast<double>(static_cast<long long>(s)))
        std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(s));
    else
        std::snprintf(buf, sizeof buf, "%.1fs", s);
    return buf;
}

int run_session_list(const Invocation& inv) {
    constexpr std::string_view cmd = "session list";
    const std::string limit_text = inv.vm["limit"].as<std::string>();
    const auto limit = parse_int(limit_text, kSessionLimitMin, kSessionLimitMax);
    if (!limit)
        throw UsageError(std::string(cmd) + ": --limit must be an integer 1..100000, got " + in_quotes(limit_text));
    Json req = Json::object();
    req["cmd"] = "session_list";
    req["limit"] = *limit;
    Json r = call(inv, req);
    if (inv.json) {
        print_json(inv.out, r);
        return 0;
    }
    const Json& sessions = member(r, "sessions");
    const size_t n = sessions.is_array() ? sessions.size() : 0;
    if (n > 0) {
        Table t(true);
        t.row({"kind", "proto", "state", "in src", "in dst", "", "out src", "out dst", "idle/timeout"});
        for (const auto& s : sessions) {
            const Json& in = member(s, "in");
            const Json& outside = member(s, "out");
            t.row({field(s, "kind"), field(s, "proto"), field(s, "state"), field(in, "src"), field(in, "dst"), "->",
                   field(outside, "src"), field(outside, "dst"),
                   seconds_text(member(s, "idle_s")) + "/" + seconds_text(member(s, "timeout_s"))});
        }
        t.print(inv.out);
    }
    inv.out << n << (n == 1 ? " session" : " sessions") << " shown of " << field(r, "total");
    const Json& truncated = member(r, "truncated");
    if (truncated.is_boolean() && truncated.get<bool>())
        inv.out << " (raise --limit to see more)";
    inv.out << "\n";
    return 0;
}

// ---- process directory and resolution ----------------------------------------------------------

constexpr int kDirLimitMax = 100'000;
constexpr const char* kDirLimitDefault = "1000";

void dir_list_options(po::options_description& visible, po::options_description&,
                      po::positional_options_description&) {
    visible.add_options()
        ("local", po::bool_switch(), "only processes registered with this gateway")
        ("remote", po::bool_switch(), "only other parties' processes (announced, answered, not found)")
        ("limit", po::value<std::string>()->default_value(kDirLimitDefault)->value_name("N"),
         "list at most N entries, 1..100000");
}

void pid_operand(po::options_description&, po::options_description& hidden,
                 po::positional_options_description& positional) {
    hidden.add_options()("pid", po::value<std::string>(), "process ID");
    positional.add("pid", 1);
}

// PARTY.NODE.LOCAL with each part in range, or 0x and 1-16 hex digits; checked here so a typo is
// named before anything is sent.
std::string pid_argument(const Invocation& inv, std::string_view cmd) {
    if (!inv.vm.count("pid"))
        throw UsageError(std::string(cmd) + ": missing PID (a process ID: PARTY.NODE.LOCAL or 0xHEX)");
    const std::string pid = inv.vm["pid"].as<std::string>();
    const auto parsed = parse_process_id(pid);
    const bool ok = parsed && parsed->value != 0;
    if (!ok)
        throw UsageError(std::string(cmd) + ": PID must be PARTY.NODE.LOCAL (16.16.32 bits, decimal) or 0xHEX, got " +
                         in_quotes(pid));
    return pid;
}

std::string record_line(const Json& rec) {
    return field(rec, "pid") + " epoch " + field(rec, "epoch") + " " + field(rec, "transport") + " " +
           field(rec, "address") + " gid " + field(rec, "gid") + " qpn " + field(rec, "qpn") + " mtu " +
           field(rec, "mtu");
}

int run_dir_list(const Invocation& inv) {
    constexpr std::string_view cmd = "dir list";
    const bool local = inv.vm["local"].as<bool>(), remote = inv.vm["remote"].as<bool>();
    if (local && remote) throw UsageError(std::string(cmd) + ": --local and --remote exclude each other");
    const std::string limit_text = inv.vm["limit"].as<std::string>();
    const auto limit = parse_int(limit_text, 1, kDirLimitMax);
    if (!limit)
        throw UsageError(std::string(cmd) + ": --limit must be an integer 1..100000, got " + in_quotes(limit_text));
    Json req = {{"cmd", "dir_list"}, {"which", local ? "local" : remote ? "remote" : "all"}, {"limit", *limit}};
    Json r = call(inv, req);
    if (inv.json) {
        print_json(inv.out, r);
        return 0;
    }
    const Json& entries = member(r, "entries");
    if (entries.is_array() && !entries.empty()) {
        Table t(true);
        t.row({"key", "kind", "owner", "epoch", "transport", "address", "gid", "qpn", "mtu", "expires"});
        for (const auto& e : entries) {
            const Json& rec = member(e, "record");
            const Json& exp = member(e, "expires_in_ms");
            t.row({field(e, "key"), field(e, "kind"), field(e, "owner"), field(rec, "epoch"), field(rec, "transport"),
                   field(rec, "address"), field(rec, "gid"), field(rec, "qpn"), field(rec, "mtu"),
                   exp.is_number() ? seconds_text(Json(exp.get<double>() / 1000.0)) : "never"});
        }
        t.print(inv.out);
    }
    inv.out << field(r, "shown") << " shown of " << field(r, "total") << "\n";
    return 0;
}

// ---- packet capture ----------------------------------------------------------------------------

constexpr int kCaptureCountMax = 10'000'000;
constexpr int kCaptureDurationMax = 86'400;
constexpr auto kCapturePoll = std::chrono::milliseconds(100);
std::atomic<bool> g_capture_interrupted{false};

void capture_options(po::options_description& visible, po::options_description&,
                     po::positional_options_description&) {
    visible.add_options()
        ("port", po::value<std::string>()->value_name("NAME"), "the gateway port to capture on (see fedgatectl status)")
        ("write,w", po::value<std::string>()->value_name("FILE"),
         "the pcapng file to write (replaced if it exists); - writes to standard output, for a pipe")
        ("count", po::value<std::string>()->value_name("N"), "stop after N packets, 1..10000000 (default: no limit)")
        ("filter", po::value<std::string>()->value_name("EXPR"), "keep only packets matching a tcpdump filter expression")
        ("duration", po::value<std::string>()->value_name("S"), "stop after S seconds, 1..86400 (default: no limit)")
        ("snaplen", po::value<std::string>()->value_name("N"), "bytes kept of each packet, 64..2048 (default 2048)");
}

// Runs until the capture is done, the duration is over, or SIGINT/SIGTERM; then stops it.
int run_capture(const Invocation& inv) {
    constexpr std::string_view cmd = "capture";
    const auto need = [&](const char* name, const char* what) {
        if (!inv.vm.count(name)) throw UsageError(std::string(cmd) + ": missing " + what);
        return inv.vm[name].as<std::string>();
    };
    const auto number = [&](const char* name, int lo, int hi) -> std::optional<int> {
        if (!inv.vm.count(name)) return std::nullopt;
        const std::string v = inv.vm[name].as<std::string>();
        const auto n = parse_int(v, lo, hi);
        if (!n)
            throw UsageError(std::string(cmd) + ": --" + name + " must be an integer " + std::to_string(lo) + ".." +
                             std::to_string(hi) + ", got " + in_quotes(v));
        return n;
    };
    const std::string port = need("port", "--port NAME (the gateway port to capture on)");
    const std::string file_arg = need("write", "-w FILE (the pcapng file to write, or - for standard output)");
    if (file_arg.empty()) throw UsageError(std::string(cmd) + ": -w needs a file name (or -)");
    const auto count = number("count", 1, kCaptureCountMax);
    const auto duration = number("duration", 1, kCaptureDurationMax);
    const auto snaplen = number("snaplen", 64, 2048);
    // fedgated writes the capture: into a file, for which it needs the whole path and a file that is
    // not there yet, or for -w - into this process's standard output, passed with the request.
    const bool to_stdout = file_arg == "-";
    std::string file = "-";
    if (to_stdout) {
        if (::isatty(STDOUT_FILENO))
            throw UsageError(std::string(cmd) + ": -w - writes binary pcapng to standard output, which is a terminal: "
                                                "pipe it (| tshark -r -) or redirect it to a file");
    } else {
        file = std::filesystem::absolute(file_arg).lexically_normal().string();
        std::error_code ec;
        if (std::filesystem::is_directory(file, ec)) throw UsageError(std::string(cmd) + ": -w " + file + " is a directory");
        std::filesystem::remove(file, ec);
    }
    std::ostream& say = to_stdout ? inv.err : inv.out;  // standard output is the capture's
    const std::string target = to_stdout ? "standard output" : file;

    Json req = {{"cmd", "capture_start"}, {"port", port}, {"file", file}};
    if (count) req["count"] = *count;
    if (snaplen) req["snaplen"] = *snaplen;
    if (inv.vm.count("filter")) req["filter"] = inv.vm["filter"].as<std::string>();
    Json st = call(inv, req, kCallTimeout, to_stdout ? STDOUT_FILENO : -1);
    const Json id = member(st, "id");
    if (!inv.json)
        say << "capturing on " << port << " to " << target
            << (req.contains("filter") ? " (filter '" + req["filter"].get<std::string>() + "')" : std::string())
            << (count ? ", " + std::to_string(*count) + " packets" : std::string()) << std::endl;

    g_capture_interrupted = false;
    struct sigaction on{}, old_int{}, old_term{};
    on.sa_handler = [](int) { g_capture_interrupted = true; };
    sigaction(SIGINT, &on, &old_int);
    sigaction(SIGTERM, &on, &old_term);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(duration.value_or(kCaptureDurationMax));
    while (!g_capture_interrupted && std::chrono::steady_clock::now() < until) {
        st = call(inv, {{"cmd", "capture_status"}, {"id", id}});
        if (field(st, "state") != "running") break;
        std::this_thread::sleep_for(kCapturePoll);
    }
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    // fedgated has written and closed its end once this returns: a reader of -w - sees the end.
    st = call(inv, {{"cmd", "capture_stop"}, {"id", id}});
    if (inv.json) {
        print_json(say, st);
    } else {
        say << field(st, "written") << " packets written to " << target << ", " << field(st, "dropped")
            << " dropped (" << field(st, "matched") << " matched of " << field(st, "seen") << " seen)\n";
        if (member(st, "error").is_string()) say << "error: " << field(st, "error") << "\n";
    }
    return field(st, "state") == "failed" ? 1 : 0;
}

void conn_list_options(po::options_description& visible, po::options_description&,
                       po::positional_options_description&) {
    visible.add_options()("limit", po::value<std::string>()->default_value(kDirLimitDefault)->value_name("N"),
                          "list at most N handshakes, 1..100000, newest first");
}

int run_conn_list(const Invocation& inv) {
    const std::string limit_text = inv.vm["limit"].as<std::string>();
    const auto limit = parse_int(limit_text, 1, kDirLimitMax);
    if (!limit) throw UsageError("conn list: --limit must be an integer 1..100000, got " + in_quotes(limit_text));
    Json r = call(inv, {{"cmd", "conn_list"}, {"limit", *limit}});
    if (inv.json) {
        print_json(inv.out, r);
        return 0;
    }
    const Json& list = member(r, "handshakes");
    if (list.is_array() && !list.empty()) {
        Table t(true);
        t.row({"conn id", "initiator", "target", "role", "peer", "stage", "status", "transport", "age"});
        for (const auto& h : list)
            t.row({field(h, "conn_id"), field(h, "initiator"), field(h, "target"), field(h, "role"),
                   field(h, "peer_party"), field(h, "stage"), field(h, "status"), field(h, "transport"),
                   seconds_text(Json(member(h, "age_ms").is_number() ? member(h, "age_ms").get<double>() / 1000.0 : 0.0))});
        t.print(inv.out);
    }
    inv.out << field(r, "shown") << " shown of " << field(r, "total") << "\n";
    // RDMA connections between parties whose RoCE v2 traffic this gateway translates.
    const Json& tr = member(r, "translations");
    if (tr.is_array() && !tr.empty()) {
        inv.out << "\nRoCE v2 translations:\n";
        Table t(true);
        t.row({"conn id", "local", "remote", "node", "qpn", "int vqpn", "ext vqpn", "peer", "peer vqpn", "to peer",
               "from peer", "idle"});
        const auto flow = [](const Json& f) {
            return field(f, "packets") + " pkts " + field(f, "bytes") + " B";
        };
        for (const auto& c : tr)
            t.row({field(c, "conn_id"), field(c, "local"), field(c, "remote"), field(c, "node"), field(c, "node_qpn"),
                   field(c, "internal_vqpn"), field(c, "external_vqpn"), field(c, "peer"), field(c, "peer_vqpn"),
                   flow(member(c, "to_peer")), flow(member(c, "from_peer")),
                   seconds_text(Json(member(c, "idle_ms").is_number() ? member(c, "idle_ms").get<double>() / 1000.0 : 0.0))});
        t.print(inv.out);
    }
    return 0;
}

int run_dir_show(const Invocation& inv) {
    Json r = call(inv, {{"cmd", "dir_show"}, {"pid", pid_argument(inv, "dir show")}});
    if (inv.json) {
        print_json(inv.out, r);
        return 0;
    }
    Table t(false);
    t.row({"key", field(r, "key")});
    t.row({"kind", field(r, "kind")});
    t.row({"owner", field(r, "owner")});
    const Json& rec = member(r, "record");
    if (rec.is_object())
        for (const auto& el : rec.items()) t.row({el.key(), text(el.value())});
    for (const char* k : {"source", "registered_ms_ago", "heartbeat_expires_in_ms", "expires_in_ms"})
        if (r.contains(k) && !r[k].is_null()) t.row({k, text(r[k])});
    t.print(inv.out);
    return 0;
}

int run_resolve(const Invocation& inv) {
    const std::string pid = pid_argument(inv, "resolve");
    Json r = call(inv, {{"cmd", "resolve"}, {"pid", pid}});
    const bool ok = field(r, "status") == "ok";
    if (inv.json)
        print_json(inv.out, r);
    else if (ok)
        inv.out << record_line(member(r, "record")) << " (" << field(r, "source") << ")\n";
    else
        inv.out << "resolve " << field(r, "target") << ": " << field(r, "status") << " (" << field(r, "source") << ")\n";
    return ok ? 0 : 1;
}

// ---- logs ------------------------------------------------------------------------------------

constexpr std::string_view kLogLevels = "emerg, alert, crit, err, warning, notice, info, debug";

void log_level_operands(po::options_description&, po::options_description& hidden,
                        po::positional_options_description& positional) {
    hidden.add_options()("type", po::value<std::string>(), "log type or glob")("level", po::value<std::string>(),
                                                                                "log level");
    positional.add("type", 1).add("level", 1);
}

bool log_type_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-' || c == '*' || c == '?' || c == '[' || c == ']';
}

int run_log_level(const Invocation& inv) {
    constexpr std::string_view cmd = "log level";
    if (!inv.vm.count("type"))
        throw UsageError(std::string(cmd) + ": missing TYPE (a log type such as fedgate.resolve, or a glob such as "
                                            "'fedgate.*'; 'fedgatectl log list' shows them)");
    if (!inv.vm.count("level"))
        throw UsageError(std::string(cmd) + ": missing LEVEL (" + std::string(kLogLevels) + ")");
    const std::string type = inv.vm["type"].as<std::string>(), level = inv.vm["level"].as<std::string>();
    if (type.empty() || type.size() > 64 || !std::all_of(type.begin(), type.end(), log_type_char))
        throw UsageError(std::string(cmd) + ": TYPE must be a log type name or glob (1-64 of letters, digits, "
                                            "'_', '.', '-', '*', '?', '[]'), got " + in_quotes(type));
    const std::string levels(kLogLevels);
    bool known = false;
    for (std::string_view rest = levels; !rest.empty();) {
        const size_t comma = rest.find(", ");
        known = known || rest.substr(0, comma) == level;
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 2);
    }
    if (!known)
        throw UsageError(std::string(cmd) + ": LEVEL must be one of " + levels + ", got " + in_quotes(level));
    Json r = call(inv, {{"cmd", "log_level"}, {"type", type}, {"level", level}});
    if (inv.json) {
        print_json(inv.out, r);
        return 0;
    }
    const Json& changed = member(r, "changed");
    if (changed.is_array())
        for (const auto& c : changed)
            inv.out << field(c, "type") << ": " << field(c, "from") << " -> " << field(c, "to") << "\n";
    return 0;
}

int run_log_list(const Invocation& inv) {
    Json r = call(inv, {{"cmd", "log_list"}});
    if (inv.json) {
        print_json(inv.out, r);
        return 0;
    }
    const Json& types = member(r, "types");
    Table t(true);
    t.row({"type", "level"});
    if (types.is_array())
        for (const auto& e : types) t.row({field(e, "type"), field(e, "level")});
    t.print(inv.out);
    inv.out << "global level " << field(r, "global_level") << " (no message above it is logged, whatever its type)\n";
    return 0;
}

// ---- reload ----------------------------------------------------------------------------------

int run_reload(const Invocation& inv) {
    Json r = call(inv, {{"cmd", "reload"}});
    if (inv.json) {
        print_json(inv.out, r);
        return 0;
    }
    const Json& changes = member(r, "changes");
    const Json& dropped = member(r, "dropped");
    const bool none = (!changes.is_array() || changes.empty()) && (!dropped.is_array() || dropped.empty());
    if (changes.is_array())
        for (const auto& c : changes) inv.out << field(c, "text") << "\n";
    if (dropped.is_array())
        for (const auto& d : dropped) inv.out << text(d) << "\n";
    if (none) inv.out << "no changes\n";
    return 0;
}

// ---- cluster ---------------------------------------------------------------------------------

std::string ago_text(const Json& unix_ms) {
    if (!unix_ms.is_number()) return "-";
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
    const double s = (static_cast<double>(now) - unix_ms.get<double>()) / 1000.0;
    return uptime_text(Json(s < 0 ? 0.0 : s)) + " ago";
}

int run_cluster_status(const Invocation& inv) {
    Json r = call(inv, {{"cmd", "cluster_status"}});
    if (inv.json) {
        print_json(inv.out, r);
        return 0;
    }
    inv.out << "party " << field(r, "party") << " member " << field(r, "member") << " (" << field(r, "role")
            << "), active " << field(r, "active") << "\n";
    const Json& lease = member(r, "lease");
    if (lease.is_object())
        inv.out << "lease " << field(lease, "id") << " ttl " << field(lease, "ttl_s") << " s, renewed "
                << field(lease, "renewed_ms_ago") << " ms ago\n";
    else
        inv.out << "lease none\n";
    const Json& store = member(r, "store");
    inv.out << "store " << (member(store, "healthy").is_boolean() && member(store, "healthy").get<bool>() ? "healthy" : "UNHEALTHY");
    if (const Json& e = member(store, "last_error"); e.is_string() && !e.get<std::string>().empty())
        inv.out << ", last error: " << e.get<std::string>();
    inv.out << "\n";
    Table ep(true);
    ep.row({"endpoint", "state"});
    if (const Json& eps = member(store, "endpoints"); eps.is_array())
        for (const auto& e : eps) ep.row({field(e, "url"), field(e, "state")});
    ep.print(inv.out);
    Table t(true);
    t.row({"member", "active", "pid", "version"});
    if (const Json& ms = member(r, "members"); ms.is_array())
        for (const auto& m : ms)
            t.row({field(m, "member"), field(m, "active"), field(member(m, "info"), "pid"), field(member(m, "info"), "version")});
    t.print(inv.out);
    const Json& f = member(r, "last_failover");
    if (f.is_object())
        inv.out << "last failover " << field(f, "from") << " -> " << field(f, "to") << ", " << ago_text(member(f, "at_unix_ms"))
                << "\n";
    else
        inv.out << "last failover none\n";
    const Json& ss = member(r, "sessions");
    if (ss.is_object()) {
        inv.out << "session events on " << field(ss, "sync") << ": sent " << field(ss, "events_sent") << ", received "
                << field(ss, "events_received") << ", missed " << field(ss, "events_missed") << ", rejected "
                << field(ss, "rejected") << "; mirrored " << field(ss, "mirrored") << " session(s)";
        if (const Json& from = member(ss, "mirrored_from"); from.is_array())
            for (const auto& m : from) inv.out << ", " << field(m, "sessions") << " from " << field(m, "member");
        inv.out << "\n";
        if (ss.contains("caches_received"))
            inv.out << "warm cache: " << field(ss, "cache_records") << " remote record(s) in the last copy, "
                    << field(ss, "caches_received") << " copies taken, " << field(ss, "caches_sent") << " sent\n";
    } else {
        inv.out << "session events off\n";
    }
    return 0;
}

// ---- help ------------------------------------------------------------------------------------

void help_options(po::options_description&, po::options_description& hidden,
                  po::positional_options_description& positional) {
    hidden.add_options()("topic", po::value<std::vector<std::string>>(), "command to explain");
    positional.add("topic", -1);
}

int run_help(const Invocation& inv) {
    if (!inv.vm.count("topic")) {
        print_help(inv.out);
        return 0;
    }
    // `help map` explains every `map ...` command.
    const std::string topic = join(inv.vm["topic"].as<std::vector<std::string>>(), " ");
    if (!print_topic_help(inv.out, topic))
        throw UsageError("help: unknown command '" + topic + "'");
    return 0;
}

// ---- completion ------------------------------------------------------------------------------

int run_completion(const Invocation& inv) {
    cli::print_bash_completion(inv.out, kProgram, kCommands, global_options());
    return 0;
}

// ---- dispatch --------------------------------------------------------------------------------

std::string default_socket() {
    const char* env = std::getenv(kSocketEnv);
    return env && *env ? env : kDefaultSocket;
}

int dispatch(std::vector<std::string> args, std::ostream& out, std::ostream& err) {
    cli::CommandLine<Command> line;
    try {
        line = cli::parse_command_line(std::move(args), kCommands, global_options());
    } catch (const UsageError& e) {
        return usage_error(err, e.what(), e.command);
    }
    if (!line.group.empty()) {  // `map --help` explains every `map ...` command
        print_topic_help(out, line.group);
        return 0;
    }
    const Command* cmd = line.command;
    const po::variables_map& vm = line.vm;
    if (vm["help"].as<bool>()) {
        if (cmd)
            print_command_help(out, *cmd);
        else
            print_help(out);
        return 0;
    }
    if (vm["version"].as<bool>()) {
        out << kProg << " " << FEDGATE_VERSION << "\n";
        return 0;
    }
    if (!cmd)
        return usage_error(err, "no command given", nullptr);

    Invocation inv{vm.count("socket") ? vm["socket"].as<std::string>() : default_socket(), vm["json"].as<bool>(),
                   vm, out, err};
    if (inv.socket.empty())
        return usage_error(err, "--socket: empty path", cmd);
    try {
        return cmd->run(inv);
    } catch (const UsageError& e) {
        return usage_error(err, e.what(), cmd);
    } catch (const MgmtCallError& e) {
        err << kProg << ": " << e.what() << "\n";
    } catch (const RefusedError& e) {
        err << kProg << ": " << e.what() << "\n";
    } catch (const nlohmann::json::exception& e) {
        err << kProg << ": malformed reply from fedgated at " << inv.socket << ": " << e.what() << "\n";
    }
    return 1;
}

}  // namespace

std::vector<const cli::CommandText*> fedgatectl_commands() {
    std::vector<const cli::CommandText*> rows;
    for (const Command& c : kCommands)
        rows.push_back(&c);
    return rows;
}

po::options_description fedgatectl_global_options() { return global_options(); }

int run_fedgatectl(int argc, char** argv, std::ostream& out, std::ostream& err) {
    try {
        return dispatch(cli::arguments(argc, argv), out, err);
    } catch (const std::exception& e) {
        err << kProg << ": " << e.what() << "\n";
        return 1;
    }
}

}  // namespace fedgate
