// fedgate_bench_resolve: the compute-node side of tests/bench/resolve_bench.sh (UDP, no DPDK).
//  - register-many fills a gateway's directory fast: one socket, a window of registrations in
//    flight, unanswered ones sent again after a timeout, until every record got reg_reply ok.
//  - latency resolves distinct targets one at a time and reports round-trip percentiles and which
//    path (cache, directed query, broadcast, ...) answered.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <iostream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <boost/program_options.hpp>

#include "proto/resolve_wire.hpp"
#include "fedgate/node_client.hpp"

namespace fedgate {
namespace {

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kDefaultWindow = 64;
constexpr uint32_t kDefaultRegTimeoutMs = 500;      // before an unanswered registration is sent again
constexpr uint32_t kDefaultStallS = 20;             // no reply at all for this long: give up
constexpr uint32_t kDefaultResolveTimeoutMs = 3000;  // above the gateway's query timeout (1 s default)
constexpr int kResolveTries = 2;
constexpr int kRcvBuf = 4 << 20;

constexpr const char* kUsage =
    "usage: fedgate_bench_resolve register-many --gateway IP[:PORT] --party P --node N --count C --listen-ip IP\n"
    "                                           [--window W] [--timeout-ms MS] [--max-seconds S] [--progress-s N]\n"
    "         registers P.N.0 .. P.N.(C-1) (tcp, address --listen-ip, port 1 + i % 65535) from --listen-ip,\n"
    "         W requests in flight (default 64), unanswered ones again after MS (default 500); with S,\n"
    "         sends nothing new after S seconds; with N, a progress line on stderr every N seconds\n"
    "       fedgate_bench_resolve latency --gateway IP[:PORT] --targets FIRST_PID --count C [--timeout-ms MS]\n"
    "         resolves FIRST_PID, FIRST_PID+1, ... (local part incremented) one at a time and prints\n"
    "         p50_us p99_us ok notok and how many answers each source gave\n";

struct UsageError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

uint32_t parse_ipv4_or_throw(const std::string& s, const char* what) {
    in_addr a{};
    if (::inet_pton(AF_INET, s.c_str(), &a) != 1) throw UsageError(std::string(what) + ": '" + s + "' is not an IPv4 address");
    return ntohl(a.s_addr);
}

struct Endpoint {
    uint32_t ip = 0;  // host order
    uint16_t port = kDefaultResolvePort;
};

Endpoint parse_gateway(const std::string& s) {
    Endpoint e;
    const auto colon = s.find(':');
    e.ip = parse_ipv4_or_throw(s.substr(0, colon), "--gateway");
    if (colon != std::string::npos) {
        const std::string p = s.substr(colon + 1);
        char* end = nullptr;
        const unsigned long v = std::strtoul(p.c_str(), &end, 10);
        if (p.empty() || *end != '\0' || v < 1 || v > 65535) throw UsageError("--gateway: bad port '" + p + "'");
        e.port = static_cast<uint16_t>(v);
    }
    return e;
}

sockaddr_in sockaddr_of(uint32_t ip, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(ip);
    a.sin_port = htons(port);
    return a;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---------------------------------------------------------------------------------------------
// register-many

struct RegisterMany {
    Endpoint gateway;
    uint16_t party = 0, node = 0;
    uint32_t count = 0;
    uint32_t listen_ip = 0;
    uint32_t window = kDefaultWindow;
    std::chrono::milliseconds timeout{kDefaultRegTimeoutMs};
    uint32_t max_seconds = 0;  // 0: no limit; else stop sending new ones after this long
    uint32_t progress_s = 0;   // 0: quiet; else a progress line on stderr this often
};

class Registrar {
public:
    explicit Registrar(const RegisterMany& o) : o_(o), state_(o.count, State::idle), deadline_(o.count) {
        fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "socket");
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &kRcvBuf, sizeof kRcvBuf);
        const sockaddr_in local = sockaddr_of(o.listen_ip, 0);
        if (::bind(fd_, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0)
            throw std::system_error(errno, std::generic_category(), "bind to --listen-ip");
        // Request IDs base + i: a reply to an earlier run (another base) never matches.
        std::random_device rd;
        id_base_ = (uint64_t{rd()} << 32 | rd()) & ~uint64_t{0xffffffff};
    }
    ~Registrar() { ::close(fd_); }
    Registrar(const Registrar&) = delete;
    Registrar& operator=(const Registrar&) = delete;

    // Returns 0 when every record is registered, or the time limit stopped it with every sent one
    // registered; 1 (after saying why) otherwise.
    int run() {
        const Clock::time_point t0 = Clock::now();
        Clock::time_point last_progress = t0;
        Clock::time_point next_report = t0 + std::chrono::seconds(o_.progress_s);
        uint32_t done_at_report = 0;
        uint32_t limit = o_.count;  // records to register: lowered to what was sent when time is up
        while (done_ < limit) {
            const Clock::time_point now = Clock::now();
            if (o_.max_seconds != 0 && limit == o_.count && now - t0 >= std::chrono::seconds(o_.max_seconds))
                limit = next_;  // finish what is in flight, send nothing new
            while (in_flight_ < o_.window && next_ < limit) send(next_++);
            if (o_.progress_s != 0 && now >= next_report) {
                std::cerr << "  register-many: " << static_cast<uint64_t>(seconds_since(t0)) << " s: " << done_
                          << " registered (" << (done_ - done_at_report) / o_.progress_s << "/s in the last "
                          << o_.progress_s << " s)\n";
                done_at_report = done_;
                next_report += std::chrono::seconds(o_.progress_s);
            }
            // Resend what timed out; the queue is in deadline order (one timeout for all).
            while (!timeouts_.empty() && timeouts_.front().second <= now) {
                const uint32_t i = timeouts_.front().first;
                const Clock::time_point d = timeouts_.front().second;
                timeouts_.pop_front();
                if (state_[i] == State::in_flight && deadline_[i] == d) {
                    ++retries_;
                    --in_flight_;
                    send(i);
                }
            }
            int wait_ms = 1;
            if (!timeouts_.empty())
                wait_ms = static_cast<int>(std::clamp<int64_t>(
                    std::chrono::ceil<std::chrono::milliseconds>(timeouts_.front().second - now).count(), 0, 100));
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, wait_ms) > 0) {
                const uint32_t before = done_;
                if (const int rc = receive(); rc != 0) return rc;
                if (done_ != before) last_progress = Clock::now();
            }
            if (Clock::now() - last_progress > std::chrono::seconds(kDefaultStallS)) {
                std::cerr << "fedgate_bench_resolve: register-many: no reply from the gateway for " << kDefaultStallS
                          << " s (" << done_ << " of " << o_.count << " registered)\n";
                return 1;
            }
        }
        const double s = seconds_since(t0);
        std::cout << "registered " << done_ << " records in " << s << " s (" << static_cast<uint64_t>(done_ / s)
                  << "/s), retries " << retries_ << ", send_errors " << send_errors_ << ", ignored " << ignored_;
        if (done_ < o_.count) std::cout << "; stopped at the time limit of " << o_.max_seconds << " s (" << o_.count << " asked)";
        std::cout << "\n";
        return 0;
    }

private:
    enum class State : uint8_t { idle, in_flight, done };

    std::array<uint8_t, sizeof(MsgHeader) + sizeof(RegisterBody)> request(uint32_t i) const {
        DmaAddress rec;
        rec.pid = ProcessId::make(o_.party, o_.node, i);
        rec.epoch = 1;
        rec.transport = Transport::tcp;
        rec.ipv4 = o_.listen_ip;
        rec.port = static_cast<uint16_t>(1 + i % 65535);
        RegisterBody body;
        encode(rec, body.record);
        MsgHeader h;
        encode(Header{MsgType::reg, 0, sizeof body, id_base_ + i, 0}, h);
        std::array<uint8_t, sizeof(MsgHeader) + sizeof(RegisterBody)> d;
        std::memcpy(d.data(), &h, sizeof h);
        std::memcpy(d.data() + sizeof h, &body, sizeof body);
        return d;
    }

    void send(uint32_t i) {
        const auto d = request(i);
        const sockaddr_in to = sockaddr_of(o_.gateway.ip, o_.gateway.port);
        // A failed send (ENOBUFS, EAGAIN) is simply retried after the timeout, like a lost one.
        if (::sendto(fd_, d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to) < 0) ++send_errors_;
        state_[i] = State::in_flight;
        deadline_[i] = Clock::now() + o_.timeout;
        timeouts_.emplace_back(i, deadline_[i]);
        ++in_flight_;
    }

    int receive() {
        const sockaddr_in gw = sockaddr_of(o_.gateway.ip, o_.gateway.port);
        for (;;) {
            std::array<uint8_t, 2048> rx;
            sockaddr_in from{};
            socklen_t len = sizeof from;
            const ssize_t got = ::recvfrom(fd_, rx.data(), rx.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
            if (got < 0) {
                if (errno == EINTR) continue;
                return 0;  // drained
            }
            ParsedMsg m;
            if (from.sin_addr.s_addr != gw.sin_addr.s_addr || from.sin_port != gw.sin_port ||
                parse_message({rx.data(), static_cast<std::size_t>(got)}, m) != WireError::ok ||
                m.header.type != MsgType::reg_reply || m.body.size() != sizeof(RegReplyBody) ||
                m.header.seq - id_base_ >= o_.count) {
                ++ignored_;
                continue;
            }
            const auto i = static_cast<uint32_t>(m.header.seq - id_base_);
            RegReplyBody b;
            std::memcpy(&b, m.body.data(), sizeof b);
            if (b.status != static_cast<uint8_t>(RegStatus::ok)) {
                std::cerr << "fedgate_bench_resolve: register-many: the gateway refused "
                          << format_process_id(ProcessId::make(o_.party, o_.node, i)) << ": "
                          << reg_status_name(static_cast<RegStatus>(b.status)) << " (" << done_ << " registered before)\n";
                return 1;
            }
            if (state_[i] != State::in_flight) continue;  // the answer to a retry of a done one
            state_[i] = State::done;
            --in_flight_;
            ++done_;
        }
    }

    const RegisterMany& o_;
    int fd_ = -1;
    uint64_t id_base_ = 0;
    std::vector<State> state_;
    std::vector<Clock::time_point> deadline_;
    std::deque<std::pair<uint32_t, Clock::time_point>> timeouts_;
    uint32_t next_ = 0, in_flight_ = 0, done_ = 0;
    uint64_t retries_ = 0, send_errors_ = 0, ignored_ = 0;
};

// ---------------------------------------------------------------------------------------------
// latency

struct Latency {
    Endpoint gateway;
    ProcessId first;
    uint32_t count = 0;
    std::chrono::milliseconds timeout{kDefaultResolveTimeoutMs};
};

// Nearest-rank percentile of sorted values.
double percentile(const std::vector<double>& sorted, double p) {
    if (sorted.empty()) return 0;
    const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
    return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

int run_latency(const Latency& o) {
    NodeClientOptions opt;
    opt.timeout = o.timeout;
    opt.tries = kResolveTries;
    NodeClient client(o.gateway.ip, o.gateway.port, opt);
    std::vector<double> us;
    us.reserve(o.count);
    uint64_t ok = 0, notok = 0, no_reply = 0;
    std::array<uint64_t, 5> sources{};                     // by AnswerSource
    std::array<uint64_t, 6> statuses{};                    // by ResolveStatus
    for (uint32_t i = 0; i < o.count; ++i) {
        const ProcessId target = ProcessId::make(o.first.party(), o.first.node(), o.first.local() + i);
        const Clock::time_point t0 = Clock::now();
        const ResolveResult r = client.resolve(target);
        const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (!r.replied()) {
            ++no_reply;
            ++notok;
            continue;  // no round trip to time
        }
        us.push_back(t);
        ++sources[static_cast<std::size_t>(r.source)];
        ++statuses[static_cast<std::size_t>(*r.status)];
        (r.ok() ? ok : notok)++;
    }
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (const double v : us) sum += v;
    std::cout << "p50_us " << static_cast<uint64_t>(percentile(us, 0.50)) << " p99_us "
              << static_cast<uint64_t>(percentile(us, 0.99)) << " ok " << ok << " notok " << notok << "\n";
    std::cout << "  mean_us " << static_cast<uint64_t>(us.empty() ? 0 : sum / static_cast<double>(us.size()))
              << " max_us " << static_cast<uint64_t>(us.empty() ? 0 : us.back()) << " no_reply " << no_reply
              << " retries " << client.stats().retries << "\n  sources";
    for (std::size_t s = 0; s < sources.size(); ++s)
        std::cout << " " << answer_source_name(static_cast<AnswerSource>(s)) << " " << sources[s];
    std::cout << "\n  statuses";
    for (std::size_t s = 0; s < statuses.size(); ++s)
        std::cout << " " << resolve_status_name(static_cast<ResolveStatus>(s)) << " " << statuses[s];
    std::cout << "\n";
    return 0;
}

// ---------------------------------------------------------------------------------------------

template <typename T>
T bounded(const po::variables_map& vm, const char* name, uint64_t lo, uint64_t hi) {
    const uint64_t v = vm[name].as<uint64_t>();
    if (v < lo || v > hi)
        throw UsageError(std::string("--") + name + " must be " + std::to_string(lo) + ".." + std::to_string(hi));
    return static_cast<T>(v);
}

int run(int argc, char** argv) {
    if (argc < 2) throw UsageError("missing command");
    const std::string cmd = argv[1];
    po::options_description opts;
    opts.add_options()("gateway", po::value<std::string>()->required())("count", po::value<uint64_t>()->required())(
        "timeout-ms", po::value<uint64_t>());
    if (cmd == "register-many") {
        opts.add_options()("party", po::value<uint64_t>()->required())("node", po::value<uint64_t>()->required())(
            "listen-ip", po::value<std::string>()->required())("window", po::value<uint64_t>()->default_value(kDefaultWindow))(
            "max-seconds", po::value<uint64_t>()->default_value(0))("progress-s", po::value<uint64_t>()->default_value(0));
    } else if (cmd == "latency") {
        opts.add_options()("targets", po::value<std::string>()->required());
    } else {
        throw UsageError("unknown command '" + cmd + "'");
    }
    po::variables_map vm;
    try {
        po::store(po::command_line_parser(argc - 1, argv + 1).options(opts).run(), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw UsageError(e.what());
    }
    const Endpoint gw = parse_gateway(vm["gateway"].as<std::string>());
    if (cmd == "register-many") {
        RegisterMany o;
        o.gateway = gw;
        o.party = bounded<uint16_t>(vm, "party", 1, 65535);
        o.node = bounded<uint16_t>(vm, "node", 0, 65535);
        o.count = bounded<uint32_t>(vm, "count", 1, 16'777'216);
        o.window = bounded<uint32_t>(vm, "window", 1, 65536);
        o.max_seconds = bounded<uint32_t>(vm, "max-seconds", 0, 86'400);
        o.progress_s = bounded<uint32_t>(vm, "progress-s", 0, 3600);
        o.listen_ip = parse_ipv4_or_throw(vm["listen-ip"].as<std::string>(), "--listen-ip");
        if (vm.count("timeout-ms")) o.timeout = std::chrono::milliseconds(bounded<uint32_t>(vm, "timeout-ms", 1, 60'000));
        Registrar r(o);
        return r.run();
    }
    Latency o;
    o.gateway = gw;
    o.count = bounded<uint32_t>(vm, "count", 1, 10'000'000);
    const auto first = parse_process_id(vm["targets"].as<std::string>());
    if (!first) throw UsageError("--targets: '" + vm["targets"].as<std::string>() + "' is not a process ID (P.N.L)");
    if (uint64_t{first->local()} + o.count - 1 > UINT32_MAX) throw UsageError("--targets + --count overflows the local part");
    o.first = *first;
    if (vm.count("timeout-ms")) o.timeout = std::chrono::milliseconds(bounded<uint32_t>(vm, "timeout-ms", 1, 60'000));
    return run_latency(o);
}

}  // namespace
}  // namespace fedgate

int main(int argc, char** argv) {
    try {
        return fedgate::run(argc, argv);
    } catch (const fedgate::UsageError& e) {
        std::cerr << "fedgate_bench_resolve: " << e.what() << "\n" << fedgate::kUsage;
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "fedgate_bench_resolve: " << e.what() << "\n";
        return 1;
    }
}
