// The command-table machinery fedgatectl and fedgate-node share (see command_table.hpp).
#include "tools/command_table.hpp"

#include <climits>

namespace fedgate::cli {
namespace {

// Guessing would let `--sock X` through boost while our command-word scan does not know it.
constexpr int kParseStyle = po::command_line_style::unix_style & ~po::command_line_style::allow_guessing;

// "map add import" -> {"map", "add", "import"}
std::vector<std::string> words(std::string_view s) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < s.size()) {
        size_t j = s.find(' ', i);
        if (j == std::string_view::npos)
            j = s.size();
        if (j > i)
            out.emplace_back(s.substr(i, j - i));
        i = j + 1;
    }
    return out;
}

std::vector<std::string> example_lines(const CommandText& c) {
    std::vector<std::string> out;
    std::string_view rest = c.example;
    while (!rest.empty()) {
        const size_t nl = rest.find('\n');
        out.emplace_back(rest.substr(0, nl));
        rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    }
    return out;
}

// The command's options (and operands) as boost reads them; `visible` is what help shows.
struct CommandOptions {
    po::options_description visible;
    po::options_description hidden;
    po::positional_options_description positional;
};

CommandOptions command_options(const CommandText& c) {
    CommandOptions o{po::options_description(std::string(c.name) + " options"), {}, {}};
    if (c.options)
        c.options(o.visible, o.hidden, o.positional);
    return o;
}

}  // namespace

// ---- text ------------------------------------------------------------------------------------

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
    std::string out;
    for (const auto& p : parts) {
        if (!out.empty())
            out += sep;
        out += p;
    }
    return out;
}

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

// ---- usage and help --------------------------------------------------------------------------

std::string usage_line(const Program& p, const CommandText& c) {
    std::string s = "usage: " + std::string(p.name) + " ";
    if (p.help_shows_globals || c.name != "help")
        s += std::string(p.global_synopsis) + " ";
    s += c.name;
    if (!c.operands.empty())
        s += " " + std::string(c.operands);
    if (!c.option_synopsis.empty())
        s += " " + std::string(c.option_synopsis);
    return s;
}

void print_command_usage(std::ostream& out, const Program& p, const CommandText& c) {
    out << usage_line(p, c) << "\n";
    const auto visible = command_options(c).visible;
    if (!visible.options().empty())
        out << "\n" << visible;
}

void print_usage_and_options(std::ostream& out, const Program& p, const CommandText& c,
                             const po::options_description* globals) {
    out << usage_line(p, c) << "\n\n" << c.summary << "\n";
    po::options_description both;
    const auto visible = command_options(c).visible;
    if (!visible.options().empty())
        both.add(visible);
    if (globals)
        both.add(*globals);
    if (!both.options().empty())
        out << both;
}

void print_example_lines(std::ostream& out, const CommandText& c) {
    for (const auto& e : example_lines(c))
        out << "  " << e << "\n";
}

void print_command_examples(std::ostream& out, const CommandText& c) {
    out << "\n" << (example_lines(c).size() == 1 ? "example:" : "examples:") << "\n";
    print_example_lines(out, c);
}

void print_help_hint(std::ostream& out, const Program& p) {
    out << "\n'" << p.name << " help COMMAND' shows a command's options.\n";
}

// ---- reading the command line ----------------------------------------------------------------

namespace {

// Index of the first argument that is not a global option (or its value): where the command starts.
// Read as boost reads `globals`, so this scan and the parser agree on every global option.
size_t skip_global_options(const std::vector<std::string>& args, const po::options_description& globals) {
    size_t i = 0;
    while (i < args.size()) {
        const std::string& a = args[i];
        const bool is_long = a.starts_with("--");
        const size_t eq = a.find('=');
        std::string key;  // "--name" and "--name=VALUE" look up "name"; "-n" looks up "-n", as boost does
        if (is_long)
            key = a.substr(2, eq == std::string::npos ? eq : eq - 2);
        else if (a.size() == 2 && a[0] == '-')
            key = a;
        const po::option_description* o = key.empty() ? nullptr : globals.find_nothrow(key, false);
        if (!o)
            break;
        const bool takes_value = o->semantic()->max_tokens() > 0;
        const bool joined = is_long && eq != std::string::npos;
        if (joined && !takes_value)
            break;  // "--json=1": the parser says what is wrong with it
        i += takes_value && !joined ? 2 : 1;
    }
    return i;
}

// A command line without a command word, read against the global options alone.
po::variables_map parse_global_options(const std::vector<std::string>& args, const po::options_description& globals) {
    po::variables_map vm;
    try {
        po::store(po::command_line_parser(args)
                      .options(globals)
                      .positional(po::positional_options_description{})
                      .style(kParseStyle)
                      .run(),
                  vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw UsageError(e.what());
    }
    return vm;
}

// `args` (the command's words taken out) read against the global options and `c`'s options and
// operands; the error names the command and carries it, also for an operand it does not take.
po::variables_map parse_command_options(const std::vector<std::string>& args, const CommandText& c,
                                        const po::options_description& globals) {
    auto [visible, hidden, positional] = command_options(c);
    if (positional.max_total_count() != UINT_MAX) {
        hidden.add_options()("unexpected", po::value<std::vector<std::string>>(), "");
        positional.add("unexpected", -1);
    }
    po::options_description all;
    all.add(globals).add(visible).add(hidden);

    po::variables_map vm;
    try {
        po::store(po::command_line_parser(args).options(all).positional(positional).style(kParseStyle).run(), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        throw UsageError(std::string(c.name) + ": " + e.what(), &c);
    }
    if (vm.count("unexpected"))
        throw UsageError(std::string(c.name) + ": unexpected argument " +
                             in_quotes(vm["unexpected"].as<std::vector<std::string>>().front()),
                         &c);
    return vm;
}

// The longest name in `rows` whose words start at args[at]: its row and word count.
struct CommandMatch {
    size_t row;
    size_t words;
};

std::optional<CommandMatch> match_command(std::span<const CommandText* const> rows,
                                          const std::vector<std::string>& args, size_t at) {
    std::optional<CommandMatch> best;
    for (size_t i = 0; i < rows.size(); ++i) {
        const auto w = words(rows[i]->name);
        if (at + w.size() <= args.size() && std::equal(w.begin(), w.end(), args.begin() + static_cast<long>(at)) &&
            (!best || w.size() > best->words))
            best = CommandMatch{i, w.size()};
    }
    return best;
}

// args[at...] name no command. When they start several commands ("map", "map add") and --help
// follows, returns those words; otherwise throws the UsageError that says what may follow them.
std::string group_for_help(std::span<const CommandText* const> rows, const std::vector<std::string>& args,
                           size_t at) {
    // The longest run of words that starts some longer command, and the words that may follow it.
    size_t prefix_words = 0;
    std::vector<std::string> subs;
    for (const CommandText* row : rows) {
        const auto w = words(row->name);
        size_t n = 0;
        while (n + 1 < w.size() && at + n < args.size() && w[n] == args[at + n])
            ++n;
        if (n == 0 || n < prefix_words)
            continue;
        if (n > prefix_words) {
            prefix_words = n;
            subs.clear();
        }
        if (std::find(subs.begin(), subs.end(), w[n]) == subs.end())
            subs.push_back(w[n]);
    }
    if (subs.empty())
        throw UsageError("unknown command " + in_quotes(args[at]));
    const std::string group =
        join({args.begin() + static_cast<long>(at), args.begin() + static_cast<long>(at + prefix_words)}, " ");
    const auto rest = args.begin() + static_cast<long>(at + prefix_words);
    if (std::find_if(rest, args.end(), [](const std::string& a) { return a == "--help" || a == "-h"; }) != args.end())
        return group;
    if (rest != args.end() && !rest->starts_with("-"))
        throw UsageError("unknown command " + in_quotes(group + " " + *rest) + " (" + in_quotes(group) +
                         " needs one of: " + join(subs, ", ") + ")");
    throw UsageError(in_quotes(group) + " needs one of: " + join(subs, ", "));
}

}  // namespace

namespace detail {

ParsedLine parse_command_line(std::vector<std::string> args, std::span<const CommandText* const> rows,
                              const po::options_description& globals) {
    ParsedLine line;
    const size_t at = skip_global_options(args, globals);
    if (at >= args.size() || args[at].starts_with("-")) {
        line.vm = parse_global_options(args, globals);
        return line;
    }
    const auto match = match_command(rows, args, at);
    if (!match) {
        line.group = group_for_help(rows, args, at);
        return line;
    }
    line.row = match->row;
    args.erase(args.begin() + static_cast<long>(at), args.begin() + static_cast<long>(at + match->words));
    line.vm = parse_command_options(args, *rows[match->row], globals);
    return line;
}

}  // namespace detail

// ---- option values ---------------------------------------------------------------------------

std::vector<std::string> arguments(int argc, char** argv) {
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i)
        args.emplace_back(argv[i]);
    return args;
}

std::optional<std::string> opt(const po::variables_map& vm, const char* name) {
    if (!vm.count(name))
        return std::nullopt;
    return vm[name].as<std::string>();
}

std::string need(const po::variables_map& vm, std::string_view cmd, const char* name, std::string_view what) {
    auto v = opt(vm, name);
    if (!v)
        throw UsageError(std::string(cmd) + ": missing --" + name + " (" + std::string(what) + ")");
    return *v;
}

}  // namespace fedgate::cli
