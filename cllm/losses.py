"""The CLLM loss (``item_losses``) and a deterministic mean of it (``mean_losses``).

With q(. | x, s)_i the model's distribution at block position i when fed prefix x and state s (it
predicts position i + 1):
  - global consistency: a random intermediate state s (not the fixed point); with j the first
    position where s differs from the fixed point y*, sum over i >= j of KL(q(.|x, y*)_i, detached ||
    q(.|x, s)_i), divided by n. Positions before j see the same inputs in s and y*, so their term is
    0 by construction: the loss is "counted from the first wrong position on", and a state equal to
    the fixed point has loss exactly 0;
  - AR: cross-entropy of the fixed point's own tokens, teacher forced (the last prefix position
    predicts y*_0, block position i predicts y*_{i+1}); the blocks of one answer cover the whole
    greedy answer (a block's position 0 is the token after the previous block), so over a prompt's
    items this is the AR loss on the answer. Weighted by w (10, as in the reference code);
  - local consistency (optional, weight --local): for consecutive states s_k, s_{k+1} of the
    trajectory, KL(q(.|x, s_{k+1}) detached || q(.|x, s_k)) from s_k's first wrong position on.
The fixed point row, the sampled state and (with --local) the next state go through the model as one
batch of equal-length rows.
"""

from __future__ import annotations

import random
from typing import Any


def first_wrong(state: list[int], fixed_point: list[int]) -> int:
    """The first position where ``state`` differs from the fixed point (len if none)."""
    for i, (a, b) in enumerate(zip(state, fixed_point)):
        if a != b:
            return i
    return len(fixed_point)


def block_logits(model, prefix: list[int], rows: list[list[int]]):
    """Logits for each row fed after ``prefix`` (one batch): [rows, 1 + n, V]; index 0 is the last
    prefix position (it predicts block position 0), index 1 + i is block position i."""
    import torch

    n = len(rows[0])
    ids = torch.tensor([prefix + r for r in rows], device=model.device)
    return model(input_ids=ids, logits_to_keep=n + 1, use_cache=False).logits.float()


def kl_from(target_logits, student_logits, start: int, window: int = 0):
    """sum over positions >= start (and < start + window, if window > 0) of
    KL(softmax(target) || softmax(student)) / n (0 if none)."""
    import torch.nn.functional as F

    n = target_logits.shape[0]
    if start >= n:
        return student_logits.sum() * 0.0
    end = min(n, start + window) if window > 0 else n
    t = F.log_softmax(target_logits[start:end], -1)
    s = F.log_softmax(student_logits[start:end], -1)
    return (t.exp() * (t - s)).sum() / n


def consistency_loss(model, prefix: list[int], state: list[int], fixed_point: list[int]):
    """Global consistency loss of one state (the target: the detached fixed-point distribution)."""
    import torch

    with torch.no_grad():
        target = block_logits(model, prefix, [fixed_point])[0, 1:]
    student = block_logits(model, prefix, [state])[0, 1:]
    return kl_from(target, student, first_wrong(state, fixed_point))


def item_losses(model, item: dict, rng: random.Random, w_ar: float = 10.0, w_local: float = 0.0) -> dict[str, Any]:
    """The losses of one item (tensors; ``total`` has the gradient): consistency, ar, local, total."""
    import torch
    import torch.nn.functional as F

    fp, states = item["fixed_point"], item["states"]
    cand = [k for k, s in enumerate(states) if s != fp]
    k = rng.choice(cand) if cand else len(states) - 1
    rows = [fp, states[k]]
    if w_local > 0 and cand:
        rows.append(states[min(k + 1, len(states) - 1)])
    full = block_logits(model, item["prompt_ids"], rows)
    logits = full[:, 1:]
    target = logits[0].detach()
    cons = kl_from(target, logits[1], first_wrong(states[k], fp))
    # teacher-forced AR on the fixed point, its position 0 included (predicted from the prefix)
    ar = F.cross_entropy(full[0, :-1], torch.tensor(fp, device=full.device))
    out = {"consistency": cons, "ar": ar}
    total = cons + w_ar * ar
    if len(rows) == 3:
        local = kl_from(logits[2].detach(), logits[1], first_wrong(states[k], rows[2]))
        out["local"] = local
        total = total + w_local * local
    out["total"] = total
    return out


def mean_losses(model, items: list[dict]) -> dict[str, float]:
    """Deterministic losses over all items: the mean global consistency loss over every state that
    is not the fixed point, and the mean AR loss (for before / after comparisons)."""
    import torch
    import torch.nn.functional as F

    cons, ar, n_states = 0.0, 0.0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for it in items:
            fp = it["fixed_point"]
            rows = [fp] + [s for s in it["states"] if s != fp]
            full = block_logits(model, it["prompt_ids"], rows)
            logits = full[:, 1:]
            ar += float(F.cross_entropy(full[0, :-1], torch.tensor(fp, device=full.device)))
            for k, s in enumerate(rows[1:], 1):
                cons += float(kl_from(logits[0], logits[k], first_wrong(s, fp)))
                n_states += 1
    model.train(was_training)
    return {"consistency": cons / max(1, n_states), "ar": ar / max(1, len(items))}


# --- the cheap step: the context once without gradient, its KV reused by every row ----------------

def prefix_cache(model, prefix: list[int]):
    """The KV cache of ``prefix`` (no gradient): what every row of an item is fed after."""
    import torch
    from transformers import DynamicCache

    from decoding.model import cache_kw

    cache = DynamicCache(config=model.config)
    if prefix:
        with torch.no_grad():
            model(input_ids=torch.tensor([prefix], device=model.device), use_cache=True,
                  **{cache_kw(type(_base(model))): cache})
    return cache


def _base(model):
    """The transformers model under a peft wrapper (for its forward's signature)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


def cached_block_logits(model, prefix: list[int], rows: list[list[int]]):
    """``block_logits`` with the context forwarded once without gradient: the last prefix token is
    fed again with each row (so the logit that predicts block position 0 has a gradient), over the
    KV of ``prefix[:-1]`` shared by all rows. Same values as ``block_logits``; the gradient flows
    through the block's positions only (not through the context's keys and values)."""
    import torch

    from decoding.model import cache_kw

    cache = prefix_cache(model, prefix[:-1])
    R, past = len(rows), len(prefix) - 1
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None and layer.keys.numel():
            layer.keys = layer.keys.expand(R, -1, -1, -1)
            layer.values = layer.values.expand(R, -1, -1, -1)
    ids = torch.tensor([[prefix[-1]] + r for r in rows], device=model.device)
    pos = torch.arange(past, past + ids.shape[1], device=model.device).expand(R, -1)
    return model(input_ids=ids, position_ids=pos, use_cache=True,
                 **{cache_kw(type(_base(model))): cache}).logits.float()


def noise(state: list[int], fixed_point: list[int]) -> float:
    """The share of a state not yet converged, counted from its first wrong position (Jacobi
    Forcing's noise ratio): 0 at the fixed point, 1 where position 0 is already wrong."""
    return (len(fixed_point) - first_wrong(state, fixed_point)) / max(1, len(fixed_point))


STATE_PICKS = ("random", "stratified")


def pick_states(cand: list[list[int]], fixed_point: list[int], k: int, rng: random.Random,
                how: str = "random") -> list[list[int]]:
    """``k`` of the candidate states (without replacement). ``random``: a uniform draw (the paper's);
    ``stratified``: one state per noise stratum, after Jacobi Forcing's noise schedule (its blocks
    cycle through evenly spaced noise targets): the targets (i + u) / k for i < k with one uniform
    offset u, and for each, the nearest not yet picked state by ``noise`` (ties: the earlier state).
    Either way every item's rows span its trajectory; stratified never draws two nearly converged
    states where a noisy one exists."""
    k = min(k, len(cand))
    if how == "random":
        return rng.sample(cand, k)
    if how not in STATE_PICKS:
        raise ValueError(f"state_pick is one of {', '.join(STATE_PICKS)}, got {how!r}")
    u, left, out = rng.random(), list(range(len(cand))), []
    level = [noise(s, fixed_point) for s in cand]
    for i in range(k):
        t = (i + u) / k
        j = min(left, key=lambda j: (abs(level[j] - t), j))
        left.remove(j)
        out.append(cand[j])
    return out


def unlikelihood(logits, targets: list[int], before: list[int]):
    """Token-level unlikelihood with previous-context candidates (Welleck et al., 2019, "Neural text
    generation with unlikelihood training", eq. 4): at each position t, -sum log(1 - p(c)) over the
    candidates c = the tokens of ``before`` + targets[:t] other than targets[t], averaged over the
    positions. ``logits[t]`` predicts ``targets[t]`` after ``before`` + targets[:t]. It lowers the
    probability of repeating earlier tokens where the text did not repeat them, which is the margin a
    greedy repetition loop lacks; the target itself is never a candidate, so a repeat that the text
    makes (a number carried from an earlier line) is not pushed down.

    >>> import torch
    >>> round(float(unlikelihood(torch.log(torch.tensor([[0.5, 0.5, 1e-9], [0.1, 0.3, 0.6]])), [1, 2], [0])), 4)
    0.5776
    """
    import torch

    n, vocab = logits.shape
    cand = torch.zeros(n, vocab, dtype=torch.bool, device=logits.device)
    seen = [t for t in before if 0 <= t < vocab]
    for t in range(n):
        if seen:
            cand[t, seen] = True
        cand[t, targets[t]] = False
        seen.append(targets[t])
    p = torch.softmax(logits, dim=-1)
    return -(torch.log((1 - p).clamp(min=1e-5)) * cand).sum() / max(1, n)


def repeat_positions(ids: list[int], n: int = 4) -> list[int]:
    """The positions t of ``ids`` whose token ends an n-gram (``ids[t-n+1..t]``) that occurred earlier
    in ``ids``: the tokens of a repetition, the candidates of sequence-level unlikelihood (Welleck et
    al., 2019, section 5.2). The first occurrence of a repeated stretch is not among them.

    >>> repeat_positions([1, 2, 3, 1, 2, 3, 1, 2, 9], n=2)
    [4, 5, 6, 7]
    """
    seen: set[tuple[int, ...]] = set()
    out = []
    for t in range(n - 1, len(ids)):
        g = tuple(ids[t - n + 1:t + 1])
        if g in seen:
            out.append(t)
        seen.add(g)
    return out


def sequence_unlikelihood(model, prompt_ids: list[int], answer_ids: list[int], n: int = 4):
    """Sequence-level unlikelihood of a degenerate answer (Welleck et al., 2019, eq. 7 with the
    repeated-n-gram candidates): -log(1 - p(x_t)) averaged over ``repeat_positions``, p the model's
    probability of the answer's own token after the prompt and the answer before it (the cheap
    step: the prompt once without gradient). It lowers the probability of going on with the loop
    where the loop goes on, the student's own loops as negatives. 0 (with a graph) where nothing
    repeats."""
    import torch

    full = cached_block_logits(model, prompt_ids, [answer_ids])[0, :-1]
    pos = repeat_positions(answer_ids, n)
    if not pos:
        return full.sum() * 0.0
    rows = full[pos]
    p = torch.softmax(rows, dim=-1).gather(1, torch.tensor([[answer_ids[t]] for t in pos], device=rows.device))
    return -torch.log((1 - p).clamp(min=1e-5)).mean()


def item_losses_cached(model, item: dict, rng: random.Random, w_ar: float = 10.0, states: int = 4,
                       window: int = 0, pick: str = "random", w_ul: float = 0.0, w_kl: float = 0.0) -> dict[str, Any]:
    """The CLLM loss of one item with the cheap step: the fixed point and up to ``states``
    intermediate states (``pick_states``: drawn without replacement, or one per noise stratum) as
    rows over one cached context. The global consistency term is the mean over those states of
    ``kl_from`` (as ``item_losses``, which draws one state); the AR term is the same teacher-forced
    cross-entropy of the fixed point. ``window`` > 0 counts only the first ``window`` positions from
    each state's first wrong one (a recipe option, not the paper's: where a Jacobi iteration's
    accepted run is decided). ``w_ul`` > 0 adds ``unlikelihood`` on the fixed point's row (its clean
    context: the answer before the block and the block so far), this weight (a recipe option against
    repetition loops). ``w_kl`` > 0 adds ``base_kl`` on the fixed point's row, this weight (an anchor to
    the base model's next-token distributions on the student's own text)."""
    import torch
    import torch.nn.functional as F

    fp = item["fixed_point"]
    cand = [s for s in item["states"] if s != fp]
    picked = pick_states(cand, fp, states, rng, pick) if cand else []
    full = cached_block_logits(model, item["prompt_ids"], [fp] + picked)
    target = full[0, 1:].detach()
    cons = sum((kl_from(target, full[1 + i, 1:], first_wrong(s, fp), window) for i, s in enumerate(picked)),
               full.sum() * 0.0) / max(1, len(picked))
    ar = F.cross_entropy(full[0, :-1], torch.tensor(fp, device=full.device))
    out = {"consistency": cons, "ar": ar, "total": cons + w_ar * ar}
    if w_ul:
        out["ul"] = unlikelihood(full[0, :-1], fp, list(item["prompt_ids"][item["prompt_len"]:]))
        out["total"] = out["total"] + w_ul * out["ul"]
    if w_kl:
        out["kl"] = base_kl(model, item["prompt_ids"], fp, full[0, :-1])
        out["total"] = out["total"] + w_kl * out["kl"]
    return out


def base_kl(model, prefix: list[int], block: list[int], student_logits):
    """KL(base || student) per position, averaged over ``block``'s positions: the base is ``model`` with
    its adapter switched off (no gradient), fed ``prefix`` + ``block`` with the cheap step as the
    student was; ``student_logits[t]`` predicts ``block[t]``. On-policy distillation from the base
    (Agarwal et al., 2024, "On-policy distillation of language models"): on the student's own answers,
    where its drift shows, it keeps each next-token distribution near the base's, which the AR loss on
    the student's own greedy answers does not (that one sharpens the student toward itself)."""
    import torch

    off = getattr(model, "disable_adapter", None)
    if not callable(off):
        raise TypeError("base_kl needs a model whose adapter can be switched off (a peft model)")
    with torch.no_grad(), off():
        base = cached_block_logits(model, prefix, [block])[0, :-1]
    return kl_from(base, student_logits, 0)


def answer_ar_loss(model, prompt_ids: list[int], answer_ids: list[int]):
    """Teacher-forced cross-entropy (mean per token) of ``answer_ids`` after ``prompt_ids``, with the
    cheap step (the prompt once without gradient): the AR loss on a dataset's own answer (the
    ``w_gt`` recipe option: "ground-truth labels", what reproductions of CLLM needed)."""
    import torch
    import torch.nn.functional as F

    full = cached_block_logits(model, prompt_ids, [answer_ids])
    return F.cross_entropy(full[0, :-1], torch.tensor(answer_ids, device=full.device))
