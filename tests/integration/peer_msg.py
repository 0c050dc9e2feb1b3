#!/usr/bin/python3
"""Sends one hand-made gateway-to-gateway resolution message, for tests of the receiving checks.

usage: peer_msg.py --src IP --dst IP --party N --key HEX (announce PID IP:PORT | sync)
                   [--seq-offset-s S] [--repeat N] [--port P]

Builds MsgHeader | body | HMAC-SHA256 exactly as proto/resolve_wire.hpp lays them out, signs
it with --key (the real pair key for a replay test, any other key for a forgery) and sends it from
--src (a raw IPv4 socket: the source may be another host's address) to --dst:7410. --repeat sends
the identical bytes again (a replay). Test tool only: it runs inside the test's own namespaces.
"""
import argparse
import hashlib
import hmac
import socket
import struct
import time

MAGIC, VERSION = 0x4647, 1
ANNOUNCE, SYNC = 18, 21


def pid(text):
    party, node, local = (int(x) for x in text.split("."))
    return party << 48 | node << 32 | local


def record(p, ip, port, epoch=1):
    gid = b"\x00" * 10 + b"\xff\xff" + socket.inet_aton(ip)
    # pid epoch transport flags mtu gid qpn ipv4 port reserved ttl  (48 bytes)
    return struct.pack("!QIBBH16sI4sHHI", p, epoch, 2, 0, 0, gid, 0, socket.inet_aton(ip), port, 0, 0)


def checksum(data):
    if len(data) % 2:
        data += b"\x00"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--party", type=int, required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--port", type=int, default=7410)
    ap.add_argument("--seq-offset-s", type=float, default=0.0)
    ap.add_argument("--repeat", type=int, default=1)
    # Channel 0 is the sending gateway's lcore, quiet unless it answers queries: a hand-made
    # message stamped now is then newer than anything the real gateway sent on it.
    ap.add_argument("--channel", type=int, default=0)
    ap.add_argument("what", nargs="+")
    a = ap.parse_args()

    if a.what[0] == "announce":
        ip, port = a.what[2].split(":")
        # A stream the receiver does not know, seq 1 with the snapshot flag: applied if authentic.
        body = struct.pack("!QQHBB", 0x5EED, 1, 1, 1, 0) + record(pid(a.what[1]), ip, int(port))
        mtype = ANNOUNCE
    elif a.what[0] == "sync":
        body = struct.pack("!QQI", 0x5EED, 0, 0)
        mtype = SYNC
    else:
        ap.error("what: announce PID IP:PORT | sync")
    seq = int((time.time() + a.seq_offset_s) * 1e9)
    header = struct.pack("!HBBHHQB3s", MAGIC, VERSION, mtype, a.party, len(body), seq, a.channel, b"\x00" * 3)
    msg = header + body
    msg += hmac.new(bytes.fromhex(a.key), msg, hashlib.sha256).digest()

    src, dst = socket.inet_aton(a.src), socket.inet_aton(a.dst)
    udp_len = 8 + len(msg)
    pseudo = src + dst + struct.pack("!BBH", 0, 17, udp_len)
    udp = struct.pack("!HHHH", a.port, a.port, udp_len, 0) + msg
    csum = checksum(pseudo + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", csum) + udp[8:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    for _ in range(a.repeat):
        s.sendto(ip + udp, (a.dst, 0))


if __name__ == "__main__":
    main()
