// The C API (fedgate/fedgate.h) over Endpoint and NodeClient: C++ failures become a fedgate_error
// naming the stage; no exception crosses into C.
#include "fedgate/fedgate.h"

#include <arpa/inet.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "fedgate/connection.hpp"
#include "fedgate/endpoint.hpp"
#include "fedgate/node_client.hpp"

struct fedgate_endpoint {
    std::unique_ptr<fedgate::Endpoint> ep;
};

struct fedgate_conn {
    std::unique_ptr<fedgate::Connection> c;
    std::string peer;
};

namespace {

using fedgate::ConnStage;

const char* stage_text(int stage) {
    switch (stage) {
    case FEDGATE_STAGE_OPEN: return "open";
    case FEDGATE_STAGE_TIMEOUT: return "timeout";
    case FEDGATE_STAGE_ARGUMENT: return "argument";
    default:
        if (stage >= 0 && stage < static_cast<int>(fedgate::kConnStageCount))
            return fedgate::conn_stage_name(static_cast<ConnStage>(stage));
        return "unknown";
    }
}

// Fills `err` (when given) with the stage and "stage STAGE: message".
void set_error(fedgate_error* err, int stage, const std::string& message) {
    if (err == nullptr) return;
    err->stage = stage;
    std::snprintf(err->message, sizeof err->message, "stage %s: %s", stage_text(stage), message.c_str());
}

int c_stage(ConnStage s) { return s == ConnStage::open ? FEDGATE_STAGE_OPEN : static_cast<int>(s); }

// A C++ failure as a fedgate_error: an Error keeps its stage, anything else gets `stage`.
void set_error_from(fedgate_error* err, const std::exception& e, int stage) {
    if (const auto* fe = dynamic_cast<const fedgate::Error*>(&e))
        set_error(err, c_stage(fe->stage()), fe->why());
    else
        set_error(err, stage, e.what());
}

template <typename T>
T* null_arg(fedgate_error* err, int stage, const char* what) {
    set_error(err, stage, std::string(what) + " is NULL");
    return nullptr;
}

// "IP" or "IP:PORT" -> host-order address and port.
bool parse_gateway(const char* text, uint32_t& ip, uint16_t& port) {
    std::string s(text);
    port = fedgate::kDefaultResolvePort;
    if (const auto colon = s.rfind(':'); colon != std::string::npos) {
        const std::string p = s.substr(colon + 1);
        char* end = nullptr;
        const unsigned long v = std::strtoul(p.c_str(), &end, 10);
        if (p.empty() || *end != '\0' || v == 0 || v > 65535) return false;
        port = static_cast<uint16_t>(v);
        s.resize(colon);
    }
    in_addr a{};
    if (inet_pton(AF_INET, s.c_str(), &a) != 1) return false;
    ip = ntohl(a.s_addr);
    return true;
}

bool parse_ipv4(const char* text, uint32_t& ip) {
    in_addr a{};
    if (text == nullptr || inet_pton(AF_INET, text, &a) != 1) return false;
    ip = ntohl(a.s_addr);
    return true;
}

template <std::size_t N>
void copy_text(char (&dst)[N], const std::string& src) {
    std::snprintf(dst, N, "%s", src.c_str());
}

}  // namespace

extern "C" {

const char* fedgate_stage_name(int stage) { return stage_text(stage); }

fedgate_endpoint* fedgate_open(const char* gateway, const char* pid, const char* bind_ipv4, const char* transport,
                               fedgate_error* err) {
    if (gateway == nullptr) return null_arg<fedgate_endpoint>(err, FEDGATE_STAGE_OPEN, "gateway");
    if (pid == nullptr) return null_arg<fedgate_endpoint>(err, FEDGATE_STAGE_OPEN, "pid");
    fedgate::EndpointOptions o;
    if (!parse_gateway(gateway, o.gateway_ipv4, o.gateway_port)) {
        set_error(err, FEDGATE_STAGE_OPEN, std::string("gateway '") + gateway + "' is not IP or IP:PORT");
        return nullptr;
    }
    const auto id = fedgate::parse_process_id(pid);
    if (!id) {
        set_error(err, FEDGATE_STAGE_OPEN, std::string("pid '") + pid + "' is not a process ID (PARTY.NODE.LOCAL)");
        return nullptr;
    }
    o.pid = *id;
    if (!parse_ipv4(bind_ipv4, o.bind_ipv4)) {
        set_error(err, FEDGATE_STAGE_OPEN, std::string("bind_ipv4 '") + (bind_ipv4 ? bind_ipv4 : "(null)") +
                                               "' is not this node's IPv4 address");
        return nullptr;
    }
    const auto t = fedgate::parse_transport_choice(transport != nullptr ? transport : "auto");
    if (!t) {
        set_error(err, FEDGATE_STAGE_OPEN, std::string("transport '") + transport + "' is not auto, rdma or tcp");
        return nullptr;
    }
    o.transport = *t;
    o.log = [](const std::string&) {};  // the caller sees the transport in fedgate_conn_transport
    try {
        return new fedgate_endpoint{std::make_unique<fedgate::Endpoint>(std::move(o))};
    } catch (const std::exception& e) {
        set_error_from(err, e, FEDGATE_STAGE_OPEN);
        return nullptr;
    }
}

void fedgate_endpoint_close(fedgate_endpoint* ep) { delete ep; }

int fedgate_listen(fedgate_endpoint* ep, fedgate_error* err) {
    if (ep == nullptr) return set_error(err, FEDGATE_STAGE_ARGUMENT, "endpoint is NULL"), -1;
    try {
        ep->ep->listen();
        return 0;
    } catch (const std::exception& e) {
        set_error_from(err, e, FEDGATE_STAGE_TRANSPORT);
        return -1;
    }
}

fedgate_conn* fedgate_accept(fedgate_endpoint* ep, int timeout_ms, fedgate_error* err) {
    if (ep == nullptr) return null_arg<fedgate_conn>(err, FEDGATE_STAGE_ARGUMENT, "endpoint");
    if (timeout_ms < 0) {
        set_error(err, FEDGATE_STAGE_ARGUMENT, "timeout_ms is negative");
        return nullptr;
    }
    auto c = ep->ep->accept(std::chrono::milliseconds(timeout_ms));
    if (c == nullptr) {
        set_error(err, FEDGATE_STAGE_TIMEOUT, "no connection within " + std::to_string(timeout_ms) + " ms");
        return nullptr;
    }
    const std::string peer = fedgate::format_process_id(c->peer_pid());
    return new fedgate_conn{std::move(c), peer};
}

fedgate_conn* fedgate_connect(fedgate_endpoint* ep, const char* target, fedgate_error* err) {
    if (ep == nullptr) return null_arg<fedgate_conn>(err, FEDGATE_STAGE_ARGUMENT, "endpoint");
    if (target == nullptr) return null_arg<fedgate_conn>(err, FEDGATE_STAGE_ARGUMENT, "target");
    const auto id = fedgate::parse_process_id(target);
    if (!id) {
        set_error(err, FEDGATE_STAGE_ARGUMENT, std::string("target '") + target + "' is not a process ID");
        return nullptr;
    }
    std::unique_ptr<fedgate::Connection> c;
    try {
        c = ep->ep->connect(*id);
    } catch (const std::exception& e) {
        set_error_from(err, e, FEDGATE_STAGE_REQ);
        return nullptr;
    }
    const std::string peer = fedgate::format_process_id(c->peer_pid());
    return new fedgate_conn{std::move(c), peer};
}

ssize_t fedgate_send(fedgate_conn* c, const void* buf, size_t len, fedgate_error* err) {
    if (c == nullptr || (buf == nullptr && len != 0))
        return set_error(err, FEDGATE_STAGE_ARGUMENT, "connection or buffer is NULL"), -1;
    try {
        c->c->send_all({static_cast<const uint8_t*>(buf), len});
        return static_cast<ssize_t>(len);
    } catch (const std::exception& e) {
        set_error_from(err, e, FEDGATE_STAGE_DATA);
        return -1;
    }
}

ssize_t fedgate_recv(fedgate_conn* c, void* buf, size_t len, fedgate_error* err) {
    if (c == nullptr || buf == nullptr || len == 0)
        return set_error(err, FEDGATE_STAGE_ARGUMENT, "connection or buffer is NULL, or the length 0"), -1;
    try {
        return static_cast<ssize_t>(c->c->recv_some({static_cast<uint8_t*>(buf), len}));
    } catch (const std::exception& e) {
        set_error_from(err, e, FEDGATE_STAGE_DATA);
        return -1;
    }
}

int fedgate_shutdown(fedgate_conn* c, fedgate_error* err) {
    if (c == nullptr) return set_error(err, FEDGATE_STAGE_ARGUMENT, "connection is NULL"), -1;
    try {
        c->c->shutdown_send();
        return 0;
    } catch (const std::exception& e) {
        set_error_from(err, e, FEDGATE_STAGE_DATA);
        return -1;
    }
}

int fedgate_conn_fd(const fedgate_conn* c) { return c != nullptr ? c->c->native_handle() : -1; }

const char* fedgate_conn_transport(const fedgate_conn* c) {
    return c != nullptr ? fedgate::transport_name(c->c->transport()) : "";
}

const char* fedgate_conn_peer(const fedgate_conn* c) { return c != nullptr ? c->peer.c_str() : ""; }

void fedgate_close(fedgate_conn* c) { delete c; }

int fedgate_resolve(const char* gateway, const char* pid, const char* bind_ipv4, int timeout_ms, fedgate_record* out,
                    fedgate_error* err) {
    uint32_t ip = 0;
    uint16_t port = 0;
    if (gateway == nullptr || !parse_gateway(gateway, ip, port))
        return set_error(err, FEDGATE_STAGE_ARGUMENT, "gateway is not IP or IP:PORT"), -1;
    const auto id = pid != nullptr ? fedgate::parse_process_id(pid) : std::nullopt;
    if (!id || out == nullptr || timeout_ms <= 0)
        return set_error(err, FEDGATE_STAGE_ARGUMENT, "pid is not a process ID, out is NULL or timeout_ms <= 0"), -1;
    fedgate::NodeClientOptions o;
    o.timeout = std::chrono::milliseconds(timeout_ms);
    o.tries = 1;
    if (bind_ipv4 != nullptr) {
        uint32_t b = 0;
        if (!parse_ipv4(bind_ipv4, b)) return set_error(err, FEDGATE_STAGE_ARGUMENT, "bind_ipv4 is not IPv4"), -1;
        o.bind_ipv4 = b;
    }
    try {
        fedgate::NodeClient client(ip, port, o);
        const fedgate::ResolveResult r = client.resolve(*id);
        if (!r.replied()) return set_error(err, FEDGATE_STAGE_RESOLVE, "no answer from the gateway: " + r.error), -1;
        if (!r.ok())
            return set_error(err, FEDGATE_STAGE_RESOLVE,
                             std::string(pid) + ": " + fedgate::resolve_status_name(*r.status)),
                   -1;
        const fedgate::DmaAddress& a = r.record;
        *out = fedgate_record{};
        copy_text(out->pid, fedgate::format_process_id(a.pid));
        out->epoch = a.epoch;
        copy_text(out->transport, fedgate::transport_name(a.transport));
        char ipbuf[INET_ADDRSTRLEN], gidbuf[INET6_ADDRSTRLEN];
        const in_addr addr{htonl(a.ipv4)};
        copy_text(out->ipv4, inet_ntop(AF_INET, &addr, ipbuf, sizeof ipbuf) != nullptr ? ipbuf : "");
        out->port = a.port;
        copy_text(out->gid, inet_ntop(AF_INET6, a.gid.data(), gidbuf, sizeof gidbuf) != nullptr ? gidbuf : "");
        out->qpn = a.qpn;
        out->mtu = a.mtu;
        return 0;
    } catch (const std::exception& e) {
        set_error(err, FEDGATE_STAGE_RESOLVE, e.what());
        return -1;
    }
}

}  // extern "C"
