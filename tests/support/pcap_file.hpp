// Minimal classic-pcap (Ethernet, microsecond) reader and writer for tests and the benchmark input.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace fedgate::test {

inline bool write_pcap(const std::string& path, const std::vector<std::vector<uint8_t>>& frames) {
    std::ofstream f(path, std::ios::binary);
    const uint32_t hdr[] = {0xa1b2c3d4, 0x00040002, 0, 0, 65535, 1};  // magic, v2.4, tz, sigfigs, snaplen, DLT_EN10MB
    f.write(reinterpret_cast<const char*>(hdr), sizeof hdr);
    for (const auto& fr : frames) {
        const uint32_t rec[] = {0, 0, static_cast<uint32_t>(fr.size()), static_cast<uint32_t>(fr.size())};
        f.write(reinterpret_cast<const char*>(rec), sizeof rec);
        f.write(reinterpret_cast<const char*>(fr.data()), static_cast<std::streamsize>(fr.size()));
    }
    return static_cast<bool>(f);
}

inline std::vector<std::vector<uint8_t>> read_pcap(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::vector<std::vector<uint8_t>> out;
    char hdr[24];
    if (!f.read(hdr, sizeof hdr)) return out;
    uint32_t rec[4];
    while (f.read(reinterpret_cast<char*>(rec), sizeof rec)) {
        std::vector<uint8_t> fr(rec[2]);
        if (!f.read(reinterpret_cast<char*>(fr.data()), rec[2])) break;
        out.push_back(std::move(fr));
    }
    return out;
}

}  // namespace fedgate::test
