#!/usr/bin/python3
"""Where two builds of the appliance image differ.

    images/compare-images.py A.img B.img

Reports the bytes that differ per region (partition table and boot code, boot partition,
root file system). In the root file system (ext4) each differing byte is placed: in an
inode table it is named by inode field (ctime, checksum ...), elsewhere by block. Exit 0
when the images differ only in inode change times and the inode checksums that cover
them (or not at all), 1 otherwise.
"""
import struct
import sys
from collections import Counter

CHUNK = 1 << 20

# ext4 inode fields by byte offset (struct ext4_inode, 256-byte inodes).
INODE_FIELDS = [
    (0x00, 2, "mode"), (0x02, 2, "uid"), (0x04, 4, "size"), (0x08, 4, "atime"),
    (0x0C, 4, "ctime"), (0x10, 4, "mtime"), (0x14, 4, "dtime"), (0x18, 2, "gid"),
    (0x1A, 2, "links"), (0x1C, 4, "blocks"), (0x20, 4, "flags"), (0x24, 4, "version"),
    (0x28, 60, "block map/extents"), (0x64, 4, "generation"), (0x68, 4, "file_acl"),
    (0x6C, 4, "size_high"), (0x70, 4, "obso_faddr"), (0x74, 8, "osd2"),
    (0x7C, 2, "checksum_lo"), (0x7E, 2, "reserved"), (0x80, 2, "extra_isize"),
    (0x82, 2, "checksum_hi"), (0x84, 4, "ctime_extra"), (0x88, 4, "mtime_extra"),
    (0x8C, 4, "atime_extra"), (0x90, 4, "crtime"), (0x94, 4, "crtime_extra"),
    (0x98, 4, "version_hi"), (0x9C, 4, "projid"), (0xA0, 96, "in-inode xattrs"),
]
# What a build may change: the change times mke2fs copies from the build directory, and
# the checksums over them.
ALLOWED = {"ctime", "ctime_extra", "checksum_lo", "checksum_hi"}


def field(offset):
    for start, size, name in INODE_FIELDS:
        if start <= offset < start + size:
            return name
    return f"inode byte 0x{offset:02x}"


def partitions(f):
    f.seek(0)
    mbr = f.read(512)
    parts = []
    for i in range(4):
        entry = mbr[446 + 16 * i:446 + 16 * (i + 1)]
        start, size = struct.unpack_from("<II", entry, 8)
        if size:
            parts.append((start * 512, size * 512))
    return parts


def inode_tables(f, base):
    """[(first byte, last byte + 1, first inode number)] of each group's inode table."""
    f.seek(base + 1024)
    sb = f.read(1024)
    inodes_per_group = struct.unpack_from("<I", sb, 0x28)[0]
    block_size = 1024 << struct.unpack_from("<I", sb, 0x18)[0]
    inode_size = struct.unpack_from("<H", sb, 0x58)[0]
    blocks = struct.unpack_from("<I", sb, 0x04)[0]
    blocks_per_group = struct.unpack_from("<I", sb, 0x20)[0]
    incompat = struct.unpack_from("<I", sb, 0x60)[0]
    desc_size = struct.unpack_from("<H", sb, 0xFE)[0] if incompat & 0x80 else 32
    groups = (blocks + blocks_per_group - 1) // blocks_per_group
    gdt = base + (1 if block_size > 1024 else 2) * block_size
    f.seek(gdt)
    raw = f.read(groups * desc_size)
    tables = []
    for g in range(groups):
        d = raw[g * desc_size:(g + 1) * desc_size]
        lo = struct.unpack_from("<I", d, 0x08)[0]
        hi = struct.unpack_from("<I", d, 0x28)[0] if desc_size >= 64 else 0
        start = base + ((hi << 32) | lo) * block_size
        tables.append((start, start + inodes_per_group * inode_size, g * inodes_per_group + 1))
    return tables, inode_size, block_size


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, b = (open(p, "rb") for p in sys.argv[1:])
    parts = partitions(a)
    if parts != partitions(b):
        print("partition tables differ")
        return 1
    (boot_start, boot_size), (root_start, root_size) = parts
    tables, inode_size, block_size = inode_tables(a, root_start)

    def region(pos):
        if pos < boot_start:
            return "MBR and gap"
        if pos < boot_start + boot_size:
            return "boot partition"
        if pos < root_start + root_size:
            return "root file system"
        return "after the partitions"

    by_region, by_field, inodes = Counter(), Counter(), set()
    pos = 0
    a.seek(0)
    b.seek(0)
    while True:
        x, y = a.read(CHUNK), b.read(CHUNK)
        if not x and not y:
            break
        if x != y:
            for i in range(0, max(len(x), len(y)), inode_size):
                if x[i:i + inode_size] == y[i:i + inode_size]:
                    continue
                for j in range(i, min(i + inode_size, max(len(x), len(y)))):
                    if j < len(x) and j < len(y) and x[j] == y[j]:
                        continue
                    p = pos + j
                    by_region[region(p)] += 1
                    if region(p) != "root file system":
                        continue
                    for start, end, first in tables:
                        if start <= p < end:
                            inodes.add(first + (p - start) // inode_size)
                            by_field[field((p - start) % inode_size)] += 1
                            break
                    else:
                        by_field[f"block {(p - root_start) // block_size} (not an inode)"] += 1
        pos += CHUNK

    if not by_region:
        print("identical")
        return 0
    for r, n in sorted(by_region.items()):
        print(f"{r}: {n} bytes differ")
    print(f"root file system: {len(inodes)} inodes differ, by field:")
    for f, n in by_field.most_common():
        print(f"  {f}: {n} bytes")
    only_times = set(by_region) == {"root file system"} and set(by_field) <= ALLOWED
    print("only inode change times (and their checksums) differ" if only_times
          else "differences beyond inode change times")
    return 0 if only_times else 1


if __name__ == "__main__":
    sys.exit(main())
