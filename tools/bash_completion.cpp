// The bash completion script generated from a command table (see bash_completion.hpp).
#include "tools/bash_completion.hpp"

#include <regex>
#include <string>
#include <vector>

namespace fedgate::cli {
namespace {

// 'like this', safe for bash whatever `s` holds.
std::string shell_word(std::string_view s) {
    std::string out = "'";
    for (char c : s) {
        if (c == '\'')
            out += "'\\''";
        else
            out += c;
    }
    return out + "'";
}

// What the script completes an option's value with: FILE (file names), the choices of a|b, or
// nothing (empty) for a value it cannot guess (a number, an address).
std::string value_kind(const po::option_description& o) {
    std::string name = o.semantic()->name();  // value_name, then " (=default)" when there is one
    name = name.substr(0, name.find(' '));
    if (name.find("PATH") != std::string::npos || name.find("FILE") != std::string::npos)
        return "FILE";
    static const std::regex choices("[a-z0-9_.-]+(\\|[a-z0-9_.-]+)+");
    return std::regex_match(name, choices) ? name : "";
}

// The table's entries for `d`'s options: --name, or --name=KIND when it takes a value; the short
// form as well (-w=FILE), which the script reads but does not offer.
std::vector<std::string> option_entries(const po::options_description& d) {
    std::vector<std::string> out;
    for (const auto& o : d.options()) {
        const bool takes_value = o->semantic()->max_tokens() > 0;
        const std::string value = takes_value ? "=" + value_kind(*o) : "";
        if (!o->long_name().empty())
            out.push_back("--" + o->long_name() + value);
        const std::string short_name = o->canonical_display_name(po::command_line_style::allow_dash_for_short);
        if (short_name.size() == 2 && short_name[0] == '-')
            out.push_back(short_name + value);
    }
    return out;
}

// The words an operand list of choices may be: "[import|export]" names them; "PID", "[COMMAND]"
// and "TYPE LEVEL" name none.
std::vector<std::string> operand_choices(std::string_view operands) {
    std::string s(operands);
    if (s.size() >= 2 && s.front() == '[' && s.back() == ']')
        s = s.substr(1, s.size() - 2);
    static const std::regex choices("[a-z0-9_.-]+(\\|[a-z0-9_.-]+)*");
    std::vector<std::string> out;
    if (!std::regex_match(s, choices))
        return out;
    size_t i = 0;
    while (i <= s.size()) {
        const size_t bar = std::min(s.find('|', i), s.size());
        out.push_back(s.substr(i, bar - i));
        i = bar + 1;
    }
    return out;
}

std::string words_of(const std::vector<std::string>& entries) {
    std::string out;
    for (const auto& e : entries)
        out += (out.empty() ? "" : " ") + shell_word(e);
    return out;
}

// A case arm of the table function: `opts` and `operands` of one command ("" for the globals).
void print_arm(std::ostream& out, std::string_view name, const std::vector<std::string>& opts,
               const std::vector<std::string>& operands) {
    out << "    " << shell_word(name) << ") opts=(" << words_of(opts) << ") operands=(" << words_of(operands)
        << ") ;;\n";
}

// The part of the script that is the same for every program; F stands for the function's name.
constexpr std::string_view kBody = R"BASH(
# F_value_of OPTION: sets `value` to what OPTION's value completes with (FILE, a|b or empty); fails
# when OPTION is unknown or takes no value. Reads the caller's `globals` and `opts`.
F_value_of() {
    local s
    for s in "${globals[@]}" "${opts[@]}"; do
        if [[ $s == "$1="* ]]; then
            value=${s#*=}
            return 0
        fi
    done
    return 1
}

# F_values KIND WORD [PREFIX]: completes an option's value.
F_values() {
    local w
    local -a alternatives
    case $1 in
    FILE)
        compopt -o filenames 2>/dev/null || true  # outside a completion (a test), there is none to set
        mapfile -t COMPREPLY < <(compgen -f -- "$2")
        ;;
    *'|'*)
        IFS='|' read -ra alternatives <<<"$1"
        for w in "${alternatives[@]}"; do
            [[ $w == "$2"* ]] && COMPREPLY+=("${3-}$w")
        done
        ;;
    esac
}

F() {
    COMPREPLY=()
    local -a commands=(COMMANDS)
    local -a ws=() opts=() operands=() globals=() args=() reply=()
    local w j c value cur line='' cmd='' open=1 pending='' matched joining=0 n k
    # COMP_WORDBREAKS splits "--opt=VALUE" at '=': join the pieces again.
    for ((j = 0; j <= COMP_CWORD; j++)); do
        w=${COMP_WORDS[j]}
        if ((joining)); then
            ws[-1]+=$w
            joining=0
        elif [[ $w == = && ${#ws[@]} -gt 1 && ${ws[-1]} == -* && ${ws[-1]} != *=* ]]; then
            ws[-1]+='='
            joining=1
        else
            ws+=("$w")
        fi
    done
    n=$((${#ws[@]} - 1))
    cur=${ws[n]}
    F_table ''
    globals=("${opts[@]}")
    opts=()
    # The words before the cursor: options (and their values), the command's words, its operands.
    for ((k = 1; k < n; k++)); do
        w=${ws[k]}
        if [[ -n $pending ]]; then
            pending=
        elif [[ $w == -* ]]; then
            [[ $w != *=* ]] && F_value_of "$w" && pending=1
        else
            if ((open)); then
                c=${line:+$line }$w
                open=0 matched=0
                for j in "${commands[@]}"; do
                    [[ $j == "$c" ]] && cmd=$c matched=1
                    [[ $j == "$c "* ]] && open=1 matched=1
                done
                if ((matched)); then
                    line=$c
                    [[ -n $cmd ]] && F_table "$cmd"
                    continue
                fi
            fi
            args+=("$w")
        fi
    done

    if [[ -n $pending ]]; then
        F_value_of "${ws[n - 1]}"
        F_values "$value" "$cur"
        return 0
    fi
    if [[ $cur == -*=* ]]; then
        # Unsplit when COMP_WORDBREAKS has no '=': then the reply carries the option too.
        local prefix=''
        [[ ${COMP_WORDS[COMP_CWORD]} == "$cur" ]] && prefix=${cur%%=*}=
        F_value_of "${cur%%=*}" && F_values "$value" "${cur#*=}" "$prefix"
        return 0
    fi
    if [[ $cur == -* ]]; then
        for w in "${globals[@]}" "${opts[@]}"; do
            [[ $w == --* ]] && reply+=("${w%%=*}")
        done
    elif ((open)); then
        for j in "${commands[@]}"; do
            if [[ -z $line ]]; then
                reply+=("${j%% *}")
            elif [[ $j == "$line "* ]]; then
                w=${j#"$line "}
                reply+=("${w%% *}")
            fi
        done
    elif [[ $cmd == help ]]; then
        # help's operands are a command's words.
        c=${args[*]}
        for j in "${commands[@]}"; do
            if [[ -z $c ]]; then
                reply+=("${j%% *}")
            elif [[ $j == "$c "* ]]; then
                w=${j#"$c "}
                reply+=("${w%% *}")
            fi
        done
    elif [[ -n $cmd ]]; then
        ((${#args[@]} == 0)) && reply+=("${operands[@]}")
        for w in "${opts[@]}"; do
            [[ $w == --* ]] && reply+=("${w%%=*}")
        done
    fi
    for w in "${reply[@]}"; do
        [[ $w == "$cur"* && " ${COMPREPLY[*]} " != *" $w "* ]] && COMPREPLY+=("$w")
    done
    return 0
}
)BASH";

// `text` with every F (a word of its own: F, F_table, F_values) replaced by `fn`.
std::string with_function_name(std::string_view text, const std::string& fn) {
    static const std::regex f("\\bF(_[a-z_]+)?\\b");
    return std::regex_replace(std::string(text), f, fn + "$1");
}

}  // namespace

void print_bash_completion(std::ostream& out, const Program& p, std::span<const CommandText* const> rows,
                           const po::options_description& globals) {
    std::string fn = "_" + std::string(p.name);
    for (char& c : fn)
        if (c == '-')
            c = '_';
    out << "# shellcheck shell=bash\n# bash completion for " << p.name << ", generated by `" << p.name
        << " completion bash` from its command table; do not edit.\n"
        << "# Needs bash alone, not the bash-completion package.\n\n"
        << "# " << fn << "_table COMMAND: sets `opts` (its options: --name, or --name=KIND when the option takes\n"
        << "# a value of KIND: FILE, a|b, or empty for anything) and `operands` (the words its first operand\n"
        << "# may be); the global options for ''.\n"
        << fn << "_table() {\n    case $1 in\n";
    print_arm(out, "", option_entries(globals), {});
    std::vector<std::string> names;
    for (const CommandText* c : rows) {
        names.emplace_back(c->name);
        std::vector<std::string> opts;
        if (c->options) {
            po::options_description visible, hidden;
            po::positional_options_description positional;
            c->options(visible, hidden, positional);
            opts = option_entries(visible);
        }
        print_arm(out, c->name, opts, operand_choices(c->operands));
    }
    out << "    *) opts=() operands=() ;;\n    esac\n}\n";
    std::string body = with_function_name(kBody, fn);
    body.replace(body.find("(COMMANDS)"), 10, "(" + words_of(names) + ")");
    out << body << "\ncomplete -F " << fn << " " << p.name << "\n";
}

}  // namespace fedgate::cli
