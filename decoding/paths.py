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
    """This CPU's model name (/proc/cpuinfo's "model name"; else what ``platform`` says): what a
    measurement on this machine (kernel choice, step-cost curve, built kernel) is kept under."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.machine())
    except OSError:
        return platform.processor() or platform.machine()
