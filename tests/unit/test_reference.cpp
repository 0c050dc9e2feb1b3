// The config reference cannot drift from the parser: the keys are read out of config.cpp
// (config_keys.hpp), proven against the running parser, and then every one must be documented in
// fedgated(8), shown in the example config, and no document may name a key the parser refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "controlplane/config.hpp"
#include "tests/unit/config_keys.hpp"

namespace fedgate {
namespace {

using testing::config_schema;
using testing::ConfigSchema;
using testing::read_source_file;

// A small valid config, as sections, so one key at a time can be set to something else.
struct Section {
    std::string table;
    bool array;
    std::vector<std::string> lines;
};

std::vector<Section> minimal_config() {
    return {
        {"gateway", false, {"party = \"alpha\"", "party_id = 1"}},
        {"eal", false, {"args = [\"-l\", \"0\"]"}},
        {"port", true, {"name = \"internal\"", "role = \"internal\"", "device = \"net_null0\"", "address = \"198.18.1.1/24\""}},
        {"port", true, {"name = \"external\"", "role = \"external\"", "device = \"net_null1\"", "address = \"198.19.0.1/24\""}},
        {"peer", true, {"party = \"beta\"", "party_id = 2", "address = \"198.19.0.2\"", "key = \"00112233445566778899aabbccddeeff\""}},
        {"import", true, {"cluster = \"c1\"", "proto = \"tcp\"", "port = 8080", "peer = \"beta\"", "peer_port = 9000"}},
        {"export", true, {"cluster = \"c1\"", "proto = \"tcp\"", "port = 9001", "node = \"198.18.1.20:50051\""}},
    };
}

std::string render(const std::string& top_line, const std::vector<Section>& sections) {
    std::string s = top_line.empty() ? "" : top_line + "\n";
    for (const Section& sec : sections) {
        s += (sec.array ? "[[" : "[") + sec.table + (sec.array ? "]]\n" : "]\n");
        for (const std::string& l : sec.lines) s += l + "\n";
    }
    return s;
}

// The minimal config with TABLE.KEY (or the top-level key TABLE, when key is empty) set to `value`.
std::string config_with(const ConfigSchema& schema, const std::string& table, const std::string& key,
                        const std::string& value) {
    std::vector<Section> sections = minimal_config();
    if (key.empty()) {
        std::erase_if(sections, [&](const Section& s) { return s.table == table; });
        return render(table + " = " + value, sections);
    }
    auto it = std::find_if(sections.begin(), sections.end(), [&](const Section& s) { return s.table == table; });
    if (it == sections.end()) {
        sections.push_back({table, schema.by_table.at(table).array, {}});
        it = sections.end() - 1;
    }
    std::erase_if(it->lines, [&](const std::string& l) { return l.rfind(key + " =", 0) == 0; });
    it->lines.push_back(key + " = " + value);
    return render("", sections);
}

// What the parser names a key in its errors: "nat.udp_s", "port[0].name", "gateway".
std::string error_name(const ConfigSchema& schema, const std::string& table, const std::string& key) {
    if (key.empty()) return table;
    return table + (schema.by_table.at(table).array ? "[0]." : ".") + key;
}

// No key of any table takes a date-time, so this is the wrong type for every one of them.
constexpr const char* kWrongType = "1979-05-27T07:32:00Z";

TEST(Reference, ConfigKeysAreExtractedFromConfigCpp) {
    const ConfigSchema& s = config_schema();
    // The tables the top level accepts, each read by its own TableReader; at least those the
    // design has always had, so an extraction that silently finds nothing cannot pass.
    EXPECT_GE(s.tables.size(), 12u);
    for (const char* t : {"gateway", "eal", "port", "peer", "import", "export"})
        EXPECT_TRUE(s.by_table.count(t)) << "config.cpp has no table " << t;
    std::size_t keys = 0;
    for (const auto& [t, table] : s.by_table) keys += table.keys.size();
    EXPECT_GE(keys, 60u);
    EXPECT_TRUE(s.by_table.at("port").array);
    EXPECT_FALSE(s.by_table.at("resolve").array);
}

TEST(Reference, KeyExtractionFailsLoudlyOnAnUnexpectedShape) {
    using testing::extract_config_schema;
    // A table accepted at the top but read by no TableReader with a key list.
    EXPECT_THROW(extract_config_schema(R"(TableReader top(f, root, "", {"gateway", "nat"});
                                          TableReader r(f, t, "gateway", {"party"});)"),
                 std::runtime_error);
    // No top-level list at all (say, the keys moved into a constexpr array).
    EXPECT_THROW(extract_config_schema(R"(TableReader r(f, t, "gateway", {"party"});)"), std::runtime_error);
    // A commented-out reader does not count; one that is read does.
    const auto ok = extract_config_schema(R"(TableReader top(f, root, "", {"gateway", "port"});
        // TableReader r(f, t, "gateway", {"old"});
        TableReader r(f, t, "gateway", {"party", "party_id"});
        TableReader(f, t, "port[" + std::to_string(i) + "]").fail("name", "x");
        TableReader p(f, t, "port[" + std::to_string(i) + "]", {"name"});)");
    EXPECT_EQ(ok.by_table.at("gateway").keys, (std::vector<std::string>{"party", "party_id"}));
    EXPECT_TRUE(ok.by_table.at("port").array);
}

TEST(Reference, TheMinimalConfigLoads) {
    EXPECT_NO_THROW(parse_config(render("", minimal_config()), "minimal.toml"));
}

// The parser's own refusal of an unknown key lists the keys it knows there: they must be exactly
// the extracted ones, table by table.
TEST(Reference, ExtractedKeysAreThoseTheParserListsAsKnown) {
    const ConfigSchema& s = config_schema();
    const auto known_in_error = [&](const std::string& table) -> std::string {
        const std::string text = table.empty() ? render("no_such_key = 1", minimal_config())
                                               : config_with(s, table, "no_such_key", "1");
        try {
            parse_config(text, "t.toml");
        } catch (const ConfigError& e) {
            const std::string what = e.what();
            const auto at = what.find("unknown key (known here: ");
            if (at == std::string::npos) return "not an unknown-key error: " + what;
            return what.substr(at + 25, what.rfind(')') - at - 25);
        }
        return "accepted";
    };
    const auto joined = [](const std::vector<std::string>& v) {
        std::string out;
        for (const std::string& k : v) out += (out.empty() ? "" : ", ") + k;
        return out;
    };
    EXPECT_EQ(known_in_error(""), joined(s.tables)) << "the top level";
    for (const auto& [t, table] : s.by_table) EXPECT_EQ(known_in_error(t), joined(table.keys)) << "table " << t;
}

// A key in a list but never read would be accepted with any value: each one, given the wrong type,
// must be refused by name, and not as an unknown key.
TEST(Reference, EveryExtractedKeyIsReadByTheParser) {
    const ConfigSchema& s = config_schema();
    std::vector<std::pair<std::string, std::string>> all;
    for (const std::string& t : s.tables) all.emplace_back(t, "");
    for (const auto& [t, table] : s.by_table)
        for (const std::string& k : table.keys) all.emplace_back(t, k);
    for (const auto& [t, k] : all) {
        const std::string name = error_name(s, t, k);
        try {
            parse_config(config_with(s, t, k, kWrongType), "t.toml");
            ADD_FAILURE() << name << " = " << kWrongType << " was accepted";
        } catch (const ConfigError& e) {
            EXPECT_EQ(e.key(), name) << e.what();
            EXPECT_EQ(std::string(e.what()).find("unknown key"), std::string::npos) << e.what();
        }
    }
}

// ---- fedgated(8) ---------------------------------------------------------------------------------
// The reference is the CONFIGURATION section: a subsection per table, `.SS [nat]` or
// `.SS [[port]]`, and under it one `.TP` entry per key whose tag line is `.B [nat] udp_s` (array
// tables: `.B [[port]] name`), so `grep -F '.B [nat] ' fedgated.8` lists a table's keys.

struct ManReference {
    std::vector<std::string> subsections;                     // "[nat]", "[[port]]", in order
    std::vector<std::tuple<std::string, std::string, int>> keys;  // header, key, line
    std::vector<std::string> malformed;                       // `.B [` lines that fit no entry
};

ManReference man_reference(const std::string& page) {
    ManReference r;
    std::istringstream in(page);
    bool in_section = false;
    std::string previous;
    int n = 0;
    static const std::regex entry(R"(^\.B (\[\[?)([a-z_]+)(\]\]?) ([a-z_]+)$)");
    static const std::regex subsection(R"(^\.SS (\[\[?[a-z_]+\]\]?)$)");
    for (std::string line; std::getline(in, line); previous = line) {
        ++n;
        if (line.rfind(".SH ", 0) == 0) in_section = line == ".SH CONFIGURATION";
        if (!in_section) continue;
        std::smatch m;
        if (std::regex_match(line, m, subsection)) r.subsections.push_back(m[1]);
        if (line.rfind(".B [", 0) != 0) continue;
        if (previous == ".TP" && std::regex_match(line, m, entry) && m[1].length() == m[3].length())
            r.keys.emplace_back(std::string(m[1]) + std::string(m[2]) + std::string(m[3]), m[4], n);
        else
            r.malformed.push_back(std::to_string(n) + ": " + line);
    }
    return r;
}

TEST(Reference, ManPageDocumentsEveryConfigKeyAndNoOther) {
    const ConfigSchema& s = config_schema();
    const ManReference man = man_reference(read_source_file("dist/man/fedgated.8"));
    ASSERT_FALSE(man.keys.empty()) << "fedgated.8 has no `.TP` / `.B [table] key` entries under .SH CONFIGURATION";
    EXPECT_TRUE(man.malformed.empty()) << "lines that look like reference entries but fit no format:\n"
                                       << ::testing::PrintToString(man.malformed);

    std::set<std::pair<std::string, std::string>> documented;
    for (const auto& [header, key, line] : man.keys) {
        const std::string table = header.substr(header.find_first_not_of('['),
                                                header.find(']') - header.find_first_not_of('['));
        EXPECT_EQ(header, s.header(table)) << "fedgated.8:" << line << ": " << header << " " << key
                                           << ": the table is unknown, or written with the wrong brackets";
        EXPECT_TRUE(s.known(table, key)) << "fedgated.8:" << line << ": documents " << header << " " << key
                                         << ", which the parser does not accept";
        EXPECT_TRUE(documented.emplace(table, key).second) << "fedgated.8:" << line << ": " << key << " twice";
    }
    for (const auto& [t, table] : s.by_table)
        for (const std::string& k : table.keys)
            EXPECT_TRUE(documented.count({t, k})) << "fedgated.8 does not document " << s.header(t) << " " << k
                                                  << " (add `.TP` / `.B " << s.header(t) << " " << k
                                                  << "` under .SS " << s.header(t) << ")";
    // Keys the prose refers to, quoted: `.BR "[nat] port_range" ;`.
    const std::string page = read_source_file("dist/man/fedgated.8");
    static const std::regex quoted(R"re("(\[\[?)([a-z_]+)(\]\]?) ([a-z_]+)")re");
    std::size_t refs = 0;
    for (auto it = std::sregex_iterator(page.begin(), page.end(), quoted); it != std::sregex_iterator(); ++it, ++refs) {
        const std::string table = (*it)[2], key = (*it)[4];
        EXPECT_TRUE(s.known(table, key) && std::string((*it)[1]) + table + std::string((*it)[3]) == s.header(table))
            << "fedgated.8 refers to " << (*it)[0] << ", which is not a config key";
    }
    EXPECT_GE(refs, 5u);
    // A subsection per table, in the order the parser lists them, and no other.
    std::vector<std::string> expected;
    for (const std::string& t : s.tables) expected.push_back(s.header(t));
    EXPECT_EQ(man.subsections, expected);
}

// ---- dist/fedgate.toml.example and README.md -------------------------------------------------------

// Every peer key printed in the documentation (the README, the example config, the man pages, the
// operator's guide) is refused as a real key, whatever the rest of the file: copying an example
// must not give an operator a key everybody has.
TEST(Reference, EveryKeyPrintedInTheDocsIsRefused) {
    const std::regex key_line(R"re(key *= *"([0-9a-fA-F]{32,})")re");
    std::set<std::string> keys;
    for (const char* f : {"README.md", "dist/fedgate.toml.example", "dist/man/fedgated.8", "dist/man/fedgatectl.8",
                          "dist/man/fedgate-node.1", "docs/operators-guide.md"}) {
        const std::string text = read_source_file(f);
        for (auto it = std::sregex_iterator(text.begin(), text.end(), key_line); it != std::sregex_iterator(); ++it)
            keys.insert((*it)[1].str());
    }
    ASSERT_GE(keys.size(), 2u) << "the docs print keys; the scan found too few";
    const std::string example = read_source_file("dist/fedgate.toml.example");
    const std::regex any_key(R"re(\nkey = "[0-9a-f]+")re");
    for (const std::string& k : keys) {
        const std::string text = std::regex_replace(example, any_key, "\nkey = \"" + k + "\"");
        try {
            parse_config(text, "example.toml");
            ADD_FAILURE() << "the documented key " << k << " was accepted";
        } catch (const fedgate::ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find("is the example key printed in fedgate's documentation"), std::string::npos)
                << k << ": " << e.what();
        }
    }
}

TEST(Reference, ExampleConfigLoadsAndShowsEveryKey) {
    std::string text = read_source_file("dist/fedgate.toml.example");
    // As shipped it is refused for its published key; with a key of one's own it loads (unknown keys
    // would be errors).
    EXPECT_THROW(parse_config(text, "dist/fedgate.toml.example"), fedgate::ConfigError);
    text = std::regex_replace(text, std::regex(R"re(\nkey = "[0-9a-f]+")re"),
                              "\nkey = \"0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0\"");
    EXPECT_NO_THROW(parse_config(text, "dist/fedgate.toml.example"));
    const ConfigSchema& s = config_schema();
    std::set<std::pair<std::string, std::string>> shown;
    std::set<std::string> tables;
    for (const auto& use : testing::toml_key_uses(text, /*commented=*/true)) {
        EXPECT_TRUE(s.known(use.table, use.key))
            << "dist/fedgate.toml.example:" << use.line << ": " << use.table << "." << use.key << " is not a key";
        shown.emplace(use.table, use.key);
        tables.insert(use.table);
    }
    // It says "Every key is shown": hold it to that, commented-out optional keys included.
    for (const auto& [t, table] : s.by_table)
        for (const std::string& k : table.keys)
            EXPECT_TRUE(shown.count({t, k})) << "dist/fedgate.toml.example does not show " << s.header(t) << " " << k;
}

TEST(Reference, ReadmeConfigBlockHasEveryTable) {
    const std::string md = read_source_file("README.md");
    const auto section = md.find("## Configuration");
    const auto start = md.find("```toml\n", section);
    const auto end = md.find("```", start + 8);
    ASSERT_TRUE(section != std::string::npos && start != std::string::npos && end != std::string::npos);
    const std::string block = md.substr(start + 8, end - start - 8);
    const ConfigSchema& s = config_schema();
    std::set<std::string> tables;
    for (const auto& use : testing::toml_key_uses(block, /*commented=*/true)) {
        EXPECT_TRUE(s.known(use.table, use.key)) << "README.md's config block: " << use.table << "." << use.key;
        tables.insert(use.table);
    }
    for (const std::string& t : s.tables)
        EXPECT_TRUE(tables.count(t) || block.find("\n" + s.header(t)) != std::string::npos)
            << "README.md's config block (## Configuration) has no " << s.header(t) << " table";
}

}  // namespace
}  // namespace fedgate
