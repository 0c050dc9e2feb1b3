// fedgate-node's commands: one table of {name, synopsis, options, handler} and the dispatcher around it.
#include "tools/fedgate_node_cli.hpp"

#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sys/socket.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "client/src/digest_stream.hpp"
#include "fedgate/endpoint.hpp"
#include "fedgate/handshake_only.hpp"
#include "fedgate/node_client.hpp"
#include "client/src/tcp_backend.hpp"
#include "tools/bash_completion.hpp"
#include "tools/command_table.hpp"
#include "tools/sidecar.hpp"

#ifndef FEDGATE_VERSION
#define FEDGATE_VERSION "unknown"
#endif

namespace fedgate {
namespace {

namespace po = boost::program_options;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using cli::in_quotes;
using cli::need;
using cli::opt;
using cli::UsageError;

constexpr std::string_view kProg = "fedgate-node";
constexpr cli::Program kProgram{.name = kProg,
                                .global_synopsis = "--gateway IP[:PORT] [--bind IP] [--timeout-ms MS] [--tries N]",
                                .help_shows_globals = false};
constexpr const char* kGatewayEnv = "FEDGATE_GATEWAY";  // --gateway's default when set
constexpr uint32_t kTimeoutMsMin = 1;
constexpr uint32_t kTimeoutMsMax = 60'000;
constexpr uint32_t kTriesMin = 1;
constexpr uint32_t kTriesMax = 10;
constexpr uint32_t kHeartbeatMsMin = 1;
constexpr uint32_t kHeartbeatMsMax = 3'600'000;
constexpr uint32_t kDefaultHeartbeatMs = 1000;  // when neither --heartbeat-ms nor the gateway says
constexpr uint16_t kRoceDefaultMtu = 1024;
constexpr std::array<uint32_t, 5> kRoceMtus{256, 512, 1024, 2048, 4096};  // the IB path MTUs

struct Invocation {
    const po::variables_map& vm;
    std::ostream& out;
    std::ostream& err;
    int stop_fd;
};

// {name, operands, option synopsis, summary, examples, options, handler}; see command_table.hpp.
using Command = cli::Command<Invocation>;

void register_options(po::options_description&, po::options_description&, po::positional_options_description&);
void deregister_options(po::options_description&, po::options_description&, po::positional_options_description&);
void resolve_options(po::options_description&, po::options_description&, po::positional_options_description&);
void help_options(po::options_description&, po::options_description&, po::positional_options_description&);
void listen_options(po::options_description&, po::options_description&, po::positional_options_description&);
void connect_options(po::options_description&, po::options_description&, po::positional_options_description&);
void expose_options(po::options_description&, po::options_description&, po::positional_options_description&);
void forward_options(po::options_description&, po::options_description&, po::positional_options_description&);
int run_listen(const Invocation&);
int run_expose(const Invocation&);
int run_forward(const Invocation&);
int run_connect(const Invocation&);
int run_register(const Invocation&);
int run_deregister(const Invocation&);
int run_resolve(const Invocation&);
int run_help(const Invocation&);
int run_completion(const Invocation&);

constexpr std::array kCommands{
    Command{{"register", "",
            "--pid ID --transport tcp|roce_v2 --listen IP:PORT [--epoch N] [--gid GID] [--qpn N] [--mtu N] "
            "[--ttl-s N] [--heartbeat-ms N] [--once]",
            "register this process's DMA address record, then heartbeat until SIGINT/SIGTERM and deregister",
            "fedgate-node --gateway 198.18.1.1 register --pid 1.7.42 --transport roce_v2 "
            "--listen 198.18.1.20:4791 --qpn 0x1234\n"
            "fedgate-node --gateway 198.18.1.1:7410 register --pid 1.7.43 --transport tcp "
            "--listen 198.18.1.20:50051 --once",
            register_options}, run_register},
    Command{{"deregister", "", "--pid ID --epoch N", "remove a registration (the epoch it was registered with)",
            "fedgate-node --gateway 198.18.1.1 deregister --pid 1.7.43 --epoch 12345", deregister_options},
            run_deregister},
    Command{{"resolve", "ID", "[--json]",
            "ask the gateway for process ID's DMA address record (from its cache, the owner or every peer)",
            "fedgate-node --gateway 198.18.1.1 resolve 2.3.99\n"
            "fedgate-node --gateway 198.18.1.1 --timeout-ms 1000 resolve 0.3.99 --json",
            resolve_options}, run_resolve},
    Command{{"listen", "",
            "--pid ID [--tcp-port N] [--transport auto|rdma|tcp] [--count N] [--json] "
            "[--handshake-only --qpn N --psn N [--gid GID] [--mtu N]]",
            "register, accept connections from other processes and check the bytes each one sends (or, "
            "--handshake-only, print each one's RDMA path)",
            "fedgate-node --gateway 198.18.2.1 listen --pid 2.7.42 --count 1\n"
            "fedgate-node --gateway 198.18.2.1 --bind 198.18.2.10 listen --pid 2.7.42 --tcp-port 5000 --transport tcp\n"
            "fedgate-node --gateway 198.18.2.1 --bind 198.18.2.10 listen --pid 2.7.42 --transport rdma "
            "--handshake-only --qpn 0x5678 --psn 0x99 --json",
            listen_options}, run_listen},
    Command{{"connect", "",
            "--pid ID --to ID (--bytes N | --handshake-only --qpn N --psn N [--gid GID] [--mtu N]) "
            "[--transport auto|rdma|tcp] [--parallel K] [--repeat N] [--hold] [--json]",
            "register, connect to process --to through the gateways and send it N checked bytes (or, "
            "--handshake-only, print the RDMA path)",
            "fedgate-node --gateway 198.18.1.1 connect --pid 1.7.42 --to 2.7.42 --bytes 268435456\n"
            "fedgate-node --gateway 198.18.1.1 connect --pid 1.7.42 --to 2.7.42 --bytes 1048576 --parallel 4 --json\n"
            "fedgate-node --gateway 198.18.1.1 --bind 198.18.1.20 connect --pid 1.7.42 --to 2.7.42 --transport rdma "
            "--handshake-only --qpn 0x1234 --psn 0x42 --mtu 4096 --json",
            connect_options}, run_connect},
    Command{{"expose", "", "--pid ID --to HOST:PORT [--tcp-port N] [--transport auto|rdma|tcp]",
            "register as process ID and hand every connection made to it to a new TCP connection to HOST:PORT "
            "(a sidecar for a server that cannot change)",
            "fedgate-node --gateway 198.18.2.1 --bind 198.18.2.10 expose --pid 2.7.50 --to 127.0.0.1:50051\n"
            "fedgate-node --gateway 198.18.2.1 expose --pid 2.7.50 --to localhost:8080 --tcp-port 7000 --transport tcp",
            expose_options}, run_expose},
    Command{{"forward", "", "--listen HOST:PORT --to ID --pid ID [--transport auto|rdma|tcp]",
            "accept local TCP connections on HOST:PORT and connect each to process ID through the gateways "
            "(a sidecar for a client that cannot change)",
            "fedgate-node --gateway 198.18.1.1 --bind 198.18.1.20 forward --listen 127.0.0.1:6000 --to 2.7.50 "
            "--pid 1.3.7\n"
            "fedgate-node --gateway 198.18.1.1 forward --listen 0.0.0.0:6000 --to 2.7.50 --pid 1.3.7 --transport tcp",
            forward_options}, run_forward},
    Command{{"completion bash", "", "",
            "print a bash completion script for fedgate-node's commands and options (installed in "
            "share/bash-completion/completions)",
            "source <(fedgate-node completion bash)", nullptr}, run_completion},
    Command{{"help", "[COMMAND]", "", "show help for every command, or for one", "fedgate-node help register",
            help_options}, run_help},
};

// ---- text ------------------------------------------------------------------------------------

std::string ipv4_text(uint32_t host_order) {
    const in_addr a{htonl(host_order)};
    char buf[INET_ADDRSTRLEN];
    return ::inet_ntop(AF_INET, &a, buf, sizeof buf) ? buf : "?";
}

std::string gid_text(const std::array<uint8_t, 16>& gid) {
    char buf[INET6_ADDRSTRLEN];
    return ::inet_ntop(AF_INET6, gid.data(), buf, sizeof buf) ? buf : "?";
}

// ---- usage and help --------------------------------------------------------------------------

po::options_description global_options() {
    po::options_description d("global options");
    d.add_options()
        ("gateway", po::value<std::string>()->value_name("IP[:PORT]"),
         "the gateway's internal address and resolution port (port default 7410); default $FEDGATE_GATEWAY")
        ("bind", po::value<std::string>()->value_name("IP"),
         "send from this local address (the gateway checks that a registration comes from the record's "
         "address); default: the kernel's choice")
        ("timeout-ms", po::value<std::string>()->value_name("MS"),
         "wait for the first reply, 1..60000 (default 300); each retry waits twice as long")
        ("tries", po::value<std::string>()->value_name("N"), "requests sent before giving up, 1..10 (default 4)")
        ("help,h", po::bool_switch(), "show help and exit")
        ("version", po::bool_switch(), "show the version and exit");
    return d;
}

void print_id_note(std::ostream& out) {
    out << "A process ID is PARTY.NODE.LOCAL in decimal (party 0..65535, node 0..65535, local\n"
           "0..4294967295), such as 2.7.42, or 0x and 1-16 hex digits. Party 0 means \"owner unknown\":\n"
           "resolve then asks every peer gateway.\n";
}

void print_help(std::ostream& out) {
    out << "fedgate-node: register a compute process with its fedgate gateway, keep it registered, and\n"
           "resolve other processes' DMA (RDMA/RoCE v2 or TCP) addresses through it; connect to processes by\n"
           "ID, and (expose, forward) let programs that cannot change do so through local TCP ports\n\n";
    cli::print_commands(out, kProgram, kCommands);
    out << "\n" << global_options() << "\n";
    print_id_note(out);
    cli::print_all_examples(out, kCommands);
    cli::print_help_hint(out, kProgram);
    out << "Exit status: 0 success; 1 the gateway refused, answered negatively or did not reply;\n"
        << "2 bad command line (nothing was sent).\n";
}

void print_command_help(std::ostream& out, const cli::CommandText& c) {
    const bool with_globals = c.name != "help";  // as its usage line: see kProgram
    const po::options_description globals = global_options();
    cli::print_usage_and_options(out, kProgram, c, with_globals ? &globals : nullptr);
    if (c.name == "register")
        out << "\nWithout --once, fedgate-node prints one line 'registered ID epoch N', then heartbeats every\n"
               "--heartbeat-ms (default: what the gateway asks for, else 1000 ms); if the gateway has forgotten\n"
               "the process it registers again. SIGINT or SIGTERM deregisters and exits 0.\n";
    if (c.name == "listen")
        out << "\nPrints 'listening ID epoch N tcp port P', then one line per connection: its ID, the peer, the\n"
               "transport, the bytes, the time, the throughput and whether the sender's SHA-256 matched. Exits\n"
               "after --count connections, or on SIGINT/SIGTERM, and deregisters; 1 if any digest differed.\n"
               "With --json the 'listening' line goes to stderr and stdout has one JSON object per connection,\n"
               "one per line, as each one ends.\n";
    if (c.name == "connect")
        out << "\nEach connection sends an 8-byte length, N pseudo-random bytes and their SHA-256; the listener\n"
               "answers with its own digest. A failure names its stage: resolve, req, rep, refused, transport,\n"
               "rtr, rts or data. Exit 1 if any connection failed or any digest differed.\n";
    if (c.name == "expose")
        out << "\nA sidecar beside a TCP server that knows nothing of fedgate: it registers --pid, listens, and for\n"
               "every connection another process makes to that ID (fedgate-node forward, or a program with the\n"
               "client library) opens a new TCP connection to --to and copies the bytes both ways. When one side\n"
               "stops sending (EOF) the other side's sending direction is shut down, so a half-close passes\n"
               "through; both are closed once both directions are done. Any number of connections at once.\n"
               "\n"
               "Prints 'exposing ID to HOST:PORT' once ready, then one line per connection as it ends:\n"
               "  conn 0x... PEER-ID <-> HOST:PORT tcp: N bytes PEER-ID -> HOST:PORT, M bytes HOST:PORT -> PEER-ID, S s\n"
               "A target that refuses is said on stderr ('cannot connect to TCP HOST:PORT: Connection refused') and\n"
               "the fedgate connection is closed. SIGINT or SIGTERM closes the connections still open, prints\n"
               "'expose ID: N connections, F failed' on stderr, deregisters and exits 0.\n"
               "HOST is an IPv4 address or localhost; the target is normally on this node (127.0.0.1).\n";
    if (c.name == "forward")
        out << "\nA sidecar beside a TCP client that knows nothing of fedgate: point the client at --listen, and\n"
               "every connection it makes there is connected to process --to through the gateways (typically a\n"
               "server behind 'fedgate-node expose' in another party), the bytes copied both ways; half-closes\n"
               "pass through as for expose. The sidecar registers as --pid (an ID of this gateway's party, unique\n"
               "to this sidecar) to make its connections; no mapping is configured by hand.\n"
               "\n"
               "Prints 'forwarding HOST:PORT to ID' once ready (port 0 in --listen: the port taken is printed),\n"
               "then one line per connection as it ends:\n"
               "  conn 0x... CLIENT <-> ID tcp: N bytes CLIENT -> ID, M bytes ID -> CLIENT, S s\n"
               "A connect to --to that fails closes the local connection and says the stage on stderr, such as\n"
               "'forward: connect 2.7.50: stage resolve: not_found; closed the local connection from ...'.\n"
               "SIGINT or SIGTERM stops accepting, closes the connections still open, prints\n"
               "'forward HOST:PORT to ID: N connections, F failed' on stderr, deregisters and exits 0.\n"
               "HOST is an IPv4 address (0.0.0.0: every local address) or localhost.\n";
    if (c.name == "listen" || c.name == "connect")
        out << "\n--handshake-only runs the RDMA handshake (REQ/REP/RTU through the gateways) with no RDMA device:\n"
               "this side's QP is --qpn, --psn, --gid and --mtu, registered in the record too, and no data moves.\n"
               "listen says 'listening ID epoch N rdma handshake-only qpn Q psn P gid G mtu M'. Each connection\n"
               "prints what its QP would be programmed with: the peer's QPN, PSN and GID and the negotiated\n"
               "(lower) MTU. With --json, one object per line: conn_id, initiator, target, transport, local_qpn,\n"
               "local_psn, local_gid, local_mtu, peer_qpn, peer_psn, peer_gid, peer_mtu, mtu (connect adds\n"
               "setup_us). It needs --transport rdma; every connection reports the same QPN.\n";
    if (with_globals) {
        out << "\n";
        print_id_note(out);
    }
    cli::print_command_examples(out, c);
}

int usage_error(std::ostream& err, const std::string& what, const cli::CommandText* c) {
    return cli::usage_error(err, kProgram, kCommands, what, c);
}

// ---- argument checks -------------------------------------------------------------------------

// Digits only (no sign, spaces or fraction), within lo..hi; `hex` also takes 0x and hex digits.
std::optional<uint64_t> parse_uint(const std::string& s, uint64_t lo, uint64_t hi, bool hex = false) {
    std::string_view digits = s;
    int base = 10;
    if (hex && digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
        digits.remove_prefix(2);
        base = 16;
    }
    if (digits.empty() || digits.size() > 10)
        return std::nullopt;
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
    if (ec != std::errc{} || end != digits.data() + digits.size() || v < lo || v > hi)
        return std::nullopt;
    return v;
}

std::optional<uint32_t> parse_ipv4(const std::string& s) {  // host order; dotted quad only
    in_addr a{};
    if (::inet_pton(AF_INET, s.c_str(), &a) != 1)
        return std::nullopt;
    return ntohl(a.s_addr);
}

uint64_t check_uint(std::string_view cmd, const char* option, const std::string& v, uint64_t lo, uint64_t hi,
                    bool hex = false) {
    auto n = parse_uint(v, lo, hi, hex);
    if (!n)
        throw UsageError(std::string(cmd) + ": --" + option + " must be an integer " + std::to_string(lo) + ".." +
                         std::to_string(hi) + (hex ? " (decimal, or 0x and hex digits)" : "") + ", got " +
                         in_quotes(v));
    return *n;
}

// `what` names the argument in the message: "--pid" or "ID".
ProcessId check_pid(std::string_view cmd, const std::string& what, const std::string& v) {
    const auto id = parse_process_id(v);
    if (!id)
        throw UsageError(std::string(cmd) + ": " + what +
                         " must be a process ID PARTY.NODE.LOCAL such as 2.7.42, or 0x and 1-16 hex digits, got " +
                         in_quotes(v));
    if (id->value == 0)
        throw UsageError(std::string(cmd) + ": " + what + " must not be 0 (0.0.0 names no process)");
    return *id;
}

Transport check_transport(std::string_view cmd, const std::string& v) {
    const auto t = parse_transport(v);
    if (!t)
        throw UsageError(std::string(cmd) + ": --transport must be tcp or roce_v2, got " + in_quotes(v));
    return *t;
}

struct HostPort {
    uint32_t ipv4 = 0;
    uint16_t port = 0;
};

// IP:PORT; with `default_port`, a bare IP too.
std::optional<HostPort> parse_endpoint(const std::string& v, std::optional<uint16_t> default_port) {
    const size_t colon = v.rfind(':');
    if (colon == std::string::npos) {
        const auto ip = parse_ipv4(v);
        if (!ip || !default_port)
            return std::nullopt;
        return HostPort{*ip, *default_port};
    }
    const auto ip = parse_ipv4(v.substr(0, colon));
    const auto port = parse_uint(v.substr(colon + 1), 1, 65535);
    if (!ip || !port)
        return std::nullopt;
    return HostPort{*ip, static_cast<uint16_t>(*port)};
}

HostPort check_listen(std::string_view cmd, const std::string& v) {
    const auto e = parse_endpoint(v, std::nullopt);
    if (!e)
        throw UsageError(std::string(cmd) +
                         ": --listen must be IP:PORT (port 1..65535) such as 198.18.1.20:4791, got " + in_quotes(v));
    if (e->ipv4 == 0)
        throw UsageError(std::string(cmd) + ": --listen needs the process's own address, not 0.0.0.0, got " +
                         in_quotes(v));
    return *e;
}

std::array<uint8_t, 16> check_gid(std::string_view cmd, const std::string& v) {
    std::array<uint8_t, 16> gid{};
    if (::inet_pton(AF_INET6, v.c_str(), gid.data()) != 1)
        throw UsageError(std::string(cmd) + ": --gid must be a GID in IPv6 form such as fe80::1 or "
                                            "::ffff:198.18.1.20, got " +
                         in_quotes(v));
    return gid;
}

uint32_t random_epoch() {
    std::random_device rd;
    return std::uniform_int_distribution<uint32_t>(1, UINT32_MAX)(rd);
}

// --gateway/--bind/--timeout-ms/--tries (or $FEDGATE_GATEWAY), checked. Bad values are usage errors.
struct GatewayOptions {
    HostPort gateway;
    NodeClientOptions client;
};

GatewayOptions gateway_options(const Invocation& inv) {
    std::string gateway;
    if (auto g = opt(inv.vm, "gateway")) {
        gateway = *g;
    } else {
        const char* env = std::getenv(kGatewayEnv);
        if (!env || !*env)
            throw UsageError("missing --gateway (the gateway's internal address, IP or IP:PORT; or set $" +
                             std::string(kGatewayEnv) + ")");
        gateway = env;
    }
    const auto gw = parse_endpoint(gateway, kDefaultResolvePort);
    if (!gw)
        throw UsageError("--gateway must be IP or IP:PORT (port 1..65535) such as 198.18.1.1 or 198.18.1.1:7410, "
                         "got " +
                         in_quotes(gateway));
    NodeClientOptions options;
    if (auto b = opt(inv.vm, "bind")) {
        const auto ip = parse_ipv4(*b);
        if (!ip)
            throw UsageError("--bind must be an IPv4 address such as 198.18.1.20, got " + in_quotes(*b));
        options.bind_ipv4 = *ip;
    }
    if (auto t = opt(inv.vm, "timeout-ms")) {
        const auto ms = parse_uint(*t, kTimeoutMsMin, kTimeoutMsMax);
        if (!ms)
            throw UsageError("--timeout-ms must be an integer 1..60000, got " + in_quotes(*t));
        options.timeout = std::chrono::milliseconds(*ms);
    }
    if (auto t = opt(inv.vm, "tries")) {
        const auto n = parse_uint(*t, kTriesMin, kTriesMax);
        if (!n)
            throw UsageError("--tries must be an integer 1..10, got " + in_quotes(*t));
        options.tries = static_cast<int>(*n);
    }
    return {*gw, options};
}

// The client for the global options; a socket that cannot be set up throws std::system_error (exit 1).
NodeClient make_client(const Invocation& inv) {
    const GatewayOptions g = gateway_options(inv);
    return NodeClient(g.gateway.ipv4, g.gateway.port, g.client);
}

// ---- register and deregister -----------------------------------------------------------------

void register_options(po::options_description& visible, po::options_description&,
                      po::positional_options_description&) {
    visible.add_options()
        ("pid", po::value<std::string>()->value_name("ID"), "this process's ID (see below)")
        ("transport", po::value<std::string>()->value_name("tcp|roce_v2"), "how peers connect to it")
        ("listen", po::value<std::string>()->value_name("IP:PORT"),
         "the address and port peers connect to; the IP must be this node's own")
        ("epoch", po::value<std::string>()->value_name("N"),
         "0..4294967295; changes when the process restarts (default: random, non-zero)")
        ("gid", po::value<std::string>()->value_name("GID"),
         "RDMA GID in IPv6 form, such as fe80::1 (default ::ffff:<listen IP>, the IPv4-mapped GID)")
        ("qpn", po::value<std::string>()->value_name("N"), "queue pair number, 0..16777215 or 0x... (default 0)")
        ("mtu", po::value<std::string>()->value_name("N"),
         "path MTU: roce_v2 256|512|1024|2048|4096 (default 1024); tcp 0..65535 (default 0)")
        ("ttl-s", po::value<std::string>()->value_name("N"),
         "seconds peer gateways may cache the record (default 0: left to the gateway)")
        ("heartbeat-ms", po::value<std::string>()->value_name("N"),
         "heartbeat interval, 1..3600000 (default: what the gateway asks for, else 1000)")
        ("once", po::bool_switch(), "register, print the line and exit (no heartbeats, no deregister)");
}

void deregister_options(po::options_description& visible, po::options_description&,
                        po::positional_options_description&) {
    visible.add_options()
        ("pid", po::value<std::string>()->value_name("ID"), "the registered process's ID")
        ("epoch", po::value<std::string>()->value_name("N"), "the epoch it registered with");
}

// True when `stop_fd` becomes readable before `until`. Waits in poll(), so a signal or the pipe
// wakes it at once.
bool stop_before(int stop_fd, Clock::time_point until) {
    for (;;) {
        const auto remaining = std::max(std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()),
                                        std::chrono::milliseconds{0});
        pollfd p{stop_fd, POLLIN, 0};
        const int n = ::poll(stop_fd >= 0 ? &p : nullptr, stop_fd >= 0 ? 1 : 0,
                             static_cast<int>(std::min<int64_t>(remaining.count(), INT_MAX)));
        if (n > 0)
            return true;
        if (remaining.count() == 0)
            return false;
    }
}

int refused(std::ostream& err, std::string_view what, RegStatus s) {
    err << kProg << ": " << what << " refused: " << reg_status_name(s) << "\n";
    return 1;
}

// Heartbeats until the stop fd fires, then deregisters. Registers again when the gateway has
// forgotten the process (it restarted, or the entry timed out while we could not reach it).
int keep_registered(const Invocation& inv, NodeClient& client, const DmaAddress& record,
                    std::optional<uint32_t> fixed_interval_ms, uint32_t gateway_interval_ms) {
    const std::string who = format_process_id(record.pid);
    auto interval = [&] {
        return std::chrono::milliseconds(fixed_interval_ms ? *fixed_interval_ms
                                         : gateway_interval_ms ? gateway_interval_ms
                                                               : kDefaultHeartbeatMs);
    };
    Clock::time_point next = Clock::now() + interval();
    while (!stop_before(inv.stop_fd, next)) {
        RegResult r = client.heartbeat(record.pid, record.epoch);
        next = Clock::now() + interval();
        if (!r.replied()) {
            inv.err << kProg << ": heartbeat " << who << ": " << r.error << "; still trying" << std::endl;
            continue;
        }
        if (r.status == RegStatus::unknown) {
            r = client.register_process(record);
            if (!r.replied()) {
                inv.err << kProg << ": register " << who << ": " << r.error << "; still trying" << std::endl;
                continue;
            }
            if (!r.ok())
                return refused(inv.err, "register", *r.status);
            inv.err << kProg << ": the gateway had forgotten " << who << "; registered again, epoch "
                    << record.epoch << std::endl;
        } else if (!r.ok()) {
            return refused(inv.err, "heartbeat", *r.status);
        }
        if (r.heartbeat_ms != 0 && r.heartbeat_ms != gateway_interval_ms) {
            gateway_interval_ms = std::clamp(r.heartbeat_ms, kHeartbeatMsMin, kHeartbeatMsMax);
            next = Clock::now() + interval();
        }
    }
    const RegResult r = client.deregister(record.pid, record.epoch);
    if (!r.replied()) {
        inv.err << kProg << ": deregister " << who << ": " << r.error << "\n";
        return 1;
    }
    if (!r.ok() && r.status != RegStatus::unknown)  // unknown: already gone, which is what we wanted
        return refused(inv.err, "deregister", *r.status);
    return 0;
}

int run_register(const Invocation& inv) {
    constexpr std::string_view cmd = "register";
    DmaAddress rec;
    rec.pid = check_pid(cmd, "--pid", need(inv.vm, cmd, "pid", "this process's ID, such as 2.7.42"));
    rec.transport = check_transport(cmd, need(inv.vm, cmd, "transport", "tcp or roce_v2"));
    const HostPort listen =
        check_listen(cmd, need(inv.vm, cmd, "listen", "the IP:PORT this process accepts connections on"));
    rec.ipv4 = listen.ipv4;
    rec.port = listen.port;
    const auto epoch = opt(inv.vm, "epoch");
    rec.epoch = epoch ? static_cast<uint32_t>(check_uint(cmd, "epoch", *epoch, 0, UINT32_MAX)) : random_epoch();
    const auto gid = opt(inv.vm, "gid");
    rec.gid = gid ? check_gid(cmd, *gid) : ipv4_gid(listen.ipv4);
    if (auto qpn = opt(inv.vm, "qpn"))
        rec.qpn = static_cast<uint32_t>(check_uint(cmd, "qpn", *qpn, 0, kMaxQpn, true));
    if (auto mtu = opt(inv.vm, "mtu")) {
        if (rec.transport == Transport::roce_v2) {
            const auto m = parse_uint(*mtu, 0, UINT16_MAX);
            if (!m || std::find(kRoceMtus.begin(), kRoceMtus.end(), *m) == kRoceMtus.end())
                throw UsageError(std::string(cmd) + ": --mtu for roce_v2 must be 256, 512, 1024, 2048 or 4096, got " +
                                 in_quotes(*mtu));
            rec.mtu = static_cast<uint16_t>(*m);
        } else {
            rec.mtu = static_cast<uint16_t>(check_uint(cmd, "mtu", *mtu, 0, UINT16_MAX));
        }
    } else {
        rec.mtu = rec.transport == Transport::roce_v2 ? kRoceDefaultMtu : 0;
    }
    if (auto ttl = opt(inv.vm, "ttl-s"))
        rec.ttl_s = static_cast<uint32_t>(check_uint(cmd, "ttl-s", *ttl, 0, UINT32_MAX));
    std::optional<uint32_t> heartbeat_ms;
    if (auto hb = opt(inv.vm, "heartbeat-ms"))
        heartbeat_ms = static_cast<uint32_t>(check_uint(cmd, "heartbeat-ms", *hb, kHeartbeatMsMin, kHeartbeatMsMax));

    NodeClient client = make_client(inv);
    const RegResult r = client.register_process(rec);
    if (!r.replied()) {
        inv.err << kProg << ": register " << format_process_id(rec.pid) << ": " << r.error << "\n";
        return 1;
    }
    if (!r.ok())
        return refused(inv.err, "register", *r.status);
    inv.out << "registered " << format_process_id(rec.pid) << " epoch " << rec.epoch << std::endl;
    if (inv.vm["once"].as<bool>())
        return 0;
    return keep_registered(inv, client, rec, heartbeat_ms,
                           r.heartbeat_ms ? std::clamp(r.heartbeat_ms, kHeartbeatMsMin, kHeartbeatMsMax) : 0);
}

int run_deregister(const Invocation& inv) {
    constexpr std::string_view cmd = "deregister";
    const ProcessId pid = check_pid(cmd, "--pid", need(inv.vm, cmd, "pid", "the registered process's ID"));
    const auto epoch =
        static_cast<uint32_t>(check_uint(cmd, "epoch", need(inv.vm, cmd, "epoch", "the epoch it registered with"), 0,
                                         UINT32_MAX));
    NodeClient client = make_client(inv);
    const RegResult r = client.deregister(pid, epoch);
    if (!r.replied()) {
        inv.err << kProg << ": deregister " << format_process_id(pid) << ": " << r.error << "\n";
        return 1;
    }
    if (!r.ok())
        return refused(inv.err, "deregister", *r.status);
    inv.out << "deregistered " << format_process_id(pid) << " epoch " << epoch << "\n";
    return 0;
}

// ---- resolve ---------------------------------------------------------------------------------

void resolve_options(po::options_description& visible, po::options_description& hidden,
                     po::positional_options_description& positional) {
    visible.add_options()("json", po::bool_switch(), "print the answer as JSON (2-space indent)");
    hidden.add_options()("target", po::value<std::string>(), "process ID to resolve");
    positional.add("target", 1);
}

int run_resolve(const Invocation& inv) {
    constexpr std::string_view cmd = "resolve";
    if (!inv.vm.count("target"))
        throw UsageError("resolve: missing ID (the process ID to resolve, such as 2.7.42)");
    const ProcessId target = check_pid(cmd, "ID", inv.vm["target"].as<std::string>());
    const bool json = inv.vm["json"].as<bool>();
    NodeClient client = make_client(inv);
    const ResolveResult r = client.resolve(target);
    const std::string target_text = format_process_id(target);
    if (!r.replied()) {
        inv.err << kProg << ": resolve " << target_text << ": " << r.error << "\n";
        return 1;
    }
    if (!r.ok()) {
        if (json)
            inv.out << Json{{"status", resolve_status_name(*r.status)}, {"target", target_text}}.dump(2) << "\n";
        else
            inv.err << kProg << ": resolve " << target_text << ": " << resolve_status_name(*r.status) << "\n";
        return 1;
    }
    const DmaAddress& a = r.record;
    const std::string address = ipv4_text(a.ipv4) + ":" + std::to_string(a.port);
    if (json) {
        Json j = Json::object();
        j["status"] = resolve_status_name(*r.status);
        j["source"] = answer_source_name(r.source);
        j["target"] = target_text;
        j["pid"] = format_process_id(a.pid);
        j["epoch"] = a.epoch;
        j["transport"] = transport_name(a.transport);
        j["address"] = address;
        j["gid"] = gid_text(a.gid);
        j["qpn"] = a.qpn;
        j["mtu"] = a.mtu;
        j["ttl_s"] = a.ttl_s;
        inv.out << j.dump(2) << "\n";
    } else {
        inv.out << format_process_id(a.pid) << " epoch " << a.epoch << " " << transport_name(a.transport) << " "
                << address << " gid " << gid_text(a.gid) << " qpn " << a.qpn << " mtu " << a.mtu << " source "
                << answer_source_name(r.source) << "\n";
    }
    return 0;
}

// ---- listen and connect ----------------------------------------------------------------------

constexpr uint64_t kMaxCount = 1'000'000;
constexpr uint64_t kMaxBytes = uint64_t{1} << 33;  // 8 GiB: the stream is generated, never held
constexpr uint64_t kMaxParallel = 256;
constexpr uint64_t kMaxRepeat = 1'000'000;
constexpr auto kStopCheck = std::chrono::milliseconds{200};  // how soon listen notices SIGINT/SIGTERM

// The values a handshake-only QP takes, shared by listen and connect.
void handshake_only_options(po::options_description& visible) {
    visible.add_options()
        ("handshake-only", po::bool_switch(),
         "run the RDMA handshake without a device and print the path each QP would get; no data moves "
         "(needs --transport rdma, --qpn, --psn)")
        ("qpn", po::value<std::string>()->value_name("N"),
         "--handshake-only: this side's QP number, 2..16777215 or 0x...")
        ("psn", po::value<std::string>()->value_name("N"),
         "--handshake-only: this side's starting PSN, 0..16777215 or 0x...")
        ("gid", po::value<std::string>()->value_name("GID"),
         "--handshake-only: this side's GID in IPv6 form (default ::ffff:<this node's address>: --bind, else "
         "the address the gateway is reached from)")
        ("mtu", po::value<std::string>()->value_name("N"),
         "--handshake-only: this side's path MTU, 256|512|1024|2048|4096 (default 1024)");
}

void listen_options(po::options_description& visible, po::options_description&,
                    po::positional_options_description&) {
    visible.add_options()
        ("pid", po::value<std::string>()->value_name("ID"), "this process's ID (see below)")
        ("tcp-port", po::value<std::string>()->value_name("N"), "the TCP port to accept on, 0..65535 (default 0: any)")
        ("transport", po::value<std::string>()->value_name("auto|rdma|tcp"),
         "auto: RDMA if this node has a device, else tcp (said once); rdma: RDMA only; tcp (default auto)")
        ("count", po::value<std::string>()->value_name("N"),
         "exit after N connections, 1..1000000 (default: until SIGINT/SIGTERM)")
        ("json", po::bool_switch(),
         "one JSON object per connection, one per line (JSON Lines); the 'listening' line goes to stderr");
    handshake_only_options(visible);
}

void connect_options(po::options_description& visible, po::options_description&,
                     po::positional_options_description&) {
    visible.add_options()
        ("pid", po::value<std::string>()->value_name("ID"), "this process's ID (see below)")
        ("to", po::value<std::string>()->value_name("ID"), "the process to connect to")
        ("bytes", po::value<std::string>()->value_name("N"),
         "bytes to send on each connection, 0..8589934592 (not with --handshake-only)")
        ("transport", po::value<std::string>()->value_name("auto|rdma|tcp"), "as for listen (default auto)")
        ("parallel", po::value<std::string>()->value_name("K"), "connections at once, each from its own thread, 1..256 "
                                                                "(default 1)")
        ("repeat", po::value<std::string>()->value_name("N"),
         "connections each thread makes one after another, 1..1000000 (default 1)")
        ("hold", po::bool_switch(), "after printing, stay registered until SIGINT/SIGTERM, then deregister")
        ("json", po::bool_switch(),
         "print the connections as a JSON array (2-space indent); with --handshake-only one object per line");
    handshake_only_options(visible);
}

TransportChoice check_choice(std::string_view cmd, const po::variables_map& vm) {
    const auto v = opt(vm, "transport");
    if (!v) return TransportChoice::automatic;
    const auto t = parse_transport_choice(*v);
    if (!t) throw UsageError(std::string(cmd) + ": --transport must be auto, rdma or tcp, got " + in_quotes(*v));
    return *t;
}

// The address this node reaches the gateway from: the kernel's route choice, when --bind is absent.
uint32_t route_source(uint32_t gateway, uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(gateway);
    to.sin_port = htons(port);
    sockaddr_in local{};
    socklen_t len = sizeof local;
    const bool ok = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
                    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
    if (fd >= 0) ::close(fd);
    if (!ok || local.sin_addr.s_addr == 0)
        throw std::runtime_error("no route to the gateway " + ipv4_text(gateway) + "; give --bind IP");
    return ntohl(local.sin_addr.s_addr);
}

// --handshake-only's values as given; the GID's default needs the node's address (endpoint_options).
struct HandshakeOnlyArgs {
    uint32_t qpn = 0;
    uint32_t psn = 0;
    uint16_t mtu = kRoceDefaultMtu;
    std::optional<std::array<uint8_t, 16>> gid;
};

// Checked before anything is sent: nullopt without --handshake-only, whose values are then refused.
std::optional<HandshakeOnlyArgs> check_handshake_only(std::string_view cmd, const po::variables_map& vm,
                                                      TransportChoice transport) {
    const std::string c(cmd);
    if (!vm["handshake-only"].as<bool>()) {
        for (const char* o : {"qpn", "psn", "gid", "mtu"})
            if (opt(vm, o))
                throw UsageError(c + ": --" + o +
                                 " is only for --handshake-only (with a device, the device gives the QP its values)");
        return std::nullopt;
    }
    if (transport != TransportChoice::rdma)
        throw UsageError(c + ": --handshake-only needs --transport rdma, got " +
                         (opt(vm, "transport") ? "--transport " + std::string(transport_choice_name(transport))
                                               : std::string("no --transport (auto)")));
    HandshakeOnlyArgs a;
    a.qpn = static_cast<uint32_t>(
        check_uint(cmd, "qpn", need(vm, cmd, "qpn", "--handshake-only: this side's QP number, such as 0x1234"), 2,
                   kMaxQpn, true));
    a.psn = static_cast<uint32_t>(
        check_uint(cmd, "psn", need(vm, cmd, "psn", "--handshake-only: this side's starting PSN, such as 0x42"), 0,
                   kMaxPsn, true));
    if (auto g = opt(vm, "gid")) {
        a.gid = check_gid(cmd, *g);
        if (std::all_of(a.gid->begin(), a.gid->end(), [](uint8_t b) { return b == 0; }))
            throw UsageError(c + ": --gid must not be the zero GID, got " + in_quotes(*g));
    }
    if (auto m = opt(vm, "mtu")) {
        const auto n = parse_uint(*m, 0, UINT16_MAX);
        if (!n || std::find(kRoceMtus.begin(), kRoceMtus.end(), *n) == kRoceMtus.end())
            throw UsageError(c + ": --mtu must be 256, 512, 1024, 2048 or 4096, got " + in_quotes(*m));
        a.mtu = static_cast<uint16_t>(*n);
    }
    return a;
}

EndpointOptions endpoint_options(const Invocation& inv, ProcessId pid, TransportChoice transport) {
    const GatewayOptions g = gateway_options(inv);
    EndpointOptions o;
    o.gateway_ipv4 = g.gateway.ipv4;
    o.gateway_port = g.gateway.port;
    o.pid = pid;
    o.transport = transport;
    o.bind_ipv4 = g.client.bind_ipv4 ? *g.client.bind_ipv4 : route_source(g.gateway.ipv4, g.gateway.port);
    if (opt(inv.vm, "timeout-ms")) o.try_timeout = g.client.timeout;
    if (opt(inv.vm, "tries")) o.tries = g.client.tries;
    o.log = [&err = inv.err](const std::string& line) { err << kProg << ": " << line << std::endl; };
    return o;
}

// The verbs backend on the real libibverbs, choosing a GID on the subnet of the node's address.
// Where no device exists, auto means tcp (said once on stderr) and rdma fails at stage transport.
std::unique_ptr<RdmaProvider> verbs_provider(const EndpointOptions& o) { return make_verbs_provider(o.bind_ipv4); }

// The QP a handshake-only side reports: the given values, the GID defaulting to the node's address.
RdmaQpParams handshake_only_qp(const HandshakeOnlyArgs& a, const EndpointOptions& o) {
    RdmaQpParams q;
    q.qpn = a.qpn;
    q.psn = a.psn;
    q.mtu = a.mtu;
    q.gid = a.gid.value_or(ipv4_gid(o.bind_ipv4));
    return q;
}

std::unique_ptr<RdmaProvider> rdma_provider(const EndpointOptions& o,
                                            const std::optional<RdmaQpParams>& handshake_only) {
    if (handshake_only) return std::make_unique<HandshakeOnlyProvider>(*handshake_only);
    return verbs_provider(o);
}

bool stop_requested(int stop_fd) {
    pollfd p{stop_fd, POLLIN, 0};
    return stop_fd >= 0 && ::poll(&p, 1, 0) > 0;
}

std::string rate_text(uint64_t bytes, double seconds) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(1) << (seconds > 0 ? bytes * 8 / seconds / 1e6 : 0.0) << " Mbit/s";
    return s.str();
}

std::string conn_id_text(uint64_t id) {
    std::ostringstream s;
    s << "0x" << std::hex << std::setw(16) << std::setfill('0') << id;
    return s.str();
}

std::string verdict(const StreamResult& r) {
    if (!r.error.empty()) return "error: " + r.error;
    return r.digest_ok ? "digest ok" : "digest MISMATCH (sent " + hex(r.peer_digest) + ", got " + hex(r.local_digest) + ")";
}

// One handshake-only connection: what its QP would be programmed with. `local`: our side's values.
Json handshake_json(const Connection& c, const RdmaQpParams& local, bool initiator) {
    const RdmaPath p = c.rdma_path().value_or(RdmaPath{});
    Json j = Json::object();
    j["conn_id"] = conn_id_text(c.conn_id());
    j["initiator"] = format_process_id(initiator ? c.local_pid() : c.peer_pid());
    j["target"] = format_process_id(initiator ? c.peer_pid() : c.local_pid());
    j["transport"] = transport_name(c.transport());
    j["local_qpn"] = local.qpn;
    j["local_psn"] = p.sq_psn;
    j["local_gid"] = gid_text(local.gid);
    j["local_mtu"] = local.mtu;
    j["peer_qpn"] = p.remote.qpn;
    j["peer_psn"] = p.rq_psn;
    j["peer_gid"] = gid_text(p.remote.gid);
    j["peer_mtu"] = p.remote.mtu;
    j["mtu"] = p.mtu;
    return j;
}

// The same in one line: "peer qpn Q psn P gid G mtu M, local qpn ..., path mtu M".
std::string handshake_text(const Connection& c, const RdmaQpParams& local) {
    const RdmaPath p = c.rdma_path().value_or(RdmaPath{});
    std::ostringstream s;
    s << "handshake-only: peer qpn " << p.remote.qpn << " psn " << p.rq_psn << " gid " << gid_text(p.remote.gid)
      << " mtu " << p.remote.mtu << ", local qpn " << local.qpn << " psn " << p.sq_psn << " gid " << gid_text(local.gid)
      << " mtu " << local.mtu << ", path mtu " << p.mtu;
    return s.str();
}

int run_listen(const Invocation& inv) {
    constexpr std::string_view cmd = "listen";
    const ProcessId pid = check_pid(cmd, "--pid", need(inv.vm, cmd, "pid", "this process's ID, such as 2.7.42"));
    const TransportChoice transport = check_choice(cmd, inv.vm);
    const std::optional<HandshakeOnlyArgs> handshake_only = check_handshake_only(cmd, inv.vm, transport);
    EndpointOptions o = endpoint_options(inv, pid, transport);
    if (auto p = opt(inv.vm, "tcp-port")) o.tcp_port = static_cast<uint16_t>(check_uint(cmd, "tcp-port", *p, 0, 65535));
    uint64_t count = 0;
    if (auto c = opt(inv.vm, "count")) count = check_uint(cmd, "count", *c, 1, kMaxCount);
    const bool json = inv.vm["json"].as<bool>();

    std::optional<RdmaQpParams> local;
    if (handshake_only) local = handshake_only_qp(*handshake_only, o);
    const std::unique_ptr<RdmaProvider> rdma = rdma_provider(o, local);
    Endpoint ep(o, rdma.get());
    try {
        ep.listen();
    } catch (const Error& e) {
        inv.err << kProg << ": listen " << format_process_id(pid) << ": " << e.what() << "\n";
        return 1;
    }
    std::ostringstream ready;
    ready << "listening " << format_process_id(pid) << " epoch " << ep.epoch();
    if (local)
        ready << " rdma handshake-only qpn " << local->qpn << " psn " << local->psn << " gid " << gid_text(local->gid)
              << " mtu " << local->mtu;
    else
        ready << " tcp port " << ep.tcp_port();
    // With --json, stdout holds only the connections' objects; readiness is still said, on stderr.
    if (json)
        inv.err << kProg << ": " << ready.str() << std::endl;
    else
        inv.out << ready.str() << std::endl;
    std::mutex out_mu;
    int bad = 0;
    std::vector<std::thread> readers;
    for (uint64_t accepted = 0; (count == 0 || accepted < count) && !stop_requested(inv.stop_fd);) {
        std::unique_ptr<Connection> c = ep.accept(kStopCheck);
        if (!c) continue;
        ++accepted;
        if (local) {  // nothing to read: the path is the whole outcome
            std::lock_guard lock(out_mu);
            if (json)
                inv.out << handshake_json(*c, *local, false).dump() << std::endl;
            else
                inv.out << "conn " << conn_id_text(c->conn_id()) << " from " << format_process_id(c->peer_pid()) << " "
                        << transport_name(c->transport()) << " " << handshake_text(*c, *local) << std::endl;
            continue;
        }
        readers.emplace_back([&, c = std::move(c)] {
            const StreamResult r = receive_digest_stream(*c);
            std::lock_guard lock(out_mu);
            if (json) {
                Json j = Json::object();
                j["conn_id"] = conn_id_text(c->conn_id());
                j["initiator"] = format_process_id(c->peer_pid());
                j["target"] = format_process_id(c->local_pid());
                j["transport"] = transport_name(c->transport());
                j["bytes"] = r.bytes;
                j["seconds"] = r.seconds;
                j["mbit_s"] = r.seconds > 0 ? r.bytes * 8 / r.seconds / 1e6 : 0.0;
                j["digest"] = !r.error.empty() ? "error" : r.digest_ok ? "ok" : "mismatch";
                if (!r.error.empty()) j["error"] = r.error;
                inv.out << j.dump() << std::endl;
            } else {
                inv.out << "conn " << conn_id_text(c->conn_id()) << " from " << format_process_id(c->peer_pid()) << " "
                        << transport_name(c->transport()) << " " << r.bytes << " bytes " << std::fixed
                        << std::setprecision(3) << r.seconds << " s " << rate_text(r.bytes, r.seconds) << " "
                        << verdict(r) << std::endl;
            }
            if (!r.ok()) ++bad;
        });
    }
    for (std::thread& t : readers) t.join();
    ep.stop();
    return bad == 0 ? 0 : 1;
}

struct ConnectOutcome {
    std::optional<ConnectError> error;
    Transport transport = Transport::tcp;
    uint64_t conn_id = 0;
    double setup_us = 0;
    StreamResult stream;
    std::unique_ptr<Connection> handshake_only;  // kept to print its path; no data moved
};

ConnectOutcome connect_once(Endpoint& ep, ProcessId to, uint64_t bytes, uint64_t seed, bool handshake_only) {
    ConnectOutcome o;
    const auto t0 = Clock::now();
    std::unique_ptr<Connection> c;
    try {
        c = ep.connect(to);
    } catch (const Error& e) {
        o.error = ConnectError{e.stage(), e.why()};
    }
    o.setup_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (o.error) return o;
    o.transport = c->transport();
    o.conn_id = c->conn_id();
    if (handshake_only) {
        o.handshake_only = std::move(c);
        return o;
    }
    o.stream = send_digest_stream(*c, bytes, seed);
    if (!o.stream.error.empty()) o.error = ConnectError{ConnStage::data, o.stream.error};
    return o;
}

// --handshake-only: one line per connection (JSON Lines with --json), failures as in print_outcomes.
void print_handshakes(const Invocation& inv, ProcessId to, const std::vector<ConnectOutcome>& all, bool json,
                      const RdmaQpParams& local) {
    for (const ConnectOutcome& o : all) {
        if (o.error) {
            inv.err << kProg << ": connect " << format_process_id(to) << ": stage " << conn_stage_name(o.error->stage)
                    << ": " << o.error->message << "\n";
            if (json)
                inv.out << Json{{"target", format_process_id(to)}, {"stage", conn_stage_name(o.error->stage)},
                                {"error", o.error->message}}.dump()
                        << "\n";
            continue;
        }
        const Connection& c = *o.handshake_only;
        if (json) {
            Json j = handshake_json(c, local, true);
            j["setup_us"] = o.setup_us;
            inv.out << j.dump() << "\n";
            continue;
        }
        inv.out << "conn " << conn_id_text(o.conn_id) << " to " << format_process_id(to) << " "
                << transport_name(o.transport) << " setup " << static_cast<uint64_t>(o.setup_us) << " us "
                << handshake_text(c, local) << "\n";
    }
}

void print_outcomes(const Invocation& inv, ProcessId to, const std::vector<ConnectOutcome>& all, bool json) {
    Json list = Json::array();
    for (const ConnectOutcome& o : all) {
        if (o.error) {
            inv.err << kProg << ": connect " << format_process_id(to) << ": stage " << conn_stage_name(o.error->stage)
                    << ": " << o.error->message << "\n";
            if (json)
                list.push_back({{"target", format_process_id(to)}, {"stage", conn_stage_name(o.error->stage)},
                                {"error", o.error->message}});
            continue;
        }
        const double mbit = o.stream.seconds > 0 ? o.stream.bytes * 8 / o.stream.seconds / 1e6 : 0.0;
        if (json) {
            list.push_back({{"target", format_process_id(to)}, {"conn_id", conn_id_text(o.conn_id)},
                            {"transport", transport_name(o.transport)}, {"setup_us", o.setup_us},
                            {"bytes", o.stream.bytes}, {"seconds", o.stream.seconds}, {"mbit_s", mbit},
                            {"digest", o.stream.digest_ok ? "ok" : "mismatch"}});
            continue;
        }
        inv.out << "conn " << conn_id_text(o.conn_id) << " to " << format_process_id(to) << " "
                << transport_name(o.transport) << " setup " << static_cast<uint64_t>(o.setup_us) << " us "
                << o.stream.bytes << " bytes " << std::fixed << std::setprecision(3) << o.stream.seconds << " s "
                << rate_text(o.stream.bytes, o.stream.seconds) << " " << verdict(o.stream) << "\n";
    }
    if (json) inv.out << list.dump(2) << "\n";
}

int run_connect(const Invocation& inv) {
    constexpr std::string_view cmd = "connect";
    const ProcessId pid = check_pid(cmd, "--pid", need(inv.vm, cmd, "pid", "this process's ID, such as 1.7.42"));
    const ProcessId to = check_pid(cmd, "--to", need(inv.vm, cmd, "to", "the process to connect to, such as 2.7.42"));
    const TransportChoice transport = check_choice(cmd, inv.vm);
    const std::optional<HandshakeOnlyArgs> handshake_only = check_handshake_only(cmd, inv.vm, transport);
    uint64_t bytes = 0;
    if (!handshake_only)
        bytes = check_uint(cmd, "bytes", need(inv.vm, cmd, "bytes", "how many bytes to send"), 0, kMaxBytes);
    else if (opt(inv.vm, "bytes"))
        throw UsageError("connect: --bytes is not for --handshake-only: it moves no data");
    uint64_t parallel = 1, repeat = 1;
    if (auto k = opt(inv.vm, "parallel")) parallel = check_uint(cmd, "parallel", *k, 1, kMaxParallel);
    if (auto n = opt(inv.vm, "repeat")) repeat = check_uint(cmd, "repeat", *n, 1, kMaxRepeat);
    const bool json = inv.vm["json"].as<bool>();

    const EndpointOptions o = endpoint_options(inv, pid, transport);
    std::optional<RdmaQpParams> local;
    if (handshake_only) local = handshake_only_qp(*handshake_only, o);
    const std::unique_ptr<RdmaProvider> rdma = rdma_provider(o, local);
    Endpoint ep(o, rdma.get());
    std::vector<ConnectOutcome> all(parallel * repeat);
    std::vector<std::thread> threads;
    for (uint64_t i = 0; i < parallel; ++i)
        threads.emplace_back([&, i] {
            for (uint64_t r = 0; r < repeat; ++r)
                all[i * repeat + r] = connect_once(ep, to, bytes, random_epoch() + i * repeat + r, local.has_value());
        });
    for (std::thread& t : threads) t.join();
    if (local)
        print_handshakes(inv, to, all, json, *local);
    else
        print_outcomes(inv, to, all, json);
    inv.out.flush();
    // --hold: the process (and what the gateways set up for it) stays until told to go.
    if (inv.vm["hold"].as<bool>())
        while (!stop_before(inv.stop_fd, Clock::now() + std::chrono::hours(1))) {
        }
    ep.stop();
    const bool ok = std::all_of(all.begin(), all.end(), [&](const ConnectOutcome& c) {
        return !c.error && (local || c.stream.ok());
    });
    return ok ? 0 : 1;
}

// ---- expose and forward (tools/sidecar.hpp) -------------------------------------------------------

void expose_options(po::options_description& visible, po::options_description&,
                    po::positional_options_description&) {
    visible.add_options()
        ("pid", po::value<std::string>()->value_name("ID"), "the process ID to expose (see below)")
        ("to", po::value<std::string>()->value_name("HOST:PORT"),
         "the local TCP server each connection is handed to, such as 127.0.0.1:50051")
        ("tcp-port", po::value<std::string>()->value_name("N"),
         "the TCP port fedgate connections arrive on, 0..65535 (default 0: any)")
        ("transport", po::value<std::string>()->value_name("auto|rdma|tcp"), "as for listen (default auto)");
}

void forward_options(po::options_description& visible, po::options_description&,
                     po::positional_options_description&) {
    visible.add_options()
        ("listen", po::value<std::string>()->value_name("HOST:PORT"),
         "where local clients connect, such as 127.0.0.1:6000 (port 0: any free port, printed)")
        ("to", po::value<std::string>()->value_name("ID"), "the process each connection goes to")
        ("pid", po::value<std::string>()->value_name("ID"),
         "the ID this sidecar registers as to connect: of this gateway's party, unique to it")
        ("transport", po::value<std::string>()->value_name("auto|rdma|tcp"), "as for connect (default auto)");
}

// `example`: a good value, for the message.
sidecar::LocalAddress check_local_address(std::string_view cmd, const char* option, const std::string& v,
                                          uint16_t min_port, const char* example) {
    const auto a = sidecar::parse_local_address(v, min_port);
    if (!a)
        throw UsageError(std::string(cmd) + ": --" + option +
                         " must be HOST:PORT with HOST an IPv4 address or localhost and PORT " +
                         std::to_string(min_port) + "..65535, such as " + example + ", got " + in_quotes(v));
    return *a;
}

// The sidecar's lines, from any of its threads, one whole line at a time: stdout for readiness and
// connections, stderr (after "fedgate-node: ") for failures and the endpoint's own notices.
class SidecarOutput {
public:
    explicit SidecarOutput(const Invocation& inv) : inv_(inv) {}
    void out(const std::string& line) {
        std::lock_guard lock(mu_);
        inv_.out << line << std::endl;
    }
    void err(const std::string& line) {
        std::lock_guard lock(mu_);
        inv_.err << kProg << ": " << line << std::endl;
    }
    sidecar::Report report() {
        return {[this](const std::string& l) { out(l); }, [this](const std::string& l) { err(l); }};
    }

private:
    const Invocation& inv_;
    std::mutex mu_;
};

std::string totals_text(const sidecar::Totals& t) {
    return std::to_string(t.connections) + " connection" + (t.connections == 1 ? "" : "s") + ", " +
           std::to_string(t.failed) + " failed";
}

int run_expose(const Invocation& inv) {
    constexpr std::string_view cmd = "expose";
    const ProcessId pid = check_pid(cmd, "--pid", need(inv.vm, cmd, "pid", "the process ID to expose, such as 2.7.50"));
    const sidecar::LocalAddress to = check_local_address(
        cmd, "to", need(inv.vm, cmd, "to", "the local TCP server to hand connections to, such as 127.0.0.1:50051"), 1,
        "127.0.0.1:50051");
    const TransportChoice transport = check_choice(cmd, inv.vm);
    EndpointOptions o = endpoint_options(inv, pid, transport);
    if (auto p = opt(inv.vm, "tcp-port")) o.tcp_port = static_cast<uint16_t>(check_uint(cmd, "tcp-port", *p, 0, 65535));
    SidecarOutput output(inv);
    o.log = [&output](const std::string& line) { output.err(line); };

    const std::unique_ptr<RdmaProvider> rdma = verbs_provider(o);
    Endpoint ep(o, rdma.get());
    const std::string who = format_process_id(pid);
    try {
        ep.listen();
    } catch (const Error& e) {
        output.err("expose " + who + ": " + e.what());
        return 1;
    }
    output.out("exposing " + who + " to " + sidecar::address_text(to));
    const sidecar::Totals t = sidecar::expose(ep, to, inv.stop_fd, output.report());
    ep.stop();
    output.err("expose " + who + ": " + totals_text(t));
    return 0;
}

int run_forward(const Invocation& inv) {
    constexpr std::string_view cmd = "forward";
    sidecar::LocalAddress listen = check_local_address(
        cmd, "listen", need(inv.vm, cmd, "listen", "where local clients connect, such as 127.0.0.1:6000"), 0,
        "127.0.0.1:6000");
    const ProcessId to =
        check_pid(cmd, "--to", need(inv.vm, cmd, "to", "the process to connect each client to, such as 2.7.50"));
    const ProcessId pid = check_pid(
        cmd, "--pid", need(inv.vm, cmd, "pid", "the ID this sidecar registers as, of this gateway's party, such as 1.3.7"));
    const TransportChoice transport = check_choice(cmd, inv.vm);
    EndpointOptions o = endpoint_options(inv, pid, transport);
    SidecarOutput output(inv);
    o.log = [&output](const std::string& line) { output.err(line); };

    std::string error;
    const int fd = open_tcp_listener(listen.ipv4, listen.port, SOMAXCONN, error);
    if (fd < 0) {
        output.err("forward: " + error);
        return 1;
    }
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    listen.port = socket_port(fd);
    const std::unique_ptr<RdmaProvider> rdma = verbs_provider(o);
    Endpoint ep(o, rdma.get());
    const std::string where = sidecar::address_text(listen), target = format_process_id(to);
    output.out("forwarding " + where + " to " + target);
    const sidecar::Totals t = sidecar::forward(ep, fd, listen, to, inv.stop_fd, output.report());
    output.err("forward " + where + " to " + target + ": " + totals_text(t));
    return 0;
}

// ---- help ------------------------------------------------------------------------------------

void help_options(po::options_description&, po::options_description& hidden,
                  po::positional_options_description& positional) {
    hidden.add_options()("topic", po::value<std::vector<std::string>>(), "command to explain");
    positional.add("topic", -1);  // a command's words: `help completion bash`
}

int run_help(const Invocation& inv) {
    if (!inv.vm.count("topic")) {
        print_help(inv.out);
        return 0;
    }
    const std::string topic = cli::join(inv.vm["topic"].as<std::vector<std::string>>(), " ");
    if (const Command* c = cli::command_named(kCommands, topic)) {
        print_command_help(inv.out, *c);
        return 0;
    }
    bool any = false;  // `help completion`: every `completion ...` command
    for (const Command& c : kCommands)
        if (std::string_view(c.name).starts_with(topic + " ")) {
            print_command_help(inv.out, c);
            any = true;
        }
    if (!any)
        throw UsageError("help: unknown command " + in_quotes(topic));
    return 0;
}

// ---- completion ------------------------------------------------------------------------------

int run_completion(const Invocation& inv) {
    cli::print_bash_completion(inv.out, kProgram, kCommands, global_options());
    return 0;
}

// ---- dispatch --------------------------------------------------------------------------------

void print_version(std::ostream& out) { out << kProg << " " << FEDGATE_VERSION << "\n"; }

int dispatch(std::vector<std::string> args, std::ostream& out, std::ostream& err, int stop_fd) {
    cli::CommandLine<Command> line;
    try {
        line = cli::parse_command_line(std::move(args), kCommands, global_options());
    } catch (const UsageError& e) {
        return usage_error(err, e.what(), e.command);
    }
    if (!line.group.empty()) {  // `completion --help` explains every `completion ...` command
        for (const Command& c : kCommands)
            if (std::string_view(c.name).starts_with(line.group + " "))
                print_command_help(out, c);
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
        print_version(out);
        return 0;
    }
    if (!cmd)
        return usage_error(err, "no command given", nullptr);

    const Invocation inv{vm, out, err, stop_fd};
    try {
        return cmd->run(inv);
    } catch (const UsageError& e) {
        return usage_error(err, e.what(), cmd);
    }
}

}  // namespace

std::vector<const cli::CommandText*> fedgate_node_commands() {
    std::vector<const cli::CommandText*> rows;
    for (const Command& c : kCommands)
        rows.push_back(&c);
    return rows;
}

po::options_description fedgate_node_global_options() { return global_options(); }

int run_fedgate_node(int argc, char** argv, std::ostream& out, std::ostream& err, int stop_fd) {
    try {
        return dispatch(cli::arguments(argc, argv), out, err, stop_fd);
    } catch (const std::exception& e) {  // the socket could not be set up, or worse
        err << kProg << ": " << e.what() << "\n";
        return 1;
    }
}

}  // namespace fedgate
