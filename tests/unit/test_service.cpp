// fedgated under systemd: the watchdog's progress check and the journal's priority prefixes
// (tests/integration/notify.sh runs the daemon against a stand-in notify socket).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "controlplane/service.hpp"

namespace {

using fedgate::ProgressCheck;

TEST(ProgressCheck, FeedsWhileEveryWorkerGoesRoundAndNamesTheFirstThatDoesNot) {
    ProgressCheck c;
    EXPECT_EQ(c.stalled(std::vector<uint64_t>{10, 20}), -1) << "the first look is progress";
    EXPECT_EQ(c.stalled(std::vector<uint64_t>{11, 25}), -1);
    EXPECT_EQ(c.stalled(std::vector<uint64_t>{12, 25}), 1) << "worker 1 stood still";
    EXPECT_EQ(c.stalled(std::vector<uint64_t>{12, 26}), 0) << "now worker 0 did";
    EXPECT_EQ(c.stalled(std::vector<uint64_t>{12, 26}), 0) << "both: the first is named";
    EXPECT_EQ(c.stalled(std::vector<uint64_t>{13, 27}), -1) << "both moved again";
    EXPECT_EQ(c.stalled(std::vector<uint64_t>{13, 27, 0}), -1) << "another number of workers starts over";
    EXPECT_EQ(c.stalled(std::vector<uint64_t>{14, 28, 0}), 2);
}

TEST(JournalLines, EachLineGetsTheSyslogPriorityOfItsRteLogLevel) {
    EXPECT_EQ(fedgate::journal_lines(1, "down\n"), "<0>down\n");      // RTE_LOG_EMERG -> LOG_EMERG
    EXPECT_EQ(fedgate::journal_lines(4, "bad\n"), "<3>bad\n");        // ERR
    EXPECT_EQ(fedgate::journal_lines(5, "hm\n"), "<4>hm\n");          // WARNING
    EXPECT_EQ(fedgate::journal_lines(7, "ready\n"), "<6>ready\n");    // INFO
    EXPECT_EQ(fedgate::journal_lines(8, "x\n"), "<7>x\n");            // DEBUG
    EXPECT_EQ(fedgate::journal_lines(7, "a\nb\n"), "<6>a\n<6>b\n") << "each line of a message";
    EXPECT_EQ(fedgate::journal_lines(7, "no newline"), "<6>no newline\n");
    EXPECT_EQ(fedgate::journal_lines(0, "odd\n"), "<6>odd\n") << "a level out of range is info";
    EXPECT_EQ(fedgate::journal_lines(7, ""), "");
}

TEST(ServiceNotify, WithoutSystemdNothingIsSentAndNoWatchdogIsAsked) {
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    fedgate::service::ready("x");  // no socket: nothing to do, no error
    EXPECT_EQ(fedgate::service::watchdog_usec(), 0u);
    ::setenv("WATCHDOG_USEC", "400000", 1);
    EXPECT_EQ(fedgate::service::watchdog_usec(), 400000u);
    ::setenv("WATCHDOG_USEC", "nonsense", 1);
    EXPECT_EQ(fedgate::service::watchdog_usec(), 0u);
    ::unsetenv("WATCHDOG_USEC");
}

}  // namespace
