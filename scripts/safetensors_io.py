"""A tiny reader and writer for the safetensors format, with numpy only (no safetensors package).

Format: 8-byte little-endian header length N, N bytes of UTF-8 JSON mapping tensor name ->
{"dtype", "shape", "data_offsets": [begin, end)} plus an optional "__metadata__" (str -> str),
then the raw little-endian data; offsets are relative to the end of the header. Not a general
implementation: only the dtypes in _DTYPES, and the whole file is read into memory.
"""

import json
import os
import struct

import numpy as np

# safetensors dtype name -> numpy little-endian dtype
_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
}
_NAMES = {dt.str: name for name, dt in _DTYPES.items()}  # keyed by "<f8", "|i1", ...
_kMaxHeaderBytes = 100 * 1024 * 1024  # the reference implementation's limit


class SafetensorsError(Exception):
    pass


def _bf16_to_f32(raw):
    """bf16 is the top half of an f32; numpy has no bf16 dtype."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


def read(path):
    """Returns (tensors: dict name -> numpy array, metadata: dict or None). Checks every offset."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SafetensorsError(f"{path}: {len(blob)} bytes, shorter than the 8-byte header length")
    (header_bytes,) = struct.unpack("<Q", blob[:8])
    if header_bytes > _kMaxHeaderBytes or 8 + header_bytes > len(blob):
        raise SafetensorsError(
            f"{path}: header length {header_bytes} bytes does not fit in the file of {len(blob)} bytes")
    try:
        header = json.loads(blob[8:8 + header_bytes].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not UTF-8 JSON: {e}") from e
    data = memoryview(blob)[8 + header_bytes:]
    metadata = header.pop("__metadata__", None)
    tensors = {}
    for name, info in header.items():
        dtype_name = info.get("dtype")
        shape = [int(s) for s in info.get("shape", [])]
        begin, end = (int(o) for o in info.get("data_offsets", [-1, -1]))
        if dtype_name == "BF16":
            itemsize = 2
        elif dtype_name in _DTYPES:
            itemsize = _DTYPES[dtype_name].itemsize
        else:
            raise SafetensorsError(
                f"{path}: tensor {name} has dtype {dtype_name}; supported: BF16, {', '.join(_DTYPES)}")
        numel = int(np.prod(shape, dtype=np.int64))
        if not (0 <= begin <= end <= len(data)) or end - begin != numel * itemsize:
            raise SafetensorsError(
                f"{path}: tensor {name} offsets [{begin}, {end}) do not hold shape {shape} of "
                f"{dtype_name} ({numel * itemsize} bytes) in a data section of {len(data)} bytes")
        if dtype_name == "BF16":
            array = _bf16_to_f32(np.frombuffer(data[begin:end], dtype="<u2"))
        else:
            array = np.frombuffer(data[begin:end], dtype=_DTYPES[dtype_name])
        tensors[name] = array.reshape(shape).copy()
    return tensors, metadata


def write(path, tensors, metadata=None):
    """Writes dict name -> numpy array atomically (temporary file, flush, fsync, rename).

    Tensors are laid out in sorted name order, the header is space-padded to a multiple of 8 bytes
    so every tensor starts 8-byte aligned (as the reference writer does).
    """
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        array = np.array(tensors[name], order="C", copy=False)  # not ascontiguousarray: keeps 0-d
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        if array.dtype.str not in _NAMES:
            raise SafetensorsError(f"{path}: tensor {name} has numpy dtype {array.dtype}; "
                                   f"supported: {', '.join(_DTYPES)}")
        raw = array.tobytes()
        header[name] = {"dtype": _NAMES[array.dtype.str], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header_json = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_json += b" " * (-len(header_json) % 8)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(header_json)))
        f.write(header_json)
        for raw in chunks:
            f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
