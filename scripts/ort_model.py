"""Reads an onnxruntime ORT-format model (a flatbuffer, schema onnxruntime/core/flatbuffers/schema/ort.fbs)
and writes it back as an ONNX protobuf. Standard library and numpy only, so scripts/setup needs no
onnx or flatbuffers packages."""

import struct
from dataclasses import dataclass, field

import numpy as np

# ONNX TensorProto element types -> numpy.
NUMPY_TYPES = {
    1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
    9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64,
}
ONNX_TYPES = {np.dtype(t): code for code, t in NUMPY_TYPES.items()}


class Table:
    """One flatbuffer table: fields by vtable slot (slot n lives at vtable offset 4 + 2n)."""

    def __init__(self, buf: bytes, pos: int):
        self.buf, self.pos = buf, pos
        vtable = pos - struct.unpack_from("<i", buf, pos)[0]
        self.vtable, self.vtable_size = vtable, struct.unpack_from("<H", buf, vtable)[0]

    def _field(self, slot: int):
        offset = 4 + 2 * slot
        if offset >= self.vtable_size:
            return None
        relative = struct.unpack_from("<H", self.buf, self.vtable + offset)[0]
        return self.pos + relative if relative else None

    def scalar(self, slot: int, fmt: str, default=0):
        at = self._field(slot)
        return default if at is None else struct.unpack_from("<" + fmt, self.buf, at)[0]

    def _indirect(self, at: int) -> int:
        return at + struct.unpack_from("<I", self.buf, at)[0]

    def table(self, slot: int):
        at = self._field(slot)
        return None if at is None else Table(self.buf, self._indirect(at))

    def string(self, slot: int, default=""):
        at = self._field(slot)
        if at is None:
            return default
        start = self._indirect(at)
        length = struct.unpack_from("<I", self.buf, start)[0]
        return self.buf[start + 4:start + 4 + length].decode("utf-8")

    def _vector(self, slot: int):
        at = self._field(slot)
        if at is None:
            return 0, 0
        start = self._indirect(at)
        return start + 4, struct.unpack_from("<I", self.buf, start)[0]

    def tables(self, slot: int):
        start, count = self._vector(slot)
        return [Table(self.buf, self._indirect(start + 4 * i)) for i in range(count)]

    def strings(self, slot: int):
        start, count = self._vector(slot)
        out = []
        for i in range(count):
            s = self._indirect(start + 4 * i)
            length = struct.unpack_from("<I", self.buf, s)[0]
            out.append(self.buf[s + 4:s + 4 + length].decode("utf-8"))
        return out

    def scalars(self, slot: int, fmt: str):
        start, count = self._vector(slot)
        return list(struct.unpack_from(f"<{count}{fmt}", self.buf, start)) if count else []

    def raw(self, slot: int) -> bytes:
        start, count = self._vector(slot)
        return self.buf[start:start + count]


@dataclass
class Node:
    """One operator: its type, domain, names of inputs and outputs, and attributes by name."""

    op_type: str
    domain: str
    name: str
    inputs: list
    outputs: list
    attributes: dict  # name -> (onnx AttributeType, value)


@dataclass
class Graph:
    """A graph: initializers (numpy arrays), nodes in order, and typed inputs and outputs."""

    name: str
    initializers: dict
    nodes: list
    inputs: list  # [(name, elem_type or None, shape list of int/str/None)]
    outputs: list
    value_types: dict = field(default_factory=dict)


@dataclass
class Model:
    """A model: IR version, opset imports and the main graph."""

    ir_version: int
    opsets: list  # [(domain, version)]
    producer: str
    graph: Graph


def _tensor(t: Table) -> tuple:
    name, dims, data_type = t.string(0), t.scalars(2, "q"), t.scalar(3, "i")
    if t.scalar(6, "q", -1) >= 0:
        raise ValueError(f"tensor {name}: external data is not supported")
    if data_type == 8:
        raise ValueError(f"tensor {name}: string tensors are not supported")
    array = np.frombuffer(t.raw(4), dtype=NUMPY_TYPES[data_type]).reshape(dims)
    return name, array


def _value_type(v: Table):
    """(elem_type, shape) of a tensor ValueInfo, or None when it has no tensor type."""
    type_info = v.table(2)
    if type_info is None or type_info.scalar(1, "B") != 1:
        return None
    tensor_type = type_info.table(2)
    shape_table = tensor_type.table(1)
    shape = None
    if shape_table is not None:
        shape = []
        for dim in shape_table.tables(0):
            value = dim.table(0)
            if value is None:
                shape.append(None)
            elif value.scalar(0, "b") == 1:
                shape.append(value.scalar(1, "q"))
            elif value.scalar(0, "b") == 2:
                shape.append(value.string(2))
            else:
                shape.append(None)
    return tensor_type.scalar(0, "i"), shape


def _attribute(a: Table):
    kind = a.scalar(2, "i")
    if kind == 1:
        value = a.scalar(3, "f")
    elif kind == 2:
        value = a.scalar(4, "q")
    elif kind == 3:
        value = a.string(5).encode("utf-8")
    elif kind == 4:
        value = _tensor(a.table(6))
    elif kind == 5:
        value = _graph(a.table(7), a.string(0))
    elif kind == 6:
        value = a.scalars(8, "f")
    elif kind == 7:
        value = a.scalars(9, "q")
    elif kind == 8:
        value = [s.encode("utf-8") for s in a.strings(10)]
    elif kind == 9:
        value = [_tensor(t) for t in a.tables(11)]
    elif kind == 10:
        value = [_graph(g, a.string(0)) for g in a.tables(12)]
    else:
        raise ValueError(f"attribute {a.string(0)}: type {kind} is not supported")
    return a.string(0), (kind, value)


def _graph(g: Table, name: str) -> Graph:
    if g.tables(7):
        raise ValueError("sparse initializers are not supported")
    initializers = dict(_tensor(t) for t in g.tables(0))
    value_types = {}
    for v in g.tables(1):
        value_types[v.string(0)] = _value_type(v)
    nodes = []
    for n in sorted(g.tables(2), key=lambda n: n.scalar(4, "I")):
        if n.scalar(6, "i") != 0:
            raise ValueError(f"node {n.string(0)}: fused nodes are not supported")
        nodes.append(Node(n.string(5), n.string(2), n.string(0), n.strings(8), n.strings(9),
                          dict(_attribute(a) for a in n.tables(10))))
    inputs = [(i, *(value_types.get(i) or (None, None))) for i in g.strings(5)]
    outputs = [(o, *(value_types.get(o) or (None, None))) for o in g.strings(6)]
    return Graph(name, initializers, nodes, inputs, outputs, value_types)


def read(path: str) -> Model:
    """Reads an ORT-format model file."""
    with open(path, "rb") as f:
        buf = f.read()
    if buf[4:8] != b"ORTM":
        raise ValueError(f"{path} is not an ORT-format model")
    session = Table(buf, struct.unpack_from("<I", buf, 0)[0])
    model = session.table(1)
    opsets = [(o.string(0), o.scalar(1, "q")) for o in model.tables(1)]
    return Model(model.scalar(0, "q"), opsets, model.string(2), _graph(model.table(7), "main"))


# --- ONNX protobuf writer (onnx/onnx.proto field numbers) ---

def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _int(number: int, value: int) -> bytes:
    return _key(number, 0) + _varint(value)


def _bytes(number: int, value) -> bytes:
    if isinstance(value, str):
        value = value.encode("utf-8")
    return _key(number, 2) + _varint(len(value)) + value


def _float(number: int, value: float) -> bytes:
    return _key(number, 5) + struct.pack("<f", value)


def _tensor_proto(name: str, array: np.ndarray) -> bytes:
    array = np.asarray(array, order="C")
    out = b"".join(_int(1, d) for d in array.shape)
    out += _int(2, ONNX_TYPES[array.dtype]) + _bytes(8, name)
    return out + _bytes(9, array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())


def _value_info(name: str, elem_type, shape) -> bytes:
    out = _bytes(1, name)
    if elem_type is None:
        return out
    tensor = _int(1, elem_type)
    if shape is not None:
        dims = b""
        for d in shape:
            if isinstance(d, int):
                dims += _bytes(1, _int(1, d))
            elif isinstance(d, str):
                dims += _bytes(1, _bytes(2, d))
            else:
                dims += _bytes(1, b"")
        tensor += _bytes(2, dims)
    return out + _bytes(2, _bytes(1, tensor))


def _attribute_proto(name: str, kind: int, value) -> bytes:
    out = _bytes(1, name) + _int(20, kind)
    if kind == 1:
        return out + _float(2, value)
    if kind == 2:
        return out + _int(3, value)
    if kind == 3:
        return out + _bytes(4, value)
    if kind == 4:
        return out + _bytes(5, _tensor_proto(*value))
    if kind == 5:
        return out + _bytes(6, _graph_proto(value))
    if kind == 6:
        return out + b"".join(_float(7, v) for v in value)
    if kind == 7:
        return out + b"".join(_int(8, v) for v in value)
    if kind == 8:
        return out + b"".join(_bytes(9, v) for v in value)
    if kind == 9:
        return out + b"".join(_bytes(10, _tensor_proto(*t)) for t in value)
    return out + b"".join(_bytes(11, _graph_proto(g)) for g in value)


def _node_proto(node: Node) -> bytes:
    out = b"".join(_bytes(1, i) for i in node.inputs) + b"".join(_bytes(2, o) for o in node.outputs)
    out += _bytes(3, node.name) + _bytes(4, node.op_type)
    out += b"".join(_bytes(5, _attribute_proto(n, *v)) for n, v in node.attributes.items())
    return out + (_bytes(7, node.domain) if node.domain else b"")


def _graph_proto(graph: Graph) -> bytes:
    out = b"".join(_bytes(1, _node_proto(n)) for n in graph.nodes) + _bytes(2, graph.name)
    out += b"".join(_bytes(5, _tensor_proto(n, a)) for n, a in graph.initializers.items())
    out += b"".join(_bytes(11, _value_info(*i)) for i in graph.inputs)
    return out + b"".join(_bytes(12, _value_info(*o)) for o in graph.outputs)


def write(model: Model, path: str) -> None:
    """Writes the model as an ONNX protobuf file."""
    out = _int(1, model.ir_version) + _bytes(2, model.producer or "sttd")
    out += _bytes(7, _graph_proto(model.graph))
    out += b"".join(_bytes(8, (_bytes(1, d) if d else b"") + _int(2, v)) for d, v in model.opsets)
    with open(path, "wb") as f:
        f.write(out)


# --- Folding weight dequantization into float initializers ---

_FOLDABLE = {
    "Cast": lambda xs, a: xs[0].astype(NUMPY_TYPES[a["to"][1]]),
    "Mul": lambda xs, a: np.multiply(xs[0], xs[1]),
    "Add": lambda xs, a: np.add(xs[0], xs[1]),
    "Sub": lambda xs, a: np.subtract(xs[0], xs[1]),
    "Transpose": lambda xs, a: np.transpose(xs[0], a["perm"][1] if "perm" in a else None),
}


def _fold(graph: Graph, visible: dict, root: Graph, hoisted: dict) -> int:
    """Replaces each foldable node whose inputs are all constants by its value. A subgraph's node
    that reads only outer constants becomes one initializer of the root graph, shared by every
    branch that computes the same thing."""
    folded, kept = 0, []
    for node in graph.nodes:
        if node.op_type in _FOLDABLE and node.inputs and all(
                i in graph.initializers or i in visible for i in node.inputs):
            inputs = [graph.initializers[i] if i in graph.initializers else visible[i]
                      for i in node.inputs]
            value = _FOLDABLE[node.op_type](inputs, node.attributes)
            output = node.outputs[0]
            if graph is root or any(i in graph.initializers for i in node.inputs):
                graph.initializers[output] = value
            else:
                key = (node.op_type, tuple(node.inputs),
                       repr(sorted((k, v[1]) for k, v in node.attributes.items())))
                if key in hoisted and hoisted[key] != output:
                    kept.append(Node("Identity", "", node.name, [hoisted[key]], [output], {}))
                elif key not in hoisted:
                    hoisted[key] = output
                    root.initializers[output] = value
                    visible[output] = value
            folded += 1
            continue
        for kind, value in node.attributes.values():
            if kind == 5:
                folded += _fold(value, {**visible, **graph.initializers}, root, hoisted)
        kept.append(node)
    graph.nodes = kept
    return folded


def _used_names(graph: Graph, used: set) -> None:
    used.update(o[0] for o in graph.outputs)
    for node in graph.nodes:
        used.update(node.inputs)
        for kind, value in node.attributes.values():
            if kind == 5:
                _used_names(value, used)


def _drop_unused(graph: Graph, used: set) -> None:
    graph.initializers = {n: a for n, a in graph.initializers.items() if n in used}
    for node in graph.nodes:
        for kind, value in node.attributes.values():
            if kind == 5:
                _drop_unused(value, used)


def _fuse_transposed_matmuls(graph: Graph) -> None:
    """MatMul(A, Transpose(W)) with a 2-D W becomes FusedMatMul(A, W, transB=1): onnxruntime reads
    W transposed in place instead of keeping (or, once folded, storing) a transposed copy."""
    producers = {o: n for n in graph.nodes for o in n.outputs}
    readers = {}
    for node in graph.nodes:
        for name in node.inputs:
            readers[name] = readers.get(name, 0) + 1
    for node in graph.nodes:
        for kind, value in node.attributes.values():
            if kind == 5:
                _fuse_transposed_matmuls(value)
        if node.op_type != "MatMul" or node.domain:
            continue
        transpose = producers.get(node.inputs[1])
        if transpose is None or transpose.op_type != "Transpose":
            continue
        perm = transpose.attributes.get("perm", (7, [1, 0]))[1]
        if list(perm) != [1, 0]:
            continue
        node.op_type, node.domain = "FusedMatMul", "com.microsoft"
        node.inputs = [node.inputs[0], transpose.inputs[0]]
        node.attributes = {"transB": (2, 1)}
        if readers[transpose.outputs[0]] == 1:
            graph.nodes.remove(transpose)


# --- Weights back to int8, in the form onnxruntime multiplies fastest ---


def _quantize_matmuls(graph: Graph, visible: dict, root: Graph, quantized: dict) -> int:
    """MatMul(A, W) and FusedMatMul(A, W, transB=1) with a constant 2-D float W become
    DynamicQuantizeMatMul(A, Wq, scale, zero point): W as int8 with one symmetric scale per output
    column, A quantized per run. A decoder step is a matrix-vector product bound by reading the
    weights, so a quarter of the bytes is about 2.5x the speed; the greedy tokens of the LibriVox
    clips are unchanged. Each W is quantized once, in the root graph, for every branch that reads
    it."""
    count = 0
    for node in graph.nodes:
        for kind, value in node.attributes.values():
            if kind == 5:
                count += _quantize_matmuls(value, {**visible, **graph.initializers}, root, quantized)
        plain = node.op_type == "MatMul" and not node.domain
        transposed = (node.op_type == "FusedMatMul" and node.domain == "com.microsoft"
                      and node.attributes == {"transB": (2, 1)})
        if not (plain or transposed) or len(node.inputs) != 2:
            continue
        name = node.inputs[1]
        weight = graph.initializers.get(name, visible.get(name))
        if weight is None or weight.ndim != 2 or weight.dtype != np.float32:
            continue
        key = (name, transposed)
        if key not in quantized:
            matrix = weight.T if transposed else weight
            scale = np.abs(matrix).max(axis=0) / 127.0
            scale[scale == 0] = 1.0
            values = np.clip(np.rint(matrix / scale), -127, 127).astype(np.int8)
            stem = f"{name}{'_T' if transposed else ''}_int8"
            root.initializers[stem] = np.ascontiguousarray(values)
            root.initializers[f"{stem}_scale"] = scale.astype(np.float32)
            root.initializers[f"{stem}_zero_point"] = np.zeros(matrix.shape[1], np.int8)
            quantized[key] = [stem, f"{stem}_scale", f"{stem}_zero_point"]
        node.op_type, node.domain, node.attributes = "DynamicQuantizeMatMul", "com.microsoft", {}
        node.inputs = [node.inputs[0], *quantized[key]]
        count += 1
    return count


def convert(model: Model) -> tuple:
    """Folds the weights' dequantization, then stores the matrix weights as per-column int8 for
    DynamicQuantizeMatMul. Returns (nodes folded, matrix products quantized)."""
    _fuse_transposed_matmuls(model.graph)
    folded = _fold(model.graph, {}, model.graph, {})
    quantized = _quantize_matmuls(model.graph, {}, model.graph, {})
    _finish(model)
    return folded, quantized


def _finish(model: Model) -> None:
    """Drops initializers nothing reads and declares exactly the operator domains in use."""
    used = set()
    _used_names(model.graph, used)
    _drop_unused(model.graph, used)
    domains = set()

    def collect(graph):
        for node in graph.nodes:
            domains.add(node.domain)
            for kind, value in node.attributes.values():
                if kind == 5:
                    collect(value)
    collect(model.graph)
    model.opsets = [(d, v) for d, v in model.opsets if d in domains or d == ""]
    if "com.microsoft" in domains and all(d != "com.microsoft" for d, _ in model.opsets):
        model.opsets.append(("com.microsoft", 1))


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3:
        sys.exit("usage: ort_model.py MODEL.ort OUT.onnx  (folds the weights' dequantization, "
                 "stores matrix weights as per-column int8)")
    source = read(sys.argv[1])
    folded, quantized = convert(source)
    write(source, sys.argv[2])
    print(f"{sys.argv[2]}: {folded} weight nodes folded, {quantized} matrix products in int8")
