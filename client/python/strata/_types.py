"""The ctypes mirrors of strata.h's structs (other than st_client_params_t,
which params.py builds from its table)."""

import ctypes

c_u8, c_u16, c_u32, c_u64, c_sz, c_vp = (ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32,
                                         ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p)


class CWriteResult(ctypes.Structure):
    _fields_ = [("replicas", c_u32), ("quorum", c_u32), ("written", c_u32)]


class CLookup(ctypes.Structure):
    _fields_ = [("matched_blocks", c_u64), ("resumable_blocks", c_u64),
                ("nodes_asked", c_u32), ("nodes_down", c_u32)]


class CGetOp(ctypes.Structure):
    _fields_ = [("block", c_u64), ("kind", c_u8), ("layer", c_u16), ("dst", c_vp),
                ("dst_len", c_sz), ("row_bytes", c_u32), ("rows", ctypes.POINTER(c_u32)),
                ("n_rows", c_u32), ("status", ctypes.c_int), ("length", c_sz)]


class CPutOp(ctypes.Structure):
    _fields_ = [("block", c_u64), ("kind", c_u8), ("layer", c_u16), ("src", c_vp),
                ("len", c_sz), ("status", ctypes.c_int), ("row_bytes", c_u32)]


class CHashItem(ctypes.Structure):
    _fields_ = [("content", c_u8 * 16), ("start", c_u64), ("n_tokens", c_u64)]


class CSession(ctypes.Structure):
    _fields_ = [("id", ctypes.c_char * 64), ("head", c_u8 * 16), ("length", c_u64),
                ("created_ms", c_u64), ("updated_ms", c_u64), ("ttl_ms", c_u64)]


class CScoreQuery(ctypes.Structure):
    _fields_ = [("layer", c_u32), ("heads", c_u32), ("dim", c_u32), ("q", c_vp), ("w", c_vp),
                ("k", c_u32)]


class CScoreStats(ctypes.Structure):
    _fields_ = [("blocks", c_u64), ("blocks_scored", c_u64), ("bytes_sent", c_u64),
                ("bytes_received", c_u64), ("nodes", c_u32)]
