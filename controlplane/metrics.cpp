// The Prometheus endpoint: stats/status JSON rendered as exposition text from the counter table, and its HTTP server.
#include "controlplane/metrics.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "controlplane/config.hpp"
#include "controlplane/counter_table.hpp"
#include "controlplane/log.hpp"

namespace fedgate {
namespace {

using json = nlohmann::ordered_json;
using Labels = std::vector<std::pair<std::string_view, std::string>>;

// The sample value as exposition text: integers exactly, other numbers shortest round-trip,
// booleans 1/0; nothing for anything else.
std::optional<std::string> value_text(const json& v) {
    if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
    if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
    if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
    if (v.is_number_float()) {
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof buf, v.get<double>());
        return std::string(buf, r.ptr);
    }
    return std::nullopt;
}

std::string escape_help(std::string_view s) {
    std::string out;
    for (char c : s) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

// Families in the order first seen, each with its samples together, so HELP and TYPE come once.
class Exposition {
public:
    void add(std::string_view name, const char* type, std::string_view help, const Labels& labels, const json& v) {
        const auto value = value_text(v);
        if (!value) return;
        Family* f = nullptr;
        for (Family& g : families_)
            if (g.name == name) f = &g;
        if (f == nullptr) f = &families_.emplace_back(Family{std::string(name), type, std::string(help), {}});
        std::string line(name);
        if (!labels.empty()) {
            line += '{';
            for (std::size_t i = 0; i < labels.size(); ++i) {
                if (i > 0) line += ',';
                line += std::string(labels[i].first) + "=\"" + escape_label_value(labels[i].second) + "\"";
            }
            line += '}';
        }
        f->samples.push_back(line + " " + *value);
    }

    std::string text() const {
        std::string out;
        for (const Family& f : families_) {
            out += "# HELP " + f.name + " " + escape_help(f.help) + "\n";
            out += "# TYPE " + f.name + " " + f.type + "\n";
            for (const std::string& s : f.samples) out += s + "\n";
        }
        return out;
    }

private:
    struct Family {
        std::string name;
        const char* type;
        std::string help;
        std::vector<std::string> samples;
    };
    std::vector<Family> families_;
};

const json& at(const json& obj, std::string_view key) {
    static const json missing;
    if (!obj.is_object()) return missing;
    const auto it = obj.find(key);
    return it == obj.end() ? missing : *it;
}

std::string str(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_null()) return "";
    return v.dump();
}

void render_status(Exposition& e, const json& status) {
    if (!status.is_object()) return;
    if (at(status, "party").is_string())
        e.add("fedgate_info", "gauge", "The gateway's party and version (always 1)",
              {{"party", str(at(status, "party"))}, {"party_id", str(at(status, "party_id"))},
               {"version", str(at(status, "version"))}},
              json(1));
    e.add("fedgate_uptime_seconds", "gauge", "Seconds since fedgated started", {}, at(status, "uptime_s"));
    const json& ports = at(status, "ports");
    if (ports.is_array())
        for (const json& p : ports) {
            const Labels l{{"port", str(at(p, "name"))}};
            e.add("fedgate_port_link_up", "gauge", "1 if the port's link is up", l, at(at(p, "link"), "up"));
        }
    const json& peers = at(status, "peers");
    if (peers.is_array())
        for (const json& p : peers)
            e.add("fedgate_peer_info", "gauge", "A configured peer gateway (always 1)",
                  {{"peer", str(at(p, "party"))}, {"party_id", str(at(p, "party_id"))}, {"address", str(at(p, "address"))}},
                  json(1));
}

const json& at_path(const json& from, std::string_view section) {
    const json* o = &from;
    while (!section.empty()) {
        const std::size_t slash = section.find('/');
        o = &at(*o, section.substr(0, slash));
        section = slash == std::string_view::npos ? std::string_view{} : section.substr(slash + 1);
    }
    return *o;
}

// One row of the counter table: its samples in `reply`, for every port or peer its scope names.
void render_row(Exposition& e, const CounterDesc& d, const json& reply) {
    const std::string family = exposed_family(d);
    if (family.empty()) return;  // a sum of other rows
    const char* type = d.type == MetricType::counter ? "counter" : "gauge";
    const auto emit = [&](const json& entry, Labels labels) {
        for (const Label& l : d.labels)
            if (!l.name.empty()) labels.emplace_back(l.name, std::string(l.value));
        const json& v = at(at_path(entry, d.section), d.key);
        if (d.dim == Dim::none) {
            e.add(family, type, d.help, labels, v);
        } else if (d.dim == Dim::drop_reason) {
            // Every reason the reply's totals list, for every port: a port's JSON lists only its non-zero ones.
            const json& reasons = at(reply, "drops_by_reason");
            if (!reasons.is_object()) return;
            for (const auto& r : reasons.items()) {
                Labels l = labels;
                l.emplace_back("reason", r.key());
                const json& x = at(v, r.key());
                e.add(family, type, d.help, l, x.is_null() ? json(0) : x);
            }
        } else if (v.is_object()) {
            for (const auto& k : v.items()) {
                Labels l = labels;
                l.emplace_back(d.dim_label, k.key());
                e.add(family, type, d.help, l, k.value());
            }
        }
    };
    if (d.scope == Scope::gateway) {
        emit(reply, {});
        return;
    }
    const bool port = d.scope == Scope::port;
    const json& entries = port ? at(reply, "ports") : at_path(reply, "resolution/exchange/peers");
    if (!entries.is_array()) return;
    for (const json& x : entries)
        emit(x, {{port ? "port" : "peer", str(at(x, port ? "name" : "party"))}});
}

void render_rows(Exposition& e, Reply which, const json& reply) {
    if (!reply.is_object()) return;
    for (const CounterDesc& d : counter_table())
        if (d.reply == which) render_row(e, d, reply);
}

// ---- HTTP ----

std::string reply(int code, std::string_view reason, std::string_view content_type, const std::string& body,
                  bool head = false, std::string_view extra_header = {}) {
    std::string r = "HTTP/1.1 " + std::to_string(code) + " " + std::string(reason) + "\r\n";
    r += "Content-Type: " + std::string(content_type) + "\r\n";
    r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    if (!extra_header.empty()) r += std::string(extra_header) + "\r\n";
    r += "Connection: close\r\n\r\n";
    if (!head) r += body;
    return r;
}

std::string error_reply(int code, std::string_view reason, const std::string& why, std::string_view extra = {}) {
    return reply(code, reason, "text/plain; charset=utf-8", std::to_string(code) + " " + std::string(reason) + ": " + why + "\n",
                 false, extra);
}

bool token_char(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '-' || c == '_'; }

bool wait_fd(int fd, short events, int timeout_ms) {
    pollfd p{fd, events, 0};
    int rc;
    do rc = ::poll(&p, 1, timeout_ms);
    while (rc < 0 && errno == EINTR);
    return rc > 0;
}

constexpr int kPollMs = 200;            // how soon stop() is noticed
constexpr int kClientTimeoutMs = 2000;  // a scraper that says nothing is dropped after this

}  // namespace

std::string escape_label_value(std::string_view v) {
    std::string out;
    for (char c : v) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

std::string render_prometheus(const json& stats, const json& status) {
    Exposition e;
    render_status(e, status);
    render_rows(e, Reply::status, status);
    render_rows(e, Reply::stats, stats);
    return e.text();
}

std::string http_reply(std::string_view request, const std::function<std::string()>& metrics) {
    if (request.size() > kMaxHttpRequestBytes)
        return error_reply(431, "Request Header Fields Too Large",
                           "requests are limited to " + std::to_string(kMaxHttpRequestBytes) + " bytes");
    const std::size_t eol = request.find('\n');
    if (eol == std::string_view::npos) return error_reply(400, "Bad Request", "no request line");
    std::string_view line = request.substr(0, eol);
    if (line.ends_with('\r')) line.remove_suffix(1);
    // METHOD SP TARGET SP HTTP/1.x, nothing more.
    const std::size_t sp1 = line.find(' ');
    const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
        return error_reply(400, "Bad Request", "the request line must be METHOD PATH HTTP/1.x");
    const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                           version = line.substr(sp2 + 1);
    if (method.empty() || !std::all_of(method.begin(), method.end(), token_char) || target.empty() ||
        target[0] != '/' || (version != "HTTP/1.0" && version != "HTTP/1.1"))
        return error_reply(400, "Bad Request", "the request line must be METHOD PATH HTTP/1.x");
    const bool head = method == "HEAD";
    if (method != "GET" && !head)
        return error_reply(405, "Method Not Allowed", "only GET and HEAD are served", "Allow: GET, HEAD");
    const std::string_view path = target.substr(0, target.find('?'));
    if (path != "/metrics") return error_reply(404, "Not Found", "metrics are at /metrics");
    std::string body;
    try {
        body = metrics();
    } catch (const std::exception& ex) {
        return error_reply(500, "Internal Server Error", ex.what());
    }
    return reply(200, "OK", kMetricsContentType, body, head);
}

MetricsServer::MetricsServer(uint32_t addr_host_order, uint16_t port, Render render)
    : render_(std::move(render)), address_(format_ipv4(addr_host_order) + ":" + std::to_string(port)), port_(port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw std::runtime_error("metrics.listen " + address_ + ": socket(): " + std::strerror(errno));
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a restart within TIME_WAIT
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(addr_host_order);
    socklen_t len = sizeof a;
    if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 16) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        const int err = errno;
        ::close(listen_fd_);
        listen_fd_ = -1;
        throw std::runtime_error("metrics.listen " + address_ + ": cannot listen: " + std::strerror(err) +
                                 (err == EADDRNOTAVAIL ? " (not an address of the gateway's network namespace; the "
                                                         "data plane's port addresses are not kernel addresses)"
                                                       : ""));
    }
    port_ = ntohs(a.sin_port);
    address_ = format_ipv4(addr_host_order) + ":" + std::to_string(port_);
}

MetricsServer::~MetricsServer() { stop(); }

void MetricsServer::start() {
    FG_LOG(INFO, metrics, "Prometheus metrics at http://%s/metrics", address_.c_str());
    thread_ = std::thread([this] { accept_loop(); });
}

void MetricsServer::stop() {
    stopping_.store(true);
    if (thread_.joinable()) thread_.join();
    if (listen_fd_ >= 0) {
        ::close(listen_fd_);
        listen_fd_ = -1;
    }
}

void MetricsServer::accept_loop() {
    while (!stopping_.load()) {
        if (!wait_fd(listen_fd_, POLLIN, kPollMs)) continue;
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        serve(fd);
    }
}

void MetricsServer::serve(int fd) {
    std::string request;
    char buf[2048];
    // Up to the blank line that ends the headers (the body of a GET is never read), or the limit.
    while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos &&
           request.size() <= kMaxHttpRequestBytes && !stopping_.load()) {
        if (!wait_fd(fd, POLLIN, kClientTimeoutMs)) break;
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        request.append(buf, static_cast<std::size_t>(n));
    }
    if (!request.empty()) {
        const std::string r = http_reply(request, render_);
        for (std::size_t off = 0; off < r.size();) {
            if (!wait_fd(fd, POLLOUT, kClientTimeoutMs)) break;
            const ssize_t n = ::send(fd, r.data() + off, r.size() - off, MSG_NOSIGNAL);
            if (n <= 0) break;
            off += static_cast<std::size_t>(n);
        }
        // Closing with unread request bytes would reset the connection and could lose the reply.
        ::shutdown(fd, SHUT_WR);
        for (int i = 0; i < 16 && wait_fd(fd, POLLIN, 100) && ::recv(fd, buf, sizeof buf, 0) > 0; ++i) {
        }
    }
    ::close(fd);
}

}  // namespace fedgate
