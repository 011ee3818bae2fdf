"""Protocol constants and framing (keep in sync with udf-runtime/src/script/wire.rs)."""

import os
import struct

_HDR = struct.Struct("<QB")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")

F_INIT, F_READY, F_RUN, F_RESULT, F_FINISH, F_DONE, F_ERROR, F_HELLO = 1, 2, 3, 4, 5, 6, 7, 8
F_IMPORT, F_SCRIPT = 9, 10
F_GET_CONNECTION, F_CONNECTION, F_SINGLE_CALL, F_SINGLE_RESULT = 11, 12, 13, 14
F_FETCH, F_ROWS, F_EMIT, F_ROW_ENDS = 15, 16, 17, 18
# RUN's flags: bit 0 asks a SCALAR EMITS run for ROW_ENDS.
RUN_TRACE_ROWS = 1
E_EXCEPTION, E_BAD_OUTPUT, E_SINGLE_CALL = 1, 2, 3

# The first field of INIT; the engine and this worker come from one binary, so they agree.
PROTOCOL_VERSION = 3
MODE_RUNS, MODE_SINGLE_CALL = 0, 1

W_BOOL, W_I64, W_F64, W_I128, W_UTF8, W_DATE32, W_TS_US = 1, 2, 3, 4, 5, 6, 7

T_BOOLEAN, T_SMALLINT, T_INTEGER, T_BIGINT, T_DECIMAL, T_DOUBLE = 1, 2, 3, 4, 5, 6
T_VARCHAR, T_CHAR, T_DATE, T_TIMESTAMP = 7, 8, 9, 10
T_TIMESTAMP_LTZ, T_GEOMETRY, T_HASHTYPE = 11, 12, 13
T_INTERVAL_YM, T_INTERVAL_DS = 14, 15


class _EngineGone(Exception):
    """The engine closed the protocol socket: exit quietly."""


class _ProtocolError(Exception):
    """A frame did not look like the protocol says."""



class _Channel(object):
    def __init__(self, fd):
        self.fd = fd
        self.rf = open(fd, "rb", buffering=1 << 16, closefd=False)

    def read(self):
        try:
            return self._read()
        except (BrokenPipeError, ConnectionResetError):
            raise _EngineGone()

    def _read(self):
        hdr = self.rf.read(9)
        if len(hdr) < 9:
            raise _EngineGone()
        size, kind = _HDR.unpack(hdr)
        payload = self.rf.read(size) if size else b""
        if len(payload) < size:
            raise _EngineGone()
        return kind, payload

    def request(self, kind, parts, answer):
        """Sends one frame and reads the engine's answer, which must be of kind `answer`: a
        _Reader over its payload."""
        self.write(kind, parts)
        got, payload = self.read()
        if got != answer:
            raise _ProtocolError("expected frame %d in answer to frame %d, got frame %d" % (answer, kind, got))
        return _Reader(payload)

    def write(self, kind, parts):
        """Sends one frame; parts are bytes-like (bytes, arrays, numpy arrays)."""
        size = 0
        for p in parts:
            size += len(p) if type(p) is bytes else memoryview(p).nbytes
        data = memoryview(b"".join([_HDR.pack(size, kind)] + parts))
        try:
            while data:
                k = os.write(self.fd, data)
                data = data[k:]
        except (BrokenPipeError, ConnectionResetError):
            raise _EngineGone()


class _Reader(object):
    __slots__ = ("b", "p")

    def __init__(self, payload):
        self.b = memoryview(payload)
        self.p = 0

    def u8(self):
        v = self.b[self.p]
        self.p += 1
        return v

    def u32(self):
        v = _U32.unpack_from(self.b, self.p)[0]
        self.p += 4
        return v

    def i32(self):
        v = _I32.unpack_from(self.b, self.p)[0]
        self.p += 4
        return v

    def u64(self):
        v = _U64.unpack_from(self.b, self.p)[0]
        self.p += 8
        return v

    def take(self, n):
        v = self.b[self.p : self.p + n]
        if len(v) != n:
            raise _ProtocolError("frame too short")
        self.p += n
        return v

    def str(self):
        return bytes(self.take(self.u32())).decode("utf-8")

    def opt_str(self):
        """u8 present | str: the str, or None."""
        present = self.u8()
        s = self.str()
        return s if present else None

    def opt_list(self):
        """u8 present | u32 n | n str: the list, or None."""
        present = self.u8()
        items = [self.str() for _ in range(self.u32())]
        return items if present else None


def _s(text):
    b = text.encode("utf-8", "replace")
    return _U32.pack(len(b)) + b
