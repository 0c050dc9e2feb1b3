# tests/bench/insn_trace.py — run inside gdb attached to a forwarding fedgated (nat_bench.sh's
# NAT_BENCH_INSNS): the instructions the data plane executes for a packet, counted exactly.
#
# Steps the data-plane thread one instruction at a time (stepi, the other threads held) through
# TRACE_CALLS calls of TRACE_FUNCTION (Dataplane::handle_burst, or Dataplane::poll_once: the whole
# poll, the PMDs' receive and send and the housekeeping with it), callees included, and writes to
# TRACE_OUT:
#   packets P
#   instructions I
#   per_packet X
#   function NAME COUNT          (for each function an instruction was executed in, most first)
# and, with TRACE_LISTING=PATH, every instruction executed to PATH in address order, one a line:
#   COUNT_PER_PACKET  ADDRESS <FUNCTION+OFFSET>:  DISASSEMBLY
# (where the instructions go: a packet's parse, probe and rewrite read off in the order GCC laid them).
# A count that does not move with the machine's load or speed: where timing on a shared VM
# resolves only differences of 5-10%, this tells a change of a few instructions a packet.
import collections
import os

import gdb

CALLS = int(os.environ.get("TRACE_CALLS", "3"))
OUT = os.environ["TRACE_OUT"]
LISTING = os.environ.get("TRACE_LISTING", "")
MAX_STEPS = int(os.environ.get("TRACE_MAX_STEPS", "2000000"))
TARGET = os.environ.get("TRACE_FUNCTION", "fedgate::Dataplane::handle_burst")
# A call's packets: handle_burst's third argument (n, in dx at its entry); another function's
# return value (poll_once's: the packets it took in).
PACKETS_FROM_ARG = TARGET.endswith("::handle_burst")

gdb.execute("set pagination off")
gdb.execute("set confirm off")
# The daemon's own signals (the bench's SIGINT at the end among them) pass straight through.
for sig in ("SIGCONT", "SIGSTOP", "SIGUSR1", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGINT", "SIGTERM"):
    gdb.execute(f"handle {sig} nostop noprint pass", to_string=True)


def next_call():
    """Runs to the next entry of TARGET (all threads running, so the lcore gets there)."""
    gdb.execute("set scheduler-locking off")
    bp = gdb.Breakpoint(TARGET, internal=True)
    gdb.execute("continue", to_string=True)
    bp.delete()
    gdb.execute("set scheduler-locking on")


pcs = collections.Counter()
packets = steps = 0
for _ in range(CALLS):
    next_call()
    if PACKETS_FROM_ARG:
        packets += int(gdb.parse_and_eval("$rdx")) & 0xffff  # handle_burst(this, pkts, n, in): n in dx
    entry_sp = int(gdb.parse_and_eval("$sp"))
    ret = int(gdb.parse_and_eval("*(unsigned long *)$sp"))
    while steps < MAX_STEPS:
        pc = int(gdb.parse_and_eval("$pc"))
        if pc == ret and int(gdb.parse_and_eval("$sp")) > entry_sp:
            if not PACKETS_FROM_ARG:
                packets += int(gdb.parse_and_eval("$rax")) & 0xffffffff
            break
        pcs[pc] += 1
        steps += 1
        gdb.execute("stepi", to_string=True)

functions = collections.Counter()
for pc, n in pcs.items():
    block = gdb.execute(f"info symbol {pc:#x}", to_string=True).strip()
    # "NAME + OFFSET in section .text of FILE", or "NAME in section ..." at offset 0
    if " in section " in block:
        name = block.split(" in section ")[0].rsplit(" + ", 1)[0]
    else:  # a PMD's static function in a stripped library: named by its library
        lib = gdb.solib_name(pc)
        name = f"({os.path.basename(lib)}, no symbols)" if lib else f"{pc:#x}"
    functions[name] += n

with open(OUT, "w") as o:
    o.write(f"packets {packets}\ninstructions {steps}\n")
    if steps >= MAX_STEPS:
        o.write("truncated\n")
    o.write(f"per_packet {steps / packets:.1f}\n" if packets else "per_packet -\n")
    for name, n in functions.most_common():
        o.write(f"function {name} {n}\n")
if LISTING:
    with open(LISTING, "w") as o:
        for pc in sorted(pcs):
            # "   0x5555... <fedgate::Dataplane::handle_burst(...)+123>:\tmov ..." -> the part after the address
            line = gdb.execute(f"x/i {pc:#x}", to_string=True).strip().lstrip("=> ")
            o.write(f"{pcs[pc] / max(packets, 1):8.2f}  {line}\n")
gdb.execute("detach")
