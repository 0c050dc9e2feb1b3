// The Prometheus endpoint: the daemon's stats and status replies in text exposition format 0.0.4,
// and the small HTTP server that answers GET /metrics with them.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

namespace fedgate {

// The `stats` and `status` management replies (Commands::stats(), Commands::status()) as exposition
// text: one family per row of the counter table (counter_table.hpp) beside the status's info gauges;
// `# HELP` and `# TYPE` once per family, counters named *_total, gauges not, ports, drop reasons and
// peers as labels. Pure: a missing section or counter is left out, never an error.
std::string render_prometheus(const nlohmann::ordered_json& stats, const nlohmann::ordered_json& status);

// A label value escaped as the exposition format asks: backslash, double quote and newline.
std::string escape_label_value(std::string_view v);

inline constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";
inline constexpr std::size_t kMaxHttpRequestBytes = 8 * 1024;

// The whole HTTP reply (status line, headers, body) for one request's bytes: GET or HEAD of
// /metrics gets `metrics()`, another path 404, another method 405, anything unreadable 400, a
// request too large 431. Every reply closes the connection. Pure but for calling `metrics`.
std::string http_reply(std::string_view request, const std::function<std::string()>& metrics);

// One control thread that accepts on a TCP address and answers each connection with http_reply,
// one at a time. Reading metrics reads the counters the lcore publishes; the data plane never
// sees a scrape.
class MetricsServer {
public:
    using Render = std::function<std::string()>;

    // Binds and listens at once: a taken or foreign address fails with a message naming it.
    // `port` 0 takes a free port (tests); port() tells which.
    MetricsServer(uint32_t addr_host_order, uint16_t port, Render render);
    ~MetricsServer();
    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;

    void start();
    void stop();  // stops accepting, finishes the connection in hand, closes the socket
    uint16_t port() const { return port_; }
    const std::string& address() const { return address_; }  // "IP:PORT", for messages

private:
    void accept_loop();
    void serve(int fd);

    Render render_;
    std::string address_;
    uint16_t port_ = 0;
    int listen_fd_ = -1;
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

}  // namespace fedgate
