// A fake gateway for the client library's tests, on 127.0.0.1: it answers registration, heartbeat,
// deregistration and resolution from its own table, and relays REQ/REP/RTU between the processes'
// control sockets unchanged (a target it does not know gets unknown_target), dropping the first N
// messages of a kind when asked. The C++ endpoint tests use it in-process; fedgate_fake_gateway
// (fake_gateway_main.cpp) runs it for the Python module's tests.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "proto/conn_wire.hpp"
#include "proto/resolve_wire.hpp"

namespace fedgate::testing {

inline constexpr auto kFakeGatewayWait = std::chrono::seconds(20);  // generous: ASan, a shared machine

template <typename Body>
inline std::vector<uint8_t> message(MsgType type, uint64_t seq, const Body& body) {
    std::vector<uint8_t> out(sizeof(MsgHeader) + sizeof body);
    MsgHeader h;
    encode(Header{type, 0, static_cast<uint16_t>(sizeof body), seq, 0}, h);
    std::memcpy(out.data(), &h, sizeof h);
    std::memcpy(out.data() + sizeof h, &body, sizeof body);
    return out;
}

class RelayGateway {
public:
    // `ipv4`: the address to listen on (host order), 127.0.0.1 by default; an ephemeral port.
    explicit RelayGateway(uint32_t ipv4 = 0x7f000001) {
        fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(ipv4);
        if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::pipe2(stop_, O_CLOEXEC) != 0)
            throw std::runtime_error("fake gateway: cannot bind on 127.0.0.1");
        socklen_t len = sizeof a;
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { serve(); });
    }
    ~RelayGateway() {
        (void)!::write(stop_[1], "x", 1);
        thread_.join();
        for (int fd : {fd_, stop_[0], stop_[1]}) ::close(fd);
    }

    uint16_t port() const { return port_; }
    std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

    // Loss injection: the first n messages of a kind vanish.
    void drop_first(MsgType type, int n) {
        std::lock_guard lock(mu_);
        drop_[type] = n;
    }
    void forget(ProcessId pid) {
        std::lock_guard lock(mu_);
        procs_.erase(pid.value);
    }
    int seen(MsgType type) {
        std::lock_guard lock(mu_);
        return seen_[type];
    }
    int dropped(MsgType type) {
        std::lock_guard lock(mu_);
        return dropped_[type];
    }
    bool wait_seen(MsgType type, int n) {
        std::unique_lock lock(mu_);
        return changed_.wait_for(lock, kFakeGatewayWait, [&] { return seen_[type] >= n; });
    }
    bool registered(ProcessId pid) {
        std::lock_guard lock(mu_);
        return procs_.count(pid.value) != 0;
    }
    std::optional<DmaAddress> record_of(ProcessId pid) {
        std::lock_guard lock(mu_);
        const auto it = procs_.find(pid.value);
        if (it == procs_.end()) return std::nullopt;
        return it->second.record;
    }

private:
    struct Proc {
        DmaAddress record;
        sockaddr_in control{};
    };

    void serve() {
        for (;;) {
            pollfd p[2] = {{fd_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
            if (::poll(p, 2, -1) < 0 || p[1].revents) return;
            std::vector<uint8_t> d(2048);
            sockaddr_in from{};
            socklen_t len = sizeof from;
            const ssize_t n = ::recvfrom(fd_, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
            if (n <= 0) continue;
            d.resize(static_cast<size_t>(n));
            ParsedMsg m;
            if (parse_message(d, m) != WireError::ok) continue;
            std::lock_guard lock(mu_);
            ++seen_[m.header.type];
            handle(m, from);
            changed_.notify_all();
        }
    }

    void reply(const sockaddr_in& to, const std::vector<uint8_t>& b) {
        ::sendto(fd_, b.data(), b.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
    }

    void reg_reply(const sockaddr_in& to, uint64_t seq, RegStatus s, ProcessId pid, uint32_t epoch) {
        RegReplyBody b{};
        b.status = static_cast<uint8_t>(s);
        store_be64(b.pid, pid.value);
        store_be32(b.epoch, epoch);
        store_be32(b.heartbeat_ms, 200);
        reply(to, message(MsgType::reg_reply, seq, b));
    }

    void handle(const ParsedMsg& m, const sockaddr_in& from) {
        switch (m.header.type) {
        case MsgType::reg: {
            RegisterBody b;
            std::memcpy(&b, m.body.data(), sizeof b);
            const DmaAddress rec = *decode(b.record);
            procs_[rec.pid.value] = Proc{rec, from};
            return reg_reply(from, m.header.seq, RegStatus::ok, rec.pid, rec.epoch);
        }
        case MsgType::heartbeat:
        case MsgType::deregister: {
            ProcessRefBody b;
            std::memcpy(&b, m.body.data(), sizeof b);
            const ProcessId pid{load_be64(b.pid)};
            const auto it = procs_.find(pid.value);
            if (it == procs_.end()) return reg_reply(from, m.header.seq, RegStatus::unknown, pid, 0);
            if (m.header.type == MsgType::deregister) procs_.erase(it);
            return reg_reply(from, m.header.seq, RegStatus::ok, pid, load_be32(b.epoch));
        }
        case MsgType::resolve: {
            ResolveBody b;
            std::memcpy(&b, m.body.data(), sizeof b);
            ResolveReplyBody r{};
            std::memcpy(r.target, b.target, sizeof r.target);
            const auto it = procs_.find(load_be64(b.target));
            r.status = static_cast<uint8_t>(it == procs_.end() ? ResolveStatus::not_found : ResolveStatus::ok);
            r.source = static_cast<uint8_t>(AnswerSource::local);
            if (it != procs_.end()) encode(it->second.record, r.record);
            return reply(from, message(MsgType::resolve_reply, m.header.seq, r));
        }
        case MsgType::conn_req:
        case MsgType::conn_rep:
        case MsgType::conn_rtu: return relay(m, from);
        default: return;
        }
    }

    // Straight from one process's control endpoint to the other's; nothing rewritten.
    void relay(const ParsedMsg& m, const sockaddr_in& from) {
        ConnBody b;
        std::memcpy(&b, m.body.data(), sizeof b);
        const auto p = decode(b);
        if (!p) return;
        if (drop_[m.header.type] > 0) {
            --drop_[m.header.type];
            ++dropped_[m.header.type];
            return;
        }
        const auto key = std::make_pair(p->initiator.value, p->conn_id);
        const std::vector<uint8_t> out = message(m.header.type, 0, b);
        if (m.header.type == MsgType::conn_rep) {
            if (const auto it = initiators_.find(key); it != initiators_.end()) reply(it->second, out);
            return;
        }
        const auto target = procs_.find(p->target.value);
        if (target == procs_.end()) {
            ConnParams refusal{p->conn_id, p->initiator, p->target, ConnStatus::unknown_target};
            ConnBody rb;
            encode(refusal, rb);
            if (m.header.type == MsgType::conn_req) reply(from, message(MsgType::conn_rep, 0, rb));
            return;
        }
        if (m.header.type == MsgType::conn_req) initiators_[key] = from;
        reply(target->second.control, out);
    }

    int fd_ = -1;
    int stop_[2] = {-1, -1};
    uint16_t port_ = 0;
    std::mutex mu_;
    std::condition_variable changed_;
    std::map<uint64_t, Proc> procs_;
    std::map<std::pair<uint64_t, uint64_t>, sockaddr_in> initiators_;
    std::map<MsgType, int> drop_, dropped_, seen_;
    std::thread thread_;
};

}  // namespace fedgate::testing
