// libFuzzer target: the process directory as a gateway group keeps it in its store
// (controlplane/cluster.hpp: StoreDirectory's segments, SegmentIndex). The input is a run of values
// (a length byte, then that many bytes, repeated; 0xff: the rest) as a member would read them under
// <prefix>processes/, one key each, committed in that order. Each value decode_segment accepts must
// encode back to its bytes (a segment; a record of the earlier layout is JSON and is only read).
// Over all of them: resolve() returns only processes some value registers, each once; the index
// rebuilt from them hands out no segment twice and never more than there are; after each of those
// is erased, what is left resolves to the same processes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "controlplane/cluster.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace fedgate;
    std::vector<KvEntry> all;
    std::set<uint64_t> registered;
    std::size_t at = 0;
    while (at < size && all.size() < 64) {
        std::size_t len = data[at++];
        if (len == 0xff || at + len > size) len = size - at;
        KvEntry e;
        e.key = "/fedgate/fuzz/processes/" + std::to_string(all.size());
        e.value.assign(reinterpret_cast<const char*>(data + at), len);
        e.mod_revision = static_cast<int64_t>(all.size()) + 1;
        at += len;
        const auto ops = StoreDirectory::decode_segment(e.value);
        if (ops) {
            if (e.value.front() != '{' && StoreDirectory::encode_segment(*ops) != e.value) std::abort();
            for (const auto& op : *ops)
                if (!op.remove) registered.insert(op.process.record.pid.value);
        }
        all.push_back(std::move(e));
    }
    const auto read = StoreDirectory::resolve(StoreDirectory::read_segments(all));
    std::set<uint64_t> seen;
    for (const auto& p : read)
        if (!registered.contains(p.record.pid.value) || !seen.insert(p.record.pid.value).second) std::abort();

    SegmentIndex index;
    std::lock_guard lk(index.mu);
    index.rebuild(StoreDirectory::read_segments(all));
    if (!index.valid() || index.segments() > all.size()) std::abort();
    const auto dead = index.take_dead(all.size() + 1);
    if (dead.size() > index.segments() || !index.take_dead(all.size() + 1).empty()) std::abort();
    std::set<std::string> gone(dead.begin(), dead.end());
    if (gone.size() != dead.size()) std::abort();
    std::vector<KvEntry> left;
    for (const auto& e : all)
        if (!gone.contains(e.key)) left.push_back(e);
    for (const auto& k : dead) index.erased(k);
    const auto after = StoreDirectory::resolve(StoreDirectory::read_segments(left));
    if (after.size() != read.size()) std::abort();
    for (std::size_t i = 0; i < read.size(); ++i)
        if (!(after[i].record == read[i].record) || after[i].source != read[i].source ||
            after[i].control_port != read[i].control_port)
            std::abort();
    return 0;
}
