"""The CLLM campaign (cllm.campaign): shards with a manifest, resumable collection and training,
the learning curve; on a tiny random model (no bundled model, a few seconds)."""

import gzip
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import cllm
from cllm import campaign as cp
from decoding.io import UsageError
from decoding.loop import decode
from tiny import ByteTokenizer, tiny_lm

WORDS = ["alpha beta", "gamma delta eps", "zeta eta", "theta iota kappa", "lambda mu", "nu xi omicron", "pi rho"]


def _lm():
    lm = tiny_lm("llama", 3)
    lm.tokenizer = ByteTokenizer()
    return lm


def _saved_after(camp, steps: int):
    """A trainer of the main run on a collected shard, ``steps`` steps trained and saved."""
    lm = _lm()
    cp.collect_shard(camp, lm, say=lambda m: None)
    a = cp.Trainer(camp, lm)
    for _ in range(steps):
        a.train_step()
    a.save()
    return a


@pytest.fixture
def camp(tmp_path):
    src = tmp_path / "src.jsonl"
    src.write_text("".join(json.dumps({"question": w, "answer": "#### 1"}) + "\n" for w in WORDS))
    held = tmp_path / "held.jsonl"
    held.write_text("".join(json.dumps({"question_id": 900 + i, "category": "math_reasoning", "turns": [w],
                                        "reference": [f"so #### {i}"]}) + "\n" for i, w in enumerate(WORDS[:3])))
    st = cp.Settings(source=str(src), heldout=str(held), curve_prompts=3, chat=False, n=6, max_new_tokens=24,
                     shard_prompts=3, lanes=2, lora_r=4, lora_alpha=8, lr=1e-2, warmup=2, items_per_step=2,
                     states_per_item=2)
    return cp.open_campaign(str(tmp_path / "camp"), st, create=True)


def test_final_number():
    assert cp.final_number("so 3 + 4 = 7.\n#### 1,200") == 1200.0
    assert cp.final_number("The answer is -2.5 dollars") == -2.5
    assert cp.final_number("no number") is None


def test_a_shard_holds_the_single_prompt_items_and_the_manifest_its_checksum(camp):
    lm = _lm()
    e = cp.collect_shard(camp, lm, say=lambda m: None)
    assert e["shard"] == 0 and e["prompt_ids"] == ["1", "2", "3"]
    items = cp.read_shard(camp, 0)
    want = []
    for i, w in enumerate(WORDS[:3]):
        tr = decode(lm, lm.encode(w), "jacobi", {"n": 6, "seed": 0}, 24)
        want += cllm.items_from_trace(tr, str(i + 1), "all", 0)
    assert items == want  # same items, in source order
    m = json.loads((camp.root / "manifest.json").read_text())
    assert m["shards"][0]["items"] == len(items) and len(m["shards"][0]["sha256"]) == 64
    # a changed shard file is refused
    p = camp.root / e["file"]
    with gzip.open(p, "wt") as f:
        f.write(json.dumps(items[0]) + "\n")
    with pytest.raises(UsageError, match="checksum"):
        cp.read_shard(camp, 0)


def test_a_cut_collection_resumes_to_the_same_shard_bytes(camp, tmp_path):
    lm = _lm()
    calls = {"n": 0}

    def stop_after_first():
        calls["n"] += 1
        return calls["n"] >= 1

    assert cp.collect_shard(camp, lm, say=lambda m: None, stop=stop_after_first) is None
    assert (camp.root / "partial" / "shard-00000.jsonl").is_file() and not camp.shards
    e = cp.collect_shard(camp, lm, say=lambda m: None)
    cut = (camp.root / e["file"]).read_bytes()
    other = cp.open_campaign(str(tmp_path / "other"), camp.settings, create=True)
    e2 = cp.collect_shard(other, lm, say=lambda m: None)
    assert (other.root / e2["file"]).read_bytes() == cut and e2["sha256"] == e["sha256"]


def test_training_resumes_where_it_stopped(camp, tmp_path):
    lm = _lm()
    for _ in range(2):
        cp.collect_shard(camp, lm, say=lambda m: None)
    # one run of 6 steps ...
    one = cp.Trainer(camp, _lm())
    rows = [one.train_step() for _ in range(6)]
    # ... against 3 steps, saved, a new process-like restore, 3 more
    other = cp.open_campaign(str(tmp_path / "o2"), camp.settings, create=True)
    other.shards = camp.shards
    for s in camp.shards:
        (other.root / s["file"]).parent.mkdir(parents=True, exist_ok=True)
        (other.root / s["file"]).write_bytes((camp.root / s["file"]).read_bytes())
    a = cp.Trainer(other, _lm())
    first = [a.train_step() for _ in range(3)]
    a.save()
    b = cp.Trainer(other, _lm())
    assert b.step == 3 and b.pos == a.pos and b.items_seen == 6
    second = [b.train_step() for _ in range(3)]
    assert [r["step"] for r in first + second] == [r["step"] for r in rows]
    # the same items in the same order: the first steps' losses are equal, the later ones close
    # (AdamW's moments are kept in bfloat16 in the state file)
    for r, s in zip(rows, first + second):
        assert r["ar"] == pytest.approx(s["ar"], rel=2e-2, abs=1e-4)
    for k, p in one.named.items():
        assert torch.allclose(p, b.named[k], rtol=2e-2, atol=2e-4), k
    assert (other.root / "run" / "adapter" / "adapter_model.safetensors").is_file()


def test_a_checkout_without_the_state_file_resumes_from_the_committed_checkpoint(camp):
    """Issue 20, item 3: run/state.pt (fp32 weights, AdamW moments) is machine-local; the committed
    run/checkpoint/ (LoRA weights in bfloat16, the position and the data RNG) lets another machine
    go on at the same step and item, with the weights rounded and the moments fresh."""
    a = _saved_after(camp, 3)
    d = camp.root / "run" / "checkpoint"
    assert (d / "lora_int8.safetensors.gz").is_file() and json.loads((d / "state.json").read_text())["step"] == 3
    (camp.root / "run" / "state.pt").unlink()  # another machine: the checkout only
    b = cp.Trainer(camp, _lm())
    assert b.resumed_from == "portable" and (b.step, b.items_seen, b.pos) == (3, a.items_seen, a.pos)
    for k, p in a.named.items():
        q, scale = cp.quantize_rows(p.detach())
        assert torch.equal(b.named[k], cp.dequantize_rows(q, scale)), k
        assert (b.named[k] - p).abs().max() <= scale.max() / 2 + 1e-7  # half an int8 step of its row at most
        assert not torch.equal(b.named[k], torch.zeros_like(p)) or not p.any()
    assert b.rng.getstate() == a.rng.getstate()
    assert b.opt.param_groups[0]["lr"] == camp.settings.lr  # past the warm-up (2 steps)
    row = b.train_step()
    assert row["step"] == 4 and math.isfinite(row["total"])
    state = json.loads((d / "state.json").read_text())
    state["config"]["lr"] = 1.0
    (d / "state.json").write_text(json.dumps(state))
    with pytest.raises(UsageError, match="lr"):
        cp.Trainer(camp, _lm())


def test_a_recipe_trains_in_its_own_run_folder_on_the_same_shards(camp):
    """Issue 20, item 4: a recipe compared on the campaign's shards: its own folder, state, metrics
    and curve; the manifest's settings untouched; another recipe in the same folder is refused."""
    lm = _lm()
    cp.collect_shard(camp, lm, say=lambda m: None)
    b = cp.use_recipe(camp, "run-lr", {"lr": 0.001, "w_ar": 20})
    assert (b.settings.lr, b.settings.w_ar, b.settings.lora_r) == (0.001, 20.0, camp.settings.lora_r)
    t = cp.Trainer(b, lm)
    t.train_step()
    t.save()
    assert (camp.root / "run-lr" / "state.pt").is_file() and (camp.root / "run-lr" / "metrics.jsonl").is_file()
    assert not (camp.root / "run" / "state.pt").exists()  # the main run untouched
    assert json.loads((camp.root / "run-lr" / "recipe.json").read_text()) == {"lr": 0.001, "w_ar": 20}
    cp.save_manifest(b)
    assert cp.open_campaign(str(camp.root)).settings.lr == camp.settings.lr  # never the recipe's
    again = cp.use_recipe(cp.open_campaign(str(camp.root)), "run-lr")  # no changes given: the kept recipe
    assert again.settings.lr == 0.001 and cp.Trainer(again, _lm()).step == 1
    with pytest.raises(UsageError, match="another recipe"):
        cp.use_recipe(camp, "run-lr", {"lr": 0.01})
    with pytest.raises(UsageError, match="training settings only"):
        cp.use_recipe(camp, "run-x", {"n": 8})
    with pytest.raises(UsageError, match="starts with 'run'"):
        cp.use_recipe(camp, "../elsewhere", {"lr": 0.01})


def test_other_training_settings_are_refused_on_resume(camp):
    lm = _lm()
    cp.collect_shard(camp, lm, say=lambda m: None)
    t = cp.Trainer(camp, lm)
    t.train_step()
    t.save()
    camp.settings = replace(camp.settings, lr=1e-3)
    with pytest.raises(UsageError, match="lr"):
        cp.Trainer(camp, _lm())


def test_run_collects_trains_and_draws_the_curve(camp):
    said = []
    done = cp.run(str(camp.root), minutes=5, eval_every=4, save_every=2, say=said.append, base=_lm(), max_steps=5)
    assert done["steps"] == 5 and done["shards"] >= 1
    curve = cp.read_curve(str(camp.root))
    assert curve[0]["items_seen"] == 0 and curve[0]["jacobi_tokens_per_step"] == curve[0]["base_jacobi_tokens_per_step"]
    assert len(curve) >= 2 and curve[-1]["items_seen"] >= 4
    for k in ("accuracy", "base_accuracy", "identical_share", "base_ppl_cllm", "base_ppl_base", "degenerate_share",
              "clean_prompts", "clean_jacobi_tokens_per_step", "clean_base_jacobi_tokens_per_step"):
        assert k in curve[-1]
    assert curve[0]["clean_jacobi_tokens_per_step"] == curve[0]["clean_base_jacobi_tokens_per_step"]  # untrained: the base
    for p in curve:  # which problems loop, as many as the share says
        assert len(p["degenerate_ids"]) == round(p["degenerate_share"] * p["prompts"])
        assert len(p["base_degenerate_ids"]) == round(p["base_degenerate_share"] * p["prompts"])
    assert curve[0]["degenerate_ids"] == curve[0]["base_degenerate_ids"]
    base = json.loads((camp.root / "run" / "base_eval.json").read_text())
    assert [t for t, _ in base["lanes"]] == [len(a) - 1 for a in base["answers"]]
    assert sum(s for _, s in base["lanes"]) == base["steps"]
    metrics = [json.loads(x) for x in (camp.root / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, 6))
    # a second run goes on from step 5
    cp.run(str(camp.root), minutes=5, eval_every=100, save_every=2, say=said.append, base=_lm(), max_steps=2)
    metrics = [json.loads(x) for x in (camp.root / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, 8))


def test_clean_rates_leave_out_the_degenerate_answers_on_both_sides():
    loop = [7, 8] * 40  # a repetition loop: cllm.evaluate.degenerate
    fine = list(range(100, 180))
    answers = [fine, loop, fine[:40]]
    lanes, base_lanes = [[80, 20], [80, 5], [40, 10]], [[80, 70], [80, 75], [40, 38]]
    got = cp.clean_rates(answers, lanes, base_lanes)
    assert got == {"clean_prompts": 2, "clean_jacobi_tokens_per_step": round(120 / 30, 4),
                   "clean_base_jacobi_tokens_per_step": round(120 / 108, 4)}
    assert cp.clean_rates([loop], [[80, 5]], [[80, 75]])["clean_jacobi_tokens_per_step"] == 0.0  # none left: 0, no error


def test_int8_rows_round_trip_within_half_a_step():
    w = torch.tensor([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0]])  # 2 rows < 3 columns: a scale per row
    q, scale = cp.quantize_rows(w)
    assert q.dtype == torch.int8 and scale.shape == (2, 1) and q[0, 1] == -127 and not q[1].any()
    back = cp.dequantize_rows(q, scale)
    assert torch.all((back - w).abs() <= scale / 2 + 1e-9) and torch.equal(back[1], torch.zeros(3))
    tall = torch.tensor([[1e-3, 2.0], [2e-3, -1.0], [-4e-3, 0.5]])  # 3 rows > 2 columns: a scale per column
    q, scale = cp.quantize_rows(tall)
    assert scale.shape == (1, 2) and q[2, 0] == -127 and q[0, 1] == 127
    assert torch.all((cp.dequantize_rows(q, scale) - tall).abs() <= scale / 2 + 1e-9)


def test_epochs_pass_over_the_shards_again_before_the_next_is_collected(camp):
    """A recipe's ``epochs``: every collected item once per pass, each pass in its own order, the
    next shard only after the last pass; a state saved mid-pass resumes in that pass."""
    lm = _lm()
    cp.collect_shard(camp, lm, say=lambda m: None)
    two = cp.use_recipe(camp, "run-e2", {"epochs": 2})
    t = cp.Trainer(two, lm)
    m = camp.items
    assert t.available() == 2 * m
    seen = []
    while t.available() >= two.settings.items_per_step:
        before = t.pos
        t.train_step()
        seen.append(before)
        if t.step == 2:
            t.save()
            again = cp.Trainer(two, _lm())
            assert (again.epoch, again.pos) == (t.epoch, t.pos)
    assert t.epoch == 1 and t.items_seen == 2 * m - t.available()
    order = [x["id"] for e in (0, 1) for x in _pass_items(two, e)]
    assert sorted(order[:m]) == sorted(order[m:])  # the same items in each pass
    rows = [json.loads(x) for x in (camp.root / "run-e2" / "metrics.jsonl").read_text().splitlines()]
    assert {r["epoch"] for r in rows} == {0, 1}
    one = cp.Trainer(camp, _lm())  # the main run: one pass
    assert one.available() == m


def _pass_items(c, epoch):
    t = cp.Trainer.__new__(cp.Trainer)
    t.c, t.st, t.epoch, t._shard = c, c.settings, epoch, None
    return [x for k in range(len(c.shards)) for x in t._items_of(k)]


def test_decay_steps_follow_the_cosine_from_lr_to_its_floor(camp):
    lm = _lm()
    cp.collect_shard(camp, lm, say=lambda m: None)
    d = cp.use_recipe(camp, "run-d", {"decay_steps": 6, "epochs": 3})
    t = cp.Trainer(d, lm)
    lrs = [t.train_step()["lr"] for _ in range(8)]
    want = [d.settings.lr * cp.lr_factor(d.settings, s) for s in range(1, 9)]
    assert lrs == pytest.approx(want)
    assert lrs[1] == pytest.approx(d.settings.lr) and lrs[-1] == pytest.approx(d.settings.lr * cp.LR_FLOOR)
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:]))  # after the warm-up it only falls


def test_a_run_starts_from_another_runs_state(camp):
    """``start_from``: a recipe that changes how training goes on continues a saved run (weights,
    position, curve) instead of repeating its steps; a second start resumes its own state; another
    LoRA shape is refused; a state file saved before the schedule keys existed still loads."""
    a = _saved_after(camp, 3)
    (camp.root / "run" / "curve.jsonl").write_text(json.dumps({"step": 0, "items_seen": 0}) + "\n")
    b = cp.use_recipe(camp, "run-b", {"epochs": 2, "decay_steps": 12, "lr": 5e-3})
    assert cp.start_from(b, "run", say=lambda m: None)
    t = cp.Trainer(b, _lm())
    assert (t.resumed_from, t.step, t.pos, t.items_seen) == ("state", 3, a.pos, a.items_seen)
    for k, p in a.named.items():
        assert torch.equal(t.named[k], p), k
    assert t.opt.param_groups[0]["lr"] == pytest.approx(5e-3 * cp.lr_factor(b.settings, 3))
    assert cp.read_curve(str(camp.root), "run-b") == cp.read_curve(str(camp.root))
    assert t.train_step()["step"] == 4
    t.save()
    assert not cp.start_from(b, "run", say=lambda m: None)  # started already: it resumes its own
    assert cp.Trainer(b, _lm()).step == 4
    with pytest.raises(UsageError, match="LoRA shape"):
        cp.start_from(cp.use_recipe(camp, "run-r8", {"lora_r": 8}), "run", say=lambda m: None)
    with pytest.raises(UsageError, match="no saved state"):
        cp.start_from(cp.use_recipe(camp, "run-c"), "run-none", say=lambda m: None)
    # the main run's state saved before ``epochs`` / ``decay_steps`` existed
    p = camp.root / "run" / "state.pt"
    s = torch.load(p, weights_only=False)
    for k in ("epochs", "decay_steps"):
        del s["config"][k]
    del s["epoch"]
    torch.save(s, p)
    old = cp.Trainer(camp, _lm())
    assert (old.step, old.epoch) == (3, 0)


def test_list_runs_names_each_runs_recipe_and_origin(camp):
    lm = _lm()
    cp.collect_shard(camp, lm, say=lambda m: None)
    a = cp.Trainer(camp, lm)
    a.train_step()
    a.save()
    assert cp.list_runs(str(camp.root)) == []  # no curve yet
    (camp.root / "run" / "curve.jsonl").write_text(json.dumps({"step": 1, "items_seen": 2}) + "\n")
    b = cp.use_recipe(camp, "run-b", {"decay_steps": 9})
    cp.start_from(b, "run", say=lambda m: None)
    cp.use_recipe(camp, "run-c", {"lr": 0.001})  # a recipe without a curve: left out
    runs = cp.list_runs(str(camp.root))
    assert [(r["run"], r["recipe"], r["from"]) for r in runs] == [("run", {}, ""), ("run-b", {"decay_steps": 9}, "run")]
    assert runs[1]["last"] == {"step": 1, "items_seen": 2}


def test_export_writes_the_runs_weights_as_a_loadable_adapter(camp, tmp_path):
    from safetensors.torch import load_file

    lm = _lm()
    with pytest.raises(UsageError, match="no saved state"):
        cp.export(str(camp.root), "run", str(tmp_path / "none"), say=lambda m: None, base=lm)
    cp.run(str(camp.root), minutes=5, eval_every=100, save_every=2, say=lambda m: None, base=lm, max_steps=3)
    t = cp.Trainer(camp, _lm())
    out = tmp_path / "adapter"
    meta = cp.export(str(camp.root), "run", str(out), say=lambda m: None, base=_lm())
    assert (meta["run"], meta["steps"], meta["items"], meta["weights_from"]) == ("run", 3, t.items_seen, "state")
    assert (meta["lora_r"], meta["ar_weight"], meta["recipe"]) == (4, camp.settings.w_ar, {})
    assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors", "cllm.json",
                                                     "curve.jsonl", "metrics.jsonl"]
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == "bundled"
    saved = load_file(str(out / "adapter_model.safetensors"))
    assert len(saved) == len(t.named) and all(v.dtype == torch.float16 for v in saved.values())
    for k, p in t.named.items():  # peft's names lack the adapter's name ("default")
        assert torch.equal(saved[k.replace(".default", "")], p.detach().half()), k
    assert (out / "metrics.jsonl").read_text() == (camp.root / "run" / "metrics.jsonl").read_text()
    # a checkout without state.pt exports the committed int8 checkpoint, and says so
    (camp.root / "run" / "state.pt").unlink()
    assert cp.export(str(camp.root), "run", str(out), say=lambda m: None, base=_lm())["weights_from"] == "portable"
    # --int8: the shipped form (the weights as the checkpoint holds them, no fp16 file)
    meta = cp.export(str(camp.root), "run", str(out), say=lambda m: None, base=_lm(), int8=True)
    assert meta["weights"] == "int8" and not (out / "adapter_model.safetensors").exists()
    back = cp.read_portable_weights(out)
    for k, p in t.named.items():
        w = cp.dequantize_rows(back[k.replace(".default", "")], back[k.replace(".default", "") + cp.SCALE])
        assert (w - p.detach()).abs().max() <= p.detach().abs().max() / 127 + 1e-6, k


def test_export_scale_merges_that_fraction_of_the_update(camp, tmp_path):
    """--scale F: the merged weights are base + F x (trained - base) in every layer (WiSE-FT's
    interpolation), lora_alpha x F in the config, F in cllm.json."""
    from peft import PeftModel

    cp.run(str(camp.root), minutes=5, eval_every=100, save_every=2, say=lambda m: None, base=_lm(), max_steps=3)
    full, half = tmp_path / "full", tmp_path / "half"
    cp.export(str(camp.root), "run", str(full), say=lambda m: None, base=_lm())
    said = []
    meta = cp.export(str(camp.root), "run", str(half), say=said.append, base=_lm(), scale=0.5)
    assert meta["scale"] == 0.5 and "scale 0.5" in said[-1]
    assert json.loads((half / "adapter_config.json").read_text())["lora_alpha"] == camp.settings.lora_alpha // 2
    assert "scale" not in json.loads((full / "cllm.json").read_text())

    def merged(folder):
        return {k: v.clone() for k, v in PeftModel.from_pretrained(_lm().model, str(folder)).merge_and_unload()
                .state_dict().items()}

    base, one, mid = _lm().model.state_dict(), merged(full), merged(half)
    moved = [k for k in base if not torch.equal(one[k], base[k])]
    assert moved  # the run changed the weights, so the check below can fail
    for k in base:
        assert torch.allclose(mid[k], base[k] + 0.5 * (one[k] - base[k]), atol=1e-5), k
    for bad in (0, -1, 2.5):
        with pytest.raises(UsageError, match="--scale"):
            cp.export(str(camp.root), "run", str(tmp_path / "x"), say=lambda m: None, base=_lm(), scale=bad)


def test_kept_points_export_the_adapter_and_curve_of_that_step(camp, tmp_path):
    said = []
    cp.run(str(camp.root), minutes=5, eval_every=4, save_every=100, say=said.append, base=_lm(), max_steps=4,
           keep_points=True)
    run_dir = camp.root / "run"
    steps = [p["step"] for p in cp.read_curve(str(camp.root))]
    assert cp.kept_points(run_dir) == steps == [0, 2, 4]
    assert any("adapters kept at curve steps 0, 2, 4" in x for x in cp.status_lines(camp))
    with pytest.raises(UsageError, match="kept: 0, 2, 4"):
        cp.export(str(camp.root), "run", str(tmp_path / "x"), say=lambda m: None, step=3)
    t = cp.Trainer(camp, _lm())  # the saved state: step 4, the last point
    out = tmp_path / "adapter"
    (out).mkdir()
    (out / "adapter_model.safetensors").write_bytes(b"stale")
    meta = cp.export(str(camp.root), "run", str(out), say=lambda m: None, step=4)
    assert (meta["step"], meta["weights"]) == (4, "int8") and not (out / "adapter_model.safetensors").exists()
    back = cp.read_portable_weights(out)
    for k, p in t.named.items():
        q, scale = cp.quantize_rows(p.detach())
        assert torch.equal(back[k.replace(".default", "")], q), k
    meta = cp.export(str(camp.root), "run", str(out), say=lambda m: None, step=2)
    assert meta["step"] == 2 and meta["items_seen"] == 4
    assert [json.loads(x)["step"] for x in (out / "curve.jsonl").read_text().splitlines()] == [0, 2]
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert any(not torch.equal(back[k], v) for k, v in cp.read_portable_weights(out).items())  # another step's weights


def test_score_rates_a_kept_point_on_the_problems_after_the_curves(camp, tmp_path):
    cp.run(str(camp.root), minutes=5, eval_every=4, save_every=100, say=lambda m: None, base=_lm(), max_steps=4,
           keep_points=True)
    quiet = dict(say=lambda m: None, progress=False)
    with pytest.raises(UsageError, match="kept: 0, 2, 4"):
        cp.score(str(camp.root), step=3, **quiet)
    with pytest.raises(UsageError, match="one adapter"):
        cp.score(str(camp.root), step=4, adapter=str(tmp_path), **quiet)
    with pytest.raises(UsageError, match="has 2 math_reasoning problems after the first 1, not 3"):
        cp.score(str(camp.root), step=4, skip=1, count=3, **quiet)
    tr, lm = cp._trainer(camp, _lm(), lambda m: None)  # the saved state: step 4, the kept point
    held = cp.heldout_rows(camp, 1, 2)
    assert [r["id"] for r in held] == ["901", "902"] and [r["id"] for r in cp.heldout_rows(camp)] == ["900", "901", "902"]
    want = cp.curve_point(camp, lm, tr.model.disable_adapter, held, base_name="want.json")
    row = cp.score(str(camp.root), step=4, skip=1, count=2, base=_lm(), cllm=lm, **quiet)
    assert (row["step"], row["skip"], row["ids"], row["prompts"]) == (4, 1, ["901", "902"], 2)
    answers = want.pop("answers")
    assert {k: row[k] for k in want} == want  # the base model beside a merged CLLM == the adapter switched off
    with gzip.open(camp.root / "run" / row["answers_file"], "rt") as f:  # its answers kept beside the row
        assert json.load(f) == {"ids": ["901", "902"], "answers": answers}
    assert "answers" not in row and row["degenerate_periods"] == "any"
    cached = json.loads((camp.root / "run" / "base_eval-1-2.json").read_text())
    assert cached["ids"] == ["901", "902"] and cached == json.loads((camp.root / "run" / "want.json").read_text())
    kept = camp.root / "run" / "base_eval-1-2.json"  # what score's progress total reads: kept for these problems only
    assert cp.cached_base(kept, held) == cached and cp.cached_base(kept, held[:1]) is None
    assert cp.cached_base(camp.root / "run" / "none.json", held) is None
    rows = [json.loads(x) for x in (camp.root / "run" / cp.SCORES).read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["jacobi_tokens_per_step"] == want["jacobi_tokens_per_step"]


def test_the_selection_set_is_what_no_shard_and_no_ground_truth_step_used(camp):
    cp.collect_shard(camp, _lm(), say=lambda m: None)  # shard 0: source problems 1-3
    order = [r["id"] for r in cp.gt_order(camp.settings)]
    assert sorted(order, key=int) == [str(i) for i in range(1, 8)] and order != sorted(order, key=int)
    got = cp.unseen_rows(camp, 2, max_step=0)  # step 0 took the first 2 places of the order
    want = [i for i in order if i not in {"1", "2", "3"}][-2:]
    assert [r["id"] for r in got] == want and all(r["reference"] == 1.0 for r in got)
    assert not set(want) & set(order[:2])
    with pytest.raises(UsageError, match="no 2 problems left"):  # 3 steps x 2 places: the order's end is reached
        cp.unseen_rows(camp, 2, max_step=2)


@pytest.mark.parametrize("exact", [True, False])
def test_a_run_at_a_larger_rank_starts_from_a_saved_run_unchanged(camp, exact):
    """rank 4 -> 8 at the same lora_alpha / lora_r: the grown adapter computes what the saved one did
    (B's new columns are zero), then its new part learns (A's new rows are drawn, not zero)."""
    a = _saved_after(camp, 3)
    if not exact:
        (camp.root / "run" / "state.pt").unlink()  # a checkout with the committed int8 checkpoint only
    ids = torch.tensor([[5, 9, 14, 3, 7, 22]])
    with torch.no_grad():
        want = cp.Trainer(camp, _lm()).model(input_ids=ids).logits
    b = cp.use_recipe(camp, "run-big", {"lora_r": 8, "lora_alpha": 16})
    assert cp.start_from(b, "run", say=lambda m: None)
    assert json.loads((b.run_dir / cp.ORIGIN).read_text())["lora_r_from"] == 4
    t = cp.Trainer(b, _lm())
    assert (t.resumed_from, t.step) == ("state" if exact else "portable", 3)
    with torch.no_grad():
        assert torch.allclose(t.model(input_ids=ids).logits, want, atol=1e-5)
    As = {k: p for k, p in t.named.items() if "lora_A" in k}
    Bs = {k: p for k, p in t.named.items() if "lora_B" in k}
    assert As and all(p.shape[0] == 8 and p[4:].abs().sum() > 0 for p in As.values())
    assert all(p.shape[1] == 8 and not p[:, 4:].any() for p in Bs.values())
    t.train_step()
    assert any(p[:, 4:].any() for p in Bs.values())  # the new rank learns
    with pytest.raises(UsageError, match="LoRA shape"):  # another scale is refused
        cp.start_from(cp.use_recipe(camp, "run-odd", {"lora_r": 8, "lora_alpha": 8}), "run", say=lambda m: None)


def test_the_state_pick_recipe_is_a_named_choice(camp, capsys):
    """``--recipe state_pick=stratified`` (a word, not a number) is kept and trains; an unknown pick
    is refused before anything is written."""
    lm = _lm()
    cp.collect_shard(camp, lm, say=lambda m: None)
    root = str(camp.root)
    assert cllm.main(["campaign", "status", "--dir", root, "--run", "run-s", "--recipe", "state_pick=stratified"]) == 0
    assert json.loads((camp.root / "run-s" / "recipe.json").read_text()) == {"state_pick": "stratified"}
    b = cp.use_recipe(cp.open_campaign(root), "run-s")
    assert b.settings.state_pick == "stratified"
    row = cp.Trainer(b, lm).train_step()
    assert math.isfinite(row["total"]) and row["consistency"] > 0
    assert cllm.main(["campaign", "status", "--dir", root, "--run", "run-t", "--recipe", "state_pick=progressive"]) == 2
    assert "state_pick is one of random, stratified" in capsys.readouterr().err
    assert not (camp.root / "run-t").exists()


def test_w_ul_recipe_adds_unlikelihood_to_each_step(camp):
    """Recipe option w_ul (a float from the command line): the metrics row carries the step's mean
    unlikelihood term, inside its total."""
    lm = _lm()
    cp.collect_shard(camp, lm, say=lambda m: None)
    assert cllm.main(["campaign", "status", "--dir", str(camp.root), "--run", "run-ul", "--recipe", "w_ul=0.5"]) == 0
    b = cp.use_recipe(cp.open_campaign(str(camp.root)), "run-ul")
    assert b.settings.w_ul == 0.5
    t = cp.Trainer(b, lm)
    rows = [t.train_step() for _ in range(3)]
    assert all(math.isfinite(r["ul"]) and r["ul"] >= 0 for r in rows) and any(r["ul"] > 0 for r in rows)
    for r in rows:
        assert r["total"] == pytest.approx(r["consistency"] + b.settings.w_ar * r["ar"] + 0.5 * r["ul"], abs=1e-4)
    assert "ul" not in cp.Trainer(camp, lm).train_step()  # off by default


def test_w_seq_recipe_adds_sequence_unlikelihood_on_the_negatives(camp):
    """Recipe option w_seq: each step adds the sequence-level unlikelihood of one of the campaign's
    negatives (cycled), inside its total; without negatives the recipe is refused, plainly."""
    lm = _lm()
    cp.collect_shard(camp, lm, say=lambda m: None)
    b = cp.use_recipe(camp, "run-seq", {"w_seq": 2.0})
    with pytest.raises(UsageError, match="w_seq needs negatives"):
        cp.Trainer(b, lm).train_step()
    item = cp.read_shard(camp, 0)[0]
    prompt = item["prompt_ids"][:item["prompt_len"]]
    loop = lm.tokenizer("abc abc abc abc abc abc", add_special_tokens=False)["input_ids"]
    cp.add_negatives(camp, [{"prompt_id": "x", "prompt_ids": prompt, "answer_ids": loop}])
    t = cp.Trainer(cp.use_recipe(camp, "run-seq2", {"w_seq": 2.0}), lm)
    rows = [t.train_step() for _ in range(2)]
    assert all(math.isfinite(r["seq"]) and r["seq"] > 0 for r in rows)
    for r in rows:
        assert r["total"] == pytest.approx(r["consistency"] + b.settings.w_ar * r["ar"] + 2.0 * r["seq"], abs=1e-4)
    assert "seq" not in cp.Trainer(camp, lm).train_step()  # off by default


def test_w_kl_recipe_adds_the_kl_to_the_base_inside_the_total(camp):
    """Recipe option w_kl: each item's loss also holds KL(base || student) on its fixed point, this
    weight, in the step's total; it is 0 at the first step (the adapter starts at the identity) and
    grows as training moves the student; off by default."""
    lm = _lm()
    cp.collect_shard(camp, lm, say=lambda m: None)
    t = cp.Trainer(cp.use_recipe(camp, "run-kl", {"w_kl": 3.0, "lr": 0.01}), lm)
    rows = [t.train_step() for _ in range(4)]
    assert abs(rows[0]["kl"]) < 1e-6 and rows[-1]["kl"] > 1e-6
    w_ar = t.st.w_ar
    for r in rows:
        assert r["total"] == pytest.approx(r["consistency"] + w_ar * r["ar"] + 3.0 * r["kl"], abs=1e-4)
    assert "kl" not in cp.Trainer(camp, lm).train_step()


def test_w_gt_adds_the_ar_loss_on_the_sources_own_answers(camp, tmp_path):
    """Recipe option w_gt: the AR loss on the source's answers (GSM8K's solutions without their
    calculator annotations), on each prompt's first block; its value is the answer's teacher-forced
    cross-entropy after the prompt, as the full sequence computes it."""
    lm = _lm()
    cp.collect_shard(camp, lm, say=lambda m: None)
    t = cp.Trainer(cp.use_recipe(camp, "run-gt", {"w_gt": 1.0}), lm)
    rows = [t.train_step() for _ in range(6)]
    with_gt = [r for r in rows if "gt" in r]
    assert with_gt and all(math.isfinite(r["gt"]) and r["gt"] > 0 for r in with_gt)
    item = next(i for i in cp.read_shard(camp, 0) if i["block"] == 0)
    prompt = item["prompt_ids"][:item["prompt_len"]]
    answers = cp.source_answers(camp.settings.source)
    assert answers[item["prompt_id"]] == "#### 1"
    answer = lm.tokenizer("#### 1", add_special_tokens=False)["input_ids"] + lm.eos_token_ids[:1]
    t.model.eval()
    with torch.no_grad():
        got = t._gt_loss(item)
        logits = t.model(input_ids=torch.tensor([prompt + answer])).logits[0, len(prompt) - 1:-1]
        want = torch.nn.functional.cross_entropy(logits.float(), torch.tensor(answer))
    assert torch.allclose(got, want, atol=1e-5)
    # calculator annotations go; a source without answers is refused
    src = tmp_path / "gsm.jsonl"
    src.write_text(json.dumps({"question": "q", "answer": "48/2 = <<48/2=24>>24 clips\n#### 24"}) + "\n"
                   + json.dumps({"question": "r"}) + "\n")
    assert cp.source_answers(str(src)) == {"1": "48/2 = 24 clips\n#### 24"}
    src.write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(UsageError, match="no answers"):
        cp.source_answers(str(src))


def test_a_large_checkpoint_is_committed_in_parts_and_read_back_whole(tmp_path, monkeypatch):
    """The portable checkpoint's weights above PART_BYTES go into parts of about equal size (the
    repo takes files under 5 MB; a rank-32 adapter of the bundled model is 9.2 MB), each tensor with
    its scale; reading joins them; a smaller save later removes the parts it no longer needs."""
    from decoding import lora_int8

    torch.manual_seed(0)
    tensors = {}
    for i in range(10):
        q, scale = cp.quantize_rows(torch.randn(64, 100))
        tensors[f"layer{i}.lora_A.weight"], tensors[f"layer{i}.lora_A.weight" + cp.SCALE] = q, scale
    one = sum(t.nbytes for t in tensors.values()) / 10
    monkeypatch.setattr(lora_int8, "PART_BYTES", int(one * 4))  # 10 tensors -> 3 parts (4, 3, 3 or so)
    d = tmp_path / "checkpoint"
    cp.write_portable_weights(d, tensors)
    names = sorted(p.name for p in d.iterdir())
    assert names == ["lora_int8.part1.safetensors.gz", "lora_int8.part2.safetensors.gz", "lora_int8.safetensors.gz"]
    sizes = [p.stat().st_size for p in d.iterdir()]
    assert max(sizes) < 1.6 * min(sizes)  # about equal parts
    back = cp.read_portable_weights(d)
    assert back.keys() == tensors.keys() and all(torch.equal(back[k], v) for k, v in tensors.items())
    monkeypatch.setattr(lora_int8, "PART_BYTES", int(one * 20))
    cp.write_portable_weights(d, tensors)
    assert sorted(p.name for p in d.iterdir()) == ["lora_int8.safetensors.gz"]  # the stale parts are gone
    assert all(torch.equal(cp.read_portable_weights(d)[k], v) for k, v in tensors.items())


def test_gt_per_step_takes_the_whole_sources_answers_in_one_order_across_resumes(camp):
    """w_gt with gt_per_step=G: G of the source's answers every step (all of its problems, not only
    the collected ones), in one seeded order that cycles; a resumed run takes the ones it would have."""
    lm = _lm()
    cp.collect_shard(camp, lm, say=lambda m: None)
    b = cp.use_recipe(camp, "run-g", {"w_gt": 1.0, "gt_per_step": 2})
    t = cp.Trainer(b, lm)
    seen = []
    for _ in range(4):
        seen += [p for p, _ in t._gt_pairs()]
        row = t.train_step()
        assert math.isfinite(row["gt"]) and row["gt"] > 0 and row["total"] > row["gt"] * 0.5
    every = {tuple(lm.encode(w)) for w in WORDS}
    assert {tuple(p) for p in seen} == every  # 8 picks over the 7 problems: all of them, then again
    assert seen[7] == seen[0]  # the order cycles
    t.save()
    again = cp.Trainer(cp.use_recipe(cp.open_campaign(str(camp.root)), "run-g"), _lm())
    assert again.step == 4 and again._gt_pairs() == t._gt_pairs()


def test_a_student_taught_campaign_collects_the_students_own_trajectories(camp, tmp_path, monkeypatch):
    """teacher=student: a shard holds the Jacobi trajectories of the adapter being trained as it
    stands (on-policy), its manifest entry names the run and step; no other run may train on them.
    A base-taught campaign's entry says base."""
    base_entry = cp.collect_shard(camp, _lm(), say=lambda m: None)
    assert base_entry["teacher"] == "base" and "dropped_degenerate" not in base_entry
    s = cp.open_campaign(str(tmp_path / "s"), replace(camp.settings, teacher="student"), create=True)
    tr, slm = cp._trainer(s, _lm(), lambda m: None)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for k, p in tr.named.items():
            if "lora_B" in k:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    tr.step = 7
    e = cp._collect_next(s, tr, slm, lambda m: None, lambda: False)
    assert e["teacher"] == {"run": "run", "step": 7}

    def items(off: bool):
        out = []
        with torch.inference_mode():
            for i, w in enumerate(WORDS[:3]):
                if off:
                    with tr.model.disable_adapter():
                        t = decode(slm, slm.encode(w), "jacobi", {"n": 6, "seed": 0}, 24)
                else:
                    t = decode(slm, slm.encode(w), "jacobi", {"n": 6, "seed": 0}, 24)
                out += cllm.items_from_trace(t, str(i + 1), "all", 0)
        return out

    student = items(False)
    assert cp.read_shard(s, 0) == student
    assert [d["fixed_point"] for d in student] != [d["fixed_point"] for d in items(True)]  # not the base's
    assert e["dropped_degenerate"] == 0
    # the collapse guard: a student's degenerate answer (a repetition loop) gives no items
    ev = sys.modules["cllm.evaluate"]  # the module (the package exports a function of that name)
    calls = []
    monkeypatch.setattr(ev, "degenerate", lambda ids: calls.append(ids) or len(calls) == 2)  # the 2nd prompt's
    s2 = cp.open_campaign(str(tmp_path / "s2"), replace(camp.settings, teacher="student"), create=True)
    e2 = cp._collect_next(s2, tr, slm, lambda m: None, lambda: False)
    assert len(calls) == 3 and e2["dropped_degenerate"] == 1
    assert cp.read_shard(s2, 0) == [d for d in student if d["prompt_id"] != "2"]
    first = lambda pid: next(d for d in student if d["prompt_id"] == pid and d["block"] == 0)
    neg = lambda pid: {"prompt_id": pid, "prompt_ids": first(pid)["prompt_ids"][:first(pid)["prompt_len"]],
                       "answer_ids": first(pid)["answer_ids"]}
    assert cp.read_negatives(s2) == [neg("2")]  # the dropped loop, kept as a negative (recipe w_seq)
    assert cp.read_negatives(s) == []
    # the same guard on a shard collected before it (the first campaign s): rewritten, counted, idempotent
    calls.clear()
    monkeypatch.setattr(ev, "degenerate", lambda ids: ids == student[-1]["answer_ids"])  # the 3rd prompt's
    assert cp.guard_shards(s) == 1
    (s.root / cp.MANIFEST).write_text((s.root / cp.MANIFEST).read_text() + " ")  # a mark a rewrite would remove
    assert cp.guard_shards(s) == 0 and (s.root / cp.MANIFEST).read_text().endswith(" ")  # nothing dropped: untouched
    assert cp.read_negatives(s) == [neg("3")]
    assert cp.add_negatives(s, [neg("3"), neg("1")]) == 1 and cp.read_negatives(s) == [neg("3"), neg("1")]  # once a prompt
    s = cp.open_campaign(str(s.root))
    assert cp.read_shard(s, 0) == [d for d in student if d["prompt_id"] != "3"]
    assert s.shards[0]["dropped_degenerate"] == 1 and s.shards[0]["items"] == len(cp.read_shard(s, 0))
    cp._check_teacher(s)
    with pytest.raises(UsageError, match="trajectories of run run"):
        cp._check_teacher(cp.use_recipe(s, "run-x"))
    with pytest.raises(UsageError, match="teacher is one of"):
        cp.open_campaign(str(tmp_path / "t"), replace(camp.settings, teacher="oracle"), create=True)


def test_a_run_starts_from_another_campaigns_run_at_its_first_shard(camp, tmp_path):
    """``--from PATH/run``: another campaign's run goes on here with its weights, step and items
    seen, but the data position (an index into the other campaign's shards) starts at shard 0."""
    a = _saved_after(camp, 3)
    assert a.pos != [0, 0]
    other = cp.use_recipe(cp.open_campaign(str(tmp_path / "o"), camp.settings, create=True), "run-o")
    assert cp.start_from(other, str(camp.root / "run"), say=lambda m: None)
    t = cp.Trainer(other, _lm())
    assert (t.resumed_from, t.step, t.items_seen, t.pos, t.epoch) == ("state", 3, a.items_seen, [0, 0], 0)
    for k, p in a.named.items():
        assert torch.equal(t.named[k], p), k
    assert json.loads((other.run_dir / cp.PORTABLE / "state.json").read_text())["pos"] == [0, 0]
    assert Path(json.loads((other.run_dir / cp.ORIGIN).read_text())["campaign"]).resolve() == camp.root.resolve()
    # a run of the same campaign keeps its position
    b = cp.use_recipe(camp, "run-b")
    assert cp.start_from(b, "run", say=lambda m: None) and cp.Trainer(b, _lm()).pos == a.pos


def test_a_run_starts_from_a_kept_point_of_another_campaign(camp, tmp_path):
    """``--from RUN/points/step-N``: a curve point's kept adapter (int8) goes on in another campaign's
    run at that step, its weights those of the point (one int8 step at most from the trainer's), the
    data position at the first shard and AdamW's moments from zero; the source's curve up to the
    point comes along. A point of the campaign's own run, or of another LoRA shape, is refused."""
    a = _saved_after(camp, 3)
    (camp.root / "run" / "curve.jsonl").write_text("".join(json.dumps({"step": s, "items_seen": 2 * s}) + "\n" for s in (2, 3, 5)))
    point = cp.point_dir(camp.run_dir, 3)
    a.write_adapter(point, int8=True)
    other = cp.use_recipe(cp.open_campaign(str(tmp_path / "o"), camp.settings, create=True), "run-o", {"lr": 1e-3})
    assert cp.start_from(other, str(point), say=lambda m: None)
    assert not cp.start_from(other, str(point), say=lambda m: None)  # started already: it resumes its own
    t = cp.Trainer(other, _lm())
    assert (t.resumed_from, t.step, t.items_seen, t.pos, t.epoch) == ("portable", 3, a.items_seen, [0, 0], 0)
    assert set(t.named) == set(a.named)
    for k, p in a.named.items():
        step = p.detach().abs().max() / 127
        assert (t.named[k] - p.detach()).abs().max() <= step + 1e-6, k
    assert not t.opt.state  # the moments start from zero
    assert [p["step"] for p in cp.read_curve(str(other.root), "run-o")] == [2, 3]
    assert json.loads((other.run_dir / cp.ORIGIN).read_text())["point"] is True
    with pytest.raises(UsageError, match="keeps no data position"):
        cp.start_from(cp.use_recipe(camp, "run-p"), str(point), say=lambda m: None)
    wide = cp.use_recipe(cp.open_campaign(str(tmp_path / "w"), camp.settings, create=True), "run-w", {"lora_r": 8, "lora_alpha": 16})
    with pytest.raises(UsageError, match="LoRA shape"):
        cp.start_from(wide, str(point), say=lambda m: None)


def test_status_lines_show_shards_teachers_drops_and_the_curve(camp):
    """``campaign status``: each shard with whose trajectories it holds and, for a student's, the
    degenerate answers it dropped; the run's saved position; the last curve points, with the figures
    without degenerate answers where measured."""
    camp.shards = [{"shard": 0, "items": 30, "answer_tokens": 400},
                   {"shard": 1, "items": 20, "answer_tokens": 300, "teacher": {"run": "run", "step": 7},
                    "dropped_degenerate": 2}]
    (camp.run_dir / cp.PORTABLE).mkdir(parents=True)
    (camp.run_dir / cp.PORTABLE / "state.json").write_text(json.dumps({"step": 9, "items_seen": 18, "pos": [1, 4]}))
    point = {"step": 8, "items_seen": 16, "jacobi_tokens_per_step": 1.5, "base_jacobi_tokens_per_step": 1.1,
             "degenerate_share": 0.25, "base_degenerate_share": 0.0, "accuracy": 0.5, "base_accuracy": 0.5}
    (camp.run_dir / "curve.jsonl").write_text(json.dumps({**point, "step": 4, "items_seen": 8}) + "\n" + json.dumps(
        {**point, "clean_prompts": 3, "clean_jacobi_tokens_per_step": 1.25, "clean_base_jacobi_tokens_per_step": 1.05}) + "\n")
    lines = cp.status_lines(camp)
    assert lines[0].endswith("2 shards, 50 items, trajectories of the base; run run")
    assert lines[1] == "  shard 0: 30 items, 400 answer tokens, base"
    assert lines[2] == f"  shard 1: 20 items, 300 answer tokens, student run at step 7, 2 of {camp.settings.shard_prompts} answers degenerate (dropped)"
    assert lines[3].startswith("  saved: step 9, 18 items trained, data position [1, 4]")
    assert "without degenerate" not in lines[4] and "degenerate 25% (base 0%)" in lines[4]
    assert "Jacobi 1.500 tokens/step (base 1.100); without degenerate 1.250 (base 1.050) on 3; degenerate 25%" in lines[5]


def test_a_run_stops_when_the_students_shard_shows_the_collapse(camp, tmp_path, monkeypatch):
    """More of a student's shard's answers degenerate than ``max_degenerate``: the run says so and
    stops after that shard (kept, the state saved), before training on it; at or under the limit, or
    with the limit 0, it goes on."""
    said = []
    ev = sys.modules["cllm.evaluate"]
    monkeypatch.setattr(ev, "degenerate", lambda ids, **kw: True)  # every answer a loop: 3 of 3 dropped
    s = cp.open_campaign(str(tmp_path / "s"), replace(camp.settings, teacher="student"), create=True)
    done = cp.run(str(s.root), minutes=5, eval_every=100, say=said.append, base=_lm(), max_steps=3, max_degenerate=0.5)
    assert done["collapsed"] == 0 and done["steps"] == 0 and done["shards"] == 1
    assert any(m.startswith("collapse: 3 of the student's 3 answers in shard 0") for m in said)
    assert cp.open_campaign(str(s.root)).shards[0]["dropped_degenerate"] == 3
    assert (s.root / "run" / "state.pt").is_file()
    e = {"shard": 4, "dropped_degenerate": 1}
    assert not cp.collapsed(s, e, 1 / 3, said.append) and cp.collapsed(s, e, 0.3, said.append)
    assert not cp.collapsed(s, {"shard": 5, "dropped_degenerate": 3}, 0, said.append)  # 0: never
    err = tmp_path / "nothing"
    assert cllm.main(["campaign", "run", "--dir", str(err), "--max-degenerate", "1.5"]) == 2
    assert not err.exists()  # refused before a campaign folder is made


def test_progress_rate_is_since_the_last_report():
    """The s/step figure covers the steps since the previous report, so one slow stretch does not
    colour every later figure."""
    from types import SimpleNamespace

    from cllm.campaign import _progress

    said, mark = [], [0.0, 0]
    row = {"consistency": 0.5, "ar": 0.1}
    _progress(SimpleNamespace(step=10, items_seen=40, seconds=1000.0), row, 10, mark, said.append)  # a slow stretch
    _progress(SimpleNamespace(step=15, items_seen=60, seconds=1040.0), row, 15, mark, said.append)  # not a 10th step
    _progress(SimpleNamespace(step=20, items_seen=80, seconds=1080.0), row, 20, mark, said.append)
    assert len(said) == 2 and said[0].endswith("100.00 s/step") and said[1].endswith("8.00 s/step")
    assert mark == [1080.0, 20]
