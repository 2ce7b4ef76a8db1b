#!/usr/bin/env python3
"""The kernel's view of a mounted tree, as JSON on stdout: for every path
(sorted, the root first) its mode, uid, gid, size, link count, inode number,
symlink target, every xattr (hex) and, for regular files, the CRC-32 (zlib)
of its content. The corpus generators record it beside each image as the
oracle the tests compare csumkit's readers with."""
import json
import os
import stat
import sys
import zlib


def view(root):
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        names = ([""] if dirpath == root else []) + sorted(dirnames) + sorted(filenames)
        for name in names:
            path = os.path.join(dirpath, name) if name else root
            st = os.lstat(path)
            entry = {
                "path": "/" + os.path.relpath(path, root) if path != root else "/",
                "mode": st.st_mode, "uid": st.st_uid, "gid": st.st_gid,
                "size": st.st_size, "nlink": st.st_nlink, "ino": st.st_ino,
                "target": os.readlink(path) if stat.S_ISLNK(st.st_mode) else None,
                "xattrs": {x: os.getxattr(path, x, follow_symlinks=False).hex()
                           for x in sorted(os.listxattr(path, follow_symlinks=False))},
            }
            if stat.S_ISREG(st.st_mode):
                crc = 0
                with open(path, "rb") as f:
                    while chunk := f.read(1 << 20):
                        crc = zlib.crc32(chunk, crc)
                entry["crc32"] = crc
            entries.append(entry)
    return entries


if __name__ == "__main__":
    json.dump(view(sys.argv[1]), sys.stdout, sort_keys=True, separators=(",", ":"))
