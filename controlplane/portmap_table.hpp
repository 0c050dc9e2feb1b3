// The port-map tables as the control threads own them: every import and export mapping, where it
// came from, checks for conflicts, the state file that makes run-time changes survive a restart,
// and publication to the data plane's PortMapView with RCU reclamation of replaced rules.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "controlplane/config.hpp"
#include "controlplane/mapping.hpp"
#include "dataplane/portmap.hpp"

struct rte_rcu_qsbr;

namespace fedgate {

// Where the run-time changes are kept (added mappings; config mappings deleted at run time), as
// one JSON document: the state file of a gateway alone, or the group's store ([cluster]).
class MapState {
public:
    virtual ~MapState() = default;
    // The document as last written; nullopt when there is none yet. Throws MapError when it cannot
    // be read.
    virtual std::optional<std::string> read() = 0;
    // Replaces it, durably, before the change is published. Throws MapError when it cannot
    // (nothing changed), MapConflict when another writer replaced it since this one last read.
    virtual void write(const std::string& text) = 0;
    virtual std::string where() const = 0;  // for messages: the file, or the store
};

// Another member of the group changed the mappings first: read them again and retry.
class MapConflict : public MapError {
public:
    explicit MapConflict(const std::string& what) : MapError("state", what) {}
};

// The state file: written whole to a temporary file, fsync'd, renamed over the old one.
std::unique_ptr<MapState> file_map_state(std::string path);

// One bit per port number: which are held. next_clear() finds a free one 64 ports at a time (a
// gateway whose automatic ports are all held asks for one at each tcp process that registers).
class PortBits {
public:
    bool test(uint16_t port) const { return (w_[port >> 6] >> (port & 63)) & 1; }
    void set(uint16_t port) { w_[port >> 6] |= uint64_t{1} << (port & 63); }
    void reset(uint16_t port) { w_[port >> 6] &= ~(uint64_t{1} << (port & 63)); }
    void reset() { w_.fill(0); }
    // The first port in [from, to] not held, or -1.
    int next_clear(uint16_t from, uint16_t to) const {
        for (uint32_t p = from; p <= to;) {
            const uint64_t free = ~w_[p >> 6] >> (p & 63);  // this word's ports from p on
            if (free != 0) {
                const uint32_t at = p + static_cast<uint32_t>(__builtin_ctzll(free));
                return at <= to ? static_cast<int>(at) : -1;
            }
            p = (p | 63) + 1;
        }
        return -1;
    }

private:
    std::array<uint64_t, 65536 / 64> w_{};
};

class PortMapTable {
public:
    // `state_file` holds the run-time changes; `rcu` may be null when no lcore reads the view (tests).
    PortMapTable(const Config& cfg, PortMapView& view, rte_rcu_qsbr* rcu, std::string state_file);
    PortMapTable(const Config& cfg, PortMapView& view, rte_rcu_qsbr* rcu, std::unique_ptr<MapState> state);
    ~PortMapTable();

    // Config mappings, less those deleted at run time, plus those added at run time, all published.
    // A state file that no longer fits the config (a peer gone, a port now taken) loses the entries
    // that do not fit, each named in `warnings`; an unreadable one is an error (throws). Called
    // again (another member of the group changed the state), it publishes only what differs: a
    // mapping that stays never blinks.
    void load(std::vector<std::string>* warnings);

    // `fedgatectl reload`: `next` becomes the config every later check reads. Its mappings replace
    // the config mappings (less those deleted at run time, which stay deleted); run-time and
    // automatic mappings stay unless their peer is gone or `next` maps their port, each one dropped
    // named in `dropped`. Rules are replaced in place, so a mapping that stays never blinks. Throws
    // MapError only when the state file cannot be rewritten; then nothing has changed.
    void reload(std::shared_ptr<const Config> next, std::vector<std::string>* dropped);

    // Each throws MapError naming the field when refused; then nothing has changed, on disk or in
    // the data plane. On success the change is on disk (fsync'd) before it is published.
    nlohmann::ordered_json add(const ImportMapping& m);
    nlohmann::ordered_json add(const ExportMapping& m);
    // kind: "import" or "export". Returns the deleted mappings (empty array: nothing matched).
    nlohmann::ordered_json remove(const std::string& kind, Proto proto, uint16_t port);
    nlohmann::ordered_json remove_cluster(const std::string& cluster, const std::optional<std::string>& kind);
    nlohmann::ordered_json list(const std::optional<std::string>& cluster) const;
    // nftables rules for a local node: a program there may be handed the peer's external
    // address:port, and the node's kernel sends it to this gateway's mapped port instead.
    std::string nft_rules(const std::optional<std::string>& cluster) const;

    // The management requests map_add, map_del, map_list.
    nlohmann::ordered_json handle(const nlohmann::ordered_json& request);

    // Mappings the gateway makes itself (source "auto", see auto_mapping.hpp): checked like any
    // other and published, but never written to the state file; they are remade when the processes
    // they serve register again. add_automatic throws MapError like add.
    void add_automatic(const ImportMapping& m);
    void add_automatic(const ExportMapping& m);
    // Removes the automatic mapping on that port; false if there is none (a person may have deleted it).
    bool remove_automatic(const std::string& kind, Proto proto, uint16_t port);
    // Whether any mapping of that kind holds the port.
    bool taken(const std::string& kind, Proto proto, uint16_t port) const;
    // The first port in [lo, hi] that no mapping of that kind holds, looking from `from` upwards
    // and wrapping round to `lo`; nullopt when every one is held. One lock for the whole look.
    std::optional<uint16_t> free_port(const std::string& kind, Proto proto, uint16_t lo, uint16_t hi, uint16_t from) const;

    std::size_t import_count() const;
    std::size_t export_count() const;

private:
    struct Key {
        std::string kind;
        Proto proto;
        uint16_t port;
        bool operator==(const Key&) const = default;
    };

    // Checks, persists, publishes: the one path for both kinds of add.
    template <typename M>
    nlohmann::ordered_json add_mapping(std::vector<M>& list, const M& m, const char* kind, MapSource source);
    void persist(const std::vector<ImportMapping>& imports, const std::vector<ExportMapping>& exports,
                 const std::vector<Key>& deleted) const {
        persist(*cfg_, imports, exports, deleted);
    }
    void persist(const Config& cfg, const std::vector<ImportMapping>& imports, const std::vector<ExportMapping>& exports,
                 const std::vector<Key>& deleted) const;
    void publish(const ImportMapping& m);
    void publish(const ExportMapping& m);
    void unpublish(const Key& k);
    void reclaim();  // waits for a grace period, then frees what was replaced
    // Publishes the new lists (over rules that stay, in place) and takes out keys no longer mapped.
    void install(std::vector<ImportMapping> imports, std::vector<ExportMapping> exports);
    // map_add / map_del once, then again after re-reading the state if another member got there first.
    template <typename F>
    nlohmann::ordered_json retrying(F&& op);
    nlohmann::ordered_json remove_if(const std::function<bool(const Key&, const std::string& cluster)>& match);

    // The config as started, or as the last reload left it (held_ keeps that one alive); read and
    // swapped under mu_ only.
    const Config* cfg_;
    std::shared_ptr<const Config> held_;
    PortMapView& view_;
    rte_rcu_qsbr* rcu_;
    std::unique_ptr<MapState> state_;
    mutable std::mutex mu_;
    std::vector<ImportMapping> imports_;
    std::vector<ExportMapping> exports_;
    std::vector<Key> deleted_config_;  // config mappings removed at run time
    // Which ports each kind holds, by protocol: taken() and add's duplicate check without a scan
    // of the lists (the gateway makes one automatic mapping per tcp process registering).
    PortBits held_ports_[2][2];  // [import, export][tcp, udp]
    PortBits& held(std::string_view kind, Proto proto) {
        return held_ports_[kind != "import"][static_cast<unsigned>(proto) & 1];
    }
    const PortBits& held(std::string_view kind, Proto proto) const {
        return held_ports_[kind != "import"][static_cast<unsigned>(proto) & 1];
    }
    void index_ports();  // again from the lists, after they are replaced
    std::vector<const ImportRule*> retired_imports_;
    std::vector<const ExportRule*> retired_exports_;
};

}  // namespace fedgate
