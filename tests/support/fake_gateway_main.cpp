// fedgate_fake_gateway: the client library tests' fake gateway (fake_gateway.hpp) as a program, for
// the tests of the Python module. Listens on 127.0.0.1 (or the address given), prints
// "fake gateway 127.0.0.1:PORT" once it answers, and runs until its standard input closes or it
// gets SIGTERM/SIGINT.
// usage: fedgate_fake_gateway [IPV4]
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "tests/support/fake_gateway.hpp"

int main(int argc, char** argv) {
    in_addr a{};
    a.s_addr = htonl(0x7f000001);
    if (argc > 2 || (argc == 2 && inet_pton(AF_INET, argv[1], &a) != 1)) {
        std::cerr << "usage: fedgate_fake_gateway [IPV4]\n";
        return 2;
    }
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before the gateway's thread starts: it inherits it
    fedgate::testing::RelayGateway gw(ntohl(a.s_addr));
    char ip[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a, ip, sizeof ip);
    std::cout << "fake gateway " << ip << ":" << gw.port() << std::endl;
    const int sfd = ::signalfd(-1, &stop, SFD_CLOEXEC);
    for (;;) {
        pollfd p[2] = {{STDIN_FILENO, POLLIN, 0}, {sfd, POLLIN, 0}};
        if (::poll(p, 2, -1) < 0 || p[1].revents) break;
        char buf[256];
        if (p[0].revents && ::read(STDIN_FILENO, buf, sizeof buf) <= 0) break;
    }
    return 0;
}
