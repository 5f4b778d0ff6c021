"""CLLM page: one prompt decoded with Jacobi by the base model and by a consistency LLM, side by
side and in step; per-block iterations, fast-forwarded and stationary counts; training curves."""

import json
from pathlib import Path

import streamlit as st

from app_pages.common import runs, ui
from viz import cllm as vc, jacobi
from viz import style


def metrics_of(folder: Path) -> tuple[list[dict], dict]:
    """The training metrics rows and the cllm.json of a CLLM folder (empty if absent)."""
    from cllm import META_FILE, METRICS_FILE, read_metrics

    rows = read_metrics(str(folder / METRICS_FILE)) if (folder / METRICS_FILE).is_file() else []
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    return rows, meta if isinstance(meta, dict) else {}


st.title("Consistency LLM (CLLM)")
st.markdown("A CLLM is the base model fine-tuned on its own Jacobi trajectories: from any intermediate state of a "
            "block it learns to predict the block's fixed point (consistency loss), while an AR loss keeps its "
            "greedy answer. Jacobi then converges in fewer iterations, with more **fast-forwarded** and "
            "**stationary** tokens. Both models below decode the same prompt with greedy Jacobi; press **Play**.")
with st.expander("Decode the sidebar's prompt with both models"):
    folder = st.text_input("CLLM folder (LoRA adapter or full model)", value=ui.SHIPPED_ADAPTER_NAME, key="cllm_folder",
                           help="A folder relative to the app's, or absolute; the shipped CLLM is "
                                f"{ui.SHIPPED_ADAPTER_NAME}.")
    st.caption("The base model is the sidebar's model (empty: the bundled SmolLM2-135M); n, max new tokens and "
               "the seed come from the sidebar.")
    if st.button("Decode with base and CLLM", key="cllm_run"):
        runs.decode_pair(folder.strip())

pair = ui.results().cllm
if pair is None:
    st.info("No CLLM traces yet: the shipped ones in assets/cllm are missing. Decode a prompt with the button above.")
    st.stop()
base, cllm, source, folder = pair.base, pair.cllm, pair.source, pair.folder
prompt = base.prompt_text or "".join(base.prompt_pieces)
st.caption(f"Showing: {ui.md(source)} · base: {ui.md(base.model_id)} · CLLM: {ui.md(cllm.model_id)} · "
           f"Jacobi n = {ui.md(str(base.params.get('n')))} · {ui.md(base.device)}, "
           f"{ui.md(base.kernel) if base.kernel == cllm.kernel else ui.md(base.kernel + ' / ' + cllm.kernel)} kernel")
st.caption(f"Prompt{' (chat)' if base.chat else ''}: {ui.md(prompt if len(prompt) <= 200 else prompt[:197] + '…')}")


def campaign_runs() -> list[dict]:
    """The training runs with a learning curve of every campaign folder (data/cllm, then data/cllm-*:
    cllm.campaign.campaign_folders, list_runs), each with its folder and whose trajectories it
    trains on (the campaign's teacher); [] if none."""
    from cllm.campaign import campaign_folders, list_runs, open_campaign
    from decoding.io import UsageError

    out = []
    for root in campaign_folders(str(ui.ROOT / "data")):
        try:
            teacher = open_campaign(str(root)).settings.teacher
            out += [{**r, "root": str(root), "folder": root.name, "teacher": teacher} for r in list_runs(str(root))]
        except (OSError, ValueError, UsageError):
            continue
    return out


def run_label(r: dict) -> str:
    """A run's folder and name, its recipe (the settings it changed), the run it started from, and
    whose trajectories it trains on where they are its own."""
    recipe = ", ".join(f"{k} {v}" for k, v in r["recipe"].items())
    what = "recipe A (the manifest's settings)" if r["run"] == "run" else (recipe or "the manifest's settings")
    if r.get("teacher") == "student":
        what += ", on its own trajectories (on-policy)"
    last = r.get("last") or {}
    latest = (f" ({last['jacobi_tokens_per_step']:.3f} tokens/step at {last.get('items_seen', 0):,} items)"
              if "jacobi_tokens_per_step" in last else "")
    where = "" if r.get("folder", "cllm") == "cllm" else f"{r['folder']}/"
    return f"{where}{r['run']}: {what}" + (f", continuing {r['from']}" if r["from"] else "") + latest


def campaign_curve_rows(root: str, run: str = "run") -> list[dict]:
    """The learning curve of one campaign run (ROOT/RUN/curve.jsonl); [] if none."""
    from cllm.campaign import read_curve

    try:
        return read_curve(root, run)
    except (OSError, ValueError):
        return []


def pairs_table() -> dict:
    """assets/cllm/pairs.json (``python -m cllm pair --results``): the rule that chose the shipped
    pair and every evaluated prompt's figures; {} if absent or unreadable."""
    try:
        t = json.loads((ui.CLLM_ASSETS / "pairs.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return t if isinstance(t, dict) and isinstance(t.get("prompts"), list) else {}


def _use_prompt(text: str, chat: bool) -> None:  # a button callback: runs before the sidebar's widgets
    st.session_state.prompt = text
    st.session_state.chat = chat


table = pairs_table()
if table:
    st.caption(f"Why this prompt: {style.esc(str(table.get('rule', '')))} (prompt {style.esc(str(table.get('chosen')))}).")
    with st.expander(f"Every prompt of the evaluation set ({len(table['prompts'])})"):
        st.dataframe([{k: p.get(k) for k in ("id", "category", "base_tokens_per_step", "cllm_tokens_per_step", "gain",
                                             "identical_share", "degenerate")} for p in table["prompts"]], hide_index=True)
        texts = table.get("texts", {})
        picked = ui.pick("Prompt", {f"{p['id']} ({p['category']}): {p['gain']:.2f}x": p for p in table["prompts"]},
                         key="cllm_pick")
        st.markdown(f"Base {picked['base_tokens_per_step']:.2f} → CLLM {picked['cllm_tokens_per_step']:.2f} tokens/step "
                    f"({picked['base_steps']} → {picked['cllm_steps']} steps), {picked['identical_share']:.0%} of the "
                    f"base's tokens kept{', degenerate answer' if picked['degenerate'] else ''}.")
        if picked["id"] in texts:
            st.text(texts[picked["id"]])
            st.button("Use this prompt in the sidebar (then decode it above)", key="cllm_use",
                      on_click=_use_prompt, args=(texts[picked["id"]], bool(table.get("chat"))))


def gain(ratio: float, stopped: bool) -> dict:
    """The tokens-per-step metric's delta: green only for a gain of two finished decodes, red for a
    loss, grey and said so when a decode was stopped (its tokens/step covers only what it decoded)."""
    if stopped:
        return {"delta": f"{ratio:.2f}x, stopped: a partial decode", "delta_color": "gray", "delta_arrow": "off"}
    up = round(ratio, 2) > 1
    same = round(ratio, 2) == 1
    return {"delta": f"{ratio:.2f}x", "delta_color": "gray" if same else "green" if up else "red",
            "delta_arrow": "off" if same else "up" if up else "down"}


rows = vc.summary_rows(base, cllm)
c1, c2, c3 = st.columns(3)
ratio = rows[1]["tokens/step"] / rows[0]["tokens/step"] if rows[0]["tokens/step"] else 0.0
c1.metric("Tokens per step: base → CLLM", f"{rows[0]['tokens/step']:.2f} → {rows[1]['tokens/step']:.2f}",
          **gain(ratio, any(t.stop_reason in ("stopped", "") for t in (base, cllm))))
c2.metric("Forward steps: base → CLLM", f"{rows[0]['steps']} → {rows[1]['steps']}")
d = vc.drift(base, cllm)
c3.metric("Same tokens as the base's answer", f"{d['identical_share']:.0%}",
          help=f"position by position; the answers agree on their first {d['common_prefix']} tokens")
st.dataframe(rows, hide_index=True)

blocks = vc.common_blocks(base, cllm)
if blocks:
    block = ui.pick("Block", {f"block {b}": b for b in blocks}, key="cllm_block")
    ui.chart(vc.side_by_side, base, cllm, block, key="cllm_anim")
    st.markdown(jacobi.DEFINITIONS)
else:
    st.warning("These traces have no Jacobi blocks in common (recording was off?).")
ui.chart(vc.iterations_figure, base, cllm, key="cllm_iters")

left, right = st.columns(2)
for col, name, t in ((left, "Base", base), (right, "CLLM", cllm)):
    with col:
        st.markdown(f"**{name}'s answer**")
        st.text(t.text)  # plain text: never rendered as HTML or markdown

st.subheader("Training")
metrics, meta = metrics_of(Path(folder))
ui.chart(vc.training_curves, metrics, key="cllm_curves")
if meta:
    keep = ("base", "items", "steps", "epochs", "lr", "ar_weight", "local", "lora_r", "scale", "train_seconds",
            "train_tokens", "device", "command")
    st.dataframe([{"setting": k, "value": str(meta[k])} for k in keep if k in meta], hide_index=True)

st.subheader("The campaign: training on GSM8K, a learning curve")
st.markdown("The consistency LLM is trained by a long campaign of short resumable runs (`python -m cllm campaign run`): "
            "Jacobi trajectories of the base model on GSM8K training problems (in an on-policy campaign, of the CLLM "
            "itself as it trains), collected in shards, then LoRA training "
            "(global consistency + AR loss). After every few hundred items the CLLM decodes held-out GSM8K test "
            "problems: if consistency training works, its Jacobi **tokens per step** rise above the base's while its "
            "answers stay as good (accuracy, the base's perplexity of them).")
runs = campaign_runs()
chosen = runs[0] if runs else {"root": str(ui.ROOT / "data" / "cllm"), "run": "run"}
if len(runs) > 1:
    labels = {run_label(r): r for r in runs}
    furthest = max(range(len(runs)), key=lambda i: (runs[i]["last"].get("items_seen", 0), -i))
    chosen = labels[st.selectbox("Training run (recipes are compared on the same shards; the furthest trained first)",
                                 list(labels), index=furthest, key="cllm_campaign_run")]
curve = campaign_curve_rows(chosen["root"], chosen["run"])
ui.chart(vc.campaign_curve, curve, key="cllm_campaign")
if curve:
    last = curve[-1]
    st.caption(f"Latest point ({style.esc(str(last.get('date', '')))}): {last['items_seen']:,} items trained, CLLM "
               f"{last['jacobi_tokens_per_step']:.3f} vs base {last.get('base_jacobi_tokens_per_step', 0):.3f} tokens/step "
               f"on {last.get('prompts')} held-out problems"
               + (f"; without the CLLM's {last['prompts'] - last['clean_prompts']} degenerate answers "
                  f"{last['clean_jacobi_tokens_per_step']:.3f} vs base {last.get('clean_base_jacobi_tokens_per_step', 0):.3f} "
                  f"on the other {last['clean_prompts']} (a repetition loop is the easiest text to fast-forward)"
                  if last.get("clean_prompts") and last.get("prompts") else "")
               + ". The campaign is under way: see docs/benchmarks.md.")

st.subheader("The training objective, drawn")
st.markdown("The CLLM learns from the base model's Jacobi trajectories. On one of them (a block of the base trace "
            "above, a held-out prompt the CLLM did not train on): from every state the model should predict the "
            "fixed point y* (**global consistency**: KL from y*'s distribution to the state's, from the state's first "
            "wrong position on, orange arrows), optionally the next state (**local consistency**, blue arrows, drawn "
            "only when the CLLM trained with it), and y* itself token by token (**AR loss**, weighted 10×, which "
            "keeps the greedy answer).")
try:
    objective = json.loads((ui.CLLM_ASSETS / "objective.json").read_text(encoding="utf-8"))
except (OSError, ValueError):
    objective = None
if objective is None:
    st.info("No objective item shipped (assets/cllm/objective.json: scripts/cllm_objective.py writes it).")
else:
    who = st.radio("Loss values of", ["the CLLM", "the base model"], key="cllm_obj_model", horizontal=True)
    local = metrics_of(ui.SHIPPED_ADAPTER)[1].get("local")  # the objective item is the shipped CLLM's
    ui.chart(vc.objective_figure, objective, "cllm" if who == "the CLLM" else "base",
             float(local) if isinstance(local, (int, float)) else None, key="cllm_objective")
    if local == 0:
        st.caption("The shipped CLLM trained without the local consistency loss (local weight 0): no local arrows.")
    st.dataframe(vc.objective_rows(objective), hide_index=True)
    st.caption(style.esc(f"{objective['command']} ({objective['seconds']} s on this machine's CPU)"))
