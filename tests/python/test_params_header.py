#!/usr/bin/python3
"""The package's st_client_params_t table (client/python/strata/params.py)
against include/strata/strata.h: every field of the C struct, in order,
with its C type, and its ST_CLIENT_FIELD_ bit, so the binding cannot drift
from the header. The check is also run on an altered copy of the header
(a field added, a type changed, a bit moved) and must report each, so the
test is shown to fail. Needs no daemon; loads libstrata (--lib)."""
import argparse
import os
import re
import sys

CTYPES = {"const char *": "str", "uint32_t": "u32", "int": "int"}


def parse_header(text):
    """([(name, ctype)] of st_client_params_t after field_mask, {FLAG: bit})."""
    m = re.search(r"typedef struct st_client_params \{(.*?)\} st_client_params_t;", text, re.S)
    if not m:
        raise SystemExit("strata.h: no st_client_params_t")
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    fields = []
    for decl in body.split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        dm = re.fullmatch(r"(const char \*|[a-z0-9_]+) ?\*?([a-z_0-9]+)", decl)
        if not dm:
            raise SystemExit("strata.h: cannot read the declaration %r" % decl)
        ctype = dm.group(1).strip() if "*" not in decl else "const char *"
        fields.append((dm.group(2), ctype))
    if fields[0] != ("field_mask", "uint64_t"):
        raise SystemExit("strata.h: st_client_params_t does not start with field_mask")
    em = re.search(r"enum st_client_field \{(.*?)\};", text, re.S)
    bits = {n: int(b) for n, b in re.findall(r"ST_CLIENT_FIELD_([A-Z_]+) = 1u << (\d+)",
                                             em.group(1))}
    return fields[1:], bits


def compare(fields, bits, table):
    """The differences between the header and the table, one line each."""
    problems = []
    names = [f.name for f in table]
    for i, (name, ctype) in enumerate(fields):
        if name not in names:
            problems.append("field %s (%s) of strata.h is missing from the binding" %
                            (name, ctype))
            continue
        f = table[names.index(name)]
        if names.index(name) != i:
            problems.append("field %s: position %d in strata.h, %d in the binding" %
                            (name, i, names.index(name)))
        if CTYPES.get(ctype) != f.ctype:
            problems.append("field %s: %s in strata.h, %s in the binding" % (name, ctype, f.ctype))
        if bits.get(f.flag) != f.bit:
            problems.append("field %s: ST_CLIENT_FIELD_%s is bit %s in strata.h, %d in the "
                            "binding" % (name, f.flag, bits.get(f.flag), f.bit))
    for n in names:
        if n not in [x for x, _ in fields]:
            problems.append("field %s of the binding is not in strata.h" % n)
    used = {f.flag for f in table}
    for flag in bits:
        if flag not in used:
            problems.append("ST_CLIENT_FIELD_%s has no field in the binding" % flag)
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--binding", required=True)
    ap.add_argument("--header", required=True)
    args = ap.parse_args()
    os.environ["STRATA_LIB"] = args.lib
    sys.path.insert(0, args.binding)
    import strata
    from strata import params

    text = open(args.header).read()
    fields, bits = parse_header(text)
    assert len(fields) >= 19, fields
    problems = compare(fields, bits, params.FIELDS)
    if problems:
        raise SystemExit("the binding disagrees with strata.h:\n  " + "\n  ".join(problems))
    # The ctypes struct has the header's layout: field_mask, then each field in order.
    cnames = [n for n, _ in params.CParams._fields_]
    assert cnames == ["field_mask"] + [n for n, _ in fields], cnames

    # The check can fail: a field added, a type changed and a bit moved are each reported.
    added = text.replace("const char *etcd_prefix;",
                         "const char *etcd_prefix;\n    uint32_t lease_ms;")
    grown = text.replace("ST_CLIENT_FIELD_ETCD_PREFIX = 1u << 19,",
                         "ST_CLIENT_FIELD_ETCD_PREFIX = 1u << 19,\n    "
                         "ST_CLIENT_FIELD_LEASE = 1u << 20,")
    retyped = text.replace("uint32_t copy_threads;", "int copy_threads;")
    moved = text.replace("ST_CLIENT_FIELD_VNODES = 1u << 6,", "ST_CLIENT_FIELD_VNODES = 1u << 21,")
    for altered, want in ((added, "lease_ms (uint32_t) of strata.h is missing"),
                          (grown, "ST_CLIENT_FIELD_LEASE has no field"),
                          (retyped, "copy_threads: int in strata.h, u32"),
                          (moved, "ST_CLIENT_FIELD_VNODES is bit 21")):
        assert altered != text, want
        got = compare(*parse_header(altered), params.FIELDS)
        assert any(want in p for p in got), (want, got)

    # Every field reaches the struct with its bit (the values libstrata will read).
    values = {f.name: (f.choices[0] if f.choices else "x") if f.ctype == "str" else 1
              for f in params.FIELDS}
    p, keep = strata.ClientParams(**values).to_c()
    for f in params.FIELDS:
        assert p.field_mask & (1 << f.bit), f.name
        got = getattr(p, f.name)
        assert got == (values[f.name].encode() if f.ctype == "str" else 1), (f.name, got)
    assert p.field_mask == sum(1 << f.bit for f in params.FIELDS)
    print("%d fields of st_client_params_t match strata.h; 4 alterations caught" % len(fields))


if __name__ == "__main__":
    main()
