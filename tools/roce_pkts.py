#!/usr/bin/python3
"""RoCE v2 test packets through fedgate gateways, built and checked with scapy (its contrib.roce
computes the ICRC independently of the gateway's code): the demo, the integration test and an
operator checking a path with `fedgate-node ... --handshake-only` use it.

  roce_pkts.py send  --iface IF --src IP --dst IP --dqpn Q [--dst-mac MAC] [--kinds send,write,ack,cnp]
  roce_pkts.py sniff --iface IF --count N --src IP --dst IP --dqpn Q [--timeout S]

send: one RC packet per kind from IP to IP (DestQP Q) out of IF, addressed to --dst-mac or to the
MAC that ARP finds for --dst. sniff: prints 'ready' once capturing, then waits for N RoCE v2
packets on IF and prints one JSON object per packet; exits 0 only if N arrived, each from --src to
--dst with DestQP Q and an ICRC that scapy computes the same.
"""
import argparse
import json
import sys

from scapy.all import ARP, Ether, IP, UDP, AsyncSniffer, Raw, conf, get_if_hwaddr, sendp, srp1
from scapy.contrib.roce import AETH, BTH, CNPPadding

conf.verb = 0
ROCE_PORT = 4791
RETH = bytes.fromhex("00000000deadbe00" "00001234" "00000040")  # VA, R_Key, DMA length 64


def packets(kinds, src, dst, dqpn):
    """One packet per kind; PSNs count up as an RC sender's would."""
    out = []
    for i, kind in enumerate(kinds):
        ip = IP(src=src, dst=dst, tos=0x02, ttl=64)  # ECN ECT(0): must arrive unchanged
        udp = UDP(sport=49152 + i, dport=ROCE_PORT, chksum=0)
        if kind == "send":
            pkt = BTH(opcode="RC_SEND_ONLY", dqpn=dqpn, psn=100 + i, ackreq=1) / Raw(b"fedgate-roce-send" + bytes(15))
        elif kind == "write":
            pkt = BTH(opcode="RC_RDMA_WRITE_ONLY", dqpn=dqpn, psn=100 + i, ackreq=1) / Raw(RETH + bytes(range(64)))
        elif kind == "ack":
            pkt = BTH(opcode="RC_ACKNOWLEDGE", dqpn=dqpn, psn=100 + i) / AETH(syndrome=0x1f, msn=7)
        elif kind == "cnp":
            pkt = BTH(opcode=0x81, becn=1, dqpn=dqpn) / CNPPadding()
        else:
            raise SystemExit(f"roce_pkts: unknown kind {kind!r} (send, write, ack, cnp)")
        out.append(ip / udp / pkt)
    return out


def icrc_ok(frame):
    """scapy's own ICRC over the frame as it arrived equals the ICRC it carries."""
    fresh = frame.copy()
    fresh[BTH].icrc = None
    return Ether(bytes(fresh))[BTH].icrc == frame[BTH].icrc


def cmd_send(a):
    kinds = a.kinds.split(",")
    mac = a.dst_mac
    if mac is None:
        reply = srp1(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(pdst=a.dst, psrc=a.src), iface=a.iface, timeout=5, retry=3)
        if reply is None:
            raise SystemExit(f"roce_pkts: no ARP answer for {a.dst} on {a.iface}")
        mac = reply[ARP].hwsrc
    src_mac = get_if_hwaddr(a.iface)
    for p in packets(kinds, a.src, a.dst, a.dqpn):
        sendp(Ether(src=src_mac, dst=mac) / p, iface=a.iface)
    print(f"sent {len(kinds)} to {a.dst} dqpn {a.dqpn:#x} via {mac}")


def cmd_sniff(a):
    got = []
    # lfilter, not a BPF filter: scapy compiles those with tcpdump, which the test machines lack.
    sniffer = AsyncSniffer(iface=a.iface, lfilter=lambda p: UDP in p and p[UDP].dport == ROCE_PORT, count=a.count,
                           started_callback=lambda: print("ready", flush=True))
    sniffer.start()
    sniffer.join(timeout=a.timeout)
    if sniffer.running:
        sniffer.stop()
    ok = True
    for f in sniffer.results or []:
        if BTH not in f:
            continue
        rec = {"src": f[IP].src, "dst": f[IP].dst, "tos": f[IP].tos, "opcode": f[BTH].opcode, "dqpn": f[BTH].dqpn,
               "psn": f[BTH].psn, "icrc_ok": icrc_ok(f)}
        rec["match"] = rec["src"] == a.src and rec["dst"] == a.dst and rec["dqpn"] == a.dqpn and rec["icrc_ok"]
        ok &= rec["match"]
        got.append(rec)
        print(json.dumps(rec), flush=True)
    print(f"arrived {len(got)} of {a.count}", flush=True)
    return 0 if ok and len(got) == a.count else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("--iface", required=True)
    s.add_argument("--src", required=True)
    s.add_argument("--dst", required=True)
    s.add_argument("--dqpn", required=True, type=lambda v: int(v, 0))
    s.add_argument("--dst-mac")
    s.add_argument("--kinds", default="send,write,ack,cnp")
    f = sub.add_parser("sniff")
    f.add_argument("--iface", required=True)
    f.add_argument("--count", required=True, type=int)
    f.add_argument("--src", required=True)
    f.add_argument("--dst", required=True)
    f.add_argument("--dqpn", required=True, type=lambda v: int(v, 0))
    f.add_argument("--timeout", type=float, default=30)
    a = ap.parse_args()
    return cmd_send(a) if a.cmd == "send" else cmd_sniff(a)


if __name__ == "__main__":
    sys.exit(main())
