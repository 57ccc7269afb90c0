#!/usr/bin/env python3
"""check_exports.py PREFIX - the two rules of what strata installs.

1. Every symbol that an installed shared library exports (nm -D --defined-only)
   is an st_ function declared ST_API in an installed header: no internal
   module, no protobuf-c, xxhash or srpc_ symbol leaks.
2. Every installed header has its library installed: each function it declares
   ST_API is exported by an installed library, and each strata/ header it
   includes is installed too.

Prints one line per violation and exits 1 when there is any.
"""
import os
import re
import subprocess
import sys

DECL = re.compile(r"\bST_API\b[^;{}]*?\b(st_\w+)\s*\(")
INCLUDE = re.compile(r'#\s*include\s*[<"](strata/[\w.]+)[>"]')


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def headers(prefix):
    found = {}
    for root, _, files in os.walk(os.path.join(prefix, "include")):
        for name in files:
            if name.endswith(".h"):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, os.path.join(prefix, "include"))
                with open(path, encoding="utf-8") as f:
                    found[rel] = strip_comments(f.read())
    return found


def libraries(prefix):
    libs = []
    for root, _, files in os.walk(prefix):
        for name in files:
            path = os.path.join(root, name)
            if ".so" in name and not os.path.islink(path):
                libs.append(path)
    return sorted(libs)


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()}


def main():
    if len(sys.argv) != 2:
        print("usage: check_exports.py PREFIX", file=sys.stderr)
        return 2
    prefix = sys.argv[1]
    hdrs = headers(prefix)
    libs = libraries(prefix)
    declared = {}  # function -> header
    for rel, text in hdrs.items():
        for name in DECL.findall(text):
            declared[name] = rel
    bad = 0
    all_exported = set()
    for lib in libs:
        syms = exported(lib)
        all_exported |= syms
        for sym in sorted(syms):
            if not sym.startswith("st_") or sym not in declared:
                print(f"{os.path.relpath(lib, prefix)} exports {sym}, "
                      "not an ST_API function of an installed header")
                bad += 1
    for name, rel in sorted(declared.items()):
        if name not in all_exported:
            print(f"include/{rel} declares {name}, but no installed library exports it")
            bad += 1
    for rel, text in sorted(hdrs.items()):
        for inc in INCLUDE.findall(text):
            if inc not in hdrs:
                print(f"include/{rel} includes {inc}, which is not installed")
                bad += 1
    print(f"{len(libs)} installed libraries, {len(all_exported)} exported symbols, "
          f"{len(hdrs)} installed headers, {len(declared)} ST_API functions: {bad} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
