# Benchmark tools of the resolution service; tests/bench/resolve_bench.sh runs them (not ctest).
# fedgate_bench_pcap encodes its resolve-mode messages with the wire functions.
target_link_libraries(fedgate_bench_pcap PRIVATE fedgate_wire)

# Registrations in bulk and resolve round trips from a compute node (UDP, no DPDK).
add_executable(fedgate_bench_resolve bench/bench_resolve_client.cpp)
target_link_libraries(fedgate_bench_resolve PRIVATE fedgate_node_client fedgate_wire Boost::program_options)
