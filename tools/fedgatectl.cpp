// fedgatectl: the operator's command line for a running fedgated (see fedgatectl_cli.hpp).
#include <iostream>

#include "tools/fedgatectl_cli.hpp"

int main(int argc, char** argv) { return fedgate::run_fedgatectl(argc, argv, std::cout, std::cerr); }
