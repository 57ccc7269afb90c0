"""Errors: one exception class per st_status_t code, each carrying the
code, its name (ST_ERR_NOT_FOUND) and libstrata's message.

A code this package does not know (a newer libstrata) still raises: an
Error, named by the library's st_status_name(), or a class registered for
that name.
"""

from typing import Dict, Optional, Type

OK = 0
# The st_status_t codes of include/strata/status.h.
CODES: Dict[str, int] = {
    "ST_ERR_INVALID": -1, "ST_ERR_NOMEM": -2, "ST_ERR_NOT_FOUND": -3, "ST_ERR_EXISTS": -4,
    "ST_ERR_EXHAUSTED": -5, "ST_ERR_IO": -6, "ST_ERR_UNAVAILABLE": -7, "ST_ERR_TIMEOUT": -8,
    "ST_ERR_CORRUPT": -9, "ST_ERR_PERMISSION": -10, "ST_ERR_PROTOCOL": -11,
    "ST_ERR_TRANSPORT": -12, "ST_ERR_BUSY": -13, "ST_ERR_UNSUPPORTED": -14,
    "ST_ERR_CANCELLED": -15, "ST_ERR_INTERNAL": -16, "ST_ERR_UNAUTHENTICATED": -17,
    "ST_ERR_PARTIAL": -18, "ST_ERR_OVERLOADED": -19,
}
_NAMES = {v: k for k, v in CODES.items()}


def status_name(status: int) -> str:
    """ST_OK, ST_ERR_NOT_FOUND, ...: the library's name for a code (a code
    this package does not list is asked of libstrata)."""
    if status == OK:
        return "ST_OK"
    if status in _NAMES:
        return _NAMES[status]
    try:
        from ._lib import lib

        return lib.st_status_name(status).decode()
    except (OSError, AttributeError):
        return "ST_ERR_UNKNOWN"


class Error(Exception):
    """A libstrata call failed. .status is the st_status_t code, .name its
    name, .message what libstrata said (which node, which limit)."""

    def __init__(self, status: int, message: str = "", name: Optional[str] = None) -> None:
        self.status = status
        self.name = name or status_name(status)
        self.message = message
        super().__init__("%s (%s, status %d)" % (message or self.name, self.name, status))

    def __repr__(self) -> str:
        return "%s(status=%d, name=%r, message=%r)" % (type(self).__name__, self.status,
                                                       self.name, self.message)


_BY_NAME: Dict[str, Type[Error]] = {}


class _Coded(Error):
    """An Error whose class names its code: raised as Class(message)."""

    code_name = "ST_ERR_UNKNOWN"

    def __init__(self, message: str = "", status: Optional[int] = None) -> None:
        if status is None:
            status = CODES.get(self.code_name, -1000)
        Error.__init__(self, status, message, self.code_name if status in _NAMES or
                       status == -1000 else None)


def _register(name: str, doc: str, *bases: type) -> Type[Error]:
    code_name = doc.split(":")[0]
    return type(name, (_Coded,) + bases, {"__doc__": doc, "__module__": "strata",
                                          "code_name": code_name})


def register(status_name_: str, cls: Type[Error]) -> None:
    """Raises cls for the code named status_name_ from now on."""
    _BY_NAME[status_name_] = cls


InvalidArgument = _register("InvalidArgument", "ST_ERR_INVALID: a parameter is malformed "
                            "(the message names it). Also a ValueError.", ValueError)
OutOfMemory = _register("OutOfMemory", "ST_ERR_NOMEM: an allocation failed.", MemoryError)
NotFound = _register("NotFound", "ST_ERR_NOT_FOUND: the object, key or session does not "
                     "exist.", LookupError)
Exists = _register("Exists", "ST_ERR_EXISTS: the object already exists.")
Exhausted = _register("Exhausted", "ST_ERR_EXHAUSTED: a limit or capacity is reached.")
IOFailure = _register("IOFailure", "ST_ERR_IO: a file or system call failed.", OSError)
Unavailable = _register("Unavailable", "ST_ERR_UNAVAILABLE: the node is down or unreachable.",
                        ConnectionError)
Timeout = _register("Timeout", "ST_ERR_TIMEOUT: a deadline passed.", TimeoutError)
Corrupt = _register("Corrupt", "ST_ERR_CORRUPT: a checksum or generation did not match.")
PermissionDenied = _register("PermissionDenied", "ST_ERR_PERMISSION: the tenant or model is "
                             "not the token's.", PermissionError)
ProtocolError = _register("ProtocolError", "ST_ERR_PROTOCOL: a peer broke the protocol.")
TransportError = _register("TransportError", "ST_ERR_TRANSPORT: the data-plane transport "
                           "failed.")
Busy = _register("Busy", "ST_ERR_BUSY: the object is leased or pinned.")
Unsupported = _register("Unsupported", "ST_ERR_UNSUPPORTED: not supported in this build or "
                        "configuration (a durable write without an SSD tier).")
Cancelled = _register("Cancelled", "ST_ERR_CANCELLED: the operation was cancelled.")
InternalError = _register("InternalError", "ST_ERR_INTERNAL: an invariant did not hold (a "
                          "bug).")
Unauthenticated = _register("Unauthenticated", "ST_ERR_UNAUTHENTICATED: no token, or one no "
                            "tenant holds.", PermissionError)
Overloaded = _register("Overloaded", "ST_ERR_OVERLOADED: the node refused the call, too "
                       "much work queued (admission control); retry after its hint.")


class PartialWrite(Error):
    """ST_ERR_PARTIAL: a durable write reached fewer replicas than
    write_quorum: .written of .replicas committed it (.quorum were asked);
    it is stored and readable, but survives fewer failures than asked."""

    def __init__(self, message: str, written: int = 0, replicas: int = 0,
                 quorum: int = 0) -> None:
        super().__init__(CODES["ST_ERR_PARTIAL"], message)
        self.written = written
        self.replicas = replicas
        self.quorum = quorum

    def __repr__(self) -> str:
        return "PartialWrite(written=%d, replicas=%d, quorum=%d, message=%r)" % (
            self.written, self.replicas, self.quorum, self.message)


for _name, _cls in (("ST_ERR_INVALID", InvalidArgument), ("ST_ERR_NOMEM", OutOfMemory),
                    ("ST_ERR_NOT_FOUND", NotFound), ("ST_ERR_EXISTS", Exists),
                    ("ST_ERR_EXHAUSTED", Exhausted), ("ST_ERR_IO", IOFailure),
                    ("ST_ERR_UNAVAILABLE", Unavailable), ("ST_ERR_TIMEOUT", Timeout),
                    ("ST_ERR_CORRUPT", Corrupt), ("ST_ERR_PERMISSION", PermissionDenied),
                    ("ST_ERR_PROTOCOL", ProtocolError), ("ST_ERR_TRANSPORT", TransportError),
                    ("ST_ERR_BUSY", Busy), ("ST_ERR_UNSUPPORTED", Unsupported),
                    ("ST_ERR_CANCELLED", Cancelled), ("ST_ERR_INTERNAL", InternalError),
                    ("ST_ERR_UNAUTHENTICATED", Unauthenticated),
                    ("ST_ERR_OVERLOADED", Overloaded)):
    register(_name, _cls)


def error_for(status: int, message: str = "") -> Error:
    """The exception for a failed status (its class by the code's name)."""
    name = status_name(status)
    if name == "ST_ERR_PARTIAL":
        return PartialWrite(message)
    cls = _BY_NAME.get(name)
    if cls is None:
        return Error(status, message, name)
    err = cls(message, status)
    err.name = name
    return err
