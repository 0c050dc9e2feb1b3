// Endpoint: registration, the background thread around the handshake state machines, connect()
// and accept().
#include "fedgate/endpoint.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <iostream>
#include <stdexcept>
#include <system_error>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "fedgate/handshake.hpp"
#include "fedgate/node_client.hpp"
#include "client/src/socket_util.hpp"
#include "client/src/tcp_backend.hpp"

namespace fedgate {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxPollMs = 1000;       // the loop looks at its timers at least this often
constexpr std::size_t kRxBuffer = 2048;  // larger than any valid message
constexpr int kDeregisterTries = 2;    // stopping should not take long when the gateway is gone

uint64_t derived_timeout_ms(const EndpointOptions& o) {
    if (o.handshake_timeout.count() > 0) return static_cast<uint64_t>(o.handshake_timeout.count());
    const int doublings = std::clamp(o.tries, 1, 20);
    return static_cast<uint64_t>(std::max<int64_t>(o.try_timeout.count(), 1)) * ((uint64_t{1} << doublings) - 1);
}

EndpointOptions checked(EndpointOptions o) {
    if (o.gateway_ipv4 == 0 || o.gateway_port == 0)
        throw Error(ConnStage::open, "the gateway address and port are required");
    if (o.pid.value == 0 || o.pid.party() == 0)
        throw Error(ConnStage::open, "the process ID needs a party (got " + format_process_id(o.pid) + ")");
    if (o.bind_ipv4 == 0) throw Error(ConnStage::open, "bind_ipv4, this node's own address, is required");
    if (o.tries < 1) throw Error(ConnStage::open, "tries must be at least 1");
    if (o.try_timeout.count() < 1) throw Error(ConnStage::open, "the try timeout must be at least 1 ms");
    if (o.accept_backlog < 1) throw Error(ConnStage::open, "the accept backlog must be at least 1");
    if (o.epoch == 0) o.epoch = static_cast<uint32_t>(std::max<std::time_t>(std::time(nullptr), 1));
    return o;
}

// The RDMA hook throws (error.hpp); inside, failures are values the handshake passes on.
std::unique_ptr<PreparedQp> try_prepare(RdmaProvider& rdma, std::string& error) {
    try {
        return rdma.prepare();
    } catch (const Error& e) {
        error = e.why();
    } catch (const std::exception& e) {
        error = e.what();
    }
    return nullptr;
}

std::unique_ptr<Connection> try_connect(PreparedQp& qp, const RdmaPath& path, uint64_t conn_id, ProcessId local_pid,
                                        ProcessId peer_pid, ConnStage& failed, std::string& error) {
    try {
        return qp.connect(path, conn_id, local_pid, peer_pid);
    } catch (const Error& e) {
        failed = e.stage() == ConnStage::rts ? ConnStage::rts : ConnStage::rtr;
        error = e.why();
    } catch (const std::exception& e) {
        failed = ConnStage::rtr;
        error = e.what();
    }
    return nullptr;
}

}  // namespace

class Endpoint::Impl {
public:
    // What Endpoint's members say (endpoint.hpp); failures of listen() and connect() are values
    // here and thrown by Endpoint. `rdma`: the RDMA backend, which Endpoint always supplies unless
    // the transport is tcp (then it is not used).
    Impl(EndpointOptions options, RdmaProvider* rdma);
    ~Impl();  // stop()
    Impl(const Impl&) = delete;
    Impl& operator=(const Impl&) = delete;

    // Accept connections from now on (before, REQs are answered not_listening). False with
    // `err` (stage transport) when the transport asked for cannot be offered.
    bool listen(ConnectError& err);
    // The next established incoming connection, or null after `timeout` (or once stopped).
    std::unique_ptr<Connection> accept(std::chrono::milliseconds timeout);
    // A connection to `target` (party 0: the gateway finds the owner), over `transport` (default:
    // the endpoint's). Null with `err` naming the stage on failure. Thread-safe.
    std::unique_ptr<Connection> connect(ProcessId target, ConnectError& err,
                                        std::optional<TransportChoice> transport = std::nullopt);
    // Stops the thread, fails pending connects, deregisters. Idempotent.
    void stop();

    ProcessId pid() const { return options_.pid; }
    uint32_t epoch() const { return options_.epoch; }
    uint16_t tcp_port() const { return tcp_port_; }  // 0 when tcp is not offered
    bool rdma_available() const { return rdma_ready_; }
    EndpointStats stats() const;
    // `target`'s record from the gateway; nullopt with `err` (stage resolve: the status, such as
    // not_found, or why no answer came).
    std::optional<DmaAddress> lookup(ProcessId target, ConnectError& err) const;

private:
    struct Active {
        ActiveHandshake hs;
        uint64_t finished_ms = 0;  // done: kept this long to answer duplicate REPs with RTU
    };
    struct PendingSocket {  // accepted tcp socket whose preamble is not complete yet
        int fd = -1;
        std::size_t got = 0;
        uint8_t buf[32] = {};
        uint64_t deadline_ms = 0;
    };

    void open_sockets();
    void open_rdma(RdmaProvider* rdma);
    void register_now();
    void deregister_now();
    // Request/reply on the control socket while the thread is not running (start, stop).
    std::optional<RegReplyBody> reg_exchange(MsgType type, std::span<const uint8_t> body, int tries,
                                             std::string& error);
    void close_sockets();
    uint8_t offer_caps() const;
    DmaAddress record() const;
    bool caps_for(TransportChoice t, uint8_t& caps, ConnectError& err) const;
    std::unique_ptr<Connection> fail(ConnectError& err, ConnStage stage, std::string message);
    std::unique_ptr<Connection> run_handshake(const ConnParams& req, std::unique_ptr<PreparedQp> qp,
                                              ConnectError& err);
    std::unique_ptr<Connection> finish_connect(const std::shared_ptr<Active>& a, PreparedQp* qp, ConnectError& err);

    // The background thread and what it does (all under mu_ except the socket calls).
    void run();
    int poll_timeout_ms(uint64_t now);
    void on_datagram(std::span<const uint8_t> d, uint64_t now);
    void on_reg_reply(const ParsedMsg& m);
    void on_conn_req(const ConnParams& req, uint64_t now);
    void on_conn_rep(const ConnParams& rep);
    void on_conn_rtu(const ConnParams& rtu);
    PassiveOffer offer_for(const ConnParams& req, std::unique_ptr<Connection>& rdma_conn);
    void accept_tcp(uint64_t now);
    void read_preamble(PendingSocket& s);
    void timers(uint64_t now);
    void send_heartbeat(uint64_t now);
    void send(MsgType type, const ConnParams& p);
    void send_raw(MsgType type, uint64_t seq, std::span<const uint8_t> body);
    void wake();
    uint64_t now_ms() const;
    bool from_gateway(const sockaddr_in& from) const;

    EndpointOptions options_;
    RdmaProvider* rdma_ = nullptr;
    bool rdma_ready_ = false;
    RdmaDeviceParams rdma_params_;  // what record() registers, read once at open
    std::string rdma_error_;
    uint64_t handshake_timeout_ms_ = 0;
    int ctl_fd_ = -1;
    int tcp_fd_ = -1;
    int wake_fd_ = -1;
    uint16_t tcp_port_ = 0;
    uint32_t heartbeat_ms_ = kEndpointHeartbeatMs;

    std::mutex send_mu_;  // ctl_fd_ stays open while a send uses it (stop() closes it)
    mutable std::mutex mu_;  // everything below
    std::condition_variable changed_;  // a handshake moved, a connection was queued, or stopping
    bool listening_ = false;
    bool stopping_ = false;
    std::mt19937_64 rng_;
    std::unordered_map<uint64_t, std::shared_ptr<Active>> active_;  // by conn_id
    PassiveHandshakes passive_;
    std::map<PassiveHandshakes::Key, std::unique_ptr<Connection>> rdma_half_open_;  // until RTU
    std::deque<std::unique_ptr<Connection>> accepted_;
    std::vector<PendingSocket> pending_;  // the thread's own (stop() closes them after it ended)
    uint64_t next_heartbeat_ms_ = 0;
    uint64_t heartbeat_seq_ = 0, reg_seq_ = 0;
    EndpointStats stats_;
    std::thread thread_;
};


const char* transport_choice_name(TransportChoice t) {
    switch (t) {
    case TransportChoice::automatic: return "auto";
    case TransportChoice::rdma: return "rdma";
    case TransportChoice::tcp: return "tcp";
    }
    return "?";
}

std::optional<TransportChoice> parse_transport_choice(std::string_view s) {
    if (s == "auto") return TransportChoice::automatic;
    if (s == "rdma") return TransportChoice::rdma;
    if (s == "tcp") return TransportChoice::tcp;
    return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Start and stop.

Endpoint::Impl::Impl(EndpointOptions options, RdmaProvider* rdma)
    : options_(checked(std::move(options))),
      handshake_timeout_ms_(derived_timeout_ms(options_)),
      passive_(options_.pid, handshake_timeout_ms_, options_.accept_backlog * 4 + 64) {
    std::random_device rd;
    std::seed_seq seed{rd(), rd(), rd(), rd()};
    rng_.seed(seed);
    open_rdma(rdma);
    try {
        open_sockets();
        register_now();
    } catch (...) {
        close_sockets();
        throw;
    }
    next_heartbeat_ms_ = now_ms() + heartbeat_ms_;
    try {
        thread_ = std::thread([this] { run(); });
    } catch (const std::system_error& e) {  // no thread to be had: leave no registration behind
        deregister_now();
        close_sockets();
        throw Error(ConnStage::open, std::string("endpoint: no thread for its control socket: ") + e.what());
    }
}

Endpoint::Impl::~Impl() { stop(); }

void Endpoint::Impl::open_rdma(RdmaProvider* rdma) {
    if (options_.transport == TransportChoice::tcp) {
        rdma_error_ = "the endpoint was opened with --transport tcp";
        return;
    }
    rdma_ = rdma;
    try {
        rdma_->open();
        rdma_ready_ = true;
    } catch (const std::exception& e) {
        const auto* fe = dynamic_cast<const Error*>(&e);
        rdma_error_ = fe ? fe->why() : e.what();
    }
    if (rdma_ready_) rdma_params_ = rdma_->device_params();
    if (rdma_ready_ || options_.transport != TransportChoice::automatic) return;
    // Visible, once: the fallback is never silent.
    const std::string line = "endpoint " + format_process_id(options_.pid) + ": " + rdma_error_ + "; using tcp";
    if (options_.log)
        options_.log(line);
    else
        std::cerr << "fedgate " << line << std::endl;
}

void Endpoint::Impl::open_sockets() {
    if (options_.transport != TransportChoice::rdma) {
        std::string error;
        const int backlog = static_cast<int>(std::max<std::size_t>(options_.accept_backlog, 128));
        tcp_fd_ = open_tcp_listener(options_.bind_ipv4, options_.tcp_port, backlog, error);
        if (tcp_fd_ < 0) throw Error(ConnStage::open, "endpoint " + format_process_id(options_.pid) + ": " + error);
        tcp_port_ = socket_port(tcp_fd_);
    }
    ctl_fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    const sockaddr_in local = sockaddr_of(options_.bind_ipv4, 0);
    if (ctl_fd_ < 0 || ::bind(ctl_fd_, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0)
        throw Error(ConnStage::open, "endpoint: cannot open a UDP socket on " + ipv4_text(options_.bind_ipv4) + ": " +
                                         std::strerror(errno));
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) throw Error(ConnStage::open, std::string("endpoint: eventfd: ") + std::strerror(errno));
}

void Endpoint::Impl::close_sockets() {
    std::lock_guard lock(send_mu_);
    for (int* fd : {&ctl_fd_, &tcp_fd_, &wake_fd_}) {
        if (*fd >= 0) ::close(*fd);
        *fd = -1;
    }
}

// What the gateway holds for this process. With a device the record says roce_v2 (peers may then
// expect RDMA) and carries the device's GID, MTU and a QP number, the values its connections use.
DmaAddress Endpoint::Impl::record() const {
    DmaAddress a;
    a.pid = options_.pid;
    a.epoch = options_.epoch;
    // A process that asked for rdma only says so even without a device (it offers no tcp port);
    // its listen() and connect() then fail at stage transport, naming why.
    a.transport = rdma_ready_ || options_.transport == TransportChoice::rdma ? Transport::roce_v2 : Transport::tcp;
    if (rdma_ready_) {
        a.gid = rdma_params_.gid;
        a.qpn = rdma_params_.qpn;
        a.mtu = rdma_params_.mtu;
    }
    a.ipv4 = options_.bind_ipv4;
    a.port = tcp_port_;
    return a;
}

bool Endpoint::Impl::from_gateway(const sockaddr_in& from) const {
    return from.sin_family == AF_INET && ntohl(from.sin_addr.s_addr) == options_.gateway_ipv4 &&
           ntohs(from.sin_port) == options_.gateway_port;
}

std::optional<RegReplyBody> Endpoint::Impl::reg_exchange(MsgType type, std::span<const uint8_t> body, int tries,
                                                   std::string& error) {
    uint64_t seq;
    {
        std::lock_guard lock(mu_);
        seq = rng_();
    }
    auto wait = options_.try_timeout;
    for (int attempt = 0; attempt < tries; ++attempt, wait *= 2) {
        send_raw(type, seq, body);
        const auto deadline = Clock::now() + wait;
        for (auto now = Clock::now(); now < deadline; now = Clock::now()) {
            pollfd p{ctl_fd_, POLLIN, 0};
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
            if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
            std::array<uint8_t, kRxBuffer> rx;
            sockaddr_in from{};
            socklen_t len = sizeof from;
            const ssize_t n = ::recvfrom(ctl_fd_, rx.data(), rx.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
            ParsedMsg m;
            if (n > 0 && from_gateway(from) && parse_message({rx.data(), static_cast<std::size_t>(n)}, m) == WireError::ok &&
                m.header.type == MsgType::reg_reply && m.header.seq == seq) {
                RegReplyBody r;
                std::memcpy(&r, m.body.data(), sizeof r);
                return r;
            }
            std::lock_guard lock(mu_);
            ++stats_.ignored_datagrams;
        }
    }
    error = "no reply from gateway " + ipv4_text(options_.gateway_ipv4) + ":" + std::to_string(options_.gateway_port) +
            " after " + std::to_string(tries) + (tries == 1 ? " try" : " tries");
    return std::nullopt;
}

void Endpoint::Impl::register_now() {
    RegisterBody body;
    encode(record(), body.record);
    std::string error;
    const auto r = reg_exchange(MsgType::reg, bytes_of(body), options_.tries, error);
    const std::string who = "endpoint " + format_process_id(options_.pid) + ": register: ";
    if (!r) throw Error(ConnStage::open, who + error);
    if (r->status != static_cast<uint8_t>(RegStatus::ok))
        throw Error(ConnStage::open, who + "refused: " +
                                 (r->status <= static_cast<uint8_t>(kLastRegStatus)
                                      ? reg_status_name(static_cast<RegStatus>(r->status))
                                      : "status " + std::to_string(r->status)));
    if (const uint32_t ms = load_be32(r->heartbeat_ms); ms != 0) heartbeat_ms_ = ms;
}

void Endpoint::Impl::deregister_now() {
    ProcessRefBody body;
    store_be64(body.pid, options_.pid.value);
    store_be32(body.epoch, options_.epoch);
    std::string error;
    (void)reg_exchange(MsgType::deregister, bytes_of(body), kDeregisterTries, error);  // best effort: it expires anyway
}

void Endpoint::Impl::stop() {
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    changed_.notify_all();
    if (!thread_.joinable()) return;
    wake();
    thread_.join();
    for (PendingSocket& s : pending_) ::close(s.fd);
    pending_.clear();
    deregister_now();
    close_sockets();
    std::lock_guard lock(mu_);
    accepted_.clear();
    rdma_half_open_.clear();
}

// ---------------------------------------------------------------------------------------------
// Sending.

uint64_t Endpoint::Impl::now_ms() const {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count());
}

void Endpoint::Impl::send_raw(MsgType type, uint64_t seq, std::span<const uint8_t> body) {
    std::array<uint8_t, sizeof(MsgHeader) + kMaxBody> d{};
    MsgHeader h;
    encode(Header{type, 0, static_cast<uint16_t>(body.size()), seq, 0}, h);
    std::memcpy(d.data(), &h, sizeof h);
    std::memcpy(d.data() + sizeof h, body.data(), body.size());
    const sockaddr_in to = sockaddr_of(options_.gateway_ipv4, options_.gateway_port);
    std::lock_guard lock(send_mu_);
    if (ctl_fd_ >= 0)  // a lost datagram is what retries are for
        (void)::sendto(ctl_fd_, d.data(), sizeof h + body.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
}

void Endpoint::Impl::send(MsgType type, const ConnParams& p) {
    ConnBody b;
    encode(p, b);
    send_raw(type, 0, bytes_of(b));
}

void Endpoint::Impl::wake() {
    const uint64_t one = 1;
    std::lock_guard lock(send_mu_);
    if (wake_fd_ >= 0) (void)!::write(wake_fd_, &one, sizeof one);
}

void Endpoint::Impl::send_heartbeat(uint64_t now) {
    ProcessRefBody body;
    store_be64(body.pid, options_.pid.value);
    store_be32(body.epoch, options_.epoch);
    heartbeat_seq_ = rng_();
    ++stats_.heartbeats_sent;
    next_heartbeat_ms_ = now + heartbeat_ms_;
    send_raw(MsgType::heartbeat, heartbeat_seq_, bytes_of(body));
}

// ---------------------------------------------------------------------------------------------
// The background thread.

void Endpoint::Impl::run() {
    for (;;) {
        std::vector<pollfd> fds{{ctl_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
        int timeout;
        {
            std::lock_guard lock(mu_);
            if (stopping_) return;
            timeout = poll_timeout_ms(now_ms());
            if (listening_ && tcp_fd_ >= 0) fds.push_back({tcp_fd_, POLLIN, 0});
        }
        const std::size_t first_pending = fds.size();
        for (const PendingSocket& s : pending_) fds.push_back({s.fd, POLLIN, 0});
        if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
        const uint64_t now = now_ms();
        if (fds[0].revents) {
            std::array<uint8_t, kRxBuffer> rx;
            sockaddr_in from{};
            socklen_t len = sizeof from;
            for (ssize_t n; (n = ::recvfrom(ctl_fd_, rx.data(), rx.size(), 0, reinterpret_cast<sockaddr*>(&from), &len)) >= 0;
                 len = sizeof from) {
                if (!from_gateway(from)) {
                    std::lock_guard lock(mu_);
                    ++stats_.ignored_datagrams;
                    continue;
                }
                on_datagram({rx.data(), static_cast<std::size_t>(n)}, now);
            }
        }
        if (fds[1].revents) {
            uint64_t drained;
            (void)!::read(wake_fd_, &drained, sizeof drained);
        }
        if (first_pending > 2 && fds[2].revents) accept_tcp(now);
        for (std::size_t i = 0; i + first_pending < fds.size() && i < pending_.size(); ++i)
            if (fds[first_pending + i].revents) read_preamble(pending_[i]);
        timers(now);
    }
}

int Endpoint::Impl::poll_timeout_ms(uint64_t now) {
    uint64_t next = std::min(next_heartbeat_ms_, now + kMaxPollMs);
    for (const auto& [id, a] : active_) {
        if (a->hs.state() == ActiveHandshake::State::waiting_rep) next = std::min(next, a->hs.deadline());
        if (a->hs.state() == ActiveHandshake::State::done) next = std::min(next, a->finished_ms + handshake_timeout_ms_);
    }
    if (const auto e = passive_.next_expiry()) next = std::min(next, *e);
    for (const PendingSocket& s : pending_) next = std::min(next, s.deadline_ms);
    return next <= now ? 0 : static_cast<int>(next - now);
}

void Endpoint::Impl::on_datagram(std::span<const uint8_t> d, uint64_t now) {
    ParsedMsg m;
    if (parse_message(d, m) != WireError::ok || is_peer_message(m.header.type)) {
        std::lock_guard lock(mu_);
        ++stats_.ignored_datagrams;
        return;
    }
    if (m.header.type == MsgType::reg_reply) return on_reg_reply(m);
    const bool conn = m.header.type == MsgType::conn_req || m.header.type == MsgType::conn_rep ||
                      m.header.type == MsgType::conn_rtu;
    std::optional<ConnParams> p;
    if (conn) {
        ConnBody b;
        std::memcpy(&b, m.body.data(), sizeof b);
        p = decode(b);
    }
    if (!p) {
        std::lock_guard lock(mu_);
        ++stats_.ignored_datagrams;
        return;
    }
    if (m.header.type == MsgType::conn_req) return on_conn_req(*p, now);
    if (m.header.type == MsgType::conn_rep) return on_conn_rep(*p);
    on_conn_rtu(*p);
}

void Endpoint::Impl::on_reg_reply(const ParsedMsg& m) {
    RegReplyBody r;
    std::memcpy(&r, m.body.data(), sizeof r);
    std::lock_guard lock(mu_);
    if (m.header.seq != heartbeat_seq_ && m.header.seq != reg_seq_) {
        ++stats_.ignored_datagrams;
        return;
    }
    if (const uint32_t ms = load_be32(r.heartbeat_ms); ms != 0) heartbeat_ms_ = ms;
    // The gateway forgot us (it restarted, or our heartbeats were lost for too long): register again.
    if (m.header.seq == heartbeat_seq_ && r.status == static_cast<uint8_t>(RegStatus::unknown)) {
        RegisterBody body;
        encode(record(), body.record);
        reg_seq_ = rng_();
        ++stats_.reregistrations;
        send_raw(MsgType::reg, reg_seq_, bytes_of(body));
    }
}

uint8_t Endpoint::Impl::offer_caps() const {
    switch (options_.transport) {
    case TransportChoice::tcp: return kCapTcp;
    case TransportChoice::rdma: return rdma_ready_ ? kCapRdma : 0;
    case TransportChoice::automatic: return rdma_ready_ ? kCapAll : kCapTcp;
    }
    return 0;
}

// Runs on the thread without mu_: only the thread changes the passive table, and the provider may
// take a moment. A QP that cannot come up leaves RDMA out of the offer (tcp, if both have it).
PassiveOffer Endpoint::Impl::offer_for(const ConnParams& req, std::unique_ptr<Connection>& rdma_conn) {
    PassiveOffer offer;
    {
        std::lock_guard lock(mu_);
        offer.listening = listening_;
        offer.backlog_full = accepted_.size() + passive_.half_open() >= options_.accept_backlog;
    }
    offer.caps = offer_caps();
    offer.tcp_ipv4 = options_.bind_ipv4;
    offer.tcp_port = tcp_port_;
    if (!offer.listening || PassiveHandshakes::would_choose(req, offer.caps) != Transport::roce_v2 ||
        !valid_rdma_mtu(req.mtu))
        return offer;
    std::string error;
    ConnStage failed = ConnStage::rtr;
    if (auto qp = try_prepare(*rdma_, error)) {
        const RdmaQpParams local = qp->local();
        rdma_conn = try_connect(*qp, rdma_path(local, rdma_params_of(req)), req.conn_id, options_.pid, req.initiator,
                                failed, error);
        if (rdma_conn) offer.rdma = local;
    }
    if (!offer.rdma) {
        std::lock_guard lock(mu_);
        ++stats_.rdma_setup_failures;
    }
    return offer;
}

void Endpoint::Impl::on_conn_req(const ConnParams& req, uint64_t now) {
    {
        std::lock_guard lock(mu_);
        if (const auto rep = passive_.repeat(req)) return send(MsgType::conn_rep, *rep);
    }
    std::unique_ptr<Connection> rdma_conn;
    const PassiveOffer offer = offer_for(req, rdma_conn);
    std::lock_guard lock(mu_);
    const ConnParams rep = passive_.on_req(req, offer, now);
    if (rep.status == ConnStatus::ok && rep.caps == kCapRdma)
        rdma_half_open_[{req.initiator.value, req.conn_id}] = std::move(rdma_conn);
    send(MsgType::conn_rep, rep);
}

void Endpoint::Impl::on_conn_rep(const ConnParams& rep) {
    std::lock_guard lock(mu_);
    const auto it = active_.find(rep.conn_id);
    if (it == active_.end()) {
        ++stats_.ignored_datagrams;
        return;
    }
    const uint64_t duplicates = it->second->hs.counters().duplicate_reps;
    const auto rtu = it->second->hs.on_rep(rep);
    stats_.duplicate_reps += it->second->hs.counters().duplicate_reps - duplicates;
    if (rtu) {
        ++stats_.rtus_sent;
        send(MsgType::conn_rtu, *rtu);
    }
    changed_.notify_all();
}

void Endpoint::Impl::on_conn_rtu(const ConnParams& rtu) {
    std::lock_guard lock(mu_);
    if (passive_.on_rtu(rtu) != PassiveHandshakes::RtuResult::established) return;
    const auto it = rdma_half_open_.find({rtu.initiator.value, rtu.conn_id});
    if (it == rdma_half_open_.end()) return;
    accepted_.push_back(std::move(it->second));
    rdma_half_open_.erase(it);
    ++stats_.established;
    changed_.notify_all();
}

void Endpoint::Impl::accept_tcp(uint64_t now) {
    for (;;) {
        const int fd = ::accept4(tcp_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        if (pending_.size() >= options_.accept_backlog) {  // a flood of sockets that say nothing
            ::close(fd);
            std::lock_guard lock(mu_);
            ++stats_.preambles_rejected;
            continue;
        }
        pending_.push_back(PendingSocket{fd, 0, {}, now + handshake_timeout_ms_});
    }
}

void Endpoint::Impl::read_preamble(PendingSocket& s) {
    const ssize_t n = ::recv(s.fd, s.buf + s.got, sizeof s.buf - s.got, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n > 0) s.got += static_cast<std::size_t>(n);
    if (n > 0 && s.got < sizeof s.buf) return;
    std::optional<Preamble> p;
    if (s.got == sizeof s.buf) {
        PreambleWire w;
        std::memcpy(&w, s.buf, sizeof w);
        p = decode(w);
    }
    const int fd = std::exchange(s.fd, -1);  // timers() drops the emptied slot
    std::lock_guard lock(mu_);
    if (!p || !passive_.on_preamble(p->conn_id, p->initiator, p->target)) {
        ::close(fd);
        ++stats_.preambles_rejected;
        return;
    }
    accepted_.push_back(std::make_unique<TcpConnection>(fd, p->conn_id, options_.pid, p->initiator));
    ++stats_.established;
    if (options_.transport == TransportChoice::automatic && !rdma_ready_) ++stats_.tcp_fallbacks;
    changed_.notify_all();
}

void Endpoint::Impl::timers(uint64_t now) {
    std::lock_guard lock(mu_);
    for (auto it = active_.begin(); it != active_.end();) {
        Active& a = *it->second;
        if (const auto req = a.hs.on_timer(now)) {
            ++stats_.reqs_sent;
            ++stats_.req_retransmits;
            send(MsgType::conn_req, *req);
        }
        if (a.hs.state() == ActiveHandshake::State::failed) changed_.notify_all();
        const bool retired = a.hs.state() == ActiveHandshake::State::done && now >= a.finished_ms + handshake_timeout_ms_;
        it = retired ? active_.erase(it) : std::next(it);
    }
    for (const PassiveHandshakes::Key& k : passive_.expire(now)) rdma_half_open_.erase(k);
    std::erase_if(pending_, [&](PendingSocket& s) {
        if (s.fd >= 0 && now < s.deadline_ms) return false;
        if (s.fd >= 0) {
            ::close(s.fd);
            ++stats_.preambles_rejected;
        }
        return true;
    });
    if (now >= next_heartbeat_ms_) send_heartbeat(now);
}

// ---------------------------------------------------------------------------------------------
// listen, accept, connect.

bool Endpoint::Impl::listen(ConnectError& err) {
    if (options_.transport == TransportChoice::rdma && !rdma_ready_) {
        err = {ConnStage::transport, "--transport rdma: " + rdma_error_};
        return false;
    }
    {
        std::lock_guard lock(mu_);
        listening_ = true;
    }
    wake();  // the thread starts polling the tcp socket
    return true;
}

std::unique_ptr<Connection> Endpoint::Impl::accept(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    changed_.wait_for(lock, timeout, [&] { return !accepted_.empty() || stopping_; });
    if (accepted_.empty()) return nullptr;
    auto c = std::move(accepted_.front());
    accepted_.pop_front();
    ++stats_.accepts;
    return c;
}

std::unique_ptr<Connection> Endpoint::Impl::fail(ConnectError& err, ConnStage stage, std::string message) {
    err = {stage, std::move(message)};
    std::lock_guard lock(mu_);
    ++stats_.connects_failed[static_cast<std::size_t>(stage)];
    return nullptr;
}

bool Endpoint::Impl::caps_for(TransportChoice t, uint8_t& caps, ConnectError& err) const {
    switch (t) {
    case TransportChoice::tcp: caps = kCapTcp; return true;
    case TransportChoice::automatic: caps = rdma_ready_ ? kCapAll : kCapTcp; return true;
    case TransportChoice::rdma:
        if (!rdma_ready_) {
            err = {ConnStage::transport, "--transport rdma: " + rdma_error_};
            return false;
        }
        caps = kCapRdma;
        return true;
    }
    return false;
}

std::optional<DmaAddress> Endpoint::Impl::lookup(ProcessId target, ConnectError& err) const {
    ResolveResult r;
    try {
        NodeClientOptions co;
        co.timeout = options_.try_timeout;
        co.tries = options_.tries;
        co.bind_ipv4 = options_.bind_ipv4;
        r = NodeClient(options_.gateway_ipv4, options_.gateway_port, co).resolve(target);
    } catch (const std::exception& e) {  // the socket could not be set up
        err = ConnectError{ConnStage::resolve, e.what()};
        return std::nullopt;
    }
    if (r.ok()) return r.record;
    err = ConnectError{ConnStage::resolve, r.replied() ? resolve_status_name(*r.status) : r.error};
    return std::nullopt;
}

std::unique_ptr<Connection> Endpoint::Impl::connect(ProcessId target, ConnectError& err,
                                              std::optional<TransportChoice> transport) {
    uint8_t caps = 0;
    if (!caps_for(transport.value_or(options_.transport), caps, err)) return fail(err, err.stage, err.message);
    if (target.value == 0 || target == options_.pid)
        return fail(err, ConnStage::req, "the target must be another process, got " + format_process_id(target));

    const std::optional<DmaAddress> record = lookup(target, err);
    if (!record) return fail(err, err.stage, err.message);

    ConnParams req;
    req.initiator = options_.pid;
    req.target = record->pid;
    {
        std::lock_guard lock(mu_);
        while (req.conn_id == 0) req.conn_id = rng_();
    }
    std::unique_ptr<PreparedQp> qp;
    if (caps & kCapRdma) {
        std::string error;
        qp = try_prepare(*rdma_, error);
        if (!qp && caps == kCapRdma)
            return fail(err, ConnStage::transport, "--transport rdma: cannot prepare a queue pair: " + error);
        if (qp)
            put_rdma_params(qp->local(), req);
        else
            caps = kCapTcp;
    }
    req.caps = caps;
    return run_handshake(req, std::move(qp), err);
}

std::unique_ptr<Connection> Endpoint::Impl::run_handshake(const ConnParams& req, std::unique_ptr<PreparedQp> qp,
                                                    ConnectError& err) {
    auto a = std::make_shared<Active>(
        Active{ActiveHandshake(req, static_cast<uint64_t>(options_.try_timeout.count()), options_.tries), 0});
    std::unique_lock lock(mu_);
    if (stopping_) {
        lock.unlock();
        return fail(err, ConnStage::req, "the endpoint is stopping");
    }
    active_[req.conn_id] = a;
    ++stats_.reqs_sent;
    send(MsgType::conn_req, a->hs.start(now_ms()));
    lock.unlock();
    wake();  // the thread's next timer is this REQ's
    lock.lock();
    changed_.wait(lock, [&] { return a->hs.state() != ActiveHandshake::State::waiting_rep || stopping_; });
    if (a->hs.state() != ActiveHandshake::State::rep_received) {
        const HandshakeFailure f = a->hs.state() == ActiveHandshake::State::failed
                                       ? a->hs.failure()
                                       : HandshakeFailure{ConnStage::rep, "the endpoint stopped before the REP"};
        active_.erase(req.conn_id);
        lock.unlock();
        return fail(err, f.stage, f.message);
    }
    lock.unlock();
    return finish_connect(a, qp.get(), err);
}

std::unique_ptr<Connection> Endpoint::Impl::finish_connect(const std::shared_ptr<Active>& a, PreparedQp* qp,
                                                     ConnectError& err) {
    ConnParams req, rep;
    {
        std::lock_guard lock(mu_);
        req = a->hs.req();
        rep = a->hs.rep();
    }
    std::unique_ptr<Connection> conn;
    if (rep.caps == kCapRdma) {
        ConnStage failed = ConnStage::rtr;
        std::string error;
        conn = try_connect(*qp, rdma_path(rdma_params_of(req), rdma_params_of(rep)), req.conn_id, req.initiator,
                           rep.target, failed, error);
        if (!conn) {
            std::unique_lock lock(mu_);
            a->hs.fail(failed, error);
            active_.erase(req.conn_id);
            lock.unlock();
            return fail(err, failed, error);
        }
    }
    {
        std::lock_guard lock(mu_);
        ++stats_.rtus_sent;
        a->finished_ms = now_ms();
        send(MsgType::conn_rtu, a->hs.complete());
    }
    if (rep.caps == kCapTcp) {
        std::string error;
        const int fd = tcp_connect(rep.ipv4, rep.port, options_.try_timeout * options_.tries, error);
        if (fd < 0) return fail(err, ConnStage::data, error);
        conn = std::make_unique<TcpConnection>(fd, req.conn_id, req.initiator, rep.target);
        PreambleWire w;
        encode(Preamble{req.conn_id, req.initiator, rep.target}, w);
        try {
            conn->send_all(bytes_of(w));
        } catch (const ConnectionError& e) {
            return fail(err, ConnStage::data, e.why());
        }
    }
    std::lock_guard lock(mu_);
    ++stats_.connects_ok;
    if (rep.caps == kCapTcp && options_.transport == TransportChoice::automatic && !rdma_ready_) ++stats_.tcp_fallbacks;
    return conn;
}

EndpointStats Endpoint::Impl::stats() const {
    std::lock_guard lock(mu_);
    EndpointStats s = stats_;
    const PassiveCounters& p = passive_.counters();
    s.late_rtus = p.late_rtus;
    s.half_open_dropped = p.half_open_dropped;
    s.reqs_received = p.reqs + p.duplicate_reqs;
    s.duplicate_reqs = p.duplicate_reqs;
    s.reqs_refused = 0;
    for (uint64_t n : p.refused) s.reqs_refused += n;
    return s;
}

// ---------------------------------------------------------------------------------------------
// The public face: one convention, failures thrown as Error.

Endpoint::Endpoint(EndpointOptions options, RdmaProvider* rdma) {
    if (rdma == nullptr && options.transport != TransportChoice::tcp) {
        own_rdma_ = make_verbs_provider(options.bind_ipv4);
        rdma = own_rdma_.get();
    }
    impl_ = std::make_unique<Impl>(std::move(options), rdma);
}

Endpoint::~Endpoint() = default;  // Impl's destructor stops; then the verbs backend goes

void Endpoint::listen() {
    ConnectError err;
    if (!impl_->listen(err)) throw Error(err.stage, err.message);
}

std::unique_ptr<Connection> Endpoint::accept(std::chrono::milliseconds timeout) { return impl_->accept(timeout); }

std::unique_ptr<Connection> Endpoint::connect(ProcessId target, std::optional<TransportChoice> transport) {
    ConnectError err;
    auto c = impl_->connect(target, err, transport);
    if (c == nullptr) throw Error(err.stage, err.message);
    return c;
}

DmaAddress Endpoint::resolve(ProcessId target) {
    ConnectError err;
    const std::optional<DmaAddress> record = impl_->lookup(target, err);
    if (!record) throw Error(err.stage, format_process_id(target) + ": " + err.message);
    return *record;
}

void Endpoint::stop() { impl_->stop(); }
ProcessId Endpoint::pid() const { return impl_->pid(); }
uint32_t Endpoint::epoch() const { return impl_->epoch(); }
uint16_t Endpoint::tcp_port() const { return impl_->tcp_port(); }
bool Endpoint::rdma_available() const { return impl_->rdma_available(); }
EndpointStats Endpoint::stats() const { return impl_->stats(); }

}  // namespace fedgate
