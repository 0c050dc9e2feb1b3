// libFuzzer target: the packet parser must never read outside the frame, and what it reports for a
// good packet must lie inside the frame.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "dataplane/packet.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 65535) return 0;
    // An exact-size copy, so ASan flags any read past the end.
    std::unique_ptr<uint8_t[]> buf(new uint8_t[size]);
    std::memcpy(buf.get(), data, size);
    fedgate::ParsedPacket p;
    if (fedgate::parse_packet(buf.get(), static_cast<uint32_t>(size), p) != fedgate::DropReason::none) return 0;
    const auto in_frame = [&](uint32_t off, uint32_t len) { return off + len <= size; };
    if (!in_frame(p.l3_offset, 0)) std::abort();
    if (p.ether_type_host == 0x0800 || p.ether_type_host == 0x0806) {
        if (!in_frame(p.l3_offset, p.l3_len)) std::abort();
    }
    if (p.l4_offset != 0) {
        if (!in_frame(p.l4_offset, p.l4_len) || p.l4_offset < p.l3_offset + 20) std::abort();
        if (p.payload_offset < p.l4_offset || !in_frame(p.payload_offset, p.payload_len)) std::abort();
        if (p.payload_offset + p.payload_len != p.l4_offset + p.l4_len) std::abort();
    }
    return 0;
}
