// fedgate's rte_log types. One logger for the whole daemon: DPDK's.
#pragma once

#include <rte_log.h>

namespace fedgate {

struct LogTypes {
    int gateway = RTE_LOGTYPE_USER1;
    int dataplane = RTE_LOGTYPE_USER2;
    int mgmt = RTE_LOGTYPE_USER3;
};

// Registers "fedgate.gateway", "fedgate.dataplane", "fedgate.mgmt" (idempotent).
const LogTypes& log_types();

}  // namespace fedgate

#define FG_LOG(level, type, fmt, ...) \
    rte_log(RTE_LOG_##level, ::fedgate::log_types().type, "fedgate.%s: " fmt "\n", #type, ##__VA_ARGS__)
