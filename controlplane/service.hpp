// fedgated as a systemd service: readiness, status lines and the watchdog (sd_notify(3), the unit's
// Type=notify and WatchdogSec=), and log lines the journal files once each, under their priority.
//
// Without systemd ($NOTIFY_SOCKET, $WATCHDOG_USEC, $JOURNAL_STREAM unset) nothing here changes
// what fedgated does.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace fedgate {

// sd_notify(3) for this process; each call does nothing when systemd is not listening.
namespace service {
void ready(const std::string& status);  // READY=1 and STATUS=
void status(const std::string& text);   // STATUS=
void reloading(const std::string& status);
void stopping();
void watchdog();  // WATCHDOG=1
// The watchdog interval systemd asks this process to keep (WatchdogSec=), in microseconds; 0: none.
uint64_t watchdog_usec();
}  // namespace service

// The watchdog is fed only while the data plane makes progress: every worker's loop has gone round
// since the last look. A stuck lcore (a spin on a lock, a PMD that never returns) stops the feeding,
// and systemd restarts the service.
class ProgressCheck {
public:
    // The first worker whose loop count has not moved since the previous call, or -1 when every one
    // has (the first call, and a change in the number of workers, count as progress). Remembers the
    // counts.
    int stalled(std::span<const uint64_t> loops);

private:
    std::vector<uint64_t> last_;
};

// When stderr is the journal ($JOURNAL_STREAM names it), DPDK's log stream writes each message to
// stderr once with its syslog priority as a "<N>" prefix, which journald files as the priority —
// instead of DPDK's default, which writes stderr and syslog(3), both of which reach the journal.
// Returns whether it did. Call before rte_eal_init, so the EAL's own messages go the same way.
bool log_to_journal_if_stderr_is_it();

// The line the journal stream gets for one rte_log message at `rte_level` (RTE_LOG_EMERG=1 ..
// RTE_LOG_DEBUG=8): "<level-1>" before each line of `text`. Exposed for tests.
std::string journal_lines(uint32_t rte_level, std::string_view text);

}  // namespace fedgate
