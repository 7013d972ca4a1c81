"""Zip bombs for tests, written in milliseconds: one deflated member whose data is a
given head followed by gigabytes of zeros.

Deflating a mebibyte of zeros once and repeating the compressed piece gives the
stream zlib would give for all of them (a full flush resets the compressor), so
nothing large is ever compressed or held. The CRC is left 0: readers that refuse the
member before reading its data, as they must, never see the difference.
"""

from __future__ import annotations

import struct
import zlib

MIB = 1 << 20


def deflated(head: bytes, zero_mib: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    piece = c.compress(bytes(MIB)) + c.flush(zlib.Z_FULL_FLUSH)
    return first + piece * zero_mib + c.flush()


def write_zip_bomb(path, name: str, head: bytes, zero_mib: int) -> int:
    """Write the archive; returns the member's uncompressed size."""
    data = deflated(head, zero_mib)
    size = len(head) + zero_mib * MIB
    encoded = name.encode()
    sizes = struct.pack("<HHQQ", 1, 16, size, len(data))   # zip64 extra field: both sizes
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 45, 0, 8, 0, 0x21, 0, 0xFFFFFFFF, 0xFFFFFFFF,
                        len(encoded), len(sizes)) + encoded + sizes
    central = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 45, 45, 0, 8, 0, 0x21, 0, 0xFFFFFFFF, 0xFFFFFFFF,
                          len(encoded), len(sizes), 0, 0, 0, 0, 0) + encoded + sizes
    start = len(local) + len(data)
    end64 = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 1, 1, len(central), start)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, start + len(central), 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(central), start, 0)
    with open(path, "wb") as f:
        f.write(local + data + central + end64 + locator + end)
    return size
