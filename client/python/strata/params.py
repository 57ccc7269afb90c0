"""st_client_params_t: the connection parameters, one table.

FIELDS lists every field of st_client_params_t (include/strata/strata.h) in
the struct's order with its C type and its ST_CLIENT_FIELD_ bit;
the ctypes struct, ClientParams and the checks are built from it, and
tests/python/test_params_header.py fails when strata.h gains a field that
is not here (or the two disagree on a type, an order or a bit).
"""

import ctypes
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple


class Field(NamedTuple):
    name: str  # the struct member
    ctype: str  # "str" (const char *), "u32" (uint32_t) or "int"
    flag: str  # the enum st_client_field name after ST_CLIENT_FIELD_
    bit: int  # its bit in field_mask
    lo: Optional[int] = None  # inclusive bounds of an integer, where strata.h states them
    hi: Optional[int] = None
    choices: Tuple[str, ...] = ()  # allowed strings ("name:" allows a "name:..." suffix)


FIELDS: Tuple[Field, ...] = (
    Field("nodes", "str", "NODES", 0),
    Field("config_file", "str", "CONFIG_FILE", 1),
    Field("tenant", "str", "TENANT", 2),
    Field("model", "str", "MODEL", 3),
    Field("token", "str", "TOKEN", 4),
    Field("replicas", "u32", "REPLICAS", 5, 0, 16),
    Field("vnodes", "u32", "VNODES", 6),
    Field("timeout_ms", "u32", "TIMEOUT", 7),
    Field("transport", "str", "TRANSPORT", 8,
          choices=("inline", "ucx", "libfabric", "libfabric:")),
    Field("health_interval_ms", "u32", "HEALTH_INTERVAL", 9),
    Field("verify_reads", "str", "VERIFY_READS", 10, choices=("lease", "always")),
    Field("cache_locations", "str", "CACHE_LOCATIONS", 11, choices=("rows", "all")),
    Field("transport_calls", "int", "TRANSPORT_CALLS", 12, 0, 1),
    Field("copy_threads", "u32", "COPY_THREADS", 13, 1, 16),
    Field("write_quorum", "u32", "WRITE_QUORUM", 14, 0, 16),
    Field("tls_ca", "str", "TLS_CA", 15),
    Field("tls_cert", "str", "TLS_CERT", 16),
    Field("tls_key", "str", "TLS_KEY", 17),
    Field("etcd", "str", "ETCD", 18),
    Field("etcd_prefix", "str", "ETCD_PREFIX", 19),
)

BY_NAME: Dict[str, Field] = {f.name: f for f in FIELDS}
_CTYPES = {"str": ctypes.c_char_p, "u32": ctypes.c_uint32, "int": ctypes.c_int}
SECRET = frozenset(("token",))  # never shown by repr()


class CParams(ctypes.Structure):
    """st_client_params_t itself (field_mask, then FIELDS in order)."""

    _fields_ = [("field_mask", ctypes.c_uint64)] + [(f.name, _CTYPES[f.ctype]) for f in FIELDS]


def _check_value(f: Field, v: Any) -> Any:
    """v converted for field f, or InvalidArgument naming the field."""
    from .errors import InvalidArgument

    if f.ctype == "str":
        if isinstance(v, bytes):
            v = v.decode()
        if not isinstance(v, str):
            raise InvalidArgument("%s: expected a string, not %s" % (f.name, type(v).__name__))
        if "\0" in v:
            raise InvalidArgument("%s: a NUL byte in %r" % (f.name, v))
        if f.choices and v not in f.choices and not any(
                c.endswith(":") and v.startswith(c) and len(v) > len(c) for c in f.choices):
            raise InvalidArgument("%s: %r is not one of %s" % (f.name, v, ", ".join(
                c + "<provider>" if c.endswith(":") else c for c in f.choices)))
        return v
    if isinstance(v, bool):
        v = int(v)
    if not isinstance(v, int):
        raise InvalidArgument("%s: expected an integer, not %s" % (f.name, type(v).__name__))
    lo = f.lo if f.lo is not None else (0 if f.ctype == "u32" else -(1 << 31))
    hi = f.hi if f.hi is not None else ((1 << 32) - 1 if f.ctype == "u32" else (1 << 31) - 1)
    if not lo <= v <= hi:
        raise InvalidArgument("%s: %d is out of range %d..%d" % (f.name, v, lo, hi))
    return v


class ClientParams:
    """The fields to connect with; a field left None takes libstrata's
    default (its bit stays out of field_mask). Values are checked here, each
    error naming its field; libstrata checks the rest at connect."""

    def __init__(self, **fields: Any) -> None:
        self._values: Dict[str, Any] = {}
        for name, v in fields.items():
            f = BY_NAME.get(name)
            if f is None:
                from .errors import InvalidArgument

                raise InvalidArgument("%s: not a field of st_client_params_t (fields: %s)" %
                                      (name, ", ".join(BY_NAME)))
            if v is not None:
                self._values[name] = _check_value(f, v)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "ClientParams":
        return cls(**dict(values))

    def get(self, name: str) -> Any:
        return self._values.get(name)

    def items(self) -> List[Tuple[str, Any]]:
        return [(f.name, self._values[f.name]) for f in FIELDS if f.name in self._values]

    def to_c(self) -> Tuple[CParams, List[bytes]]:
        """The C struct and the encoded strings it points into (keep them
        alive while the struct is used)."""
        p = CParams()
        keep: List[bytes] = []
        for name, v in self.items():
            f = BY_NAME[name]
            if f.ctype == "str":
                v = v.encode()
                keep.append(v)
            setattr(p, name, v)
            p.field_mask |= 1 << f.bit
        return p, keep

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClientParams) and self._values == other._values

    def __repr__(self) -> str:
        shown = ("%s=%r" % (n, "***" if n in SECRET else v) for n, v in self.items())
        return "ClientParams(%s)" % ", ".join(shown)
