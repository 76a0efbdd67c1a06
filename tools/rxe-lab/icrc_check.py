#!/usr/bin/env python3
"""Independent ICRC check of a lab capture (classic pcap, Ethernet), sharing no code with
softverbs: for every IPv4/IPv6 UDP datagram to port 4791, CRC-32 (zlib) over 8 bytes of 0xff,
the IP header with TOS/TTL/checksum (IPv6: traffic class, flow label, hop limit) set to ones,
the UDP header with its checksum set to ones, the BTH with byte 4 set to ones, and the rest of
the packet up to the ICRC; the 4 ICRC bytes are that CRC little-endian.

Usage: icrc_check.py FILE.pcap. Prints a summary; exit 0 only if there is at least one RoCE
packet and no bad ICRC."""
import struct
import sys
import zlib

ROCE_PORT = 4791


def frames(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise ValueError("not a classic pcap file")
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    if linktype != 1:
        raise ValueError(f"link type {linktype}, expected Ethernet (1)")
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack(endian + "I", data[off + 8:off + 12])[0]
        yield data[off + 16:off + 16 + incl]
        off += 16 + incl


def icrc_of(frame):
    """(computed, stored) for a RoCEv2 frame, None for anything else."""
    ethertype = struct.unpack(">H", frame[12:14])[0]
    net = frame[14:]
    if ethertype == 0x0800:
        ihl = (net[0] & 0x0F) * 4
        if net[9] != 17 or ihl != 20:
            return None
        total = struct.unpack(">H", net[2:4])[0]
        ip = bytearray(net[:20])
        ip[1] = 0xFF           # TOS
        ip[8] = 0xFF           # TTL
        ip[10:12] = b"\xff\xff"  # header checksum
        udp = net[20:total]
    elif ethertype == 0x86DD:
        if net[6] != 17:
            return None
        plen = struct.unpack(">H", net[4:6])[0]
        ip = bytearray(net[:40])
        ip[0] |= 0x0F          # traffic class (low half of byte 0, high half of byte 1)
        ip[1] = 0xFF           # traffic class + flow label
        ip[2:4] = b"\xff\xff"  # flow label
        ip[7] = 0xFF           # hop limit
        udp = net[40:40 + plen]
    else:
        return None
    if len(udp) < 8 + 12 + 4 or struct.unpack(">H", udp[2:4])[0] != ROCE_PORT:
        return None
    udp_hdr = bytearray(udp[:8])
    udp_hdr[6:8] = b"\xff\xff"
    bth = bytearray(udp[8:20])
    bth[4] = 0xFF
    body = udp[20:-4]
    crc = zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp_hdr) + bytes(bth) + body)
    return crc, struct.unpack("<I", udp[-4:])[0]


def main():
    roce = bad = 0
    for n, frame in enumerate(frames(sys.argv[1]), 1):
        r = icrc_of(frame)
        if r is None:
            continue
        roce += 1
        if r[0] != r[1]:
            bad += 1
            print(f"frame {n}: ICRC {r[1]:08x}, computed {r[0]:08x}")
    print(f"{roce} roce, {bad} bad icrc")
    sys.exit(0 if roce and not bad else 1)


if __name__ == "__main__":
    main()
