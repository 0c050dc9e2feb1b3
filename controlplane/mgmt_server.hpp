// The management socket: a Unix stream socket where each connection carries one JSON request line
// and gets one JSON reply line. Requests run as tasks in the control threads' TBB arena. A request
// may come with a file descriptor (SCM_RIGHTS), which its handler can take: `fedgatectl capture -w -`
// passes its standard output so that fedgated writes the capture straight into the pipe.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>

#include <tbb/task_arena.h>
#include <tbb/task_group.h>

namespace fedgate {

class MgmtError : public std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The descriptor the client passed with the request being handled, for its handler to take (call it
// on the handler's thread): -1 if none came, or it was taken already. The taker owns it; one not
// taken is closed when its handler returns.
int mgmt_take_passed_fd();

class MgmtServer {
public:
    // Returns the `result` object; throws MgmtError (or std::exception) for an error reply.
    using Handler = std::function<nlohmann::ordered_json(const nlohmann::ordered_json& request)>;
    static constexpr std::size_t kMaxRequestBytes = 64 * 1024;

    // Binds and listens at once, so a taken or unusable path fails start-up with a clear error.
    // A stale socket left by a dead daemon is replaced; one a live daemon answers on is not.
    MgmtServer(std::string path, Handler handler, tbb::task_arena& arena);
    ~MgmtServer();
    MgmtServer(const MgmtServer&) = delete;
    MgmtServer& operator=(const MgmtServer&) = delete;

    void start();
    // Stops accepting, waits for requests in flight, removes the socket file.
    void stop();
    const std::string& path() const { return path_; }

    // Builds the reply line for one request line (the protocol without the socket; tests use it).
    static std::string reply_for(const std::string& line, const Handler& handler);

private:
    void accept_loop();
    void serve(int fd);

    std::string path_;
    Handler handler_;
    tbb::task_arena& arena_;
    tbb::task_group tasks_;
    int listen_fd_ = -1;
    std::atomic<bool> stopping_{false};
    std::thread thread_;
};

}  // namespace fedgate
