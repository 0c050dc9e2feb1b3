// fedgate-node's whole command line (parse, validate, talk to the gateway, print) behind one testable
// function.
#pragma once

#include <ostream>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace fedgate {

namespace cli {
struct CommandText;
}

// Runs `fedgate-node` with argv as main() receives it (argv[0] is ignored). Normal output goes to
// `out`, diagnostics to `err`. Returns the exit status: 0 success, 1 the gateway refused, answered
// negatively or did not reply (or the socket could not be set up), 2 bad command line (nothing was
// sent). `register` without --once keeps heartbeating until `stop_fd` becomes readable (main() makes
// it a pipe that SIGINT/SIGTERM write to; -1: never stops). FEDGATE_GATEWAY in the environment is the
// default for --gateway.
int run_fedgate_node(int argc, char** argv, std::ostream& out, std::ostream& err, int stop_fd = -1);

// fedgate-node's command table and global options, as what is generated from them (the bash completion)
// reads them: for tests that check nothing generated leaves a command or an option out.
std::vector<const cli::CommandText*> fedgate_node_commands();
boost::program_options::options_description fedgate_node_global_options();

}  // namespace fedgate
