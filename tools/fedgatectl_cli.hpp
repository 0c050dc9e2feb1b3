// fedgatectl's whole command line (parse, validate, call fedgated, print) behind one testable function.
#pragma once

#include <ostream>
#include <vector>

#include <boost/program_options/options_description.hpp>

namespace fedgate {

namespace cli {
struct CommandText;
}

// Runs `fedgatectl` with argv as main() receives it (argv[0] is ignored). Normal output goes to
// `out`, diagnostics to `err`. Returns the exit status: 0 success, 1 the daemon could not be reached
// or refused the request (or ping got no reply), 2 bad command line (nothing was sent).
// FEDGATE_SOCKET in the environment is the default for --socket.
int run_fedgatectl(int argc, char** argv, std::ostream& out, std::ostream& err);

// fedgatectl's command table and global options, as what is generated from them (the bash completion)
// reads them: for tests that check nothing generated leaves a command or an option out.
std::vector<const cli::CommandText*> fedgatectl_commands();
boost::program_options::options_description fedgatectl_global_options();

}  // namespace fedgate
