// Port-map table: checks, persistence (write, fsync, rename, fsync dir) and RCU publication.
#include "controlplane/portmap_table.hpp"

#include <fcntl.h>
#include <rte_byteorder.h>
#include <rte_rcu_qsbr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <type_traits>

namespace fedgate {
namespace {

constexpr int kStateVersion = 1;

L4Proto l4(Proto p) { return p == Proto::tcp ? L4Proto::tcp : L4Proto::udp; }

void write_all(int fd, const std::string& data, const std::string& path) {
    for (std::size_t off = 0; off < data.size();) {
        const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw MapError("state", "cannot write " + path + ": " + std::strerror(errno));
        off += static_cast<std::size_t>(n);
    }
}

}  // namespace

class FileMapState final : public MapState {
public:
    explicit FileMapState(std::string path) : path_(std::move(path)) {}
    std::optional<std::string> read() override {
        std::ifstream in(path_);
        if (!in) return std::nullopt;
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }
    void write(const std::string& text) override;
    std::string where() const override { return path_; }

private:
    std::string path_;
};

// Write a temporary file, fsync it, rename it over the old one, fsync the directory: after a crash
// the file is the old one or the new one, whole.
void FileMapState::write(const std::string& text) {
    const std::string tmp = path_ + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw MapError("state", "cannot write " + tmp + ": " + std::strerror(errno));
    try {
        write_all(fd, text, tmp);
        if (::fsync(fd) != 0) throw MapError("state", "cannot fsync " + tmp + ": " + std::strerror(errno));
    } catch (...) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    ::close(fd);
    if (::rename(tmp.c_str(), path_.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw MapError("state", "cannot replace " + path_ + ": " + std::strerror(err));
    }
    const std::string dir = std::filesystem::path(path_).parent_path().string();
    if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

std::unique_ptr<MapState> file_map_state(std::string path) { return std::make_unique<FileMapState>(std::move(path)); }

PortMapTable::PortMapTable(const Config& cfg, PortMapView& view, rte_rcu_qsbr* rcu, std::string state_file)
    : PortMapTable(cfg, view, rcu, file_map_state(std::move(state_file))) {}

PortMapTable::PortMapTable(const Config& cfg, PortMapView& view, rte_rcu_qsbr* rcu, std::unique_ptr<MapState> state)
    : cfg_(&cfg), view_(view), rcu_(rcu), state_(std::move(state)) {}

PortMapTable::~PortMapTable() {
    // The data plane is stopped by now: take every rule back out and free it.
    for (const auto& m : imports_) unpublish({"import", m.proto, m.port});
    for (const auto& m : exports_) unpublish({"export", m.proto, m.port});
    for (const ImportRule* r : retired_imports_) delete r;
    for (const ExportRule* r : retired_exports_) delete r;
}

void PortMapTable::publish(const ImportMapping& m) {
    const ImportRule* old = view_.publish(l4(m.proto), rte_cpu_to_be_16(m.port), new ImportRule(make_rule(m, *cfg_)));
    if (old != nullptr) retired_imports_.push_back(old);
}

void PortMapTable::publish(const ExportMapping& m) {
    const ExportRule* old = view_.publish(l4(m.proto), rte_cpu_to_be_16(m.port), new ExportRule(make_rule(m, *cfg_)));
    if (old != nullptr) retired_exports_.push_back(old);
}

void PortMapTable::unpublish(const Key& k) {
    if (k.kind == "import") {
        if (const ImportRule* old = view_.publish(l4(k.proto), rte_cpu_to_be_16(k.port), static_cast<const ImportRule*>(nullptr)))
            retired_imports_.push_back(old);
    } else if (const ExportRule* old = view_.publish(l4(k.proto), rte_cpu_to_be_16(k.port), static_cast<const ExportRule*>(nullptr))) {
        retired_exports_.push_back(old);
    }
}

void PortMapTable::reclaim() {
    if (retired_imports_.empty() && retired_exports_.empty()) return;
    // Every lcore passes a quiescent state (or is offline) before an old rule can go.
    if (rcu_ != nullptr) rte_rcu_qsbr_synchronize(rcu_, RTE_QSBR_THRID_INVALID);
    for (const ImportRule* r : retired_imports_) delete r;
    for (const ExportRule* r : retired_exports_) delete r;
    retired_imports_.clear();
    retired_exports_.clear();
}

void PortMapTable::persist(const Config& cfg, const std::vector<ImportMapping>& imports,
                           const std::vector<ExportMapping>& exports, const std::vector<Key>& deleted) const {
    nlohmann::ordered_json added = nlohmann::ordered_json::array();
    for (const auto& m : imports)
        if (m.source == MapSource::cli) added.push_back(to_json(m, cfg));
    for (const auto& m : exports)
        if (m.source == MapSource::cli) added.push_back(to_json(m));
    nlohmann::ordered_json gone = nlohmann::ordered_json::array();
    for (const Key& k : deleted) gone.push_back({{"kind", k.kind}, {"proto", proto_name(k.proto)}, {"port", k.port}});
    state_->write(nlohmann::ordered_json{{"version", kStateVersion}, {"added", added}, {"deleted", gone}}.dump(2) + "\n");
}

void PortMapTable::install(std::vector<ImportMapping> imports, std::vector<ExportMapping> exports) {
    // Publishing over a rule replaces it at once; only keys no longer mapped are taken out.
    const auto kept = [](const auto& list, const auto& m) {
        return std::any_of(list.begin(), list.end(), [&](const auto& o) { return o.proto == m.proto && o.port == m.port; });
    };
    for (const auto& m : imports_)
        if (!kept(imports, m)) unpublish({"import", m.proto, m.port});
    for (const auto& m : exports_)
        if (!kept(exports, m)) unpublish({"export", m.proto, m.port});
    imports_ = std::move(imports);
    exports_ = std::move(exports);
    index_ports();
    for (const auto& m : imports_) publish(m);
    for (const auto& m : exports_) publish(m);
    reclaim();
}

void PortMapTable::index_ports() {
    for (auto& kind : held_ports_)
        for (auto& ports : kind) ports.reset();
    for (const auto& m : imports_) held("import", m.proto).set(m.port);
    for (const auto& m : exports_) held("export", m.proto).set(m.port);
}

void PortMapTable::load(std::vector<std::string>* warnings) {
    std::lock_guard lk(mu_);
    std::vector<std::string> ignored;
    if (warnings == nullptr) warnings = &ignored;
    // Automatic mappings serve live processes: they stay unless the config or the state takes their port.
    std::vector<ImportMapping> auto_imports, imports = cfg_->imports;
    std::vector<ExportMapping> auto_exports, exports = cfg_->exports;
    std::copy_if(imports_.begin(), imports_.end(), std::back_inserter(auto_imports), [](const auto& m) { return m.source == MapSource::automatic; });
    std::copy_if(exports_.begin(), exports_.end(), std::back_inserter(auto_exports), [](const auto& m) { return m.source == MapSource::automatic; });
    std::vector<Key> deleted;

    const std::string where = state_->where();
    if (const std::optional<std::string> text = state_->read()) {
        nlohmann::ordered_json state;
        try {
            state = nlohmann::ordered_json::parse(*text);
        } catch (const nlohmann::json::exception& e) {
            throw MapError("state", where + " is not valid JSON: " + e.what());
        }
        if (!state.is_object() || state.value("version", 0) != kStateVersion)
            throw MapError("state", where + ": unknown format (want version " + std::to_string(kStateVersion) + ")");
        for (const auto& d : state.value("deleted", nlohmann::ordered_json::array())) {
            try {
                const Key k{d.at("kind").get<std::string>(), proto_from_json(d, "proto"), port_from_json(d, "port")};
                const auto gone = [&](const auto& m) { return m.proto == k.proto && m.port == k.port; };
                if (k.kind == "import") std::erase_if(imports, gone);
                if (k.kind == "export") std::erase_if(exports, gone);
                deleted.push_back(k);
            } catch (const std::exception& e) {
                warnings->push_back(where + ": skipped a deleted entry: " + e.what());
            }
        }
        for (const auto& a : state.value("added", nlohmann::ordered_json::array())) {
            try {
                const std::string kind = a.at("kind").get<std::string>();
                if (kind == "import") {
                    ImportMapping m = import_from_json(a);
                    m.source = MapSource::cli;
                    check_mapping(m, *cfg_);
                    if (std::any_of(imports.begin(), imports.end(), [&](const auto& o) { return o.proto == m.proto && o.port == m.port; }))
                        throw MapError("port", mapping_key("import", m.proto, m.port) + " is now mapped by the config");
                    imports.push_back(m);
                } else if (kind == "export") {
                    ExportMapping m = export_from_json(a);
                    m.source = MapSource::cli;
                    check_mapping(m, *cfg_);
                    if (std::any_of(exports.begin(), exports.end(), [&](const auto& o) { return o.proto == m.proto && o.port == m.port; }))
                        throw MapError("port", mapping_key("export", m.proto, m.port) + " is now mapped by the config");
                    exports.push_back(m);
                } else {
                    throw MapError("kind", "'" + kind + "' must be import or export");
                }
            } catch (const std::exception& e) {
                warnings->push_back(where + ": dropped a run-time mapping that no longer fits: " + e.what());
            }
        }
    }
    const auto keep = [&](auto& list, const auto& autos, const char* kind) {
        for (const auto& m : autos) {
            if (std::any_of(list.begin(), list.end(), [&](const auto& o) { return o.proto == m.proto && o.port == m.port; }))
                warnings->push_back("dropped the automatic mapping " + mapping_key(kind, m.proto, m.port) + ": the config maps that port now");
            else
                list.push_back(m);
        }
    };
    keep(imports, auto_imports, "import");
    keep(exports, auto_exports, "export");
    deleted_config_ = std::move(deleted);
    install(std::move(imports), std::move(exports));
}

void PortMapTable::reload(std::shared_ptr<const Config> next, std::vector<std::string>* dropped) {
    std::vector<std::string> ignored;
    if (dropped == nullptr) dropped = &ignored;
    std::lock_guard lk(mu_);
    const Config& c = *next;
    const auto deleted = [&](const char* kind, const auto& m) {
        return std::find(deleted_config_.begin(), deleted_config_.end(), Key{kind, m.proto, m.port}) != deleted_config_.end();
    };
    std::vector<ImportMapping> imports;
    std::vector<ExportMapping> exports;
    for (const auto& m : c.imports)
        if (!deleted("import", m)) imports.push_back(m);
    for (const auto& m : c.exports)
        if (!deleted("export", m)) exports.push_back(m);
    bool cli_dropped = false;
    const auto carry = [&](auto& list, const auto& old, const char* kind) {
        for (const auto& m : old) {
            if (m.source == MapSource::config) continue;
            std::string why;
            if (std::any_of(list.begin(), list.end(), [&](const auto& o) { return o.proto == m.proto && o.port == m.port; }))
                why = "the config maps that port now";
            else
                try {
                    check_mapping(m, c);
                } catch (const MapError& e) {
                    why = e.what();
                }
            if (why.empty()) {
                list.push_back(m);
                continue;
            }
            dropped->push_back(std::string(source_name(m.source)) + " mapping " + mapping_key(kind, m.proto, m.port) +
                               " dropped: " + why);
            cli_dropped = cli_dropped || m.source == MapSource::cli;
        }
    };
    carry(imports, imports_, "import");
    carry(exports, exports_, "export");
    if (cli_dropped) persist(c, imports, exports, deleted_config_);  // may throw: nothing has changed yet

    held_ = std::move(next);
    cfg_ = held_.get();
    install(std::move(imports), std::move(exports));
}

template <typename M>
nlohmann::ordered_json PortMapTable::add_mapping(std::vector<M>& list, const M& m_in, const char* kind, MapSource source) {
    M m = m_in;
    m.source = source;
    std::lock_guard lk(mu_);
    check_mapping(m, *cfg_);  // under the lock: a reload may swap the config
    if (held(kind, m.proto).test(m.port))
        for (const auto& o : list)
            if (o.proto == m.proto && o.port == m.port)
                throw MapError("port", mapping_key(kind, m.proto, m.port) + " is already mapped (cluster " + o.cluster + ")");
    if (source == MapSource::cli) {
        // On disk (or in the group's store) before it is published: persist the list it will be.
        auto candidate = list;
        candidate.push_back(m);
        if constexpr (std::is_same_v<M, ImportMapping>)
            persist(candidate, exports_, deleted_config_);
        else
            persist(imports_, candidate, deleted_config_);
        list = std::move(candidate);
    } else {
        // Automatic mappings are not persisted: no copy of the list (a member taking over a group's
        // directory makes one per tcp process, thousands at once).
        list.push_back(m);
    }
    held(kind, m.proto).set(m.port);
    publish(m);
    reclaim();
    if constexpr (std::is_same_v<M, ImportMapping>)
        return to_json(m, *cfg_);
    else
        return to_json(m);
}

nlohmann::ordered_json PortMapTable::add(const ImportMapping& m) { return add_mapping(imports_, m, "import", MapSource::cli); }
nlohmann::ordered_json PortMapTable::add(const ExportMapping& m) { return add_mapping(exports_, m, "export", MapSource::cli); }
void PortMapTable::add_automatic(const ImportMapping& m) { add_mapping(imports_, m, "import", MapSource::automatic); }
void PortMapTable::add_automatic(const ExportMapping& m) { add_mapping(exports_, m, "export", MapSource::automatic); }

bool PortMapTable::remove_automatic(const std::string& kind, Proto proto, uint16_t port) {
    const Key key{kind, proto, port};
    std::lock_guard lk(mu_);
    const auto gone = [&](const auto& m) { return m.source == MapSource::automatic && m.proto == proto && m.port == port; };
    const std::size_t n = kind == "import" ? std::erase_if(imports_, gone) : std::erase_if(exports_, gone);
    if (n == 0) return false;
    held(kind, proto).reset(port);
    unpublish(key);  // nothing to persist: automatic mappings are not in the state file
    reclaim();
    return true;
}

bool PortMapTable::taken(const std::string& kind, Proto proto, uint16_t port) const {
    std::lock_guard lk(mu_);
    return held(kind, proto).test(port);
}

std::optional<uint16_t> PortMapTable::free_port(const std::string& kind, Proto proto, uint16_t lo, uint16_t hi,
                                                uint16_t from) const {
    if (lo > hi) return std::nullopt;
    const uint16_t first = from < lo || from > hi ? lo : from;
    std::lock_guard lk(mu_);
    const PortBits& used = held(kind, proto);
    // From `from` to hi, then from lo up to it.
    int port = used.next_clear(first, hi);
    if (port < 0 && first > lo) port = used.next_clear(lo, static_cast<uint16_t>(first - 1));
    if (port < 0) return std::nullopt;
    return static_cast<uint16_t>(port);
}

nlohmann::ordered_json PortMapTable::remove_if(const std::function<bool(const Key&, const std::string&)>& match) {
    std::lock_guard lk(mu_);
    std::vector<ImportMapping> imports;
    std::vector<ExportMapping> exports;
    std::vector<Key> deleted = deleted_config_, gone;
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& m : imports_) {
        const Key k{"import", m.proto, m.port};
        if (!match(k, m.cluster)) {
            imports.push_back(m);
            continue;
        }
        out.push_back(to_json(m, *cfg_));
        gone.push_back(k);
        if (m.source == MapSource::config) deleted.push_back(k);
    }
    for (const auto& m : exports_) {
        const Key k{"export", m.proto, m.port};
        if (!match(k, m.cluster)) {
            exports.push_back(m);
            continue;
        }
        out.push_back(to_json(m));
        gone.push_back(k);
        if (m.source == MapSource::config) deleted.push_back(k);
    }
    if (gone.empty()) return {{"deleted", out}};
    const bool only_automatic = std::all_of(out.begin(), out.end(), [](const auto& j) { return j["source"] == "auto"; });
    if (!only_automatic) persist(imports, exports, deleted);
    imports_ = std::move(imports);
    exports_ = std::move(exports);
    index_ports();
    deleted_config_ = std::move(deleted);
    for (const Key& k : gone) unpublish(k);
    reclaim();
    return {{"deleted", out}};
}

nlohmann::ordered_json PortMapTable::remove(const std::string& kind, Proto proto, uint16_t port) {
    if (kind != "import" && kind != "export") throw MapError("kind", "'" + kind + "' must be import or export");
    nlohmann::ordered_json r = remove_if([&](const Key& k, const std::string&) { return k == Key{kind, proto, port}; });
    if (r["deleted"].empty()) throw MapError("port", mapping_key(kind.c_str(), proto, port) + " is not mapped");
    return r;
}

nlohmann::ordered_json PortMapTable::remove_cluster(const std::string& cluster, const std::optional<std::string>& kind) {
    if (kind && *kind != "import" && *kind != "export") throw MapError("kind", "'" + *kind + "' must be import or export");
    nlohmann::ordered_json r = remove_if([&](const Key& k, const std::string& c) { return c == cluster && (!kind || k.kind == *kind); });
    if (r["deleted"].empty()) throw MapError("cluster", "'" + cluster + "' has no mappings" + (kind ? " of kind " + *kind : ""));
    return r;
}

nlohmann::ordered_json PortMapTable::list(const std::optional<std::string>& cluster) const {
    std::lock_guard lk(mu_);
    nlohmann::ordered_json imports = nlohmann::ordered_json::array(), exports = nlohmann::ordered_json::array();
    for (const auto& m : imports_)
        if (!cluster || m.cluster == *cluster) imports.push_back(to_json(m, *cfg_));
    for (const auto& m : exports_)
        if (!cluster || m.cluster == *cluster) exports.push_back(to_json(m));
    return {{"imports", imports}, {"exports", exports}};
}

std::string PortMapTable::nft_rules(const std::optional<std::string>& cluster) const {
    std::lock_guard lk(mu_);
    const PortConfig* in = cfg_->port(PortRoleCfg::internal);
    std::ostringstream o;
    o << "# fedgate: node-side rules for party " << cfg_->party << (cluster ? ", cluster " + *cluster : std::string())
      << ".\n# On a node: nft -f FILE. A program there may then dial the peer's external address and port;\n"
      << "# the node sends it to this gateway's mapped port instead.\n"
      << "table ip fedgate\ndelete table ip fedgate\n"
      << "table ip fedgate {\n    chain output {\n        type nat hook output priority -100; policy accept;\n";
    for (const ImportMapping& m : imports_) {
        if (cluster && m.cluster != *cluster) continue;
        const PeerConfig* peer = cfg_->peer(m.peer);
        if (peer == nullptr || in == nullptr) continue;
        o << "        ip daddr " << format_ipv4(peer->address) << ' ' << proto_name(m.proto) << " dport " << m.peer_port
          << " dnat to " << format_ipv4(in->address.addr) << ':' << m.port << " comment \"import " << m.cluster
          << "\"\n";
    }
    o << "    }\n}\n";
    return o.str();
}

std::size_t PortMapTable::import_count() const {
    std::lock_guard lk(mu_);
    return imports_.size();
}

std::size_t PortMapTable::export_count() const {
    std::lock_guard lk(mu_);
    return exports_.size();
}

template <typename F>
nlohmann::ordered_json PortMapTable::retrying(F&& op) {
    // A group's members write the one document with compare-and-swap: the loser reads the winner's
    // change and tries again, so a map add on one member never undoes another member's.
    for (int attempt = 0;; ++attempt) {
        try {
            return op();
        } catch (const MapConflict&) {
            if (attempt == 3) throw;
            load(nullptr);
        }
    }
}

nlohmann::ordered_json PortMapTable::handle(const nlohmann::ordered_json& req) {
    if (!req.is_object() || !req.contains("cmd") || !req["cmd"].is_string()) throw MapError("cmd", "missing");
    const std::string cmd = req["cmd"].get<std::string>();
    const auto opt_string = [&](const char* name) -> std::optional<std::string> {
        if (!req.contains(name)) return std::nullopt;
        if (!req[name].is_string()) throw MapError(name, "must be a string");
        return req[name].get<std::string>();
    };
    if (cmd == "map_list") return list(opt_string("cluster"));
    if (cmd == "map_nft") return {{"ruleset", nft_rules(opt_string("cluster"))}};
    if (cmd == "map_add") {
        const auto kind = opt_string("kind");
        if (kind == "import") return retrying([&, m = import_from_json(req)] { return add(m); });
        if (kind == "export") return retrying([&, m = export_from_json(req)] { return add(m); });
        throw MapError("kind", "must be import or export");
    }
    if (cmd == "map_del") {
        if (const auto cluster = opt_string("cluster"))
            return retrying([&, c = *cluster, k = opt_string("kind")] { return remove_cluster(c, k); });
        const auto kind = opt_string("kind");
        if (!kind) throw MapError("kind", "missing (or give cluster)");
        return retrying([&, k = *kind, proto = proto_from_json(req, "proto"), port = port_from_json(req, "port")] {
            return remove(k, proto, port);
        });
    }
    throw MapError("cmd", "'" + cmd + "' is not a mapping command");
}

}  // namespace fedgate
