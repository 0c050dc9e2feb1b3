// fedgated: the gateway daemon. Reads one TOML config, checks it whole, then runs until SIGINT/SIGTERM
// (SIGHUP re-reads the config, as `fedgatectl reload` does).
#include <boost/program_options.hpp>

#include <atomic>
#include <csignal>
#include <iostream>

#include "controlplane/config.hpp"
#include "controlplane/gateway.hpp"
#include "controlplane/service.hpp"

namespace po = boost::program_options;

namespace {

std::atomic<bool> g_quit{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler stores to it");

extern "C" void on_signal(int) { g_quit.store(true); }
std::atomic<bool> g_reload{false};
extern "C" void on_hup(int) { g_reload.store(true); }

constexpr const char* kUsage = R"(usage: fedgated --config FILE [--check]

fedgate gateway daemon: runs the data plane on DPDK lcores and serves fedgatectl on the
management socket named in the config ([gateway] socket).

  --config FILE   the gateway's TOML config (see README.md, "Configuration")
  --check         parse and check the config, print a summary, and exit (0 good, 1 bad)
  --help          this text
  --version       print the version

SIGHUP re-reads the config and applies what can change while running, as `fedgatectl reload` does.
Under systemd (Type=notify) it reports READY once every port has link and the management socket
answers, STATUS lines, and feeds WatchdogSec= only while every data-plane worker's loop goes round;
with stderr on the journal, each log line is written once with its priority.
Exit codes: 0 clean stop (SIGINT/SIGTERM), 1 config or start-up error, 2 bad command line.
Example:
  fedgated --config /etc/fedgate/fedgate.toml
)";

}  // namespace

int main(int argc, char** argv) {
    po::options_description opts;
    opts.add_options()("config", po::value<std::string>())("check", po::bool_switch())("help", po::bool_switch())(
        "version", po::bool_switch());
    po::variables_map vm;
    try {
        po::store(po::command_line_parser(argc, argv).options(opts).run(), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        std::cerr << "fedgated: " << e.what() << "\n\n" << kUsage;
        return 2;
    }
    if (vm["help"].as<bool>()) {
        std::cout << kUsage;
        return 0;
    }
    if (vm["version"].as<bool>()) {
        std::cout << "fedgated " << FEDGATE_VERSION << "\n";
        return 0;
    }
    if (!vm.count("config")) {
        std::cerr << "fedgated: --config FILE is required\n\n" << kUsage;
        return 2;
    }

    // Under systemd with stderr on the journal: every line once, with its priority ("<N>" prefixes),
    // DPDK's log stream included (instead of its stderr + syslog copies).
    const bool journal = !vm["check"].as<bool>() && fedgate::log_to_journal_if_stderr_is_it();
    const char* err_prefix = journal ? "<3>" : "";
    const char* warn_prefix = journal ? "<4>" : "";
    fedgate::Config cfg;
    try {
        cfg = fedgate::load_config_file(vm["config"].as<std::string>());
    } catch (const fedgate::ConfigError& e) {
        std::cerr << err_prefix << "fedgated: config error: " << e.what() << "\n";
        return 1;
    }
    for (const std::string& w : cfg.warnings) std::cerr << warn_prefix << "fedgated: warning: " << w << "\n";
    if (vm["check"].as<bool>()) {
        std::cout << cfg.source << ": ok: party " << cfg.party << " (id " << cfg.party_id << "), " << cfg.ports.size()
                  << " ports, " << cfg.peers.size() << " peers\n";
        return 0;
    }

    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    struct sigaction hup {};
    hup.sa_handler = on_hup;
    sigemptyset(&hup.sa_mask);
    sigaction(SIGHUP, &hup, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    fedgate::Gateway gw(std::move(cfg));
    return gw.run(g_quit, &g_reload);
}
