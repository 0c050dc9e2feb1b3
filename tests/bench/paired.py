#!/usr/bin/python3
"""tests/bench/paired.py — forwarders measured in turns on one CPU, so that each ratio is paired.

On a shared virtual machine the same forwarder's rate moves by a third or more from one run to the
next (the host's other tenants, its clock), and a ratio of two runs a minute apart carries that
noise. Here every forwarder is up at once, all but one stopped (SIGSTOP): each turn lets one run
alone for a slice of SECONDS while it is sampled at both ends, then stops it and lets the next run.
A round is one slice of each, every other round in the reverse order (so that no forwarder always
follows the same one); a round's ratios compare slices taken seconds apart, and the figure is the
median of the rounds' ratios (with the lowest and highest).

Forwarders:
  --testpmd NAME JSON_ARGV   dpdk-testpmd started here in interactive mode (JSON_ARGV its command,
                             with -i), `start`ed, sampled by `show port stats PORT` (TX-packets)
  --fedgated NAME PID SOCKET a running fedgated (the caller started it and stopped it with SIGSTOP
                             once it was up), sampled over its management socket (`stats`: the
                             TX packets of port PORT)
The forwarder --reference names is what the ratios are against (and --also-against's, where given).

Output: a line per slice ("slice ROUND NAME PPS"), then "rate NAME MEDIAN_PPS MIN MAX" per forwarder
and "ratio NAME REFERENCE MEDIAN MIN MAX LO HI" per other forwarder (and against --also-against's):
LO-HI is an interval that holds the median of the rounds' ratios with a probability of at least
95% (median_ci: order statistics, no assumption about how the ratios spread; "- -" below 6 rounds).
A difference between two builds is measured when their interval leaves out 1. Every forwarder
started here is stopped at exit; every one the caller started is left running (SIGCONT), for the
caller to stop.
"""
import argparse
import ctypes
import json
import math
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import time


def die(msg):
    print(f"paired: {msg}", file=sys.stderr)
    sys.exit(1)


def median_ci(values, level=0.95):
    """A distribution-free interval for the median of what `values` sample: (the k-th lowest, the
    k-th highest) of them, with k the largest for which Binomial(n, 1/2) puts at most (1 - level) / 2
    below k (so each end misses the median that seldom, whatever the distribution). None when n is
    too small for the level (under 6 values at 95%)."""
    x, n = sorted(values), len(values)
    tail, cum, k = (1 - level) / 2, 0, 0
    for j in range(n):
        cum += math.comb(n, j)
        if cum / 2**n > tail:
            break
        k = j + 1
    return (x[k - 1], x[n - k]) if k else None


class Testpmd:
    def __init__(self, name, argv, port, timeout):
        self.name, self.port, self.buf = name, port, b""

        def child():  # gone with this script, however it ends
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

        # Line-buffered: testpmd's printf output would otherwise wait in a pipe's full buffer.
        self.p = subprocess.Popen(["stdbuf", "-oL"] + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, bufsize=0, preexec_fn=child)
        self.pid = self.p.pid
        self.read_prompt(timeout)
        self.command("start", timeout)

    def read_prompt(self, timeout):
        end = time.monotonic() + timeout
        while b"testpmd> " not in self.buf:
            ready, _, _ = select.select([self.p.stdout], [], [], max(0.0, end - time.monotonic()))
            chunk = os.read(self.p.stdout.fileno(), 65536) if ready else None
            if not chunk:
                tail = self.buf[-600:].decode(errors="replace")
                die(f"{self.name}: testpmd {'exited' if chunk == b'' else 'gave no prompt'}; its last output:\n{tail}")
            self.buf += chunk
        i = self.buf.index(b"testpmd> ") + len(b"testpmd> ")
        out, self.buf = self.buf[:i], self.buf[i:]
        return out.decode(errors="replace")

    def command(self, cmd, timeout=10):
        self.p.stdin.write(cmd.encode() + b"\n")
        return self.read_prompt(timeout)

    def sample(self):
        t0 = time.monotonic()
        out = self.command(f"show port stats {self.port}")
        t1 = time.monotonic()
        for line in out.splitlines():
            if "TX-packets:" in line:
                return (t0 + t1) / 2, int(line.split()[1])
        die(f"{self.name}: no TX-packets in testpmd's port stats:\n{out}")

    def close(self):
        os.kill(self.pid, signal.SIGCONT)
        try:
            self.p.stdin.write(b"stop\nquit\n")
            self.p.stdin.close()
            self.p.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()


class Fedgated:
    def __init__(self, name, pid, sock, port):
        self.name, self.pid, self.sock, self.port = name, pid, sock, port

    def sample(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        t0 = time.monotonic()
        try:
            s.connect(self.sock)
            s.sendall(b'{"cmd":"stats"}\n')
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
        except OSError as e:
            die(f"{self.name}: its management socket {self.sock}: {e}")
        finally:
            s.close()
        t1 = time.monotonic()
        r = json.loads(buf)
        r = r.get("result", r)
        return (t0 + t1) / 2, int(r["ports"][self.port]["tx_packets"])

    def close(self):
        os.kill(self.pid, signal.SIGCONT)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="slices of each forwarder (1..100)")
    ap.add_argument("--seconds", type=float, default=2.0, help="one slice (0.5..60)")
    ap.add_argument("--warmup", type=float, default=2.0, help="a first unmeasured slice of each (0..60)")
    ap.add_argument("--port", type=int, default=1, help="the port whose TX packets are counted")
    ap.add_argument("--start-timeout", type=float, default=300, help="testpmd's start-up, at most")
    ap.add_argument("--testpmd", nargs=2, action="append", default=[], metavar=("NAME", "JSON_ARGV"))
    ap.add_argument("--fedgated", nargs=3, action="append", default=[], metavar=("NAME", "PID", "SOCKET"))
    ap.add_argument("--reference", required=True)
    ap.add_argument("--also-against", default=None, metavar="NAME",
                    help="ratios of every other forwarder to this one too (two builds compared)")
    a = ap.parse_args()
    if not 1 <= a.rounds <= 100 or not 0.5 <= a.seconds <= 60 or not 0 <= a.warmup <= 60:
        die("--rounds must be 1..100, --seconds 0.5..60, --warmup 0..60")
    names = [t[0] for t in a.testpmd] + [f[0] for f in a.fedgated]
    if len(set(names)) != len(names) or a.reference not in names or a.also_against not in names + [None]:
        die(f"forwarder names must differ and include the reference '{a.reference}' (and --also-against's): {names}")

    fwd = []
    try:
        for name, pid, sock in a.fedgated:
            fwd.append(Fedgated(name, int(pid), sock, a.port))
        for name, argv in a.testpmd:
            try:
                argv = json.loads(argv)
            except json.JSONDecodeError as e:
                die(f"{name}: JSON_ARGV is not JSON: {e}")
            t = Testpmd(name, argv, a.port, a.start_timeout)
            fwd.append(t)
            os.kill(t.pid, signal.SIGSTOP)  # the next starts alone
        rates = {f.name: [] for f in fwd}
        for rnd in range(-1 if a.warmup > 0 else 0, a.rounds):
            # Every other round in the reverse order, so that no forwarder always follows the same one.
            for f in (fwd if rnd % 2 == 0 else fwd[::-1]):
                os.kill(f.pid, signal.SIGCONT)
                if rnd < 0:
                    time.sleep(a.warmup)
                else:
                    time.sleep(0.1)  # back on the CPU, its queues moving again
                    t0, n0 = f.sample()
                    time.sleep(a.seconds)
                    t1, n1 = f.sample()
                    pps = (n1 - n0) / (t1 - t0)
                    rates[f.name].append(pps)
                    print(f"slice {rnd} {f.name} {int(pps)}", flush=True)
                os.kill(f.pid, signal.SIGSTOP)
        for name in names:
            r = rates[name]
            print(f"rate {name} {int(statistics.median(r))} {int(min(r))} {int(max(r))}")
        for against in [a.reference] + ([a.also_against] if a.also_against else []):
            ref = rates[against]
            for name in names:
                if name == against:
                    continue
                ratios = [x / y for x, y in zip(rates[name], ref) if y > 0]
                if ratios:
                    ci = median_ci(ratios)
                    print(f"ratio {name} {against} {statistics.median(ratios):.3f} {min(ratios):.3f} {max(ratios):.3f} "
                          + (f"{ci[0]:.3f} {ci[1]:.3f}" if ci else "- -"))
                else:
                    print(f"ratio {name} {against} - - - - -")
    finally:
        for f in fwd:
            f.close()


if __name__ == "__main__":
    main()
