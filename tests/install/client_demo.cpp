// Built against an installed libfedgate-client (pkg-config and CMake both; tests/integration/
// client_install.sh): the public headers compile on their own and the library's symbols resolve.
// Prints what the library computes, so the test can check it.
#include <fedgate/endpoint.hpp>
#include <fedgate/error.hpp>

#include <iostream>

int main(int argc, char** argv) {
    const auto pid = fedgate::parse_process_id(argc > 1 ? argv[1] : "2.7.42");
    if (!pid) {
        std::cerr << "client_demo: not a process ID\n";
        return 1;
    }
    fedgate::DmaAddress rec;
    rec.pid = *pid;
    rec.epoch = 7;
    rec.transport = fedgate::Transport::tcp;
    rec.ipv4 = 0xC612020A;  // 198.18.2.10
    rec.port = 5000;
    fedgate::DmaAddressWire wire;
    fedgate::encode(rec, wire);
    const auto back = fedgate::decode(wire);
    const auto t = fedgate::parse_transport_choice("auto");
    std::cout << "pid " << fedgate::format_process_id(*pid) << " party " << pid->party() << " record "
              << (back && *back == rec ? "round-trips" : "broken") << " transport "
              << (t ? fedgate::transport_choice_name(*t) : "none") << " stage "
              << fedgate::conn_stage_name(fedgate::ConnStage::transport) << " error \""
              << fedgate::Error(fedgate::ConnStage::resolve, "2.7.42: not_found").what() << "\"\n";
    return 0;
}
