"""Runs an int8 ONNX model's weight-only MatMuls as int8 kernels.

The pinned MiniLM file stores each linear layer's weight as int8 with a scale
per output column, dequantized in the graph: ``MatMul(x, Cast(W) * scale)``.
onnxruntime folds that into a float32 weight at load, so every call streams
~42 MB of float weights through the cache, which is what a short query's
embedding costs (~2.7 ms for a one-word query on a 2-core VM). Rewritten as
onnxruntime's ``DynamicQuantizeMatMul(x, W, scale)`` (its contrib op: ``x``
quantized per call, int8 GEMM, the same int8 weights and scales) a query
embeds ~4x faster and a batch ~1.4x; the vectors stay within cosine 0.98-0.99
of the float path (labelled recall: BENCHMARKS.md).

The rewrite parses the model with a minimal ONNX schema built here: the
``onnx`` package costs 0.7-1 s to import and ~20 MB of wheels for four
fields. Every field this schema does not name (attributes, types, metadata)
is kept as protobuf unknown fields and written back unchanged.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["int8_matmuls"]

_INT8 = 3  # onnx TensorProto.DataType.INT8
_FLOAT = 1  # onnx TensorProto.DataType.FLOAT


# The fields of onnx.proto this module reads or writes: (name, number, type),
# a leading "*" for repeated; a type in _SCHEMA is a message. ONNX's numbers.
_SCHEMA: dict[str, tuple[tuple[str, int, str], ...]] = {
    "Opset": (("domain", 1, "string"), ("version", 2, "int64")),
    "Tensor": (("*dims", 1, "int64"), ("data_type", 2, "int32"), ("name", 8, "string")),
    "Node": (
        ("*input", 1, "string"),
        ("*output", 2, "string"),
        ("name", 3, "string"),
        ("op_type", 4, "string"),
        ("domain", 7, "string"),
    ),
    "Graph": (("*node", 1, "Node"), ("*initializer", 5, "Tensor")),
    "Model": (("graph", 7, "Graph"), ("*opset_import", 8, "Opset")),
}


@functools.cache
def _classes() -> tuple[Any, Any]:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FileDescriptorProto(name="argus_onnx_min.proto", package="m")
    T = descriptor_pb2.FieldDescriptorProto
    for message, fields in _SCHEMA.items():
        m = f.message_type.add(name=message)
        for name, number, kind in fields:
            field = m.field.add(name=name.lstrip("*"), number=number)
            field.label = T.LABEL_REPEATED if name[0] == "*" else T.LABEL_OPTIONAL
            if kind in _SCHEMA:
                field.type, field.type_name = T.TYPE_MESSAGE, f".m.{kind}"
            else:
                field.type = getattr(T, f"TYPE_{kind.upper()}")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    get = message_factory.GetMessageClass
    return get(pool.FindMessageTypeByName("m.Model")), get(
        pool.FindMessageTypeByName("m.Tensor")
    )


def int8_matmuls(blob: bytes) -> tuple[bytes, int]:
    """Returns the model with each ``MatMul(x, Cast(W_int8) * scale)`` whose
    dequantized weight feeds only that MatMul replaced by
    ``DynamicQuantizeMatMul(x, W_int8, scale)``, and how many were replaced."""
    model_cls, tensor_cls = _classes()
    model = model_cls.FromString(blob)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    made_by = {o: n for n in g.node for o in n.output}
    uses: dict[str, int] = {}
    for n in g.node:
        for x in n.input:
            uses[x] = uses.get(x, 0) + 1
    dropped: set[int] = set()
    flat_scales: dict[str, Any] = {}
    replaced = 0
    for n in g.node:
        if n.op_type != "MatMul" or n.domain or len(n.input) != 2:
            continue
        mul = made_by.get(n.input[1])
        if mul is None or mul.op_type != "Mul" or uses[n.input[1]] != 1:
            continue
        for w_out, scale in (tuple(mul.input), tuple(reversed(mul.input))):
            cast = made_by.get(w_out)
            if cast is None or cast.op_type != "Cast" or uses[w_out] != 1:
                continue
            w, s = inits.get(cast.input[0]), inits.get(scale)
            if w is None or s is None or w.data_type != _INT8 or len(w.dims) != 2:
                continue
            if s.data_type != _FLOAT or list(s.dims) not in (
                [w.dims[1]],
                [1, w.dims[1]],
            ):
                continue  # only a float scale per output column (or its [1, N] form)
            flat_name = f"{s.name}__per_column"
            if flat_name not in flat_scales:  # one copy per scale, however shared
                flat = flat_scales[flat_name] = tensor_cls()
                flat.CopyFrom(s)
                flat.name = flat_name
                del flat.dims[:]
                flat.dims.append(w.dims[1])
            dropped.update((id(mul), id(cast)))
            n.op_type, n.domain = "DynamicQuantizeMatMul", "com.microsoft"
            n.input[1:] = [w.name, flat_name]
            replaced += 1
            break
    if not replaced:
        return blob, 0
    kept = [n.SerializeToString() for n in g.node if id(n) not in dropped]
    del g.node[:]
    for raw in kept:
        g.node.add().MergeFromString(raw)
    g.initializer.extend(flat_scales.values())
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.add(domain="com.microsoft", version=1)
    return model.SerializeToString(), replaced
