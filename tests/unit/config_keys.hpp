// The config keys fedgated accepts, read from controlplane/config.cpp itself, so the docs tests
// check the docs against the code rather than against a list someone copied into a test.
//
// The parser refuses any key a TableReader was not told about, so the initializer lists of the
// TableReader constructions ARE the set of accepted keys:
//   TableReader r(file, t, "resolve", {"port", "announce", ...});          // [resolve]
//   TableReader r(file, t, "port[" + std::to_string(i) + "]", {"name", ...});  // [[port]]
//   TableReader top(source_name, root, "", {"gateway", "eal", ...});       // the tables themselves
// A construction without a list (used only to report an error at a key) is skipped. Anything that
// does not fit this shape throws, naming what it found, so a refactor of config.cpp fails these
// tests loudly instead of making them check nothing.
#pragma once

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fedgate::testing {

struct ConfigTable {
    bool array = false;             // [[port]] rather than [port]
    std::vector<std::string> keys;  // in the order config.cpp lists them
};

struct ConfigSchema {
    std::vector<std::string> tables;              // the top-level keys: every table, in config.cpp's order
    std::map<std::string, ConfigTable> by_table;  // each of them, with its keys

    bool known(const std::string& table, const std::string& key) const {
        const auto t = by_table.find(table);
        if (t == by_table.end()) return false;
        for (const std::string& k : t->second.keys)
            if (k == key) return true;
        return false;
    }
    std::string header(const std::string& table) const {  // "[nat]" or "[[port]]"
        const auto t = by_table.find(table);
        const bool array = t != by_table.end() && t->second.array;
        return (array ? "[[" : "[") + table + (array ? "]]" : "]");
    }
};

inline std::string read_source_file(const std::string& relative) {
    std::ifstream in(std::string(FEDGATE_SOURCE_DIR) + "/" + relative);
    if (!in) throw std::runtime_error("cannot read " + relative);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

namespace detail {

// The text with // and /* */ comments blanked out (string and character literals kept), so a
// commented-out TableReader or a quoted example in a comment is not mistaken for code.
inline std::string strip_comments(const std::string& s) {
    std::string out = s;
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '"' || c == '\'') {
            for (++i; i < s.size() && s[i] != c; ++i)
                if (s[i] == '\\') ++i;
        } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
            for (; i < s.size() && s[i] != '\n'; ++i) out[i] = ' ';
        } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
            const std::size_t end = s.find("*/", i + 2);
            const std::size_t stop = end == std::string::npos ? s.size() : end + 2;
            for (; i < stop; ++i)
                if (out[i] != '\n') out[i] = ' ';
            --i;
        }
    }
    return out;
}

// The arguments of the call whose '(' is at `open`, split at top-level commas; `end` is set past ')'.
inline std::vector<std::string> call_arguments(const std::string& s, std::size_t open, std::size_t& end) {
    std::vector<std::string> args(1);
    int depth = 0;
    for (std::size_t i = open; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '"' || c == '\'') {
            const std::size_t from = i;
            for (++i; i < s.size() && s[i] != c; ++i)
                if (s[i] == '\\') ++i;
            args.back() += s.substr(from, i - from + 1);
            continue;
        }
        if (c == '(' || c == '{' || c == '[') {
            if (depth++ == 0) continue;
        } else if (c == ')' || c == '}' || c == ']') {
            if (--depth == 0) {
                end = i + 1;
                return args;
            }
        } else if (c == ',' && depth == 1) {
            args.emplace_back();
            continue;
        }
        args.back() += c;
    }
    throw std::runtime_error("config.cpp: unbalanced TableReader(...) at offset " + std::to_string(open));
}

inline std::vector<std::string> string_literals(const std::string& s) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '"') continue;
        std::string lit;
        for (++i; i < s.size() && s[i] != '"'; ++i) lit += s[i];
        out.push_back(lit);
    }
    return out;
}

inline std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    const auto e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace detail

// Parses controlplane/config.cpp (or `source`, for tests of this parser) into its schema.
inline ConfigSchema extract_config_schema(const std::string& source) {
    using namespace detail;
    const std::string code = strip_comments(source);
    ConfigSchema schema;
    bool saw_top = false;
    std::size_t with_lists = 0;
    const std::string word = "TableReader";
    for (std::size_t at = code.find(word); at != std::string::npos; at = code.find(word, at + word.size())) {
        const bool word_start = at == 0 || !(std::isalnum(static_cast<unsigned char>(code[at - 1])) || code[at - 1] == '_');
        std::size_t i = at + word.size();
        if (!word_start || (i < code.size() && (std::isalnum(static_cast<unsigned char>(code[i])) || code[i] == '_')))
            continue;
        // `TableReader name(` or `TableReader(`; anything else (`TableReader&`, `class TableReader {`) is no construction.
        while (i < code.size() && std::isspace(static_cast<unsigned char>(code[i]))) ++i;
        while (i < code.size() && (std::isalnum(static_cast<unsigned char>(code[i])) || code[i] == '_')) ++i;
        while (i < code.size() && std::isspace(static_cast<unsigned char>(code[i]))) ++i;
        if (i >= code.size() || code[i] != '(') continue;
        std::size_t end = i;
        const std::vector<std::string> args = call_arguments(code, i, end);
        if (args.size() != 4 || trim(args[3]).rfind('{', 0) != 0) continue;  // no key list: reports only
        ++with_lists;
        const std::vector<std::string> path = string_literals(args[2]);
        const std::vector<std::string> keys = string_literals(args[3]);
        if (path.empty())
            throw std::runtime_error("config.cpp: a TableReader with a key list has no string path: " + args[2]);
        if (keys.empty()) throw std::runtime_error("config.cpp: TableReader " + path[0] + " has an empty key list");
        if (std::set<std::string>(keys.begin(), keys.end()).size() != keys.size())
            throw std::runtime_error("config.cpp: TableReader '" + path[0] + "' lists a key twice");
        if (path[0].empty()) {
            if (saw_top) throw std::runtime_error("config.cpp: two top-level TableReaders with key lists");
            saw_top = true;
            schema.tables = keys;
            continue;
        }
        const auto bracket = path[0].find('[');
        const std::string name = path[0].substr(0, bracket);
        if (schema.by_table.count(name) != 0)
            throw std::runtime_error("config.cpp: table '" + name + "' has two TableReaders with key lists");
        schema.by_table[name] = ConfigTable{bracket != std::string::npos, keys};
    }
    // Loud failures: the top-level list names the tables, and each must have been found, and no more.
    if (!saw_top) throw std::runtime_error("config.cpp: found no top-level TableReader(..., \"\", {tables})");
    if (with_lists != schema.by_table.size() + 1)
        throw std::runtime_error("config.cpp: TableReader count mismatch");
    for (const std::string& t : schema.tables)
        if (schema.by_table.count(t) == 0)
            throw std::runtime_error("config.cpp: table '" + t + "' is accepted at the top level but no TableReader "
                                     "with a key list reads it (found " + std::to_string(schema.by_table.size()) +
                                     " tables)");
    for (const auto& [t, _] : schema.by_table)
        if (std::find(schema.tables.begin(), schema.tables.end(), t) == schema.tables.end())
            throw std::runtime_error("config.cpp: TableReader '" + t + "' reads a table the top level does not accept");
    return schema;
}

inline const ConfigSchema& config_schema() {
    static const ConfigSchema schema = extract_config_schema(read_source_file("controlplane/config.cpp"));
    return schema;
}

// The keys a TOML text (a whole config or a fragment, comments included when `commented` is set:
// "# static_neighbours = [...]" documents a key too) sets, as (table, key, line number). Keys
// before any header are reported with table "" (the top level); the subkeys of an inline table
// such as [log] types = { ... } are not keys of their own.
struct TomlKeyUse {
    std::string table;
    std::string key;
    int line;
};

inline std::vector<TomlKeyUse> toml_key_uses(const std::string& text, bool commented) {
    std::vector<TomlKeyUse> out;
    std::istringstream in(text);
    std::string table;
    int n = 0;
    for (std::string line; std::getline(in, line);) {
        ++n;
        std::string s = detail::trim(line);
        if (s.rfind("#", 0) == 0) {
            if (!commented) continue;
            s = detail::trim(s.substr(1));
            // A commented line documents a key only if it looks like one: "key = value".
            const auto eq = s.find(" = ");
            if (eq == std::string::npos || s.find(' ') != eq) continue;
        }
        if (s.empty()) continue;
        if (s[0] == '[') {
            const auto close = s.find(']');
            if (close == std::string::npos) continue;
            table = detail::trim(s.substr(s[1] == '[' ? 2 : 1, close - (s[1] == '[' ? 2 : 1)));
            continue;
        }
        std::size_t k = 0;
        while (k < s.size() && (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == '_')) ++k;
        if (k == 0) continue;  // a continuation line of a multi-line value
        const std::string rest = detail::trim(s.substr(k));
        if (rest.rfind('=', 0) != 0) continue;
        out.push_back({table, s.substr(0, k), n});
    }
    return out;
}

}  // namespace fedgate::testing
