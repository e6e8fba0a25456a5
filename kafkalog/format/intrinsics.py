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
