"""Read a GGUF file's header: its metadata and where each tensor lies, without reading the weights.

The layout (GGUF v2 and v3, little-endian): the magic ``GGUF``, the version, the tensor and
key-value counts, the key-value pairs (typed scalars, strings, arrays), the tensor infos (name,
dimensions, ggml type, offset), then the tensor data from the next ``general.alignment`` boundary.

The ``gguf`` package's ``GGUFReader`` builds a numpy view per array element: 45 s for the
262,144-token vocabulary of Gemma 3 on a small host. This reader decodes each array at once
(numbers) or in one pass (strings): a few hundred milliseconds, so a manifest check can read a
GGUF's header every time. A file that is not a GGUF, is cut short or is inconsistent is a
:class:`BadGguf` that says which.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from nrt.adapters.inference.errors import ArtifactError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
# value type -> (struct format, numpy dtype) of the GGUF scalar types
_SCALARS: dict[int, tuple[str, str]] = {
    0: ("<B", "<u1"),
    1: ("<b", "<i1"),
    2: ("<H", "<u2"),
    3: ("<h", "<i2"),
    4: ("<I", "<u4"),
    5: ("<i", "<i4"),
    6: ("<f", "<f4"),
    7: ("<?", "<u1"),
    10: ("<Q", "<u8"),
    11: ("<q", "<i8"),
    12: ("<d", "<f8"),
}
_FLOAT32, _BOOL, _STRING, _ARRAY = 6, 7, 8, 9
# ggml type -> (values per block, bytes per block): the gguf package's GGML_QUANT_SIZES, so that reading a
# header needs no export-time package
BLOCKS: dict[int, tuple[int, int]] = {
    0: (1, 4),  # F32
    1: (1, 2),  # F16
    2: (32, 18),  # Q4_0
    3: (32, 20),  # Q4_1
    6: (32, 22),  # Q5_0
    7: (32, 24),  # Q5_1
    8: (32, 34),  # Q8_0
    9: (32, 40),  # Q8_1
    10: (256, 84),  # Q2_K
    11: (256, 110),  # Q3_K
    12: (256, 144),  # Q4_K
    13: (256, 176),  # Q5_K
    14: (256, 210),  # Q6_K
    15: (256, 292),  # Q8_K
    16: (256, 66),  # IQ2_XXS
    17: (256, 74),  # IQ2_XS
    18: (256, 98),  # IQ3_XXS
    19: (256, 50),  # IQ1_S
    20: (32, 18),  # IQ4_NL
    21: (256, 110),  # IQ3_S
    22: (256, 82),  # IQ2_S
    23: (256, 136),  # IQ4_XS
    24: (1, 1),  # I8
    25: (1, 2),  # I16
    26: (1, 4),  # I32
    27: (1, 8),  # I64
    28: (1, 8),  # F64
    29: (256, 56),  # IQ1_M
    30: (1, 2),  # BF16
    34: (256, 54),  # TQ1_0
    35: (256, 66),  # TQ2_0
    39: (32, 17),  # MXFP4
    40: (64, 36),  # NVFP4
    41: (128, 18),  # Q1_0
}


class BadGguf(ArtifactError):
    """A file that is not a usable GGUF: another format, an unsupported version, cut short, inconsistent."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the file: its name, its shape in numpy (row-major) order, its ggml type, where its bytes are."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # from the start of the file
    n_bytes: int

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


@dataclass(frozen=True)
class GgufHeader:
    path: Path
    version: int
    fields: dict[str, Any]  # key -> int | float | bool | str | list of them
    tensors: tuple[TensorInfo, ...]

    @property
    def architecture(self) -> str:
        return str(self.fields.get("general.architecture") or "")

    def arch_field(self, key: str, default: Any = None) -> Any:
        """``<architecture>.<key>``, e.g. ``arch_field("block_count")``."""
        return self.fields.get(f"{self.architecture}.{key}", default)

    @property
    def parameters(self) -> int:
        return sum(tensor.n_elements for tensor in self.tensors)


def read_header(path: Path) -> GgufHeader:
    """The header of the GGUF file at ``path``; :class:`BadGguf` when it is not one, or is cut short."""
    try:
        with path.open("rb") as file:
            if file.read(4) != MAGIC:
                raise BadGguf(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)")
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _Parser(path, data).header()
    except (struct.error, IndexError, ValueError) as exc:
        raise BadGguf(f"{path} is not a complete GGUF file: its header is cut short or corrupt ({exc})") from None
    except OSError as exc:
        raise BadGguf(f"{path} cannot be read: {exc.strerror or exc}") from None


def tensor_data(path: Path, tensor: TensorInfo) -> npt.NDArray[Any]:
    """The tensor's values as float32, de-quantised with the ``gguf`` package."""
    from gguf import GGMLQuantizationType, dequantize
    from gguf.quants import quant_shape_to_byte_shape

    kind = GGMLQuantizationType(tensor.ggml_type)
    raw = np.memmap(path, dtype=np.uint8, mode="r", offset=tensor.offset, shape=(tensor.n_bytes,))
    if kind == GGMLQuantizationType.F32:
        return np.array(raw.view(np.float32).reshape(tensor.shape))
    if kind == GGMLQuantizationType.F16:
        return raw.view(np.float16).reshape(tensor.shape).astype(np.float32)
    try:
        values: npt.NDArray[Any] = dequantize(raw.reshape(quant_shape_to_byte_shape(tensor.shape, kind)), kind)
    except NotImplementedError:
        raise BadGguf(
            f"{path}: tensor {tensor.name} is {kind.name}, which the gguf package cannot de-quantise"
        ) from None
    return values.astype(np.float32, copy=False).reshape(tensor.shape)


class _Parser:
    def __init__(self, path: Path, data: mmap.mmap) -> None:
        self.path = path
        self.data = data
        self.position = 4

    def header(self) -> GgufHeader:
        version = self._scalar(4)
        if version not in VERSIONS:
            swapped = int.from_bytes(int(version).to_bytes(4, "little"), "big")
            if swapped in VERSIONS:
                raise BadGguf(f"{self.path} is a big-endian GGUF; NRT reads little-endian ones (what llama.cpp writes)")
            raise BadGguf(f"{self.path}: GGUF version {version} is not supported (versions 2 and 3 are)")
        tensor_count, field_count = self._scalar(10), self._scalar(10)
        fields: dict[str, Any] = {}
        for _ in range(field_count):
            key = self._string()
            fields[key] = self._value(self._scalar(4))
        infos = [self._tensor_info() for _ in range(tensor_count)]
        alignment = int(fields.get("general.alignment", DEFAULT_ALIGNMENT))
        if alignment <= 0 or alignment & (alignment - 1):
            raise BadGguf(f"{self.path}: general.alignment {alignment} is not a power of two")
        start = -(-self.position // alignment) * alignment
        tensors = tuple(self._located(info, start) for info in infos)
        if len({tensor.name for tensor in tensors}) != len(tensors):
            raise BadGguf(f"{self.path}: two tensors share a name")
        return GgufHeader(self.path, int(version), fields, tensors)

    def _take(self, size: int) -> int:
        start = self.position
        self.position += size
        if self.position > len(self.data):
            raise BadGguf(f"{self.path} is cut short: its header runs past the end of the file")
        return start

    def _scalar(self, kind: int) -> Any:
        if kind not in _SCALARS:
            raise BadGguf(f"{self.path}: unknown GGUF value type {kind}")
        fmt = _SCALARS[kind][0]
        (value,) = struct.unpack_from(fmt, self.data, self._take(struct.calcsize(fmt)))
        if kind == _FLOAT32:
            return float(str(np.float32(value)))  # 1e-06, not 9.999999974752427e-07
        return bool(value) if kind == _BOOL else value

    def _string(self) -> str:
        size = self._scalar(10)
        start = self._take(size)
        try:
            return self.data[start : start + size].decode("utf-8")
        except UnicodeDecodeError:
            raise BadGguf(f"{self.path}: a string at byte {start} is not UTF-8") from None

    def _value(self, kind: int) -> Any:
        if kind == _STRING:
            return self._string()
        if kind != _ARRAY:
            return self._scalar(kind)
        item, count = self._scalar(4), self._scalar(10)
        if item == _STRING:
            return [self._string() for _ in range(count)]
        if item == _ARRAY:
            return [self._value(_ARRAY) for _ in range(count)]
        if item not in _SCALARS:
            raise BadGguf(f"{self.path}: unknown GGUF value type {item}")
        dtype = np.dtype(_SCALARS[item][1])
        start = self._take(dtype.itemsize * count)
        values = np.frombuffer(self.data, dtype=dtype, count=count, offset=start)
        if item == _BOOL:
            return [bool(value) for value in values]
        if item == _FLOAT32:
            return values.astype(np.float64).tolist()
        listed: list[Any] = values.tolist()
        return listed

    def _tensor_info(self) -> tuple[str, tuple[int, ...], int, int]:
        name = self._string()
        dims = tuple(self._scalar(10) for _ in range(self._scalar(4)))
        return name, tuple(reversed(dims)), self._scalar(4), self._scalar(10)

    def _located(self, info: tuple[str, tuple[int, ...], int, int], start: int) -> TensorInfo:
        name, shape, kind, offset = info
        if kind not in BLOCKS:
            raise BadGguf(f"{self.path}: tensor {name} has an unknown ggml type {kind}")
        block, size = BLOCKS[kind]
        elements = int(np.prod(shape, dtype=np.int64)) if shape else 1
        tensor = TensorInfo(name, shape, kind, start + offset, elements // block * size)
        if tensor.offset + tensor.n_bytes > len(self.data):
            raise BadGguf(
                f"{self.path} is cut short: tensor {name} ends at byte {tensor.offset + tensor.n_bytes:,}, "
                f"the file has {len(self.data):,}"
            )
        return tensor
