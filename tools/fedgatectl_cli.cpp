// fedgatectl's commands: one table of {name, synopsis, options, handler} and the dispatcher around it.
#include "tools/fedgatectl_cli.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <arpa/inet.h>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "controlplane/config.hpp"  // kDefaultSocket, shared with fedgated; header-only constants
#include "tools/mgmt_client.hpp"

namespace fedgate {
namespace {

namespace po = boost::program_options;
using Json = nlohmann::ordered_json;
using namespace std::chrono_literals;

constexpr std::string_view kProg = "fedgatectl";
constexpr const char* kSocketEnv = "FEDGATE_SOCKET";  // overrides kDefaultSocket as --socket's default
constexpr std::chrono::milliseconds kCallTimeout = 10s;  // for a daemon that accepts and then hangs
constexpr int kPingCountMin = 1;
constexpr int kPingCountMax = 100;
constexpr int kPingCountDefault = 3;
constexpr int kPingTimeoutMsMin = 1;
constexpr int kPingTimeoutMsMax = 60'000;
constexpr int kPingTimeoutMsDefault = 1000;

// Guessing would let `--sock X` through boost while our command-word scan does not know it.
constexpr int kParseStyle = po::command_line_style::unix_style & ~po::command_line_style::allow_guessing;

// Bad command line, found before anything is sent: exit 2 with the usage.
struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// The daemon answered ok:false: exit 1 with its message.
struct RefusedError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Invocation {
    std::string socket;
    bool json = false;
    const po::variables_map& vm;
    std::ostream& out;
};

// One entry per command; a new command is one more row in kCommands.
struct Command {
    std::string_view name;             // the words typed: "status", later "map add"
    std::string_view operands;         // positional arguments: "ADDR"
    std::string_view option_synopsis;  // "[--count N] [--timeout-ms MS]"
    std::string_view summary;          // one line in the command list
    std::string_view example;          // a full command line
    // Adds the command's options; positional operands are declared in `hidden` and `positional`.
    void (*options)(po::options_description& visible, po::options_description& hidden,
                    po::positional_options_description& positional);
    int (*run)(const Invocation&);
};

void ping_options(po::options_description&, po::options_description&, po::positional_options_description&);
void help_options(po::options_description&, po::options_description&, po::positional_options_description&);
int run_status(const Invocation&);
int run_stats(const Invocation&);
int run_ping(const Invocation&);
int run_help(const Invocation&);

constexpr std::array kCommands{
    Command{"status", "", "", "show the party, its ports with address and link, and its peers",
            "fedgatectl status", nullptr, run_status},
    Command{"stats", "", "", "show packet, drop, ARP, ICMP, neighbour and poll-loop counters",
            "fedgatectl stats --json", nullptr, run_stats},
    Command{"ping", "ADDR", "[--count N] [--timeout-ms MS]",
            "send ICMP echo requests to ADDR from the gateway's data plane",
            "fedgatectl ping 198.19.0.2 --count 5", ping_options, run_ping},
    Command{"help", "[COMMAND]", "", "show help for every command, or for one", "fedgatectl help ping",
            help_options, run_help},
};

// ---- text helpers ----------------------------------------------------------------------------

std::vector<std::string> words(std::string_view s) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < s.size()) {
        size_t j = s.find(' ', i);
        if (j == std::string_view::npos)
            j = s.size();
        if (j > i)
            out.emplace_back(s.substr(i, j - i));
        i = j + 1;
    }
    return out;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
    std::string out;
    for (const auto& p : parts) {
        if (!out.empty())
            out += sep;
        out += p;
    }
    return out;
}

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
        ("json", po::bool_switch(), "print the daemon's result as JSON (2-space indent)")
        ("help,h", po::bool_switch(), "show help and exit");
    return d;
}

std::string usage_line(const Command& c) {
    std::string s = "usage: fedgatectl [--socket PATH] [--json] " + std::string(c.name);
    if (!c.operands.empty())
        s += " " + std::string(c.operands);
    if (!c.option_synopsis.empty())
        s += " " + std::string(c.option_synopsis);
    return s;
}

std::string list_name(const Command& c) {
    return c.operands.empty() ? std::string(c.name) : std::string(c.name) + " " + std::string(c.operands);
}

void print_command_list(std::ostream& out) {
    Table t(false, "  ");
    for (const auto& c : kCommands)
        t.row({list_name(c), std::string(c.summary)});
    t.print(out);
}

void print_general_usage(std::ostream& out) {
    out << "usage: fedgatectl [--socket PATH] [--json] COMMAND [ARGS]\n\ncommands:\n";
    print_command_list(out);
    out << "\n'fedgatectl help COMMAND' shows a command's options.\n";
}

void print_socket_default(std::ostream& out) {
    out << "PATH defaults to $" << kSocketEnv << " if set, else " << kDefaultSocket << ".\n";
}

void print_help(std::ostream& out) {
    out << "fedgatectl: control a running fedgated through its management socket\n\n"
        << "usage: fedgatectl [--socket PATH] [--json] COMMAND [ARGS]\n\ncommands:\n";
    print_command_list(out);
    out << "\n" << global_options();
    print_socket_default(out);
    out << "\nexamples:\n";
    for (const auto& c : kCommands)
        out << "  " << c.example << "\n";
    out << "\n'fedgatectl help COMMAND' shows a command's options.\n"
        << "Exit status: 0 success; 1 fedgated unreachable or refused the request (ping: no reply);\n"
        << "2 bad command line (nothing was sent).\n";
}

po::options_description visible_options(const Command& c) {
    po::options_description visible(std::string(c.name) + " options"), hidden;
    po::positional_options_description positional;
    if (c.options)
        c.options(visible, hidden, positional);
    return visible;
}

void print_command_usage(std::ostream& out, const Command& c) {
    out << usage_line(c) << "\n";
    auto visible = visible_options(c);
    if (!visible.options().empty())
        out << "\n" << visible;
}

void print_command_help(std::ostream& out, const Command& c) {
    out << usage_line(c) << "\n\n" << c.summary << "\n";
    // One description holding both groups so boost aligns their columns alike.
    po::options_description both;
    auto visible = visible_options(c);
    if (!visible.options().empty())
        both.add(visible);
    both.add(global_options());
    out << both;
    print_socket_default(out);
    out << "\nexample:\n  " << c.example << "\n";
}

int usage_error(std::ostream& err, const std::string& what, const Command* c) {
    err << kProg << ": " << what << "\n";
    if (c)
        print_command_usage(err, *c);
    else
        print_general_usage(err);
    return 2;
}

// ---- talking to the daemon -------------------------------------------------------------------

Json call(const Invocation& inv, const Json& request, std::chrono::milliseconds timeout = kCallTimeout) {
    MgmtReply reply = mgmt_call(inv.socket, request, timeout);
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
            for (auto& e : extra_members(p, {"name", "role", "port_id", "device", "driver", "address",
                                             "next_hop", "mac", "link", "neighbours"}))
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
            for (auto& e : extra_members(p, {"party", "party_id", "address"}))
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

void print_stats(std::ostream& out, const Json& r) {
    const Json& ports = member(r, "ports");
    Table traffic(true);
    traffic.row({"port", "rx pkts", "rx bytes", "tx pkts", "tx bytes", "drops"});
    std::vector<std::string> hw_keys;
    if (ports.is_array())
        for (const auto& p : ports) {
            traffic.row({field(p, "name"), field(p, "rx_packets"), field(p, "rx_bytes"), field(p, "tx_packets"),
                         field(p, "tx_bytes"), field(p, "drops")});
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
    // `help map` explains every `map ...` command once those exist.
    const std::string topic = join(inv.vm["topic"].as<std::vector<std::string>>(), " ");
    bool found = false;
    for (const auto& c : kCommands) {
        if (c.name == topic || std::string_view(c.name).starts_with(topic + " ")) {
            if (found)
                inv.out << "\n";
            print_command_help(inv.out, c);
            found = true;
        }
    }
    if (!found)
        throw UsageError("help: unknown command '" + topic + "'");
    return 0;
}

// ---- dispatch --------------------------------------------------------------------------------

// Index of the first argument that is not a global option (or its value): where the command starts.
size_t skip_global_options(const std::vector<std::string>& args) {
    size_t i = 0;
    while (i < args.size()) {
        const std::string& a = args[i];
        if (a == "--socket")
            i += 2;
        else if (a.starts_with("--socket=") || a == "--json" || a == "--help" || a == "-h")
            i += 1;
        else
            break;
    }
    return i;
}

std::string default_socket() {
    const char* env = std::getenv(kSocketEnv);
    return env && *env ? env : kDefaultSocket;
}

int dispatch(std::vector<std::string> args, std::ostream& out, std::ostream& err) {
    const size_t at = skip_global_options(args);
    if (at >= args.size() || args[at].starts_with("-")) {
        // No command word: only global options, or a mistake among them.
        po::variables_map vm;
        try {
            po::store(po::command_line_parser(args)
                          .options(global_options())
                          .positional(po::positional_options_description{})
                          .style(kParseStyle)
                          .run(),
                      vm);
            po::notify(vm);
        } catch (const po::error& e) {
            return usage_error(err, e.what(), nullptr);
        }
        if (vm["help"].as<bool>()) {
            print_help(out);
            return 0;
        }
        return usage_error(err, "no command given", nullptr);
    }

    // The longest command whose words start at `at`: "map add" wins over a future "map".
    const Command* cmd = nullptr;
    size_t cmd_words = 0;
    for (const auto& c : kCommands) {
        const auto w = words(c.name);
        if (at + w.size() <= args.size() && std::equal(w.begin(), w.end(), args.begin() + at) &&
            w.size() > cmd_words) {
            cmd = &c;
            cmd_words = w.size();
        }
    }
    if (!cmd) {
        std::vector<std::string> subs;
        for (const auto& c : kCommands) {
            const auto w = words(c.name);
            if (w.size() > 1 && w[0] == args[at])
                subs.push_back(w[1]);
        }
        if (!subs.empty())
            return usage_error(err, "'" + args[at] + "' needs one of: " + join(subs, ", "), nullptr);
        return usage_error(err, "unknown command '" + args[at] + "'", nullptr);
    }
    args.erase(args.begin() + static_cast<long>(at), args.begin() + static_cast<long>(at + cmd_words));

    po::options_description visible(std::string(cmd->name) + " options"), hidden;
    po::positional_options_description positional;
    if (cmd->options)
        cmd->options(visible, hidden, positional);
    if (positional.max_total_count() != UINT_MAX) {
        hidden.add_options()("unexpected", po::value<std::vector<std::string>>(), "");
        positional.add("unexpected", -1);
    }
    po::options_description all;
    all.add(global_options()).add(visible).add(hidden);

    po::variables_map vm;
    try {
        po::store(po::command_line_parser(args).options(all).positional(positional).style(kParseStyle).run(), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        return usage_error(err, std::string(cmd->name) + ": " + e.what(), cmd);
    }
    if (vm.count("unexpected"))
        return usage_error(err,
                           std::string(cmd->name) + ": unexpected argument '" +
                               vm["unexpected"].as<std::vector<std::string>>().front() + "'",
                           cmd);
    if (vm["help"].as<bool>()) {
        print_command_help(out, *cmd);
        return 0;
    }

    Invocation inv{vm.count("socket") ? vm["socket"].as<std::string>() : default_socket(), vm["json"].as<bool>(),
                   vm, out};
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

int run_fedgatectl(int argc, char** argv, std::ostream& out, std::ostream& err) {
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i)
        args.emplace_back(argv[i]);
    try {
        return dispatch(std::move(args), out, err);
    } catch (const std::exception& e) {
        err << kProg << ": " << e.what() << "\n";
        return 1;
    }
}

}  // namespace fedgate
