#!/usr/bin/env python3
"""tiktoken_to_cgtok.py - converts a .tiktoken rank file ("<base64 token> <rank>" per line)
into ctxguard's compact form (the layout is documented in server/core/tok.h).

    tiktoken_to_cgtok.py NAME IN.tiktoken OUT.cgtok
"""
import base64
import hashlib
import os
import struct
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: tiktoken_to_cgtok.py NAME IN.tiktoken OUT.cgtok")
    name, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
    if len(name.encode()) > 16:
        sys.exit("encoding name longer than 16 bytes")
    records, blob = bytearray(), bytearray()
    n = 0
    with open(src, "rb") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                b64, rank = line.split()
                tok = base64.b64decode(b64, validate=True)
                rank = int(rank)
            except ValueError as e:
                sys.exit(f"{src}:{lineno}: malformed line ({e})")
            if not 1 <= len(tok) <= 128 or not 0 <= rank < 2**32:
                sys.exit(f"{src}:{lineno}: token length {len(tok)} or rank {rank} out of bounds")
            records += struct.pack("<IB", rank, len(tok))
            blob += tok
            n += 1
    payload = bytes(records) + bytes(blob)
    header = b"CGTOKBP1" + name.encode().ljust(16, b"\0")
    header += struct.pack("<III", n, len(blob), 0)
    header += hashlib.sha256(payload).digest() + struct.pack("<I", 0)
    assert len(header) == 72
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(header + payload)
    os.replace(tmp, dst)
    print(f"{dst}: {name}, {n} tokens, {len(blob)} bytes")


if __name__ == "__main__":
    main()
