// libFuzzer target: the session-event channel between a group's members (controlplane/session_sync.hpp).
// The input is a run of datagrams (a length byte, then that many bytes, repeated) as they would
// arrive on a member's sync address. Each one SyncDatagram::decode accepts must encode back to the
// very bytes it came from (session events and the warm cache's records alike); each is applied to
// one SessionMirror, which must never hold more than its bound, and whose counters must only grow.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "controlplane/session_sync.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace fedgate;
    constexpr std::size_t kBound = 64;
    SessionMirror mirror(kBound);
    std::size_t at = 0;
    while (at < size) {
        // A length byte of 0xff means "the rest", so a whole datagram of any size can be the input.
        std::size_t len = data[at++];
        if (len == 0xff || at + len > size) len = size - at;
        const std::span<const uint8_t> dgram(data + at, len);
        at += len;
        std::string why;
        const auto d = SyncDatagram::decode(dgram, &why);
        if (!d) {
            if (why.empty()) std::abort();  // a refusal always says why
            continue;
        }
        const std::vector<uint8_t> again = d->encode();
        if (again.size() != dgram.size() || !std::equal(again.begin(), again.end(), dgram.begin())) std::abort();
        const MirrorCounters before = mirror.counters();
        (void)mirror.apply(*d);
        const MirrorCounters& after = mirror.counters();
        if (mirror.total() > kBound) std::abort();
        if (after.events_received < before.events_received || after.events_missed < before.events_missed ||
            after.duplicates < before.duplicates || after.full < before.full)
            std::abort();
    }
    return 0;
}
