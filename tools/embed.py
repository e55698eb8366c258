#!/usr/bin/env python3
"""Embed a file into C as `const char NAME[]` and `const unsigned long NAME_len`."""
import sys

src, dst, name = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(src, "rb").read()
with open(dst, "w") as out:
    out.write("/* Generated from %s by tools/embed.py; do not edit. */\n" % src.split("/")[-1])
    out.write("const char %s[] = {\n" % name)
    for i in range(0, len(data), 16):
        out.write("    " + ", ".join("0x%02x" % b for b in data[i:i + 16]) + ",\n")
    out.write("    0x00\n};\n")
    out.write("const unsigned long %s_len = %d;\n" % (name, len(data)))
