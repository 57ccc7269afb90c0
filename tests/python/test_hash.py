#!/usr/bin/python3
"""Cross-checks the C block-hash chain against the Python reference, and both
against the test vectors in docs/hashing.md."""
import argparse
import re
import subprocess
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__))
import strata_hash  # noqa: E402


def parse_case(fields):
    seed = bytes.fromhex(fields[0])
    bt = int(fields[1])
    tokens = [] if fields[2] == "-" else [int(t) for t in fields[2].split(",")]
    items = []
    if fields[3] != "-":
        for it in fields[3].split(";"):
            h, s, n = it.split(":")
            items.append((bytes.fromhex(h), int(s), int(n)))
    return seed, bt, tokens, items


def hexchain(ch):
    return ",".join(h.hex() for h in ch) or "-"


def image_pixels(w, h, c, rule):
    """The pixels of an image vector: 'ramp' is byte i = i mod 256, 'fill:XX'
    every byte XX (hex)."""
    n = w * h * c
    if rule == "ramp":
        return bytes(i & 255 for i in range(n))
    if rule.startswith("fill:"):
        return bytes([int(rule[5:], 16)]) * n
    raise ValueError("unknown pixel rule " + rule)


def c_image_hash(hashtool, pixels, w, h, c):
    return subprocess.run([hashtool, "image", str(w), str(h), str(c)], input=pixels,
                          check=True, capture_output=True).stdout.decode().strip()


def check_images(hashtool, doc, seed):
    """Random images hashed by C and Python, then the doc's image vectors.
    Returns how many agreed, or -1 after printing the first disagreement."""
    import random
    rng = random.Random(seed)
    count = 0
    for _ in range(40):
        w, h, c = rng.randint(1, 70), rng.randint(1, 70), rng.choice((1, 3))
        px = bytes(rng.getrandbits(8) for _ in range(w * h * c))
        want = strata_hash.image_hash(px, w, h, c).hex()
        got = c_image_hash(hashtool, px, w, h, c)
        if got != want:
            print("image MISMATCH %dx%dx%d (rng seed %d): C %s Python %s" % (w, h, c, seed, got, want))
            return -1
        count += 1
    vectors = re.findall(r"^image (\d+) (\d+) (\d+) (\S+)\n\s*hash (\S+)$", doc, re.M)
    assert len(vectors) >= 3, "docs/hashing.md has %d image vectors" % len(vectors)
    for w, h, c, rule, want in vectors:
        w, h, c = int(w), int(h), int(c)
        px = image_pixels(w, h, c, rule)
        py = strata_hash.image_hash(px, w, h, c).hex()
        cc = c_image_hash(hashtool, px, w, h, c)
        if py != want or cc != want:
            print("image vector %dx%dx%d %s: doc %s Python %s C %s" % (w, h, c, rule, want, py, cc))
            return -1
        count += 1
    print("images: %d random and %d doc vectors agree in C and Python" % (count - len(vectors),
                                                                        len(vectors)))
    return count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hashtool", required=True)
    ap.add_argument("--doc", required=True)
    ap.add_argument("--chains", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else (__import__("time").time_ns() & 0xFFFFFFFF)

    # 1. Random chains generated and hashed by C, recomputed in Python.
    out = subprocess.run([args.hashtool, "cases", str(args.chains), str(seed)],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    assert len(out) == args.chains, "hashtool printed %d cases" % len(out)
    with_extras = 0
    blocks = 0
    for line in out:
        f = line.split(" ")
        s, bt, toks, items = parse_case(f)
        want = strata_hash.chain(s, toks, bt, items)
        if hexchain(want) != f[4]:
            print("MISMATCH (rng seed %d):\n  case %s\n  python %s" % (seed, line, hexchain(want)))
            return 1
        with_extras += bool(items)
        blocks += len(want)
    print("random chains: %d agree (%d with extras, %d blocks, rng seed %d)"
          % (len(out), with_extras, blocks, seed))
    assert with_extras >= args.chains // 3, "too few cases with extras"

    # 2. The test vectors of docs/hashing.md, for Python and for C.
    doc = open(args.doc).read()
    vectors = re.findall(r"^vector (\S+) (\d+) (\S+) (\S+)\n\s*chain (\S+)$", doc, re.M)
    assert len(vectors) >= 4, "docs/hashing.md has %d vectors" % len(vectors)
    lines = []
    for v in vectors:
        s, bt, toks, items = parse_case(v[:4])
        got = hexchain(strata_hash.chain(s, toks, bt, items))
        if got != v[4]:
            print("doc vector disagrees with Python:\n  %s\n  got %s" % (v, got))
            return 1
        lines.append(" ".join(v[:4]))
    c_out = subprocess.run([args.hashtool, "chain"], input="\n".join(lines) + "\n",
                           check=True, capture_output=True, text=True).stdout.splitlines()
    for v, got in zip(vectors, c_out):
        if got != v[4]:
            print("doc vector disagrees with C:\n  %s\n  got %s" % (v, got))
            return 1
    print("docs/hashing.md: %d vectors agree in C and Python" % len(vectors))

    # 3. st_hash_image: random images in C and Python, and the doc's image vectors.
    n_images = check_images(args.hashtool, doc, seed)
    if n_images < 0:
        return 1
    print("%d passed, 0 failed" % (len(out) + len(vectors) + n_images))
    return 0


if __name__ == "__main__":
    sys.exit(main())
