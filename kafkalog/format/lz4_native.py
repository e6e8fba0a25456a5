"""liblz4's block functions, called from compiled code.

The cleaner decompresses and recompresses batch by batch: ~250,000 liblz4 calls per GB of ~10 KB
batches, where a call from Python costs more than liblz4's own work. These are the functions that
python-lz4 (a pinned dependency) links in and exports from its extension module; they are made known
to LLVM under names of this package's own, so compiled kernels that call them can be cached.

``AVAILABLE`` is false where python-lz4 or its symbols are missing; callers then take the Python path
(cramjam's liblz4 bindings, one call per block), which reads and writes the same bytes. Pointers are
passed as integers (``array.ctypes.data + position``): on the 64-bit ABIs numba supports, a pointer
argument and a 64-bit integer argument travel the same way.
"""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
from numba import types


def _register() -> bool:
    try:
        import lz4.block._block as extension

        library = ctypes.CDLL(extension.__file__)
        functions = {"kafkalog_lz4_decompress_safe": library.LZ4_decompress_safe,
                     "kafkalog_lz4_compress_fast": library.LZ4_compress_fast}
    except (ImportError, OSError, AttributeError):
        return False
    for name, function in functions.items():
        llvm.add_symbol(name, ctypes.cast(function, ctypes.c_void_p).value)
    return True


AVAILABLE = _register()

# int LZ4_decompress_safe(const char* src, char* dst, int compressedSize, int dstCapacity):
# the bytes written, or a negative number for malformed input (it never writes past dstCapacity).
decompress_safe = types.ExternalFunction(
    "kafkalog_lz4_decompress_safe", types.int32(types.intp, types.intp, types.int32, types.int32))
# int LZ4_compress_fast(const char* src, char* dst, int srcSize, int dstCapacity, int acceleration):
# the bytes written, 0 if they do not fit. Acceleration 1 is LZ4_compress_default, what Kafka's
# lz4-java fast compressor and cramjam's compress_block use.
compress_fast = types.ExternalFunction(
    "kafkalog_lz4_compress_fast", types.int32(types.intp, types.intp, types.int32, types.int32, types.int32))
