// The README and the guides in docs/ are part of the contract: the README's example config must
// load and show the real defaults, its drop-reason table must list exactly the reasons the data
// plane counts, with the same words, and every fedgatectl command line and config key the docs
// quote must be one the code accepts (keys come from config.cpp itself: config_keys.hpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "controlplane/config.hpp"
#include "dataplane/drop_reason.hpp"
#include "tests/unit/config_keys.hpp"
#include "tools/fedgatectl_cli.hpp"

namespace fedgate {
namespace {

std::string readme() {
    std::ifstream in(FEDGATE_SOURCE_DIR "/README.md");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string example_config(const std::string& md) {
    const auto section = md.find("## Configuration");
    const auto start = md.find("```toml\n", section);
    const auto end = md.find("```", start + 8);
    if (section == std::string::npos || start == std::string::npos || end == std::string::npos) return {};
    return md.substr(start + 8, end - start - 8);
}

// The docs print peer keys that fedgated refuses as real ones (Reference.EveryKeyPrintedInTheDocsIsRefused):
// a doc's config is checked with keys of its own in their place.
std::string with_own_keys(const std::string& text) {
    return std::regex_replace(text, std::regex(R"re(key = "[0-9a-fA-F]{32,}")re"),
                              "key = \"0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0\"");
}

TEST(Docs, ReadmeExampleConfigLoadsAndShowsTheRealDefaults) {
    const std::string text = example_config(readme());
    ASSERT_FALSE(text.empty()) << "README.md has no ```toml block under ## Configuration";
    const Config c = parse_config(with_own_keys(text), "README.md");
    EXPECT_EQ(c.party, "alpha");
    EXPECT_EQ(c.socket, kDefaultSocket);
    EXPECT_EQ(c.state_dir, kDefaultStateDir);
    ASSERT_EQ(c.ports.size(), 2u);
    ASSERT_EQ(c.peers.size(), 1u);
    // The [dataplane] table says "defaults shown": hold it to that.
    const DataplaneSettings d;
    EXPECT_EQ(c.dataplane.idle_spin, d.idle_spin);
    EXPECT_EQ(c.dataplane.idle_polls_before_sleep, d.idle_polls_before_sleep);
    EXPECT_EQ(c.dataplane.idle_yield_us, d.idle_yield_us);
    EXPECT_EQ(c.dataplane.idle_sleep_max_us, d.idle_sleep_max_us);
    EXPECT_EQ(c.dataplane.mbufs, d.mbufs);
    EXPECT_EQ(c.dataplane.punt_ring, d.punt_ring);
    EXPECT_EQ(c.dataplane.neighbour_capacity, d.neighbour_capacity);
    EXPECT_EQ(c.dataplane.neighbour_reachable_s, d.neighbour_reachable_s);
    EXPECT_EQ(c.dataplane.neighbour_stale_s, d.neighbour_stale_s);
    EXPECT_EQ(c.dataplane.arp_probe_interval_ms, d.arp_probe_interval_ms);
    EXPECT_EQ(c.dataplane.arp_probes, d.arp_probes);
    // So does [nat].
    const NatSettings n;
    EXPECT_EQ(c.nat.port_lo, n.port_lo);
    EXPECT_EQ(c.nat.port_hi, n.port_hi);
    EXPECT_EQ(c.nat.max_sessions, n.max_sessions);
    EXPECT_EQ(c.nat.tcp_established_s, n.tcp_established_s);
    EXPECT_EQ(c.nat.tcp_transitory_s, n.tcp_transitory_s);
    EXPECT_EQ(c.nat.tcp_closing_s, n.tcp_closing_s);
    EXPECT_EQ(c.nat.udp_s, n.udp_s);
    // And [resolve].
    const ResolveSettings r;
    EXPECT_EQ(c.resolve.port, r.port);
    EXPECT_EQ(c.resolve.announce, r.announce);
    EXPECT_EQ(c.resolve.cache_capacity, r.cache_capacity);
    EXPECT_EQ(c.resolve.pending_queries, r.pending_queries);
    EXPECT_EQ(c.resolve.query_timeout_ms, r.query_timeout_ms);
    EXPECT_EQ(c.resolve.negative_ttl_ms, r.negative_ttl_ms);
    EXPECT_EQ(c.resolve.answer_ttl_s, r.answer_ttl_s);
    EXPECT_EQ(c.resolve.heartbeat_ms, r.heartbeat_ms);
    EXPECT_EQ(c.resolve.heartbeat_timeout_ms, r.heartbeat_timeout_ms);
    EXPECT_EQ(c.resolve.broadcast_rate, r.broadcast_rate);
    EXPECT_EQ(c.resolve.broadcast_burst, r.broadcast_burst);
    EXPECT_EQ(c.resolve.requester_broadcast_rate, r.requester_broadcast_rate);
    EXPECT_EQ(c.resolve.requester_broadcast_burst, r.requester_broadcast_burst);
    EXPECT_EQ(c.resolve.sync_interval_ms, r.sync_interval_ms);
    EXPECT_EQ(c.resolve.max_clock_skew_ms, r.max_clock_skew_ms);
    EXPECT_EQ(c.resolve.announce_window, r.announce_window);
    EXPECT_EQ(c.resolve.retransmit_ms, r.retransmit_ms);
    EXPECT_EQ(c.imports.size(), 1u);
    EXPECT_EQ(c.exports.size(), 1u);
}

TEST(Docs, ReadmeDropReasonTableMatchesTheCode) {
    const std::string md = readme();
    // The reasons' rows: those of the section "## Counters and drop reasons" whose first cell is
    // one name in backticks (a table elsewhere may start its rows with an option in backticks).
    constexpr std::string_view kSection = "## Counters and drop reasons";
    std::size_t rows = 0;
    bool in_section = false, seen_section = false;
    std::istringstream lines(md);
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind("## ", 0) == 0) {
            in_section = line == kSection;
            seen_section = seen_section || in_section;
        }
        if (in_section && line.rfind("| `", 0) == 0 && line.find("` | ") != std::string::npos) ++rows;
    }
    ASSERT_TRUE(seen_section) << "README.md has no section \"" << kSection << "\"";
    for (std::size_t i = 0; i < kDropReasonCount; ++i) {
        const std::string row =
            "| `" + std::string(kDropReasonNames[i]) + "` | " + std::string(kDropReasonHelp[i]) + " |";
        EXPECT_NE(md.find(row), std::string::npos) << "README.md lacks the row: " << row;
    }
    EXPECT_EQ(rows, kDropReasonCount) << "README.md lists reasons the code does not have";
}


// ---- the guides in docs/ ---------------------------------------------------------------------------

struct CodeBlock {
    std::string lang;  // what follows the opening ```
    std::string text;
    int line;  // of the opening fence
};

std::vector<CodeBlock> code_blocks(const std::string& md) {
    std::vector<CodeBlock> out;
    std::istringstream in(md);
    bool open = false;
    int n = 0;
    for (std::string line; std::getline(in, line);) {
        ++n;
        if (line.rfind("```", 0) != 0 && line.find_first_not_of(' ') != std::string::npos &&
            line.substr(line.find_first_not_of(' ')).rfind("```", 0) == 0)
            line = line.substr(line.find_first_not_of(' '));  // a fence indented inside a list item
        if (line.rfind("```", 0) == 0) {
            if (!open) out.push_back({line.substr(3), "", n});
            open = !open;
            continue;
        }
        if (open) out.back().text += line + "\n";
    }
    return out;
}

// The text outside code blocks: where inline `spans` live.
std::string prose(const std::string& md) {
    std::string out;
    std::istringstream in(md);
    bool open = false;
    for (std::string line; std::getline(in, line);) {
        const auto first = line.find_first_not_of(' ');
        if (first != std::string::npos && line.compare(first, 3, "```") == 0) {
            open = !open;
            continue;
        }
        if (!open) out += line + "\n";
    }
    return out;
}

std::vector<std::string> inline_spans(const std::string& text) {
    std::vector<std::string> out;
    static const std::regex span("`([^`\n]+)`");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), span); it != std::sregex_iterator(); ++it)
        out.push_back((*it)[1]);
    return out;
}

// Shell words of a command line, up to a comment, pipe, redirection or list operator; quotes are
// removed. Enough for the command lines a guide shows.
std::vector<std::string> shell_words(const std::string& line) {
    std::vector<std::string> words;
    std::string w;
    bool in_word = false;
    for (std::size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (c == '\'' || c == '"') {
            const auto close = line.find(c, i + 1);
            w += line.substr(i + 1, close - i - 1);
            in_word = true;
            i = close == std::string::npos ? line.size() : close;
        } else if (c == ' ' || c == '\t') {
            if (in_word) words.push_back(w);
            w.clear();
            in_word = false;
        } else if (!in_word && (c == '#' || c == '|' || c == '>' || c == ';' || c == '&' || c == '<')) {
            break;
        } else {
            w += c;
            in_word = true;
        }
    }
    if (in_word) words.push_back(w);
    return words;
}

struct CtlRun {
    int status;
    std::string err;
};

CtlRun run_ctl(std::vector<std::string> args) {
    args.insert(args.begin(), "fedgatectl");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::ostringstream out, err;
    const int status = run_fedgatectl(static_cast<int>(args.size()), argv.data(), out, err);
    return {status, err.str()};
}

// The fedgatectl command lines of a markdown text: each code-block line that runs fedgatectl
// (after an optional "$ " or "sudo "), and each inline span that starts with "fedgatectl ".
struct CtlLine {
    std::string text;
    bool in_block;
};

std::vector<CtlLine> fedgatectl_lines(const std::string& md) {
    std::vector<CtlLine> out;
    for (const CodeBlock& b : code_blocks(md)) {
        std::istringstream in(b.text);
        for (std::string line; std::getline(in, line);) {
            auto words = shell_words(line);
            while (!words.empty() && (words[0] == "$" || words[0] == "sudo")) words.erase(words.begin());
            if (!words.empty() && words[0] == "fedgatectl") out.push_back({line, true});
        }
    }
    for (const std::string& s : inline_spans(prose(md)))
        if (s.rfind("fedgatectl ", 0) == 0) out.push_back({s, false});
    return out;
}

// Runs a documented command line against a socket where no daemon listens: a good command line
// gets as far as connecting (status 1, "cannot reach"), a bad one is refused before (status 2).
// An inline span may also name a command or a group bare (`fedgatectl map`, `fedgatectl capture`):
// then `fedgatectl help WORDS` must know it.
// A synopsis (`fedgatectl map del import|export --proto tcp|udp`, `map nft [--cluster C]`) is no
// command line: only its leading command words are checked, with `fedgatectl help WORDS`.
bool is_synopsis(const std::string& text) {
    std::istringstream in(text);
    for (std::string t; in >> t;)
        if (t[0] == '[' || (t.size() > 1 && t.find('|') != std::string::npos)) return true;
    return false;
}

void expect_fedgatectl_line_valid(const CtlLine& line, const std::filesystem::path& dir) {
    auto words = shell_words(line.text);
    while (!words.empty() && (words[0] == "$" || words[0] == "sudo")) words.erase(words.begin());
    ASSERT_FALSE(words.empty());
    words.erase(words.begin());  // "fedgatectl"
    if (is_synopsis(line.text)) {
        std::vector<std::string> help{"help"};
        for (const std::string& w : words) {
            const bool placeholder = std::none_of(w.begin(), w.end(), ::islower);
            if (w[0] == '[' || w[0] == '-' || w.find('|') != std::string::npos || placeholder) break;
            help.push_back(w);
        }
        if (help.size() > 1) {
            EXPECT_EQ(run_ctl(help).status, 0) << "no such command: " << line.text;
        }
        return;
    }
    if (!line.in_block && !words.empty() &&
        std::none_of(words.begin(), words.end(), [](const std::string& w) { return w.rfind("-", 0) == 0; })) {
        std::vector<std::string> help{"help"};
        help.insert(help.end(), words.begin(), words.end());
        if (run_ctl(help).status == 0) return;  // a command or group, named bare
    }
    // The daemon writes a capture's file, and fedgatectl removes any old one first: not here.
    for (std::size_t i = 0; i + 1 < words.size(); ++i)
        if (words[i] == "-w" || words[i] == "--write") words[i + 1] = (dir / "capture.pcap").string();
    words.push_back("--socket");
    words.push_back((dir / "no-daemon.sock").string());
    const CtlRun r = run_ctl(words);
    if (r.status == 0) return;  // help
    EXPECT_EQ(r.status, 1) << "refused as a bad command line: " << line.text << "\n" << r.err;
    EXPECT_NE(r.err.find("cannot reach"), std::string::npos) << line.text << "\n" << r.err;
}

std::vector<std::string> doc_files() {
    std::vector<std::string> out{"README.md"};
    for (const auto& e : std::filesystem::directory_iterator(FEDGATE_SOURCE_DIR "/docs"))
        if (e.path().extension() == ".md") out.push_back("docs/" + e.path().filename().string());
    std::sort(out.begin() + 1, out.end());
    return out;
}

TEST(Docs, OperatorsGuideFedgatectlCommandsExist) {
    const std::string md = testing::read_source_file("docs/operators-guide.md");
    const auto lines = fedgatectl_lines(md);
    // The guide walks through most commands: finding few means the extraction broke.
    ASSERT_GE(lines.size(), 20u);
    const auto dir = std::filesystem::temp_directory_path() / ("fedgate-docs-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    for (const CtlLine& l : lines) {
        SCOPED_TRACE("docs/operators-guide.md: " + l.text);
        expect_fedgatectl_line_valid(l, dir);
    }
    std::filesystem::remove_all(dir);
}

TEST(Docs, FedgatectlCommandsInEveryDocExist) {
    const auto dir = std::filesystem::temp_directory_path() / ("fedgate-docs-all-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    for (const std::string& f : doc_files())
        for (const CtlLine& l : fedgatectl_lines(testing::read_source_file(f))) {
            SCOPED_TRACE(f + ": " + l.text);
            expect_fedgatectl_line_valid(l, dir);
        }
    std::filesystem::remove_all(dir);
}

// Config in a guide: a whole config (one with [gateway]) must load; a fragment may only use known
// keys; a key named in the text as `[table] key` (or `[[table]] key`), or a table as `[table]`,
// must exist, with the right brackets.
std::size_t check_config_quotes(const std::string& file, const std::string& md) {
    const auto& schema = testing::config_schema();
    std::size_t checked = 0;
    for (const CodeBlock& b : code_blocks(md)) {
        if (b.lang != "toml") continue;
        const std::string where = file + ":" + std::to_string(b.line);
        if (b.text.find("[gateway]") != std::string::npos) {
            EXPECT_NO_THROW(parse_config(with_own_keys(b.text), where)) << "the config block at " << where << " does not load";
            ++checked;
        }
        for (const auto& use : testing::toml_key_uses(b.text, /*commented=*/false)) {
            EXPECT_TRUE(schema.known(use.table, use.key))
                << where << "+" << use.line << ": " << use.table << "." << use.key << " is not a config key";
            ++checked;
        }
    }
    static const std::regex ref(R"(^(\[\[?)([a-z_]+)(\]\]?)(?: ([a-z_]+))?$)");
    for (const std::string& s : inline_spans(prose(md))) {
        std::smatch m;
        if (!std::regex_match(s, m, ref)) continue;
        const std::string table = m[2], key = m[4];
        EXPECT_TRUE(schema.by_table.count(table)) << file << ": `" << s << "`: no table " << table;
        if (!schema.by_table.count(table)) continue;
        EXPECT_EQ(std::string(m[1]) + table + std::string(m[3]), schema.header(table))
            << file << ": `" << s << "`: write it " << schema.header(table);
        if (!key.empty()) {
            EXPECT_TRUE(schema.known(table, key)) << file << ": `" << s << "` is not a config key";
        }
        ++checked;
    }
    return checked;
}

TEST(Docs, OperatorsGuideConfigKeysExist) {
    const std::string md = testing::read_source_file("docs/operators-guide.md");
    std::size_t whole = 0;
    for (const CodeBlock& b : code_blocks(md))
        if (b.lang == "toml" && b.text.find("[gateway]") != std::string::npos) ++whole;
    EXPECT_EQ(whole, 2u) << "the guide shows party alpha's and party beta's configs in full";
    EXPECT_GE(check_config_quotes("docs/operators-guide.md", md), 60u);
}

TEST(Docs, ConfigQuotedInEveryDocExists) {
    for (const std::string& f : doc_files()) check_config_quotes(f, testing::read_source_file(f));
}

}  // namespace
}  // namespace fedgate
