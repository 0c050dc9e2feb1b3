// fedgated under systemd: sd_notify messages, the watchdog's progress check, journal log lines.
#include "controlplane/service.hpp"

#include <rte_log.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace fedgate {
namespace service {
namespace {

// systemd reads STATUS= up to the end of its line: keep the text on one.
std::string one_line(const std::string& s) {
    std::string out = s;
    for (char& c : out)
        if (c == '\n' || c == '\r') c = ' ';
    return out;
}

void notify(const std::string& text) { sd_notify(0, text.c_str()); }

}  // namespace

void ready(const std::string& status) { notify("READY=1\nSTATUS=" + one_line(status)); }
void status(const std::string& text) { notify("STATUS=" + one_line(text)); }

void reloading(const std::string& status) {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const uint64_t usec = static_cast<uint64_t>(ts.tv_sec) * 1'000'000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
    notify("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec) + "\nSTATUS=" + one_line(status));
}

void stopping() { notify("STOPPING=1\nSTATUS=stopping"); }
void watchdog() { notify("WATCHDOG=1"); }

uint64_t watchdog_usec() {
    uint64_t usec = 0;
    return sd_watchdog_enabled(0, &usec) > 0 ? usec : 0;
}

}  // namespace service

int ProgressCheck::stalled(std::span<const uint64_t> loops) {
    int stuck = -1;
    if (last_.size() == loops.size())
        for (std::size_t i = 0; i < loops.size(); ++i)
            if (loops[i] == last_[i]) {
                stuck = static_cast<int>(i);
                break;
            }
    last_.assign(loops.begin(), loops.end());
    return stuck;
}

// ---------------------------------------------------------------------------------------------
// Journal log lines.

std::string journal_lines(uint32_t rte_level, std::string_view text) {
    // rte_log's EMERG..DEBUG are 1..8, syslog's 0..7.
    const uint32_t prio = rte_level >= 1 && rte_level <= 8 ? rte_level - 1 : 6;
    const std::string prefix = "<" + std::to_string(prio) + ">";
    std::string out;
    std::size_t start = 0;
    while (start < text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        out += prefix;
        out.append(text.substr(start, end - start));
        out += '\n';
        start = end + 1;
    }
    return out;
}

namespace {

// fopencookie's write: one message (rte_log writes each with one vfprintf, flushed after it).
ssize_t journal_write(void*, const char* buf, size_t size) {
    const std::string lines = journal_lines(static_cast<uint32_t>(rte_log_cur_msg_loglevel()), std::string_view(buf, size));
    std::size_t done = 0;
    while (done < lines.size()) {
        const ssize_t n = ::write(STDERR_FILENO, lines.data() + done, lines.size() - done);
        if (n <= 0) break;  // the journal went away: nothing better to do with a log line
        done += static_cast<std::size_t>(n);
    }
    return static_cast<ssize_t>(size);
}

// $JOURNAL_STREAM is "DEVICE:INODE" of the stream systemd connected to stdout/stderr.
bool stderr_is_journal() {
    const char* js = std::getenv("JOURNAL_STREAM");
    if (js == nullptr || *js == '\0') return false;
    unsigned long long dev = 0, ino = 0;
    if (std::sscanf(js, "%llu:%llu", &dev, &ino) != 2) return false;
    struct stat st {};
    if (::fstat(STDERR_FILENO, &st) != 0) return false;
    return static_cast<unsigned long long>(st.st_dev) == dev && static_cast<unsigned long long>(st.st_ino) == ino;
}

}  // namespace

bool log_to_journal_if_stderr_is_it() {
    if (!stderr_is_journal()) return false;
    cookie_io_functions_t io{};
    io.write = journal_write;
    FILE* f = fopencookie(nullptr, "w", io);
    if (f == nullptr) return false;
    setvbuf(f, nullptr, _IOLBF, 0);
    return rte_openlog_stream(f) == 0;
}

}  // namespace fedgate
