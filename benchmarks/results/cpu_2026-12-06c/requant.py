"""A GGUF re-quantized with gguf-py (RESULTS.md 15.9: the draft model's q8_0 file as q4_0 / q5_0, to see what τ
a smaller file would cost): every metadata key copied, 2-D tensors with rows of a multiple of 32 dequantized and
quantized again, the rest f16 (norms stay f32).

    python requant.py draft-q8_0.gguf draft-q4_0.gguf q4_0
"""
import sys

import gguf
import numpy as np
from gguf.quants import dequantize, quantize

FILE_TYPES = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9}

src, dst, qname = sys.argv[1], sys.argv[2], sys.argv[3].upper()
q_type = getattr(gguf.GGMLQuantizationType, qname)
r = gguf.GGUFReader(src)
w = gguf.GGUFWriter(dst, r.fields["general.architecture"].contents())
for f in r.fields.values():
    if f.name.startswith("GGUF.") or f.name in ("general.architecture", "general.file_type"):
        continue
    sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
    w.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub)
w.add_file_type(FILE_TYPES[qname])
for t in r.tensors:
    shape = tuple(int(x) for x in reversed(t.shape))  # (numpy order)
    if t.tensor_type == gguf.GGMLQuantizationType.F32:
        w.add_tensor(t.name, np.array(t.data).reshape(shape))
        continue
    a = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
    if a.ndim >= 2 and a.shape[-1] % 32 == 0:
        q = quantize(a, q_type)
        w.add_tensor(t.name, q, raw_shape=q.shape, raw_dtype=q_type)
    else:
        w.add_tensor(t.name, a.astype(np.float16))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
