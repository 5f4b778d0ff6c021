"""The public-demo switch: ``PDL_PUBLIC_DEMO=1`` limits the models a visitor can name.

A local tool may load any folder on the server (``--model`` takes paths); a public demo must not
let visitors name server paths. With the switch on, the sidebar's model field (and the CLLM
page's folder field) take only: empty (the bundled model), a Hugging Face model id (``org/name``)
whose files are already in this server's Hugging Face cache, and the shipped CLLM adapter.
Nothing is ever downloaded (the app loads with ``HF_HUB_OFFLINE``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .text import md

ENV = "PDL_PUBLIC_DEMO"
_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def public_demo() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def hf_cache() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def in_hf_cache(model_id: str) -> bool:
    """``org/name`` has a folder in the local Hugging Face cache (and is not a path here)."""
    return (bool(_HF_ID.match(model_id)) and ".." not in model_id and not Path(model_id).exists()
            and (hf_cache() / ("models--" + model_id.replace("/", "--"))).is_dir())


def model_refused(name: str, also: tuple[str, ...] = ()) -> str | None:
    """Why the public demo refuses the model ``name`` (None: allowed, or not a public demo).
    ``also``: further names allowed as they are (the shipped CLLM adapter)."""
    if not public_demo() or name in ("", "bundled", *also) or in_hf_cache(name):
        return None
    return (f"This public demo runs only the bundled model and models already in this server's Hugging Face "
            f"cache, named by id (org/name): {md(name)} is not one of them.")
