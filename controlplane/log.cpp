// Registration of fedgate's log types with rte_log.
#include "controlplane/log.hpp"

namespace fedgate {

const LogTypes& log_types() {
    static const LogTypes types = [] {
        LogTypes t;
        const auto reg = [](const char* name, int fallback) {
            const int id = rte_log_register_type_and_pick_level(name, RTE_LOG_INFO);
            return id < 0 ? fallback : id;
        };
        t.gateway = reg("fedgate.gateway", t.gateway);
        t.dataplane = reg("fedgate.dataplane", t.dataplane);
        t.mgmt = reg("fedgate.mgmt", t.mgmt);
        return t;
    }();
    return types;
}

}  // namespace fedgate
