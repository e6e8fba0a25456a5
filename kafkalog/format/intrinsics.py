"""Machine operations numba does not expose, for the compiled kernels.

* ``prefetch_row(table, row)`` — ``llvm.prefetch`` of ``table[row, 0]``: starts a cache miss
  without waiting for it (the key map's probes).
* ``load_u64(data, p)`` — the eight bytes ``data[p:p + 8]`` as one little-endian unaligned load
  (numba would otherwise read and shift eight single bytes). The caller guarantees ``p + 8 <= len``.
* ``store_u64(out, p, value)`` — the matching unaligned store.
* ``copy_bytes(out, q, data, p, n)`` — ``out[q:q + n] = data[p:p + n]`` eight bytes at a time (numba's
  slice assignment checks for overlap and builds views per call: slow for ~100-byte records).
* ``crc32c_spans(data, starts, ends)`` — CRC-32C of many spans on the CPU's crc32 instruction.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _element_pointer(context: Any, builder: Any, array_type: Any, array_value: Any, indices: list[Any]) -> Any:
    array = context.make_array(array_type)(context, builder, array_value)
    return cgutils.get_item_pointer(context, builder, array_type, array, indices)  # type: ignore[no-untyped-call]


@intrinsic
def prefetch_row(typingctx: Any, table: Any, row: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = _element_pointer(context, builder, signature.args[0], args[0],
                                   [args[1], context.get_constant(types.intp, 0)])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")  # type: ignore[no-untyped-call]
        # read (0), keep in every cache level (3), data (1)
        builder.call(fn, [builder.bitcast(pointer, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(table, types.intp), codegen


@intrinsic
def load_u64(typingctx: Any, data: Any, position: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = _element_pointer(context, builder, signature.args[0], args[0], [args[1]])
        i64 = ir.IntType(64)
        return builder.load(builder.bitcast(pointer, i64.as_pointer()), align=1)

    return types.uint64(data, types.intp), codegen


@intrinsic
def store_u64(typingctx: Any, out: Any, position: Any, value: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = _element_pointer(context, builder, signature.args[0], args[0], [args[1]])
        i64 = ir.IntType(64)
        builder.store(args[2], builder.bitcast(pointer, i64.as_pointer()), align=1)
        return context.get_dummy_value()

    return types.void(out, types.intp, types.uint64), codegen


@numba.njit(cache=True, nogil=True, inline="always")
def copy_bytes(out: Any, q: Any, data: Any, p: Any, n: Any) -> None:
    if n < 8:
        for j in range(n):
            out[q + j] = data[p + j]
        return
    j = 0
    while j + 8 <= n:
        store_u64(out, q + j, load_u64(data, p + j))  # type: ignore[call-arg]  # typingctx is numba's
        j += 8
    if j < n:  # the last eight bytes, overlapping bytes already written (with the same values)
        store_u64(out, q + n - 8, load_u64(data, p + n - 8))  # type: ignore[call-arg]


def _has_sse42() -> bool:
    import llvmlite.binding as llvm

    try:
        return bool(llvm.get_host_cpu_features().get("sse4.2", False))
    except RuntimeError:  # a host llvmlite cannot describe
        return False


# CRC-32C by the CPU's crc32 instruction (SSE 4.2), where there is one: the polynomial Kafka's
# v2 batches use. Elsewhere the callers keep using the C library per call.
HARDWARE_CRC32C = _has_sse42()


@intrinsic
def _crc32c_u64(typingctx: Any, crc: Any, word: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            builder.module, ir.FunctionType(i64, [i64, i64]), "llvm.x86.sse42.crc32.64.64")
        return builder.call(fn, [args[0], args[1]])

    return types.uint64(types.uint64, types.uint64), codegen


@intrinsic
def _crc32c_u8(typingctx: Any, crc: Any, byte: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i32, i8 = ir.IntType(32), ir.IntType(8)
        fn = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            builder.module, ir.FunctionType(i32, [i32, i8]), "llvm.x86.sse42.crc32.32.8")
        return builder.call(fn, [builder.trunc(args[0], i32), builder.trunc(args[1], i8)])

    return types.uint32(types.uint32, types.uint8), codegen


# A batch's CRC runs as three interleaved streams: the crc32 instruction takes three cycles but can
# start one each cycle, so one stream per span leaves two thirds of it idle. Each round feeds three
# consecutive blocks of _CRC_BLOCK bytes to three registers (the 2nd and 3rd starting from zero) and
# joins them: CRC is linear, so the register after A|B is shift(crc(A)) ^ crc_from_zero(B), where
# ``shift`` advances a register over _CRC_BLOCK zero bytes. That shift is a 32x32 bit matrix, applied
# a byte at a time through four 256-entry tables.
_CRC_BLOCK = 256
_CRC32C_REFLECTED = 0x82F63B78


def _zero_block_shift_tables(block_bytes: int) -> np.ndarray:
    def apply(columns: list[int], v: int) -> int:
        out = 0
        for bit in range(32):
            if v >> bit & 1:
                out ^= columns[bit]
        return out

    one_byte = []  # the register after one zero byte, for each single-bit register
    for bit in range(32):
        r = 1 << bit
        for _ in range(8):
            r = (r >> 1) ^ (_CRC32C_REFLECTED if r & 1 else 0)
        one_byte.append(r)
    shift, power = None, one_byte  # shift over block_bytes zero bytes, by squaring
    n = block_bytes
    while n:
        if n & 1:
            shift = power if shift is None else [apply(power, c) for c in shift]
        power = [apply(power, c) for c in power]
        n >>= 1
    assert shift is not None
    tables = np.zeros((4, 256), dtype=np.uint32)
    for j in range(4):
        for b in range(1, 256):
            low = b & -b
            tables[j, b] = tables[j, b ^ low] ^ shift[8 * j + low.bit_length() - 1]
    return tables


_CRC_SHIFT = _zero_block_shift_tables(_CRC_BLOCK)


@numba.njit(cache=True, nogil=True, inline="always")
def _crc_shift(tables: Any, r: Any) -> Any:
    return np.uint64(tables[0, r & 0xFF] ^ tables[1, (r >> 8) & 0xFF] ^ tables[2, (r >> 16) & 0xFF]
                     ^ tables[3, (r >> 24) & 0xFF])


@numba.njit(cache=True, nogil=True)
def _crc32c_spans(data: Any, starts: Any, ends: Any, tables: Any) -> Any:
    out = np.empty(len(starts), dtype=np.int64)
    block = _CRC_BLOCK
    for i in range(len(starts)):
        crc = np.uint64(0xFFFFFFFF)
        p, end = starts[i], ends[i]
        while p + 3 * block <= end:
            c1 = np.uint64(0)
            c2 = np.uint64(0)
            for j in range(p, p + block, 8):
                crc = _crc32c_u64(crc, load_u64(data, j))  # type: ignore[call-arg]
                c1 = _crc32c_u64(c1, load_u64(data, j + block))
                c2 = _crc32c_u64(c2, load_u64(data, j + 2 * block))
            crc = _crc_shift(tables, _crc_shift(tables, crc) ^ c1) ^ c2
            p += 3 * block
        while p + 8 <= end:
            crc = _crc32c_u64(crc, load_u64(data, p))  # type: ignore[call-arg]
            p += 8
        crc32 = np.uint32(crc)
        while p < end:
            crc32 = _crc32c_u8(crc32, data[p])  # type: ignore[call-arg]
            p += 1
        out[i] = np.int64(crc32 ^ np.uint32(0xFFFFFFFF))
    return out


def crc32c_spans(data: Any, starts: Any, ends: Any) -> Any:
    """CRC-32C of each ``data[starts[i]:ends[i]]`` (needs ``HARDWARE_CRC32C``)."""
    return _crc32c_spans(data, starts, ends, _CRC_SHIFT)
