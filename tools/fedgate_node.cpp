// fedgate-node: a compute process's registration and lookups at its gateway (see fedgate_node_cli.hpp).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "tools/fedgate_node_cli.hpp"

namespace {

int g_stop_write = -1;

// Async-signal-safe: one byte into the pipe; the heartbeat loop polls the read end.
void on_stop_signal(int) {
    const int saved = errno;
    const char byte = 1;
    (void)!::write(g_stop_write, &byte, 1);
    errno = saved;
}

}  // namespace

int main(int argc, char** argv) {
    int stop[2];
    if (::pipe2(stop, O_CLOEXEC | O_NONBLOCK) != 0) {
        std::cerr << "fedgate-node: cannot create the stop pipe: " << std::strerror(errno) << "\n";
        return 1;
    }
    g_stop_write = stop[1];
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, nullptr);
    ::sigaction(SIGTERM, &sa, nullptr);
    // Peers may close any socket at any time (expose/forward above all): EPIPE, not death.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, nullptr);
    return fedgate::run_fedgate_node(argc, argv, std::cout, std::cerr, stop[0]);
}
