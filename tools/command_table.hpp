// The command-table machinery fedgatectl and fedgate-node share: a row per command, the usage and
// help texts built from the rows, and reading a command line against them with Boost.Program_options.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <boost/program_options.hpp>

namespace fedgate::cli {

namespace po = boost::program_options;

// Adds a command's options to `visible`; positional operands are declared in `hidden` and `positional`.
using OptionsFn = void (*)(po::options_description& visible, po::options_description& hidden,
                           po::positional_options_description& positional);

// What a command row says about itself: everything but its handler, so the texts need no template.
struct CommandText {
    std::string_view name;             // the words typed: "status", "map add import"
    std::string_view operands;         // positional arguments: "ADDR"
    std::string_view option_synopsis;  // "[--count N] [--timeout-ms MS]"
    std::string_view summary;          // one line in the command list
    std::string_view example;          // full command lines, one per line
    OptionsFn options;                 // null: the command has no options or operands
};

// One row of a CLI's command table; a new command is one more row.
template <class Invocation>
struct Command : CommandText {
    int (*run)(const Invocation&);
};

// How a CLI shows itself in usage lines and messages.
struct Program {
    std::string_view name;             // "fedgatectl"
    std::string_view global_synopsis;  // the global options in usage lines: "[--socket PATH] [--json]"
    bool help_shows_globals = true;    // false: `help`, which reads none, shows none in its usage line
};

// Bad command line, found before anything is sent: exit 2 with the usage of `command` (null: the
// general usage). Handlers throw it without a command; their dispatcher knows which one ran.
struct UsageError : std::runtime_error {
    explicit UsageError(const std::string& what, const CommandText* c = nullptr)
        : std::runtime_error(what), command(c) {}
    const CommandText* command;
};

// ---- text ------------------------------------------------------------------------------------

std::string join(const std::vector<std::string>& parts, std::string_view sep);
std::string in_quotes(const std::string& s);  // 'like this', for a value in a message

// ---- usage and help --------------------------------------------------------------------------

// "usage: PROGRAM GLOBALS NAME OPERANDS OPTIONS".
std::string usage_line(const Program& p, const CommandText& c);

// The usage line and, when the command has any, its options: what a usage error prints.
void print_command_usage(std::ostream& out, const Program& p, const CommandText& c);

// The head of a command's help: the usage line, its summary, then its options followed by `globals`
// (null: none) in one block, so boost aligns their columns alike.
void print_usage_and_options(std::ostream& out, const Program& p, const CommandText& c,
                             const po::options_description* globals);

// The command's example lines, indented, one per line.
void print_example_lines(std::ostream& out, const CommandText& c);

// The tail of a command's help: "example:" (or "examples:") and its example lines, after a blank line.
void print_command_examples(std::ostream& out, const CommandText& c);

// "'PROGRAM help COMMAND' shows a command's options.", after a blank line.
void print_help_hint(std::ostream& out, const Program& p);

// "usage: PROGRAM GLOBALS COMMAND [ARGS]" and one line per command: name, operands and summary.
template <class Cmd, std::size_t N>
void print_commands(std::ostream& out, const Program& p, const std::array<Cmd, N>& commands) {
    out << "usage: " << p.name << " " << p.global_synopsis << " COMMAND [ARGS]\n\ncommands:\n";
    std::vector<std::string> left;
    std::size_t width = 0;
    for (const CommandText& c : commands) {
        left.push_back(c.operands.empty() ? std::string(c.name) : std::string(c.name) + " " + std::string(c.operands));
        width = std::max(width, left.back().size());
    }
    for (std::size_t i = 0; i < N; ++i) {
        left[i].resize(width, ' ');
        out << "  " << left[i] << "  " << commands[i].summary << "\n";
    }
}

// Every command's examples under "examples:", after a blank line.
template <class Cmd, std::size_t N>
void print_all_examples(std::ostream& out, const std::array<Cmd, N>& commands) {
    out << "\nexamples:\n";
    for (const CommandText& c : commands)
        print_example_lines(out, c);
}

// "PROGRAM: what", then the usage of `c`, or (null) the command list. Returns 2, the exit status of
// a bad command line.
template <class Cmd, std::size_t N>
int usage_error(std::ostream& err, const Program& p, const std::array<Cmd, N>& commands, const std::string& what,
                const CommandText* c) {
    err << p.name << ": " << what << "\n";
    if (c) {
        print_command_usage(err, p, *c);
    } else {
        print_commands(err, p, commands);
        print_help_hint(err, p);
    }
    return 2;
}

// ---- reading the command line ----------------------------------------------------------------

// The command named exactly `name`, or null.
template <class Cmd, std::size_t N>
const Cmd* command_named(const std::array<Cmd, N>& commands, std::string_view name) {
    const auto it = std::find_if(commands.begin(), commands.end(), [&](const Cmd& c) { return c.name == name; });
    return it == commands.end() ? nullptr : &*it;
}

// What a command line asks for, once read against the command table.
template <class Cmd>
struct CommandLine {
    const Cmd* command = nullptr;  // null: no command word (`vm` holds the global options alone), or `group`
    po::variables_map vm;          // the global options and the command's own
    std::string group;             // set for "WORDS --help" where WORDS start several commands ("map add")
};

namespace detail {
struct ParsedLine {
    std::optional<std::size_t> row;
    po::variables_map vm;
    std::string group;
};
ParsedLine parse_command_line(std::vector<std::string> args, std::span<const CommandText* const> rows,
                              const po::options_description& globals);
}  // namespace detail

// Reads `args` against `globals` and the command table: the global options, then the longest command
// name whose words follow them ("map add import" wins over a future "map"), then that command's
// options and operands (with the global options again). Throws UsageError, carrying the command
// when the mistake is in its options or operands.
template <class Cmd, std::size_t N>
CommandLine<Cmd> parse_command_line(std::vector<std::string> args, const std::array<Cmd, N>& commands,
                                    const po::options_description& globals) {
    std::array<const CommandText*, N> rows;
    std::transform(commands.begin(), commands.end(), rows.begin(), [](const CommandText& c) { return &c; });
    detail::ParsedLine p = detail::parse_command_line(std::move(args), rows, globals);
    return {p.row ? &commands[*p.row] : nullptr, std::move(p.vm), std::move(p.group)};
}

// ---- option values ---------------------------------------------------------------------------

// argv as main() receives it, without the program name.
std::vector<std::string> arguments(int argc, char** argv);

// The named option's value, or nothing when it was not given.
std::optional<std::string> opt(const po::variables_map& vm, const char* name);

// The named option's value; a missing one is "CMD: missing --NAME (WHAT)".
std::string need(const po::variables_map& vm, std::string_view cmd, const char* name, std::string_view what);

}  // namespace fedgate::cli
