"""Key/value tensors on the session's device, and the few operations the scheduler needs on them.

The cache of a sequence (or a left-padded batch of them) is a list of ``OrtValue`` s, one per
``past_key_values`` input, living where the model's session runs: host memory on the CPU
provider, device memory on CUDA. A decode step's ``present`` outputs become the next step's
``past`` inputs as they are, with no copy to the host.

Between steps the scheduler regroups rows (one joins, one leaves) and keeps a finished row's
cache for its session. Those are gathers, slices and left-pads of the cache, done here by
small helper ONNX graphs (written by :mod:`nrt.adapters.inference.onnx_writer`) run by ONNX Runtime
on the model's own provider, so the KV never crosses to the host on any provider and the
runtime needs no array library for the device (no torch, no cupy). Each helper run writes
its rows straight into the destination batch tensors (IOBinding outputs bound to offsets in
a buffer allocated once for the new batch). Only logits (or, for greedy rows, the chosen
ids) come back to the host: on CPU they are a view of the output with no copy; elsewhere a
helper graph takes the last position (and its argmax) on the device and copies just that.

Every ``OrtValue`` here is written once, when it is created, and only read afterwards: a
batch, a row and a session may share tensors without copying.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as native
from onnxruntime.capi.onnxruntime_pybind11_state import OrtValue as OrtValue

from nrt.adapters.inference.onnx_writer import Node, Value, element_type, model_bytes
from nrt.adapters.inference.weights import CUDA

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]
# A cache: one tensor per past_key_values input, [batch, heads, width, head_dim], each an
# ONNX Runtime native OrtValue (the object the public ``onnxruntime.OrtValue`` wraps).
KV = list[OrtValue]


@dataclass(frozen=True, slots=True)
class Piece:
    """Rows ``rows`` of ``past``, columns ``[start, end)``: part of a batch being assembled."""

    past: Sequence[OrtValue]
    rows: Sequence[int]
    start: int
    end: int


def kv_nbytes(past: Sequence[OrtValue]) -> int:
    """Bytes the tensors hold on their device."""
    return sum(int(v.tensor_size_in_bytes()) for v in past)


def session_device(session: ort.InferenceSession) -> tuple[str, int]:
    """Where a session's outputs should stay: ``("cuda", id)`` when CUDA serves it, else ``("cpu", 0)``."""
    providers: list[str] = session.get_providers()
    if providers and providers[0] == CUDA:
        options: dict[str, dict[str, str]] = session.get_provider_options()
        return "cuda", int(options.get(CUDA, {}).get("device_id", 0))
    return "cpu", 0


def native_device(device_type: str, device_id: int = 0) -> Any:
    """ONNX Runtime's device object for ``("cuda", 0)``, ``("cpu", 0)``, ..."""
    return ort.OrtDevice.make(device_type, device_id)._get_c_device()


class Binding:
    """One session's IOBinding, reused from run to run; not thread-safe.

    It drives ONNX Runtime's native binding (``SessionIOBinding``, what ``session.io_binding()``
    wraps) directly: the Python wrapper re-creates the device object for every bound output
    and wraps every result, about 20 us a decode step on tiny-llama (measured with ORT 1.31.1,
    as much as the whole difference to ``session.run``). Nothing stays bound after
    :meth:`run`, so a result that the caller drops is freed.
    """

    def __init__(self, session: ort.InferenceSession, device_type: str, device_id: int) -> None:
        self._session = session._sess
        self._binding = native.SessionIOBinding(session._sess)
        self.device_type = device_type
        self.device = native_device(device_type, device_id)
        self._host_device = native_device("cpu")
        self._held: list[np.ndarray] = []  # host inputs are read in place: alive until the run

    def host_input(self, name: str, array: np.ndarray) -> None:
        """A C-contiguous host array (ORT copies it to the device when the graph needs it there)."""
        self._held.append(array)
        self._binding.bind_input(name, array)

    def input(self, name: str, value: OrtValue) -> None:
        self._binding.bind_ortvalue_input(name, value)

    def output(self, name: str) -> None:
        """ORT allocates the output on the session's device."""
        self._binding.bind_output(name, self.device)

    def host_output(self, name: str) -> None:
        """ORT copies the output to host memory."""
        self._binding.bind_output(name, self._host_device)

    def output_into(self, name: str, dtype: np.dtype[Any], shape: Sequence[int], pointer: int) -> None:
        """The output is written at ``pointer`` (device memory of the right size, owned elsewhere)."""
        self._binding.bind_output(name, self.device, dtype, list(shape), pointer)

    def bound_outputs(self) -> int:
        """How many outputs the binding still holds (none between runs)."""
        return len(self._binding.get_outputs())

    def run(self) -> list[OrtValue]:
        """Run the session; the bound outputs in binding order."""
        return self.step((), (), (), ())

    def step(
        self,
        host: Iterable[tuple[str, np.ndarray]],
        values: Iterable[tuple[str, OrtValue]],
        into: Iterable[tuple[str, OrtValue]],
        outputs: Iterable[str],
    ) -> list[OrtValue]:
        """Bind ``host`` arrays, device ``values``, outputs ``into`` preallocated tensors and
        ``outputs`` (allocated by ORT on the device) on top of what is bound already, and run:
        the hot path of a decode step, in one Python frame. Outputs come back in that order."""
        binding = self._binding
        try:
            for name, array in host:  # the caller holds the arrays until this returns
                binding.bind_input(name, array)
            for name, value in values:
                binding.bind_ortvalue_input(name, value)
            for name, value in into:
                binding.bind_ortvalue_output(name, value)
            device = self.device
            for name in outputs:
                binding.bind_output(name, device)
            self._session.run_with_iobinding(binding, None)
            results = binding.get_outputs()
            # Indexing copies each OrtValue (a reference-counted handle); iterating would yield
            # references into the binding's own vector, dangling once it is cleared below.
            return [results[i] for i in range(len(results))]
        finally:
            binding.clear_binding_inputs()
            binding.clear_binding_outputs()
            self._held.clear()


class DeviceOps:
    """Cache operations for one model's tensors, run on its session's device.

    ``helpers`` forces the helper-graph path for logits on the CPU provider too (tests run
    the device path without a GPU); by default the CPU provider reads logits as numpy views.
    """

    def __init__(
        self,
        session: ort.InferenceSession,
        *,
        tensors: int,
        heads: int,
        head_dim: int,
        kv_dtype: np.dtype[Any],
        logits_dtype: np.dtype[Any],
        helpers: bool = False,
    ) -> None:
        self.device_type, self.device_id = session_device(session)
        self._device = native_device(self.device_type, self.device_id)
        self._host_logits = self.device_type == "cpu" and not helpers
        self.tensors = tensors
        self.heads = heads
        self.head_dim = head_dim
        self.kv_dtype = kv_dtype
        self._providers = list(zip(session.get_providers(), _provider_options(session), strict=True))
        slice_session = self._helper(_slice_graph(tensors, kv_dtype.name))
        tail_session = self._helper(_tail_graph(logits_dtype.name))
        self._slice = Binding(slice_session, self.device_type, self.device_id)
        self._tail = Binding(tail_session, self.device_type, self.device_id)
        self._sessions = (slice_session, tail_session)
        self._empty: dict[int, KV] = {}
        self._lock = threading.Lock()  # the helper bindings are state; the scheduler thread is their usual only user
        self._slice_inputs = [f"x{i}" for i in range(tensors)]
        self._slice_outputs = [f"y{i}" for i in range(tensors)]

    def _helper(self, graph: bytes) -> ort.InferenceSession:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # copies: no thread pool of their own
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        names = [name for name, _ in self._providers]
        provider_options = [opts for _, opts in self._providers]
        return ort.InferenceSession(graph, sess_options=options, providers=names, provider_options=provider_options)

    def binding(self, session: ort.InferenceSession) -> Binding:
        """A binding of ``session`` (the model's) whose outputs stay on this device."""
        return Binding(session, self.device_type, self.device_id)

    # ------------------------------------------------------------------ caches

    def empty_past(self, batch: int = 1) -> KV:
        """A cache of no positions (width 0), shared: nothing ever writes into it."""
        empty = self._empty.get(batch)
        if empty is None:
            shape = [batch, self.heads, 0, self.head_dim]
            empty = self._empty[batch] = [self.allocate(shape) for _ in range(self.tensors)]
        return empty

    def allocate(self, shape: Sequence[int], dtype: np.dtype[Any] | None = None) -> OrtValue:
        """An uninitialised tensor on the device (of the cache's element type by default)."""
        return OrtValue.ortvalue_from_shape_and_type(list(shape), dtype or self.kv_dtype, self._device)

    def select(self, past: Sequence[OrtValue], rows: Sequence[int], start: int, end: int) -> KV:
        """A new cache of rows ``rows`` and columns ``[start, end)`` of ``past``."""
        return self.assemble([Piece(past, rows, start, end)], width=end - start)

    def assemble(self, pieces: Sequence[Piece], width: int, *, right_padded: bool = False) -> KV:
        """A new batch of ``width`` columns: the pieces' rows one after the other, each row's
        columns right-aligned with zeros on the left (the padding the attention mask hides), or
        with ``right_padded`` left-aligned with zeros on the right (the layout of a graph with
        GroupQueryAttention, which reads each row's keys from column 0 up to its length)."""
        batch = sum(len(p.rows) for p in pieces)
        out = [self.allocate([batch, self.heads, width, self.head_dim]) for _ in range(self.tensors)]
        row_bytes = self.heads * width * self.head_dim * self.kv_dtype.itemsize
        with self._lock:
            self._assemble_into(out, pieces, width, row_bytes, right_padded)
        return out

    def _assemble_into(self, out: KV, pieces: Sequence[Piece], width: int, row_bytes: int, right_padded: bool) -> None:
        first = 0
        binding = self._slice
        for piece in pieces:
            count = len(piece.rows)
            pad = width - (piece.end - piece.start)
            if pad < 0:
                raise ValueError(f"a piece of {piece.end - piece.start} columns does not fit in {width}")
            binding.host_input("rows", np.asarray(piece.rows, dtype=np.int64))
            binding.host_input("start", np.array([piece.start], dtype=np.int64))
            binding.host_input("end", np.array([piece.end], dtype=np.int64))
            pads = [0, 0, 0, 0, 0, 0, pad, 0] if right_padded else [0, 0, pad, 0, 0, 0, 0, 0]
            binding.host_input("pads", np.array(pads, dtype=np.int64))
            for name, value in zip(self._slice_inputs, piece.past, strict=True):
                binding.input(name, value)
            shape = [count, self.heads, width, self.head_dim]
            for name, target in zip(self._slice_outputs, out, strict=True):
                binding.output_into(name, self.kv_dtype, shape, target.data_ptr() + first * row_bytes)
            binding.run()
            first += count

    def to_host(self, past: Sequence[OrtValue]) -> list[np.ndarray]:
        """Host copies of cache tensors (tests and diagnostics; the serving path never needs them)."""
        return [np.array(v.numpy()) for v in past]

    def from_host(self, arrays: Sequence[np.ndarray]) -> KV:
        """Cache tensors on the device, copied from host arrays."""
        out = []
        for array in arrays:
            value = self.allocate(array.shape)
            value.update_inplace(np.ascontiguousarray(array, dtype=self.kv_dtype))
            out.append(value)
        return out

    # ------------------------------------------------------------------ logits

    def last_logits(self, logits: OrtValue) -> FloatArray:
        """The last position's logits of each row, ``[B, vocab]``, on the host."""
        if self._host_logits:
            host: FloatArray = logits.numpy()[:, -1, :]
            return host
        out: FloatArray = self._tail_output(logits, "last")
        return out

    def greedy(self, logits: OrtValue) -> IntArray:
        """The argmax of each row's last position, ``[B]``: only the ids come to the host."""
        if self._host_logits:
            ids: IntArray = logits.numpy()[:, -1, :].argmax(axis=-1)
            return ids
        chosen: IntArray = self._tail_output(logits, "argmax")
        return chosen

    def _tail_output(self, logits: OrtValue, output: str) -> npt.NDArray[Any]:
        """One output of the logits' tail graph (``last`` or ``argmax``), run on the device, on the host."""
        with self._lock:
            self._tail.input("logits", logits)
            self._tail.host_output(output)
            result: npt.NDArray[Any] = self._tail.run()[0].numpy()
        return result


def _provider_options(session: ort.InferenceSession) -> list[dict[str, str]]:
    options: dict[str, dict[str, str]] = session.get_provider_options()
    return [dict(options.get(name, {})) for name in session.get_providers()]


def _slice_graph(tensors: int, dtype: str) -> bytes:
    """``y_i = Pad(Slice(Gather(x_i, rows), start, end, axis 2), pads)`` for every cache tensor."""
    nodes: list[Node] = []
    for i in range(tensors):
        nodes += [
            Node("Gather", (f"x{i}", "rows"), (f"g{i}",), {"axis": 0}),
            Node("Slice", (f"g{i}", "start", "end", "axes"), (f"s{i}",)),
            Node("Pad", (f"s{i}", "pads"), (f"y{i}",)),
        ]
    inputs = [
        Value("rows", "int64", 1),
        Value("start", "int64", 1),
        Value("end", "int64", 1),
        Value("pads", "int64", 1),
        *(Value(f"x{i}", dtype, 4) for i in range(tensors)),
    ]
    outputs = [Value(f"y{i}", dtype, 4) for i in range(tensors)]
    return model_bytes("nrt_kv_slice", nodes, inputs, outputs, {"axes": np.array([2], dtype=np.int64)})


def _tail_graph(dtype: str) -> bytes:
    """``last = float32(logits[:, -1, :])`` and ``argmax = argmax(logits[:, -1, :], axis=-1)``."""
    nodes = [
        Node("Gather", ("logits", "minus_one"), ("tail",), {"axis": 1}),
        Node("Cast", ("tail",), ("last",), {"to": element_type("float32")}),
        Node("ArgMax", ("tail",), ("argmax",), {"axis": -1, "keepdims": 0}),
    ]
    inputs = [Value("logits", dtype, 3)]
    outputs = [Value("last", "float32", 2), Value("argmax", "int64", 1)]
    return model_bytes("nrt_logits_tail", nodes, inputs, outputs, {"minus_one": np.array(-1, dtype=np.int64)})
