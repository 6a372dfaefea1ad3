#!/usr/bin/env python3
"""Writes the seed corpus of the wire_decode fuzz target: fuzz/corpus/wire_decode/<sha1>.

Seeds: the kernel packets of shared/golden/kernel-packets.json, a hand-built valid packet (or
several) of each of the nine types, invalid packets of every error class, and every `hex`
value in conformance/vectors/wire.json when that file exists. Files are named by the SHA-1 of
their content, as libFuzzer names the inputs it adds, so re-running is harmless. It only adds
files. Run from anywhere: python3 fuzz/seed_corpus.py [--golden PATH] [--vectors PATH]
"""

import argparse
import hashlib
import json
import struct
from pathlib import Path

FUZZ = Path(__file__).resolve().parent
ROOT = FUZZ.parent

DATA, GRANT, RESEND, RPC_UNKNOWN, BUSY, CUTOFFS, FREEZE, NEED_ACK, ACK = range(0x10, 0x19)


def common(ptype, sport=40000, dport=99, sequence=0, sender_id=1000, doff=None,
           flags=0, window=0, checksum=0, urgent=0):
    """The 28-byte common header (spec 1.2): ports, sequence, 3 reserved bytes, type, doff,
    flags, window, checksum, urgent, sender_id."""
    if doff is None:
        doff = 0xE0 if ptype == DATA else 0x50
    return struct.pack(">HHI3sBBBHHHQ", sport, dport, sequence, b"\0\0\0", ptype, doff,
                       flags, window, checksum, urgent, sender_id)


def ack(client_id=0, server_port=0):
    return struct.pack(">QH", client_id, server_port)


def data(payload=b"", message_length=None, incoming=None, offset=0, seg_offset=None,
         ack_rec=b"\0" * 10, cutoff_version=0, retransmit=0, **hdr):
    """DATA: seg.offset defaults to `offset`; pass seg_offset=0xFFFFFFFF to carry the offset
    in `sequence` as the module does."""
    if message_length is None:
        message_length = offset + len(payload)
    if incoming is None:
        incoming = message_length
    if seg_offset is None:
        seg_offset = offset
    hdr.setdefault("sequence", offset)
    body = struct.pack(">II", message_length, incoming) + ack_rec
    body += struct.pack(">HB3sI", cutoff_version, retransmit, b"\0\0\0", seg_offset)
    return common(DATA, **hdr) + body + payload


def grant(offset, priority, **hdr):
    return common(GRANT, **hdr) + struct.pack(">IB", offset, priority)


def resend(offset, length, priority, **hdr):
    return common(RESEND, **hdr) + struct.pack(">IIB", offset, length, priority)


def cutoffs(table, version, **hdr):
    return common(CUTOFFS, **hdr) + struct.pack(">8IH", *table, version)


def ack_packet(acks, num_acks=None, **hdr):
    slots = list(acks) + [ack()] * (5 - len(acks))
    n = len(acks) if num_acks is None else num_acks
    return common(ACK, **hdr) + struct.pack(">H", n) + b"".join(slots)


def hand_built():
    """Valid packets of all nine types, then invalid ones."""
    module = dict(flags=0x06, urgent=0xB97D, checksum=0x8C6C)  # what the module sends
    payload = bytes(range(256)) * 6
    valid = [
        data(b"hello", sender_id=1000),
        data(payload[:1424], message_length=500000, incoming=40000, offset=1424 * 3),
        data(payload[:100], seg_offset=0xFFFFFFFF, sequence=0, sender_id=1001, **module),
        data(payload[:1000], message_length=1_000_000, offset=999_000, retransmit=1,
             ack_rec=ack(998, 99), cutoff_version=1),
        data(payload[:1420], message_length=100_000, offset=2840, doff=0xD0),
        data(b"", message_length=1),  # a header with no payload
        grant(10000, 3, sender_id=1001),
        grant(0xFFFFFFFF, 7, **module),
        grant(50000, 0) + b"\x01",  # the pre-2025 34-byte GRANT with `resend_all`
        resend(0, 0xFFFFFFFF, 7),  # "resend everything"
        resend(2848, 1424, 5, sender_id=1001),
        common(RPC_UNKNOWN, sender_id=1001),
        common(BUSY, sender_id=1001),
        cutoffs([0, 0, 0, 0, 1_000_000, 15000, 2800, 200], 1, sender_id=1001, **module),
        cutoffs([0x7FFFFFFF] * 8, 0xFFFF),
        common(FREEZE),
        common(NEED_ACK, sender_id=1001, **module),
        ack_packet([]),
        ack_packet([ack(1000, 99)]),
        ack_packet([ack(1000 + 2 * i, 99 + i) for i in range(5)], sender_id=2000),
    ]
    invalid = [
        b"",
        common(BUSY)[:27],  # shorter than the common header
        common(0x0F),  # type codes just outside 0x10..=0x18
        common(0x19),
        common(0x00),
        data(b"x")[:55],  # truncated DATA header
        data(b"", message_length=0),  # message_length 0
        data(b"x", message_length=1_000_001),  # above HOMA_MAX_MESSAGE_LENGTH
        data(b"abcd", message_length=10, offset=8),  # payload past the message end
        data(b"abcd", message_length=10, offset=0xFFFFFFFE),  # offset overflow
        data(b"ab", message_length=10, seg_offset=0xFFFFFFFF, sequence=9),
        grant(100, 0)[:32],
        grant(100, 8),  # priority above 7
        resend(0, 100, 0)[:36],  # the upstream 36-byte RESEND
        resend(0, 100, 0xFF),
        cutoffs([0] * 8, 1)[:61],
        ack_packet([])[:79],
        ack_packet([ack(1000, 99)], num_acks=6),  # more than five acks
        ack_packet([], num_acks=0xFFFF),
    ]
    return valid + invalid


def golden(path):
    return [bytes.fromhex(p["hex"]) for p in json.loads(path.read_text())["packets"]]


def vector_hexes(node):
    """Every string under a `hex` key, anywhere in the JSON tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "hex" and isinstance(value, str):
                yield value
            else:
                yield from vector_hexes(value)
    elif isinstance(node, list):
        for value in node:
            yield from vector_hexes(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--golden", type=Path,
                        default=ROOT.parent / "shared" / "golden" / "kernel-packets.json")
    parser.add_argument("--vectors", type=Path,
                        default=ROOT / "conformance" / "vectors" / "wire.json")
    args = parser.parse_args()

    seeds = golden(args.golden) + hand_built()
    if args.vectors.exists():
        hexes = list(vector_hexes(json.loads(args.vectors.read_text())))
        seeds += [bytes.fromhex(h) for h in hexes]
        print(f"{args.vectors}: {len(hexes)} vectors")
    else:
        print(f"{args.vectors}: not found, skipped")

    out = FUZZ / "corpus" / "wire_decode"
    out.mkdir(parents=True, exist_ok=True)
    added = 0
    for seed in seeds:
        path = out / hashlib.sha1(seed).hexdigest()
        if not path.exists():
            path.write_bytes(seed)
            added += 1
    print(f"{out}: {len(seeds)} seeds, {added} new files")


if __name__ == "__main__":
    main()
