"""CLLM views: figure builders on tiny-model Jacobi traces, the page in AppTest on the shipped assets
and on a live run of two tiny models (no real model is loaded here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decoding import analysis
from decoding.loop import decode
from decoding.trace import Trace
from tiny import ByteTokenizer, tiny_lm
from viz import cllm as vc
from viz.jacobi import block_view
from viz.style import JACOBI_STATES

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
ASSETS = ROOT / "assets" / "cllm"
IDS = [5, 9, 2, 7, 5, 9, 2, 7, 1]


@pytest.fixture(scope="module")
def pair():
    a = decode(tiny_lm("llama", 0), IDS, "jacobi", {"n": 6}, 20)
    b = decode(tiny_lm("llama", 1), IDS, "jacobi", {"n": 6}, 20)
    return a, b


def test_summary_rows_add_up_the_analysis(pair):
    rows = vc.summary_rows(*pair)
    for row, t in zip(rows, pair):
        counts = analysis.jacobi_counts(t)
        assert row["steps"] == t.n_steps and row["tokens/step"] == round(t.tokens_per_step, 3)
        assert row["blocks"] == len(counts) == len(t.blocks)
        assert row["fast-forwarded"] == sum(c["fast_forwarded"] for c in counts)
        assert row["stationary"] == sum(c["stationary"] for c in counts)
        assert row["iterations/block"] == round(sum(c["iterations"] for c in counts) / len(counts), 2)
    assert [r["model"] for r in rows] == ["base", "CLLM"]


def test_side_by_side_frames_move_both_rows_in_step(pair):
    a, b = pair
    fig = vc.side_by_side(a, b, 1)
    va, vb = block_view(a, 1), block_view(b, 1)
    assert len(fig.frames) == max(len(va.rows), len(vb.rows))
    for k, fr in enumerate(fig.frames):
        assert list(fr.traces) == [0, 1]
        # a finished model holds its last state
        ka, kb = min(k, len(va.rows) - 1), min(k, len(vb.rows) - 1)
        assert list(fr.data[0].x) == list(range(len(va.rows[ka])))
        assert list(fr.data[0].marker.color) == [JACOBI_STATES[s][0] for s in va.states[ka]]
        assert list(fr.data[1].marker.color) == [JACOBI_STATES[s][0] for s in vb.states[kb]]
        assert ("initial guess" if k == 0 else f"iteration {k}") in fr.layout.title.text
    fa, fb = va.fp, vb.fp
    assert len(fig.data[2].x) == len(fa) and len(fig.data[3].x) == len(fb)
    # token text is escaped: the tiny tokenizer's pieces look like tags ("<5>")
    labels = [t for d in fig.data[:4] for t in d.text] + [h for d in fig.data[:4] for h in d.hovertext]
    assert labels and not any("<5>" in s or "<9>" in s for s in labels)


def test_side_by_side_missing_block_says_so(pair):
    fig = vc.side_by_side(pair[0], pair[1], 99)
    assert "No Jacobi iterations" in fig.layout.annotations[0].text
    assert vc.common_blocks(*pair) == sorted({x.index for x in pair[0].blocks} & {x.index for x in pair[1].blocks})


def test_iterations_figure_has_both_models(pair):
    fig = vc.iterations_figure(*pair)
    bars = [d for d in fig.data if d.type == "bar"]
    assert [list(d.y) for d in bars] == [[c["iterations"] for c in analysis.jacobi_counts(t)] for t in pair]


def test_iterations_figure_states_the_blocks_count_from_the_analysis():
    """Issue 11, error 3: the title said a block without fast-forward takes n - 1 iterations; the
    shipped traces (n = 16) show 16. The number now comes from jacobi_counts, and it holds."""
    base = Trace.load(str(ASSETS / "base_jacobi.json"))
    cllm = Trace.load(str(ASSETS / "cllm_jacobi.json"))
    n = base.params["n"]
    title = vc.iterations_figure(base, cllm).layout.title.text
    assert f"a full block commits {n} tokens: {n} iterations if no guess" in title
    counts = analysis.jacobi_counts(base) + analysis.jacobi_counts(cllm)
    plain = [c for c in counts if c["extra_committed"] == 0]
    assert plain and all(c["iterations"] == c["tokens"] for c in plain)
    assert any(c["iterations"] == n for c in plain)


def test_objective_figure_draws_the_shipped_item():
    """Issue 11, figure 7: states to the fixed point, a global arrow from every state that is not
    y*, a local arrow between differing neighbours, the AR loss on y*, with the model's values."""
    obj = json.loads((ASSETS / "objective.json").read_text(encoding="utf-8"))
    fp, states = obj["fixed_point"], obj["states"]
    assert states[-1] == fp and states[0] != fp and obj["n"] == len(fp)
    for key in ("base", "cllm"):
        L = obj["losses"][key]
        assert len(L["global"]) == len(states) and len(L["local"]) == len(states) - 1
        assert L["global"][-1] == 0.0 and all(v >= 0 for v in L["global"] + L["local"])
    fig = vc.objective_figure(obj, "cllm")
    cells = fig.data[0]
    assert len(cells.x) == len(fp) * (len(states) + 1)
    texts = [a.text for a in fig.layout.annotations if a.text]
    L = obj["losses"]["cllm"]
    n_global = sum(s != fp for s in states)
    n_local = sum(a != b for a, b in zip(states, states[1:]))
    assert sum(1 for a in fig.layout.annotations if a.showarrow) == n_global + n_local
    assert f"{L['global'][0]:.2f}" in texts and f"{L['local'][0]:.2f}" in texts
    assert f"y*  AR loss {L['ar']:.3f}" in texts
    assert f"y*  AR loss {obj['losses']['base']['ar']:.3f}" in [a.text for a in vc.objective_figure(obj, "base").layout.annotations]
    rows = vc.objective_rows(obj)
    assert rows[0]["global (CLLM)"] == L["global"][0] and rows[-1]["local to next (CLLM)"] is None
    # the consistency-trained model is closer to the fixed point from the initial guess than the base
    assert obj["losses"]["cllm"]["global"][0] < obj["losses"]["base"]["global"][0]


def test_objective_figure_draws_local_arrows_only_for_a_model_trained_with_them():
    """Issue 23, item 8: the figure drew local-consistency arrows though the shipped CLLM trained
    without that loss (cllm.json "local": 0). With weight 0 no local arrow and the legend says why;
    with a weight above 0 they are drawn; the page passes the shipped model's weight."""
    obj = json.loads((ASSETS / "objective.json").read_text(encoding="utf-8"))
    states, fp = obj["states"], obj["fixed_point"]
    n_global = sum(s != fp for s in states)
    n_local = sum(a != b for a, b in zip(states, states[1:]))
    arrows = lambda fig: sum(1 for a in fig.layout.annotations if a.showarrow)
    legend = lambda fig: [d.name for d in fig.data if d.showlegend and "local consistency" in (d.name or "")]
    off = vc.objective_figure(obj, "cllm", 0.0)
    assert arrows(off) == n_global and n_local > 0
    assert f"{obj['losses']['cllm']['local'][0]:.2f}" not in [a.text for a in off.layout.annotations]
    assert "not used in training" in legend(off)[0]
    on = vc.objective_figure(obj, "cllm", 1.0)
    assert arrows(on) == n_global + n_local and "training weight 1" in legend(on)[0]
    assert json.loads((ASSETS / "adapter" / "cllm.json").read_text())["local"] == 0
    at = fresh()
    spec = next(sp for sp in (json.loads(c.proto.spec) for c in at.get("plotly_chart"))
                if "The CLLM objective" in sp["layout"]["title"]["text"])
    assert sum(1 for a in spec["layout"]["annotations"] if a.get("showarrow")) == n_global
    assert any("not used in training" in (d.get("name") or "") for d in spec["data"])


def test_training_curves_smooth_the_rows():
    rows = [{"step": i + 1, "consistency": float(10 - i), "ar": 1.0 / (i + 1), "seconds": 2.0 * i, "tokens": 100 * i}
            for i in range(10)]
    fig = vc.training_curves(rows, window=4)
    smooth = [d for d in fig.data if d.showlegend is not False and "consistency" in (d.name or "")]
    assert len(smooth) == 1
    assert list(smooth[0].y)[:5] == [10.0, 9.5, 9.0, 8.5, 7.5]
    assert any(d.yaxis == "y2" for d in fig.data)
    assert "10 steps" in fig.layout.title.text
    assert "No training metrics" in vc.training_curves([]).layout.annotations[0].text


def test_drift_counts_identical_positions(pair):
    a, b = pair
    d = vc.drift(a, a)
    assert d["identical_share"] == 1.0 and d["common_prefix"] == len(a.output_ids)
    d = vc.drift(a, b)
    assert 0 <= d["identical_share"] <= 1 and d["common_prefix"] < len(a.output_ids)


# ---- the page -----------------------------------------------------------------------------------
def fresh() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("app_pages/cllm.py").run()
    return at


def test_shipped_assets_are_small_and_consistent():
    base = Trace.load(str(ASSETS / "base_jacobi.json"))
    cllm = Trace.load(str(ASSETS / "cllm_jacobi.json"))
    assert base.method == cllm.method == "jacobi" and base.prompt_ids == cllm.prompt_ids
    assert base.params == cllm.params
    assert "LoRA on" in cllm.model_id and "LoRA" not in base.model_id
    ad = ASSETS / "adapter"
    weights = [p for p in ad.iterdir() if p.name == "adapter_model.safetensors" or p.name.startswith("lora_int8")]
    assert len(weights) == 1 and weights[0].stat().st_size < 5_500_000  # fp16, or int8 (campaign export --int8)
    assert json.loads((ad / "adapter_config.json").read_text())["base_model_name_or_path"] == "bundled"
    from cllm import read_metrics
    rows = read_metrics(str(ad / "metrics.jsonl"))
    assert rows and rows[-1]["step"] == json.loads((ad / "cllm.json").read_text())["steps"]
    for p in ("base_jacobi.json", "cllm_jacobi.json"):
        assert (ASSETS / p).stat().st_size < 400_000


def test_page_opens_on_the_shipped_traces():
    at = fresh()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(specs) == 5
    campaign = specs[3]["layout"]
    assert "Learning curve" in campaign.get("title", {}).get("text", "") or "No learning curve" in str(campaign)
    assert len(specs[0]["frames"]) >= 2 and [f["traces"] for f in specs[0]["frames"]][0] == [0, 1]
    assert "Training" in specs[2]["layout"]["title"]["text"]
    assert "The CLLM objective" in specs[4]["layout"]["title"]["text"]
    assert any("shipped traces" in c.value for c in at.caption)
    assert len(at.metric) == 3
    sb = at.selectbox(key="cllm_block")
    first = specs[0]["layout"]["title"]["text"]
    sb.select(sb.options[-1]).run()
    assert not at.exception
    assert json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["title"]["text"] != first


def test_page_decodes_the_sidebar_prompt_with_both_models(monkeypatch):
    from app_pages.common import models

    lms = {}
    for name, seed in (("", 0), ("my-cllm", 1)):
        lm = tiny_lm("llama", seed)
        lm.tokenizer = ByteTokenizer()
        lm.model_id = f"tiny {name or 'base'}"
        lms[name] = lm
    monkeypatch.setattr(models, "get_model", lambda name: lms[name])
    at = fresh()
    at.selectbox(key="example").select("Plain text (no chat)").run()
    at.number_input(key="max_new_tokens").set_value(20).run()
    at.number_input(key="p_n").set_value(5).run()
    at.text_input(key="cllm_folder").input("my-cllm").run()
    at.button(key="cllm_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    pair = at.session_state["results"].cllm
    base, cllm, source, folder = pair.base, pair.cllm, pair.source, pair.folder
    assert source.startswith("live run (finished") and folder == "my-cllm"
    assert base.model_id == "tiny base" and cllm.model_id == "tiny my-cllm"
    assert base.params["n"] == 5 and len(base.output_ids) == 20 and base.prompt_ids == cllm.prompt_ids
    assert any("live run" in c.value for c in at.caption)
    # no metrics for this folder: the curves say so instead of failing
    assert "No training metrics" in json.dumps(json.loads(at.get("plotly_chart")[-3].proto.spec))


def test_page_states_the_pair_rule_and_lists_the_evaluation_set(monkeypatch, tmp_path):
    import shutil

    from app_pages.common import ui

    for p in ("base_jacobi.json", "cllm_jacobi.json"):
        shutil.copy(ASSETS / p, tmp_path / p)
    row = lambda i, cat, g: {"id": i, "category": cat, "split": "s", "base_tokens_per_step": 1.0, "cllm_tokens_per_step": g,
                             "base_steps": 50, "cllm_steps": 30, "gain": g, "identical_share": 0.9, "degenerate": False}
    (tmp_path / "pairs.json").write_text(json.dumps({
        "rule": "the held-out prompt with the median Jacobi tokens/step gain", "chosen": "441", "chat": True,
        "prompts": [row("441", "math_reasoning", 1.5), row("7", "qa", 1.2)],
        "texts": {"441": "Tom has 3 apples.", "7": "Who wrote Hamlet?"}}))
    monkeypatch.setattr(ui, "CLLM_ASSETS", tmp_path)
    at = fresh()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Why this prompt: the held-out prompt with the median" in c.value for c in at.caption)
    sb = at.selectbox(key="cllm_pick")
    assert sb.options == ["441 (math_reasoning): 1.50x", "7 (qa): 1.20x"]
    sb.select("7 (qa): 1.20x").run()
    assert any("Base 1.00 → CLLM 1.20 tokens/step (50 → 30 steps), 90% of the base's tokens kept" in m.value for m in at.markdown)
    at.button(key="cllm_use").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["prompt"] == "Who wrote Hamlet?" and at.session_state["chat"] is True


def test_campaign_curve_draws_cllm_base_target_and_the_perplexity_ratio():
    rows = [{"items_seen": 0, "prompts": 16, "jacobi_tokens_per_step": 1.1, "base_jacobi_tokens_per_step": 1.1,
             "accuracy": 0.25, "base_accuracy": 0.25, "identical_share": 1.0, "base_ppl_cllm": 1.5, "base_ppl_base": 1.5,
             "train_seconds": 0},
            {"items_seen": 256, "prompts": 16, "jacobi_tokens_per_step": 1.32, "base_jacobi_tokens_per_step": 1.1,
             "accuracy": 0.19, "base_accuracy": 0.25, "identical_share": 0.6, "base_ppl_cllm": 1.8, "base_ppl_base": 1.5,
             "train_seconds": 600},
            {"items_seen": "bad"}]
    fig = vc.campaign_curve(rows)
    cllm = [d for d in fig.data if d.name == "CLLM"]
    assert list(cllm[0].x) == [0, 256] and list(cllm[0].y) == [1.1, 1.32]
    target = [d for d in fig.data if (d.name or "").startswith("target")]
    assert list(target[0].y) == pytest.approx([1.65, 1.65])
    ratio = cllm[3]
    assert list(ratio.y) == pytest.approx([1.0, 1.2])
    assert "256 items" in fig.layout.title.text and "10 min" in fig.layout.title.text
    assert "No learning curve" in vc.campaign_curve([]).layout.annotations[0].text
    assert rows[0].get("ppl_ratio") is None  # the input rows are not changed
    assert not [d for d in fig.data if "degenerate" in (d.name or "")]  # no point measured them: no such lines


def test_campaign_curve_draws_the_cllm_without_its_degenerate_answers_where_measured():
    old = {"items_seen": 0, "prompts": 16, "jacobi_tokens_per_step": 1.1, "base_jacobi_tokens_per_step": 1.1}
    new = {"items_seen": 800, "prompts": 16, "jacobi_tokens_per_step": 1.6, "base_jacobi_tokens_per_step": 1.1,
           "clean_prompts": 11, "clean_jacobi_tokens_per_step": 1.45, "clean_base_jacobi_tokens_per_step": 1.08}
    fig = vc.campaign_curve([old, new])
    clean = [d for d in fig.data if d.name == "CLLM without its degenerate answers"]
    assert len(clean) == 1 and list(clean[0].x) == [800] and list(clean[0].y) == [1.45]
    assert list(clean[0].customdata[0]) == [11, 16, 1.08]
    new.update(degenerate_share=0.3125, base_degenerate_share=0.0)
    fig = vc.campaign_curve([old, new])
    loops = {d.name: list(d.y) for d in fig.data if "degenerate answers" in (d.name or "") and d.name.endswith("answers")
             and ":" in d.name}
    assert loops == {"CLLM: degenerate answers": [None, 0.3125], "base: degenerate answers": [None, 0.0]}
    new["degenerate_periods"] = "any"  # a point counted by the rule of any period; the old one did not say
    line = next(d for d in vc.campaign_curve([old, new]).data if d.name == "CLLM: degenerate answers")
    assert [list(c) for c in line.customdata] == [["periods <= 16 only"], ["any period"]]
    assert "customdata[0]" in line.hovertemplate


def test_page_compares_the_campaigns_recipe_runs(monkeypatch):
    """The campaign's recipe runs (cllm.campaign.list_runs) are chosen in a selectbox, each named by
    the settings it changed and the run it continued; the chart and caption follow the choice."""
    from cllm import campaign as cp

    point = lambda items, tps: {"step": items // 4, "items_seen": items, "jacobi_tokens_per_step": tps,
                                "base_jacobi_tokens_per_step": 1.08, "prompts": 16, "date": "2026-12-02 01:00"}
    curves = {"run": [point(0, 1.08), point(384, 1.15)],
              "run-a2": [point(0, 1.08), {**point(4096, 1.41), "clean_prompts": 13, "clean_jacobi_tokens_per_step": 1.3,
                                          "clean_base_jacobi_tokens_per_step": 1.07}]}
    runs = [{"run": "run", "recipe": {}, "from": "", "last": curves["run"][-1]},
            {"run": "run-a2", "recipe": {"epochs": 2, "decay_steps": 1187}, "from": "run", "last": curves["run-a2"][-1]}]
    monkeypatch.setattr(cp, "campaign_folders", lambda data: [ROOT / "data" / "cllm"])
    monkeypatch.setattr(cp, "list_runs", lambda root: runs)
    monkeypatch.setattr(cp, "read_curve", lambda root, run="run": curves[run])
    at = fresh()
    assert not at.exception, [e.value for e in at.exception]
    sb = at.selectbox(key="cllm_campaign_run")
    assert sb.options == ["run: recipe A (the manifest's settings) (1.150 tokens/step at 384 items)",
                          "run-a2: epochs 2, decay_steps 1187, continuing run (1.410 tokens/step at 4,096 items)"]
    assert sb.value == sb.options[1]  # the furthest trained run opens
    assert any("4,096 items trained" in c.value and "1.410" in c.value for c in at.caption)
    assert any("without the CLLM's 3 degenerate answers 1.300 vs base 1.070 on the other 13" in c.value for c in at.caption)
    title = json.loads(at.get("plotly_chart")[3].proto.spec)["layout"]["title"]["text"]
    assert "4,096 items" in title
    sb.select(sb.options[0]).run()
    assert not at.exception
    assert any("384 items trained" in c.value for c in at.caption)
    assert not any("degenerate answers" in c.value for c in at.caption)  # that point did not measure it
    title = json.loads(at.get("plotly_chart")[3].proto.spec)["layout"]["title"]["text"]
    assert "384 items" in title


def test_page_lists_the_runs_of_every_campaign_folder(monkeypatch, tmp_path):
    """A second campaign folder (data/cllm-*: e.g. the on-policy one) adds its runs, named by folder
    and teacher; choosing one draws that folder's curve."""
    from cllm import campaign as cp

    main, op = tmp_path / "cllm", tmp_path / "cllm-op"
    cp.open_campaign(str(main), cp.Settings(), create=True)
    cp.open_campaign(str(op), cp.Settings(teacher="student"), create=True)
    (tmp_path / "cllm-empty").mkdir()  # no manifest: not a campaign
    assert cp.campaign_folders(str(tmp_path)) == [main, op]
    point = lambda items, tps: {"step": items // 4, "items_seen": items, "jacobi_tokens_per_step": tps,
                                "base_jacobi_tokens_per_step": 1.08, "prompts": 16, "date": "2026-12-03 11:00"}
    curves = {(str(main), "run-d2"): [point(7200, 1.357)], (str(op), "run-op"): [point(7200, 1.357), point(8000, 1.5)]}
    monkeypatch.setattr(cp, "campaign_folders", lambda data: [main, op])
    monkeypatch.setattr(cp, "list_runs", lambda root: [{"run": r, "recipe": {}, "from": "", "last": c[-1]}
                                                      for (f, r), c in curves.items() if f == root])
    monkeypatch.setattr(cp, "read_curve", lambda root, run="run": curves[(root, run)])
    at = fresh()
    assert not at.exception, [e.value for e in at.exception]
    sb = at.selectbox(key="cllm_campaign_run")
    assert sb.options == ["run-d2: the manifest's settings (1.357 tokens/step at 7,200 items)",
                          "cllm-op/run-op: the manifest's settings, on its own trajectories (on-policy) "
                          "(1.500 tokens/step at 8,000 items)"]
    assert sb.value == sb.options[1] and any("8,000 items trained" in c.value for c in at.caption)
    sb.select(sb.options[0]).run()
    assert not at.exception and any("7,200 items trained" in c.value for c in at.caption)
