// Built against an installed libfedgate-client (pkg-config and CMake both; tests/integration/
// client_install.sh): the public headers compile on their own and the library's symbols resolve.
// Prints what the library computes, so the test can check it.
#include <fedgate/endpoint.hpp>
#include <fedgate/node_client.hpp>

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
    const auto t = fedgate::choose_transport(fedgate::kCapAll, fedgate::kCapTcp);
    std::cout << "pid " << fedgate::format_process_id(*pid) << " party " << pid->party() << " record "
              << (back && *back == rec ? "round-trips" : "broken") << " transport "
              << (t ? fedgate::transport_name(*t) : "none") << " refusal "
              << fedgate::conn_status_name(fedgate::ConnStatus::no_mapping) << " stage "
              << fedgate::conn_stage_name(fedgate::ConnStage::transport) << "\n";
    return 0;
}
