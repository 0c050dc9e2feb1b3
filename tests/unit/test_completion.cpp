// The bash completion scripts of fedgatectl and fedgate-node name every command of their tables, and
// every option of each command, so a new command or option cannot be left out of them.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "tools/command_table.hpp"
#include "tools/fedgate_node_cli.hpp"
#include "tools/fedgatectl_cli.hpp"

namespace {

namespace po = boost::program_options;
using fedgate::cli::CommandText;

struct CliRun {
    int status;
    std::string out;
    std::string err;
};

template <class Fn>
CliRun run(Fn fn, std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    std::ostringstream out, err;
    const int status = fn(static_cast<int>(args.size()), argv.data(), out, err);
    return {status, out.str(), err.str()};
}

CliRun ctl(std::vector<std::string> args) {
    args.insert(args.begin(), "fedgatectl");
    return run([](int c, char** v, std::ostream& o, std::ostream& e) { return fedgate::run_fedgatectl(c, v, o, e); },
               args);
}

CliRun node(std::vector<std::string> args) {
    args.insert(args.begin(), "fedgate-node");
    return run([](int c, char** v, std::ostream& o, std::ostream& e) { return fedgate::run_fedgate_node(c, v, o, e); },
               args);
}

// 'a' 'b c' -> {"a", "b c"}
std::vector<std::string> quoted_words(const std::string& s) {
    std::vector<std::string> out;
    static const std::regex word("'([^']*)'");
    for (auto it = std::sregex_iterator(s.begin(), s.end(), word); it != std::sregex_iterator(); ++it)
        out.push_back((*it)[1]);
    return out;
}

// What the script's table function says of each command ("" for the global options).
struct Arm {
    std::vector<std::string> opts;
    std::vector<std::string> operands;
};

std::map<std::string, Arm> arms(const std::string& script) {
    std::map<std::string, Arm> out;
    static const std::regex arm(R"(^    '([^']*)'\) opts=\((.*)\) operands=\((.*)\) ;;$)");
    std::istringstream in(script);
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (std::regex_match(line, m, arm))
            out[m[1]] = Arm{quoted_words(m[2]), quoted_words(m[3])};
    }
    return out;
}

std::vector<std::string> command_list(const std::string& script) {
    static const std::regex list(R"(local -a commands=\((.*)\)\n)");
    std::smatch m;
    return std::regex_search(script, m, list) ? quoted_words(m[1]) : std::vector<std::string>{};
}

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

// `entries` has OPTION (a flag) or OPTION=KIND (a value), as `o` takes one or not.
void expect_option(const std::vector<std::string>& entries, const po::option_description& o, const std::string& where) {
    const std::string name = "--" + o.long_name();
    const bool takes_value = o.semantic()->max_tokens() > 0;
    const bool found = std::any_of(entries.begin(), entries.end(), [&](const std::string& e) {
        return takes_value ? e.starts_with(name + "=") : e == name;
    });
    EXPECT_TRUE(found) << where << ": no " << name << (takes_value ? "=..." : "") << " among its options";
}

// Every command of `rows` is in the script's command list and has its arm, with every visible option.
void expect_complete_script(const std::string& script, const std::vector<const CommandText*>& rows,
                            const po::options_description& globals) {
    const auto table = arms(script);
    const auto commands = command_list(script);
    ASSERT_EQ(commands.size(), rows.size()) << script;
    ASSERT_TRUE(table.count("")) << "no arm for the global options";
    for (const auto& o : globals.options())
        expect_option(table.at("").opts, *o, "global options");
    for (const CommandText* c : rows) {
        const std::string name(c->name);
        EXPECT_TRUE(has(commands, name)) << "command '" << name << "' is not in the command list";
        ASSERT_TRUE(table.count(name)) << "no arm for command '" << name << "'";
        po::options_description visible, hidden;
        po::positional_options_description positional;
        if (c->options)
            c->options(visible, hidden, positional);
        for (const auto& o : visible.options())
            expect_option(table.at(name).opts, *o, "command '" + name + "'");
        EXPECT_EQ(table.at(name).opts.size() >= visible.options().size(), true) << name;
    }
}

TEST(Completion, FedgatectlScriptNamesEveryCommandAndOption) {
    const CliRun r = ctl({"completion", "bash"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(r.err.empty()) << r.err;
    const auto rows = fedgate::fedgatectl_commands();
    ASSERT_GE(rows.size(), 15u);
    expect_complete_script(r.out, rows, fedgate::fedgatectl_global_options());
    EXPECT_NE(r.out.find("\ncomplete -F _fedgatectl fedgatectl\n"), std::string::npos);
}

TEST(Completion, FedgateNodeScriptNamesEveryCommandAndOption) {
    const CliRun r = node({"completion", "bash"});  // no --gateway needed
    ASSERT_EQ(r.status, 0) << r.err;
    const auto rows = fedgate::fedgate_node_commands();
    ASSERT_GE(rows.size(), 7u);
    expect_complete_script(r.out, rows, fedgate::fedgate_node_global_options());
    EXPECT_NE(r.out.find("\ncomplete -F _fedgate_node fedgate-node\n"), std::string::npos);
}

TEST(Completion, ValuesAndOperandsCompleteWithTheirChoicesOrFileNames) {
    const auto ctl_arms = arms(ctl({"completion", "bash"}).out);
    EXPECT_TRUE(has(ctl_arms.at("").opts, "--socket=FILE"));  // PATH: file names
    EXPECT_TRUE(has(ctl_arms.at("").opts, "--json"));
    EXPECT_TRUE(has(ctl_arms.at("").opts, "-j"));
    EXPECT_TRUE(has(ctl_arms.at("map add import").opts, "--proto=tcp|udp"));
    EXPECT_TRUE(has(ctl_arms.at("map add import").opts, "--cluster="));  // a value it cannot guess
    EXPECT_TRUE(has(ctl_arms.at("capture").opts, "-w=FILE"));
    EXPECT_TRUE(has(ctl_arms.at("capture").opts, "--write=FILE"));
    EXPECT_EQ(ctl_arms.at("map del").operands, (std::vector<std::string>{"import", "export"}));
    EXPECT_TRUE(ctl_arms.at("dir show").operands.empty());  // PID
    EXPECT_TRUE(ctl_arms.count("completion bash"));
    const auto node_arms = arms(node({"completion", "bash"}).out);
    EXPECT_TRUE(has(node_arms.at("connect").opts, "--transport=auto|rdma|tcp"));
    EXPECT_TRUE(has(node_arms.at("register").opts, "--transport=tcp|roce_v2"));
    EXPECT_TRUE(has(node_arms.at("register").opts, "--once"));
}

TEST(Completion, UnknownOrMissingShellIsABadCommandLine) {
    CliRun r = ctl({"completion", "zsh"});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("unknown command 'completion zsh' ('completion' needs one of: bash)"), std::string::npos)
        << r.err;
    EXPECT_TRUE(r.out.empty());
    r = node({"completion"});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("'completion' needs one of: bash"), std::string::npos) << r.err;
}

TEST(Completion, HelpListsTheCompletionCommand) {
    const CliRun r = ctl({"help"});
    EXPECT_NE(r.out.find("\n  completion bash "), std::string::npos) << r.out;
    const CliRun n = node({"--help"});
    EXPECT_NE(n.out.find("\n  completion bash "), std::string::npos) << n.out;
}

}  // namespace
