"""Session records and the outcome of a write to a session's replicas."""

from ._types import CSession, CWriteResult


class Session:
    """st_session_info_t: a session's id, its length in tokens, the hash of
    its last full block (head, 16 bytes) and its times (ms since the epoch;
    ttl_ms its time to live)."""

    def __init__(self, s: CSession) -> None:
        self.id: str = s.id.decode()
        self.length: int = s.length
        self.head: bytes = bytes(s.head)
        self.created_ms: int = s.created_ms
        self.updated_ms: int = s.updated_ms
        self.ttl_ms: int = s.ttl_ms

    def __repr__(self) -> str:
        return "Session(id=%r, length=%d, head=%s, created_ms=%d, updated_ms=%d, ttl_ms=%d)" % (
            self.id, self.length, self.head.hex(), self.created_ms, self.updated_ms, self.ttl_ms)


SessionInfo = Session


class WriteResult:
    """st_write_result_t: R replicas the record belongs on, the quorum W
    asked for, and how many took it (durable: committed it to disk)."""

    def __init__(self, r: CWriteResult) -> None:
        self.replicas: int = r.replicas
        self.quorum: int = r.quorum
        self.written: int = r.written

    def __repr__(self) -> str:
        return "WriteResult(replicas=%d, quorum=%d, written=%d)" % (self.replicas, self.quorum,
                                                                    self.written)
