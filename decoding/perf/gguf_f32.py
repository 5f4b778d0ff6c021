"""A GGUF file with every tensor dequantized to float32 and its metadata kept: the bundled model's
weights as llama.cpp reads them in F32, the very values transformers loads (it dequantizes the
same GGUF with the same ``gguf`` package). The llama.cpp benchmark (scripts/llama_cpp_bench.py)
runs llama.cpp on it, so both sides compute with the same weights in the same precision.
"""

from __future__ import annotations

import os
from pathlib import Path

F32_FILE_TYPE = 0  # llama.cpp's LLAMA_FTYPE_ALL_F32 (general.file_type)


def to_f32(src: str | Path, dst: str | Path) -> Path:
    """Write ``src`` with every tensor as F32 to ``dst`` (atomically: a cut run leaves no file)."""
    import gguf
    import numpy as np
    from gguf import quants

    reader = gguf.GGUFReader(str(src))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + f".tmp{os.getpid()}")
    writer = gguf.GGUFWriter(str(tmp), arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes these itself
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = F32_FILE_TYPE if field.name == gguf.Keys.General.FILE_TYPE else field.contents()
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    for t in reader.tensors:  # numpy's shape is GGUF's, reversed
        data = quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        writer.add_tensor(t.name, np.ascontiguousarray(data.reshape([int(d) for d in reversed(t.shape)])))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dst)
    return dst


def bundled_f32(progress=None) -> Path:
    """The bundled model's F32 GGUF in the lab's cache folder (written once, ~540 MB)."""
    from ..model import bundled_gguf_path
    from ..paths import cache_dir

    src = bundled_gguf_path()
    dst = cache_dir() / "gguf" / f"{src.stem}.F32-{src.stat().st_size}.gguf"
    if not dst.exists():
        if progress is not None:
            progress(f"writing the bundled model's weights as an F32 GGUF once ({dst})")
        to_f32(src, dst)
    return dst
