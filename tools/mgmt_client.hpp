// Client side of fedgated's management socket: one JSON request line out, one JSON reply line back.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace fedgate {

// What the daemon answered. ordered_json keeps the daemon's key order, so the CLI prints sections
// and counters in the order the daemon chose.
struct MgmtReply {
    bool ok = false;
    nlohmann::ordered_json result;  // the reply's "result" when ok
    std::string error;              // the reply's "error" when !ok: names the bad field
};

// The call did not produce a reply. what() is a complete sentence naming the socket. (Not the
// daemon's MgmtError: that one means "refuse this request" and travels as ok:false.)
class MgmtCallError : public std::runtime_error {
public:
    enum class Kind {
        unreachable,  // socket/connect failed: no daemon, stale socket, permissions
        timeout,      // the daemon accepted but did not answer in time
        protocol,     // connection lost mid-call, or the reply is not {"ok":...} JSON
    };
    MgmtCallError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
    Kind kind() const { return kind_; }

private:
    Kind kind_;
};

// Connects to `socket_path`, sends `request` as one line, reads one reply line. `timeout` bounds
// the whole call (connect, send and receive). Throws MgmtCallError; a daemon-side refusal is not an
// error here but a reply with ok == false. `pass_fd` >= 0 goes to the daemon with the request
// (SCM_RIGHTS), for a request that names it (capture_start with "file": "-"); this process keeps its
// own copy.
MgmtReply mgmt_call(const std::string& socket_path, const nlohmann::ordered_json& request,
                    std::chrono::milliseconds timeout, int pass_fd = -1);

}  // namespace fedgate
