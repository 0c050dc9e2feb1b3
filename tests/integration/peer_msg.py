#!/usr/bin/python3
"""Sends one hand-made gateway-to-gateway resolution message, for tests of the receiving checks.

usage: peer_msg.py --src IP --dst IP --party N --key HEX (announce PID IP:PORT | sync)
                   [--key-id N] [--seq-offset-s S] [--repeat N] [--port P] [--flood-s S]

Builds MsgHeader | body | HMAC-SHA256 exactly as proto/resolve_wire.hpp lays them out, signs
it with --key (the real pair key for a replay test, any other key for a forgery) and sends it from
--src (a raw IPv4 socket: the source may be another host's address) to --dst:7410. --repeat sends
the identical bytes again (a replay). --flood-s S sends forgeries as fast as it can for S seconds:
sync messages naming the key ID with a MAC of random bytes and a fresh sequence number each second
(a forgery never moves the receiver's replay window, so every copy reaches the MAC check unless
the peer's budget stops it); it prints how many it sent. Test tool only: it runs inside the test's own namespaces.
"""
import argparse
import hashlib
import hmac
import os
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


def derived_key_id(key):
    # 1 + byte 8 of SHA-256("fedgate peer key\0" || key) mod 255 (dataplane/peer_auth.cpp, derived_key_id)
    return 1 + hashlib.sha256(b"fedgate peer key\0" + key).digest()[8] % 255


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--party", type=int, required=True)
    ap.add_argument("--key", required=True)
    # The key's ID as the header names it: what fedgated derives from the key unless given.
    ap.add_argument("--key-id", type=int)
    ap.add_argument("--port", type=int, default=7410)
    ap.add_argument("--seq-offset-s", type=float, default=0.0)
    ap.add_argument("--repeat", type=int, default=1)
    # Channel 0 is the sending gateway's lcore, quiet unless it answers queries: a hand-made
    # message stamped now is then newer than anything the real gateway sent on it.
    ap.add_argument("--channel", type=int, default=0)
    ap.add_argument("--flood-s", type=float, default=0.0)
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
    key = bytes.fromhex(a.key)
    key_id = a.key_id if a.key_id is not None else derived_key_id(key)
    header = struct.pack("!HBBHHQBB2s", MAGIC, VERSION, mtype, a.party, len(body), seq, a.channel, key_id, b"\x00" * 2)
    msg = header + body
    msg += hmac.new(key, msg, hashlib.sha256).digest()

    src, dst = socket.inet_aton(a.src), socket.inet_aton(a.dst)
    udp_len = 8 + len(msg)
    pseudo = src + dst + struct.pack("!BBH", 0, 17, udp_len)
    udp = struct.pack("!HHHH", a.port, a.port, udp_len, 0) + msg
    csum = checksum(pseudo + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", csum) + udp[8:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    if a.flood_s <= 0:
        for _ in range(a.repeat):
            s.sendto(ip + udp, (a.dst, 0))
        return
    sent, start = 0, time.monotonic()
    while time.monotonic() - start < a.flood_s:
        header = struct.pack("!HBBHHQBB2s", MAGIC, VERSION, mtype, a.party, len(body), time.time_ns(), a.channel,
                             key_id, b"\x00" * 2)
        msg = header + body + os.urandom(32)
        udp = struct.pack("!HHHH", a.port, a.port, udp_len, 0) + msg
        udp = udp[:6] + struct.pack("!H", checksum(pseudo + udp) or 0xFFFF) + udp[8:]
        for _ in range(2000):
            try:
                s.sendto(ip + udp, (a.dst, 0))
                sent += 1
            except OSError:  # the socket's buffer is full: the flood is as fast as it gets
                pass
    elapsed = time.monotonic() - start
    print(f"flood: {sent} forged messages in {elapsed:.1f} s ({sent / elapsed:.0f}/s)")


if __name__ == "__main__":
    main()
