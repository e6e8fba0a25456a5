"""Two machine operations numba does not expose, for the compiled kernels.

* ``prefetch_row(table, row)`` — ``llvm.prefetch`` of ``table[row, 0]``: starts a cache miss
  without waiting for it (the key map's probes).
* ``load_u64(data, p)`` — the eight bytes ``data[p:p + 8]`` as one little-endian unaligned load
  (numba would otherwise read and shift eight single bytes). The caller guarantees ``p + 8 <= len``.
* ``store_u64(out, p, value)`` — the matching unaligned store.
* ``copy_bytes(out, q, data, p, n)`` — ``out[q:q + n] = data[p:p + n]`` eight bytes at a time (numba's
  slice assignment checks for overlap and builds views per call: slow for ~100-byte records).
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
    j = 0
    while j + 8 <= n:
        store_u64(out, q + j, load_u64(data, p + j))  # type: ignore[call-arg]  # typingctx is numba's
        j += 8
    while j < n:
        out[q + j] = data[p + j]
        j += 1


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


@numba.njit(cache=True, nogil=True)
def crc32c_spans(data: Any, starts: Any, ends: Any) -> Any:
    """CRC-32C of each ``data[starts[i]:ends[i]]`` (needs ``HARDWARE_CRC32C``)."""
    out = np.empty(len(starts), dtype=np.int64)
    for i in range(len(starts)):
        crc = np.uint64(0xFFFFFFFF)
        p, end = starts[i], ends[i]
        while p + 8 <= end:
            crc = _crc32c_u64(crc, load_u64(data, p))  # type: ignore[call-arg]
            p += 8
        crc32 = np.uint32(crc)
        while p < end:
            crc32 = _crc32c_u8(crc32, data[p])  # type: ignore[call-arg]
            p += 1
        out[i] = np.int64(crc32 ^ np.uint32(0xFFFFFFFF))
    return out
