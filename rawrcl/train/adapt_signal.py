"""The label-free keep-or-discard signals of ``rawrcl adapt``.

- :func:`held_out_scores`: SURE, the held-out clip-aware R2R loss and the shadow check on fixed crops of the
  user's files (never trained on) — does adaptation help on the user's camera?
- :func:`keep_or_discard`: both for the start and each candidate, and the choice among them;
  :func:`final_flags` whether the final weights did worse or forgot, :func:`adapt_warnings` the warnings then,
  :func:`adapt_summary` the run's summary.
- :func:`check_crops` / :func:`check_scores`: the forgetting check — PSNR on synthetic mosaics of the
  bottom :data:`rawrcl.train.adapt_objective.CHECK_BAND` of the bundled scikit-image photos (never in the
  mix) across the camera noise ladder, photo-valued and unprocessed, with the true noise — does it still do
  what it did well?

Shapes: packed RAW (B, 4, h, w), noise (B, 2, 4) [λshot; λread] per plane, [0, 1] units.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from rawrcl.device import use_channels_last
from rawrcl.methods import OWN_MODEL
from rawrcl.methods.r2r import neighbour_mean, recorrupt, scored_mask, signal_variance
from rawrcl.methods.sure import sure_map
from rawrcl.models.compose import DenoiseThenDemosaic
from rawrcl.models.conditioning import call
from rawrcl.models.loading import RUN_JDD, RUN_RAW
from rawrcl.noise import with_row_variance
from rawrcl.train.config import AdaptConfig

#: the forgetting check's levels (``rawrcl.noise.PRESETS``): base ISO … phone high ISO, and low/high
CHECK_LEVELS = ("L1", "L2", "L3", "L4", "L5", "L6", "L7", "low", "high")
#: the check's smooth crops: each crop's centre enlarged this many times (what adaptation forgets first: the
#: HDR+ burst adaptation lost 0.13–0.66 dB on the held-out 4× rows while the 1× check read −0.06;
#: docs/adaptation.md)
CHECK_ZOOM = 4.0
#: the suffix of an enlarged condition's key ("photo L1 4x"): :func:`is_enlarged`
ENLARGED = "x"


def is_enlarged(key: str) -> bool:
    """Whether a forgetting-check condition ``key`` is one of the enlarged (smooth-content) ones."""
    return key.endswith(ENLARGED)


def censored_mean(x: torch.Tensor, var: torch.Tensor, floor: float) -> torch.Tensor:
    """E[max(x + n, floor)] for n ~ N(0, var): what a file clipped at ``floor`` stores on average."""
    sd = var.clamp_min(1e-12).sqrt()
    u = (x - floor) / sd
    normal = torch.distributions.Normal(0.0, 1.0)
    return floor + (x - floor) * normal.cdf(u) + sd * normal.log_prob(u).exp()


def shadow_bias(
    fy: torch.Tensor,
    y: torch.Tensor,
    noise: torch.Tensor,
    floor: float,
    xhat: torch.Tensor,
    var: torch.Tensor,
) -> tuple[float, float]:
    """(sum, count) over the shadow pixels (local signal < 2.5σ above ``floor``) of
    (E[max(f(y) + n, floor)] − y)/σ: 0 on average when the model's output is the clean signal; > 0 when it
    brightens the shadows (what a clipping-biased objective teaches), < 0 when it darkens them. SURE does not
    score these pixels; this is the label-free check that does."""
    dark = (xhat - floor) < 2.5 * var.sqrt()
    if not bool(dark.any()):
        return 0.0, 0.0
    v_out = signal_variance(fy, noise)
    r = (censored_mean(fy, v_out, floor) - y) / v_out.sqrt()
    return float(r[dark].sum()), float(dark.sum())


def for_scoring(model: nn.Module) -> nn.Module:
    """``model`` in eval mode and in the inference memory format of its device
    (:func:`rawrcl.device.use_channels_last`): a model trained in the plain layout on an AVX2-only CPU is
    scored ≈ 1.36× faster in channels-last. A two-stage model inside is scored on one pass of each stage
    (:attr:`~rawrcl.models.compose.DenoiseThenDemosaic.two_pass` ``False``): the scores compare networks,
    and the commands' low-noise passes would multiply the check's time. Changes ``model`` in place; returns
    it."""
    p = next(model.parameters(), None)
    dev = p.device if p is not None else torch.device("cpu")
    fmt = torch.channels_last if use_channels_last(dev) else torch.contiguous_format
    for m in model.modules():
        if isinstance(m, DenoiseThenDemosaic):
            m.two_pass = False
    return model.eval().to(memory_format=fmt)


@torch.no_grad()
def held_out_scores(
    model: nn.Module,
    crops: Sequence[dict],
    alpha: float = 0.5,
    draws: int = 2,
    seed: int = 0,
    r2r: bool = True,
) -> dict:
    """Label-free scores of ``model`` on fixed crops (lower is better), common random numbers across models.

    ``sure``: mean over scored pixels of (f(y) − y)² − v + 2v·∂fᵢ/∂yᵢ (Stein's unbiased risk estimate of
    the true MSE at the files' noise, :func:`rawrcl.methods.sure.sure_map`: per-pixel variance v from the
    neighbours, ``draws`` probes per term, ε = 0.05·σ; with row noise σ_row (crop key ``row``) also
    − σ_row² + 2σ_row²·Σ_{j in i's row} ∂fᵢ/∂y_j); ``sure_psnr`` =
    −10·log10(sure) (dB, [0, 1]);
    ``r2r``: the clip-aware R2R loss averaged over ``draws`` recorruptions (with ``r2r=False`` not computed —
    ``draws`` forward passes fewer per crop — and absent; SURE is the same either way: its probes are drawn
    first); ``shadow``: mean of
    :func:`shadow_bias` over the pixels near a clip level (reported, not used to choose: it separated a
    clipping-biased model too little, docs/adaptation.md); ``scored``: fraction of pixels clear of
    clipping; ``crop_sure``: each crop's SURE sum (0 for a crop with nothing scored), for
    :func:`gain_se_db`; ``crop_fit``: each crop's Σ (f(y) − y)² over the same pixels, the part of its SURE
    that does not scale with the told variance (:func:`sure_scale_range`). Pixels within 2.5σ of a clip
    level are not scored by SURE/R2R (the estimates assume unclipped Gaussian noise)."""
    model = for_scoring(model)
    tot = {"r2r": 0.0, "n": 0.0, "var": 0.0}
    per_crop, fit = [], []
    for k, c in enumerate(crops):
        y = c["x"][None].float()
        noise = c["noise"][None].float()
        floor = torch.tensor([float(c["floor"])])
        xhat = neighbour_mean(y)
        var = signal_variance(xhat, noise)
        w = scored_mask(xhat, var, floor, 2.5)
        n = float(w.sum())
        if n < 1:
            per_crop.append(0.0)
            fit.append(0.0)
            continue
        g = torch.Generator().manual_seed(int(seed) * 100003 + k)
        row = float(c.get("row", 0.0))
        cond = with_row_variance(noise, row) if row > 0 else noise  # what a row-aware model is told
        rows = torch.tensor([row])  # 0: no row term
        fy, sure = sure_map(lambda t, c=cond: call(model, t, c), y, var, rows, 0.05, draws, g)
        sure = sure * w
        loss = 0.0
        for _ in range(draws if r2r else 0):
            r = recorrupt(y, noise, floor, alpha, True, 2.5, generator=g, row=rows)
            out = call(model, r["input"], r["noise"]).float()
            loss += float((((out - r["target"]) ** 2) * w).sum()) / draws
        if float(c["floor"]) > -0.5:  # shadows of a clipped file: censored-mean consistency
            b, nd = shadow_bias(fy, y, noise, float(c["floor"]), xhat, var)
            tot["shadow"] = tot.get("shadow", 0.0) + b
            tot["shadow_n"] = tot.get("shadow_n", 0.0) + nd
        per_crop.append(float(sure.sum()))
        fit.append(float((((fy - y) ** 2) * w).sum()))
        tot["r2r"] += loss
        tot["n"] += n
        tot["var"] += float((var * w).sum())
        tot.setdefault("px", 0.0)
        tot["px"] += float(w.numel())
    if tot["n"] < 1:
        res = {"sure": math.nan, "sure_psnr": math.nan, "r2r": math.nan, "scored": 0.0}
    else:
        sure = sum(per_crop) / tot["n"]
        res = {
            "sure": sure,
            "sure_psnr": -10 * math.log10(sure) if sure > 0 else math.inf,
            "r2r": tot["r2r"] / tot["n"] / ((1 + 1 / alpha**2) * tot["var"] / tot["n"]),
            "shadow": tot["shadow"] / tot["shadow_n"] if tot.get("shadow_n", 0) >= 1 else 0.0,
            "scored": tot["n"] / tot["px"],
        }
    if not r2r:
        del res["r2r"]
    return {**res, "crop_sure": per_crop, "crop_fit": fit}


def gain_se_db(start: Sequence[float], cand: Sequence[float]) -> float:
    """Standard error (dB) of a candidate's held-out SURE gain over the start, −10·log10(Σ cand / Σ start),
    from the crops' SURE sums (``crop_sure`` of :func:`held_out_scores`, same crops for both): the delta
    method with the crop as the sampling unit, √(m/(m−1)·Σ aᵢ²)·10/ln 10, aᵢ = startᵢ/Σ start − candᵢ/Σ cand —
    how much the gain would move with other crops of the same files (and other probes)."""
    a, b = np.asarray(start, dtype=np.float64), np.asarray(cand, dtype=np.float64)
    m = a.size
    if m < 2 or a.sum() <= 0 or b.sum() <= 0:
        return math.nan
    d = a / a.sum() - b / b.sum()
    return float(math.sqrt(m / (m - 1) * float((d**2).sum())) * 10 / math.log(10))


def sure_scale_range(
    start_sure: Sequence[float],
    start_fit: Sequence[float],
    cand_sure: Sequence[float],
    cand_fit: Sequence[float],
) -> tuple[float, float] | None:
    """The scales s of the told noise variance over which a candidate's held-out SURE stays below the start's:
    ``(lo, hi)`` (``hi`` may be ``inf``), or None when there is none.

    From the crops' ``crop_sure`` / ``crop_fit`` of :func:`held_out_scores` (same crops for both): SURE
    told s·v is Σ fit + s·(Σ sure − Σ fit), so the candidate's difference to the start is dA + s·dB, linear in
    s. Near a good denoiser SURE is a small difference of large terms (on the HDR+ burst's held-out crops its
    estimate is ≈ 10 % of Σ fit), so a 10 % error in the told variance moves it by about its own size: whether
    a gain that holds only for s near 1 is real depends on how good the told noise is (docs/adaptation.md,
    "Stop 77")."""
    s0, f0, s1, f1 = (float(np.sum(v)) for v in (start_sure, start_fit, cand_sure, cand_fit))
    d_fit, d_var = f1 - f0, (s1 - f1) - (s0 - f0)
    if d_var == 0:
        return (0.0, math.inf) if d_fit < 0 else None
    s = -d_fit / d_var  # the break-even scale
    if d_var > 0:  # the candidate's SURE rises faster with s (it denoises less): better below s
        return (0.0, s) if s > 0 else None
    return (max(s, 0.0), math.inf)  # it denoises more: better above s


def check_crops(
    crop: int = 96,
    per_photo: int = 5,
    draws: int = 2,
    photos: int = 8,
    seed: int = 0,
    zoom: float = CHECK_ZOOM,
) -> list[dict]:
    """The forgetting check's fixed synthetic inputs: for each of :data:`CHECK_LEVELS` × (photo-valued,
    unprocessed), ``per_photo`` crops (≤ ``crop`` mosaic px, a multiple of 16) across the bottom band of
    each bundled photo, ``draws`` noise draws each; with ``zoom`` > 1 the same again with each crop's centre
    enlarged ``zoom``× (bicubic: the smooth content of a full-resolution file, keys "photo L1 4x").

    Returns ``[{"key": "photo L1", "batches": [(input, target, noise), …]}]``, one batch per crop size:
    input/target (n, 4, h, w) packed RGGB, noise (n, 2, 4) (Gaussian heteroscedastic noise at the level's
    true λ, as ``rawrcl eval``; the same on every call)."""
    from rawrcl.data.labelled import zoomed_crop
    from rawrcl.noise import PRESETS
    from rawrcl.sample_data import bundled_photos
    from rawrcl.tasks import get_task
    from rawrcl.train.adapt_objective import CHECK_BAND

    clean = []
    for _, a in bundled_photos(photos):
        h, w = a.shape[:2]
        band = np.moveaxis(a[int(h * (1 - CHECK_BAND)) :], -1, 0).astype(np.float32) / 255.0
        c = min(crop, band.shape[1], w) // 16 * 16
        for j in range(per_photo):
            x0 = int(round((w - c) * (j + 0.5) / per_photo)) // 2 * 2
            clean.append(band[:, :c, x0 : x0 + c])
    sets = [("", clean)]
    if zoom > 1:
        sets.append((f" {zoom:g}{ENLARGED}", [zoomed_crop(img, img.shape[1], zoom) for img in clean]))
    out = []
    for z, (suffix, imgs) in enumerate(sets):
        for d, (domain, unprocess) in enumerate((("photo", False), ("unproc", True))):
            task = get_task("raw-denoise", unprocess=unprocess)
            for k, level in enumerate(CHECK_LEVELS):
                groups: dict[tuple, list] = {}
                for i, img in enumerate(imgs):
                    for r in range(draws):
                        key = [seed, d, k, i, r] + ([z] if z else [])  # the plain crops draw as before
                        s = task.sample(img, np.random.default_rng(key), PRESETS[level])
                        g = groups.setdefault(tuple(s["input"].shape), [[], [], []])
                        g[0].append(s["input"])
                        g[1].append(s["target"])
                        g[2].append(s["meta"]["noise"].params(4).float())
                batches = [tuple(torch.stack(v) for v in g) for g in groups.values()]
                out.append({"key": f"{domain} {level}{suffix}", "batches": batches})
    return out


@torch.no_grad()
def check_scores(
    model: nn.Module,
    crops: Sequence[dict],
    base: dict[str, float] | None = None,
    tol: float = math.inf,
) -> dict[str, float]:
    """PSNR (dB, packed RAW, [0, 1], peak 1; MSE over all the condition's pixels) of ``model`` on each
    :func:`check_crops` condition. With ``base`` (the start's scores) the enlarged conditions go first (what
    adaptation forgets first) and scoring stops at the first condition more than ``tol`` dB below ``base``:
    the result then holds the conditions scored so far, that one last."""
    model = for_scoring(model)
    if base is not None:
        crops = sorted(crops, key=lambda c: not is_enlarged(c["key"]))  # stable: enlarged first
    res = {}
    for c in crops:
        se, n = 0.0, 0
        for x, y, noise in c["batches"]:
            out = call(model, x, noise).float()
            se += float(((out - y) ** 2).sum())
            n += y.numel()
        res[c["key"]] = -10 * math.log10(max(se / n, 1e-20))
        if base is not None and res[c["key"]] - base[c["key"]] < -tol:
            break
    return res


def forget_row(scores: dict[str, float], base: dict[str, float]) -> dict:
    """A candidate's forgetting-check keys of a keep-or-discard row, from its :func:`check_scores` ``scores``
    and the start's ``base``: ``forget_db`` its worst drop (dB), ``forget_at`` that condition,
    ``forget_stopped`` when the check stopped at its first failed condition (not necessarily the worst)."""
    drop = {k: scores[k] - base[k] for k in scores}
    worst = min(drop, key=drop.get)
    row = {"forget_db": round(drop[worst], 4), "forget_at": worst}
    if len(scores) < len(base):
        row["forget_stopped"] = True
    return row


def keep_or_discard(
    cands: Sequence[tuple[int, Path | None]],
    model_at: Callable[[int, Path | None], nn.Module],
    held: Sequence[dict],
    c: AdaptConfig,
    say: Callable[[str], None] = lambda m: None,
) -> tuple[list[dict], dict]:
    """Score the candidates (step, checkpoint path or None; step 0 = the start, first) — ``model_at(step,
    path)`` gives the model to score — on the held-out crops and the forgetting check; returns (table, the
    selected row): the best by ``c.select`` among the start and the candidates within ``c.forget_tol`` on the
    check and, selecting by SURE, whose held-out gain holds for every told-variance scale within
    ``c.noise_slack`` (:func:`sure_scale_range`, row keys ``sure_scales`` and ``sure_holds``)."""
    checks = check_crops()
    say(
        f"scoring {len(cands)} checkpoints (start included) on the held-out crops and the forgetting check "
        "(on 2 cores ≈ 20–35 s each for a fine-tune, 3–7 min for a blind-spot composite)"
    )
    table: list[dict] = []
    base_check: dict[str, float] = {}
    for i, (s, p) in enumerate(cands):
        model = model_at(s, p)
        sc = held_out_scores(model, held, alpha=c.alpha, seed=c.seed, r2r=c.select == "r2r")
        crops, fits = sc.pop("crop_sure"), sc.pop("crop_fit")
        # the start and the final weights in full (the warnings quote the final's worst condition); the
        # others only until they fail, which is all the choice needs
        full = s == 0 or i == len(cands) - 1
        fc = check_scores(model, checks, None if full else base_check, c.forget_tol)
        row = {"step": s, **{k: round(v, 8) for k, v in sc.items()}}
        if s == 0:
            base_check, base_crops, base_fits = fc, crops, fits
        se = gain_se_db(base_crops, crops) if s else 0.0
        row["sure_gain_se_db"] = round(se, 4) if math.isfinite(se) else None
        scales = sure_scale_range(base_crops, base_fits, crops, fits) if s else (0.0, math.inf)
        row["sure_scales"] = None if scales is None else [round(scales[0], 4), _finite(scales[1])]
        row["sure_holds"] = holds(scales, c.noise_slack)
        row.update(forget_row(fc, base_check))
        table.append(row)
        gain = ""
        if s:
            gain = f", {sc['sure_psnr'] - table[0]['sure_psnr']:+.3f} ± {se:.3f} vs start{scale_text(scales)}"
        r2r_txt = f", R2R {sc['r2r']:.4f}" if "r2r" in sc else ""
        which = "beyond the tolerance, not scored further" if row.get("forget_stopped") else "worst"
        say(
            f"held-out step {s}: SURE {sc['sure']:.4g} ({sc['sure_psnr']:.2f} dB{gain}){r2r_txt}; "
            f"forgetting check: {which} {row['forget_db']:+.2f} dB ({row['forget_at']})"
        )
    allowed = [
        r
        for r in table
        if r["step"] == 0 or (r["forget_db"] >= -c.forget_tol and (c.select != "sure" or r["sure_holds"]))
    ]
    if c.select == "last":
        return table, allowed[-1]
    return table, min(
        allowed, key=lambda r: (r[c.select] if math.isfinite(r[c.select]) else math.inf, r["step"])
    )


def holds(scales: tuple[float, float] | None, slack: float) -> bool:
    """Whether a :func:`sure_scale_range` covers every told-variance scale in [1/``slack``, ``slack``]."""
    return scales is not None and scales[0] <= 1 / slack and scales[1] >= slack


def scale_bound(scales: tuple[float, float] | None) -> str:
    """The bound of a :func:`sure_scale_range` in words ("below 1.22×", "above 0.83×"; "" when there is none,
    also for ``hi`` None, how a row stores ``inf``)."""
    if scales is None:
        return ""
    lo, hi = scales
    if hi is None or hi == math.inf:
        return "" if lo == 0 else f"above {lo:.2f}×"
    return f"below {hi:.2f}×"


def scale_text(scales: tuple[float, float] | None) -> str:
    """The log's words for a :func:`sure_scale_range`."""
    if scales is None:
        return "; worse at any noise variance"
    bound = scale_bound(scales)
    return f"; better if the noise variance is {bound} the told" if bound else ""


def _finite(x: float) -> float | None:
    return round(x, 4) if math.isfinite(x) else None


def table_score(table: list[dict], c: AdaptConfig) -> str:
    """The row key a keep-or-discard table is judged by (lower is better): ``burst`` for a table of
    :func:`rawrcl.train.burst_signal.burst_gain` rows (``--method burst``'s burst signal), else ``c.select``
    (SURE for ``last``)."""
    if "burst" in table[0]:
        return "burst"
    return "sure" if c.select == "last" else c.select


def final_flags(table: list[dict], c: AdaptConfig) -> tuple[str, bool, bool]:
    """(the score "worse" is judged by, the final weights scored worse than the start by it, the final weights
    lost more than ``forget_tol`` on the forgetting check) of a :func:`keep_or_discard` table (or a burst
    signal's, :func:`table_score`)."""
    score = table_score(table, c)
    base, final = table[0], table[-1]
    return score, final[score] > base[score], final["forget_db"] < -c.forget_tol


def clear_results(out: Path, stages: Sequence[str] = ()) -> None:
    """Remove a finished run's results — ``adapt.json``, :data:`RUN_RAW`, :data:`RUN_JDD` in ``out`` and in
    its stage folders ``stages`` — when a run starts afresh (new, or ``--force``), so that a run stopped
    before its end is never read as finished (a stale ``blindspot/adapt.json`` passed for ``--method
    burst``'s stage 1 done). ``--resume`` keeps them until the run's end replaces them (atomic writes): a
    kill then loses nothing."""
    for d in (out, *(out / s for s in stages)):
        for name in ("adapt.json", RUN_RAW, RUN_JDD):
            (d / name).unlink(missing_ok=True)


def adapt_summary(
    out: Path,
    checkpoint: Path,
    source: str,
    c: AdaptConfig,
    files: Sequence,
    held: int,
    table: list[dict],
    best: dict,
    fit: dict,
) -> dict:
    """The summary of run ``out`` (``adapt.json``, ``extra["adapt"]``) from its keep-or-discard
    (:func:`keep_or_discard`): ``checkpoint`` the file commands use, ``files`` the
    :class:`~rawrcl.data.noisy_crops.NoiseFile` s, ``held`` the number of held-out crops, ``fit`` what the
    trainer returned; with ``warning`` when :func:`adapt_warnings` warned."""
    _, worse, forgot = final_flags(table, c)
    summary = {
        "run_dir": str(out),
        "checkpoint": str(checkpoint),
        "source": source,
        "method": c.method,
        "steps": c.steps,
        "settings": c.to_dict(),
        "files": [f.describe() for f in files],
        "held_out_crops": held,
        "held_out": table,
        "selected_step": best["step"],
        "verdict": "kept start" if best["step"] == 0 else f"adapted (step {best['step']})",
        "final_worse_than_start": bool(worse),
        "final_forgot": bool(forgot),
        **_deltas(table, best),
        "train": {k: fit.get(k) for k in ("first_loss", "last_loss", "elapsed_s")},
    }
    if msgs := adapt_warnings(table, best, c):
        summary["warning"] = " / ".join(msgs)
    return summary


def _deltas(table: list[dict], best: dict) -> dict:
    """The kept row's gain over the start and its standard error (dB): by the burst signal for its rows (None
    where it has no dB scale), else by held-out SURE."""
    if "burst" in best:
        return {"delta_burst_db": best["burst_gain_db"], "delta_burst_se_db": best["burst_gain_se_db"]}
    return {
        "delta_sure_db": round(best["sure_psnr"] - table[0]["sure_psnr"], 4),
        "delta_sure_se_db": best["sure_gain_se_db"],
    }


def adapt_warnings(table: list[dict], best: dict, c: AdaptConfig) -> list[str]:
    """Warn (and return the messages) when the final weights scored worse than the start on the held-out
    crops or forgot more than ``forget_tol`` on the check (:func:`final_flags`), and when the start was kept
    although a checkpoint scored better, only within the told noise's uncertainty (``noise_slack``)."""
    base, final = table[0], table[-1]
    score, worse, forgot = final_flags(table, c)
    forget_tol = c.forget_tol
    kept = "kept the starting weights" if best["step"] == 0 else f"kept step {best['step']}"
    msgs = []
    if worse:
        msgs.append(
            f"adaptation made the held-out {score} score worse at the end (start {base[score]:.4g}, "
            f"final {final[score]:.4g}); {kept}"
        )
    if forgot:
        hint = forget_hint(final["forget_at"], best, c)
        msgs.append(
            f"the adapted weights lost {-final['forget_db']:.2f} dB at {final['forget_at']} on the "
            f"forgetting check (more than {forget_tol:g} dB); {kept}{hint}"
        )
    if score == "sure" and best["step"] == 0:
        unsure = [
            r
            for r in table[1:]
            if not r.get("sure_holds", True) and r["sure"] < base["sure"] and r["forget_db"] >= -forget_tol
        ]
        if unsure:
            r = min(unsure, key=lambda r: r["sure"])
            msgs.append(
                f"step {r['step']} scored better than the start on the held-out crops only if the files' "
                f"noise variance is {scale_bound(r['sure_scales'])} the told one (inside the "
                f"×{c.noise_slack:g} uncertainty of an estimate); kept the starting weights (--resume "
                "--noise-slack 1 takes it without training again; the camera's calibrated noise, --noise "
                "PROFILE from flats and darks, makes the choice surer)"
            )
    for msg in msgs:
        warnings.warn(msg, stacklevel=4)
    return msgs


def forget_hint(forget_at: str, best: dict, c: AdaptConfig) -> str:
    """What to try when the forgetting check at condition ``forget_at`` made ``adapt`` keep the start ("" when
    a checkpoint was kept, or for a method with its own network beside the start, ``OWN_MODEL``): a larger
    ``--mix`` helped at 1× (synthetic cameras); on enlarged (smooth) conditions — the measured real burst — it
    did not, and only ``--method blindspot``, which leaves the starting weights as they are, gained there
    (docs/adaptation.md)."""
    if best["step"] != 0 or c.method in OWN_MODEL:  # their start is never changed
        return ""
    if is_enlarged(forget_at):
        return (
            "; smooth (enlarged) content, as on the measured real burst, where a larger --mix did not help "
            "and --method blindspot (a new network beside the unchanged start, 45 min – 2 h) gained"
        )
    return "; a larger --mix (e.g. 2) replays more of what the model did well"
