// A bash completion script generated from a CLI's command table: command words (several per
// command), each command's options, the choices of option values and operands written as a|b, and
// file names for PATH and FILE values. `fedgatectl completion bash` and `fedgate-node completion
// bash` print it (a command row each: another shell would be another row); the build installs it
// under share/bash-completion/completions.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <ostream>
#include <span>

#include "tools/command_table.hpp"

namespace fedgate::cli {

// The script for `p`: one function, _PROGRAM (dashes as underscores), and `complete -F` for it. It
// needs bash alone, not the bash-completion package.
void print_bash_completion(std::ostream& out, const Program& p, std::span<const CommandText* const> rows,
                           const po::options_description& globals);

template <class Cmd, std::size_t N>
void print_bash_completion(std::ostream& out, const Program& p, const std::array<Cmd, N>& commands,
                           const po::options_description& globals) {
    std::array<const CommandText*, N> rows;
    std::transform(commands.begin(), commands.end(), rows.begin(), [](const CommandText& c) { return &c; });
    print_bash_completion(out, p, std::span<const CommandText* const>(rows), globals);
}

}  // namespace fedgate::cli
