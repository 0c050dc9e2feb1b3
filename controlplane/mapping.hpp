// Port mappings as the control threads handle them: checks against the config, JSON for the
// management socket and the state file, and the immutable rules the data plane reads.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

#include "controlplane/config.hpp"
#include "dataplane/portmap.hpp"

namespace fedgate {

// A refused mapping: `field` names the input at fault; what() reads "FIELD: problem".
class MapError : public std::runtime_error {
public:
    MapError(std::string field, const std::string& what) : std::runtime_error(field + ": " + what), field_(std::move(field)) {}
    const std::string& field() const { return field_; }

private:
    std::string field_;
};

// Each mapping on its own against the config (peer known, node inside an internal subnet, ports
// outside the NAT range, ...). Conflicts between mappings are the table's business.
void check_mapping(const ImportMapping& m, const Config& c);
void check_mapping(const ExportMapping& m, const Config& c);

nlohmann::ordered_json to_json(const ImportMapping& m, const Config& c);
nlohmann::ordered_json to_json(const ExportMapping& m);
// From a management request or the state file; field errors as MapError. `source` is not read.
ImportMapping import_from_json(const nlohmann::ordered_json& j);
ExportMapping export_from_json(const nlohmann::ordered_json& j);
Proto proto_from_json(const nlohmann::ordered_json& j, const char* field);
uint16_t port_from_json(const nlohmann::ordered_json& j, const char* field);

ImportRule make_rule(const ImportMapping& m, const Config& c);
ExportRule make_rule(const ExportMapping& m, const Config& c);

// "import tcp/8080" — how a mapping is named in messages.
std::string mapping_key(const char* kind, Proto proto, uint16_t port);

}  // namespace fedgate
