"""Where the lab keeps what it makes outside the repo (converted models, step-cost curves, tuning
results, the kernel choice): one folder, ``PDL_CACHE`` or the user's cache folder; and the CPU's
name that keys what was measured on this machine."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cache_dir() -> Path:
    """Where converted models live (outside the repo unless PDL_CACHE says otherwise)."""
    base = os.environ.get("PDL_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "parallel-decoding-lab")
    return Path(base)


def cpu_name() -> str:
    """This CPU's model name, family and widest vector extension, e.g. "AMD EPYC (family 26 model 2,
    avx512)": what a measurement on this machine (kernel choice, step-cost curve, built kernel) is kept
    under. A cloud CPU's model name alone can cover generations that differ where it matters: "AMD
    EPYC" names both a 2-core AVX2 host of this project and an AVX-512 one, whose few-row kernels differ
    (a kernel built for the one cannot run on the other) and whose step costs do too."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return describe_cpu(f.read()) or platform.machine()
    except OSError:
        return platform.processor() or platform.machine()


def describe_cpu(cpuinfo: str) -> str:
    r"""``cpu_name`` from the text of /proc/cpuinfo (its first processor's lines; "" without a model name).

    >>> describe_cpu("model name\t: AMD EPYC\ncpu family\t: 26\nmodel\t\t: 2\nflags\t\t: fpu avx2 avx512f\n")
    'AMD EPYC (family 26 model 2, avx512)'
    >>> describe_cpu("model name : Some ARM core\n")
    'Some ARM core'
    """
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block only
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name", "")
    if not name:
        return ""
    flags = set(fields.get("flags", "").split())
    isa = next((f.rstrip("f") for f in ("avx512f", "avx2", "avx") if f in flags), "")
    details = [f"family {fields['cpu family']} model {fields['model']}" if "cpu family" in fields and "model" in fields else "",
               isa]
    details = [d for d in details if d]
    return f"{name} ({', '.join(details)})" if details else name
