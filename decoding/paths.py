"""Where the lab keeps what it makes outside the repo (converted models, step-cost curves, tuning
results, the kernel choice): one folder, ``PDL_CACHE`` or the user's cache folder."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where converted models live (outside the repo unless PDL_CACHE says otherwise)."""
    base = os.environ.get("PDL_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "parallel-decoding-lab")
    return Path(base)
