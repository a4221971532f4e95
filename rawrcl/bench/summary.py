"""The bench's numbers → the comparisons the report states (:func:`summarise`) and its figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rawrcl.bench.protocols import ZERO_LABEL_RAW, Protocol


def _group(records: list[dict], **match) -> list[dict]:
    return [r for r in records if all(r.get(k) == v for k, v in match.items())]


def _ms(recs: list[dict], key: str = "psnr") -> tuple[float, float, int]:
    v = [r[key] for r in recs if key in r]
    if not v:
        return float("nan"), float("nan"), 0
    return float(np.mean(v)), float(np.std(v)), len(v)


def _fmt(m: float, s: float, n: int, digits: int = 2) -> str:
    if n == 0 or not np.isfinite(m):
        return "—"
    return f"{m:.{digits}f} ± {s:.{digits}f}" if n > 1 else f"{m:.{digits}f}"


def summarise(records: list[dict], protocol: Protocol) -> dict:
    """Means/stds per (task, row) and the verdicts on the issue's targets."""
    out: dict[str, Any] = {"tasks": {}, "verdicts": []}
    n = protocol.labels
    for task in protocol.tasks:
        rows = {}
        for r in _group(records, task=task, kind="baseline"):
            rows[r["method"]] = _ms([r]) + _ms([r], "ssim")
        for r in _group(records, task=task, kind="zero"):
            rows[f"{r['method']} (0 labels)"] = _ms([r]) + _ms([r], "ssim")
        sl = _group(records, task=task, method="scratch", labels=n)
        rows[f"SL{n} (scratch)"] = _ms(sl) + _ms(sl, "ssim")
        for pt in protocol.pretexts:
            g = _group(records, task=task, method=pt, labels=n, protocol="full")
            if g:
                rows[f"{pt}+SL{n}"] = _ms(g) + _ms(g, "ssim")
        orc = _group(records, task=task, method="scratch", labels="all")
        rows["Oracle (SL, all labels)"] = _ms(orc) + _ms(orc, "ssim")
        out["tasks"][task] = rows
        # verdicts: each compares two rows (mean over seeds); "spread" is the larger seed std of the two
        v = out["verdicts"]

        def cmp(claim: str, a: str, b: str, margin: float = 0.0, task=task, rows=rows, v=v) -> None:
            if a not in rows or b not in rows or not np.isfinite(rows[a][0]) or not np.isfinite(rows[b][0]):
                return
            d = rows[a][0] - rows[b][0]
            spread = max(rows[a][1] if rows[a][2] > 1 else 0.0, rows[b][1] if rows[b][2] > 1 else 0.0)
            v.append(
                {
                    "task": task,
                    "claim": claim,
                    "value": f"{d:+.2f} dB",
                    "delta": d,
                    "spread": spread,
                    "met": bool(d >= margin if margin else d > 0),
                }
            )

        sl = f"SL{n} (scratch)"
        cmp(f"RCL+SL{n} ≥ SL{n} + 1 dB (mean over seeds)", f"rcl+SL{n}", sl, margin=1.0)
        for b in ("menon", "menon+nlm", "nlm"):
            cmp(f"RCL+SL{n} beats {b}", f"rcl+SL{n}", b)
        cmp("contrastive term helps (RCL − consistency-only α=0, both + SL)", f"rcl+SL{n}", f"rcl-a0+SL{n}")
        cmp("RCL pre-training beats N2S pre-training (both + SL)", f"rcl+SL{n}", f"n2s+SL{n}")
        ref = "bilinear" if "bilinear" in rows else "noisy"
        cmp(f"pre-trained RCL model with 0 labels beats {ref}", "rcl (0 labels)", ref)
        cmp(f"N2S RAW denoiser + bilinear, 0 labels, beats {ref}", f"{ZERO_LABEL_RAW} (0 labels)", ref)
        for pt in protocol.pretexts:
            if pt != "rcl":
                cmp(f"{pt} pre-training helps SL{n}", f"{pt}+SL{n}", sl)
    return out


def _plots(out: Path, records: list[dict], protocol: Protocol, samples: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for task in protocol.tasks:
        ns = sorted(
            {
                r["labels"]
                for r in records
                if r["task"] == task and r["kind"] == "finetune" and r["labels"] != "all"
            }
        )
        if not ns:
            continue
        n_all = len(list_images_cached(records, task))
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for method, label in (("scratch", "SL (scratch)"), ("rcl", "RCL + SL")):
            xs, ms, ss = [], [], []
            for n in [*ns, "all"]:
                g = _group(
                    records,
                    task=task,
                    method=method,
                    labels=n,
                    protocol="full" if method != "scratch" else "scratch",
                )
                if g:
                    m, s, _ = _ms(g)
                    xs.append(n if n != "all" else n_all)
                    ms.append(m)
                    ss.append(s)
            if xs:
                ax.errorbar(xs, ms, yerr=ss, marker="o", capsize=3, label=label)
        for b, style in (
            ("bilinear", ":"),
            ("menon", "--"),
            ("menon+nlm", "-."),
            ("nlm", "-."),
            ("noisy", ":"),
        ):
            g = _group(records, task=task, kind="baseline", method=b)
            if g:
                ax.axhline(g[0]["psnr"], ls=style, color="grey", lw=1)
                ax.text(1, g[0]["psnr"], f" {b}", fontsize=7, va="bottom", color="grey")
        z = _group(records, task=task, kind="zero", method="rcl")
        if z:
            ax.plot([1], [z[0]["psnr"]], "k*", label="RCL, 0 labels (plotted at 1)")
        ax.set_xscale("log")
        ax.set_xlabel("# labelled photos")
        ax.set_ylabel("PSNR (dB, 8-bit sRGB)")
        ax.set_title(f"{task}: PSNR vs labels ({protocol.name}, noise {protocol.noise})")
        ax.legend(fontsize=7)
        fig.tight_layout()
        name = f"fig_labels_{task}.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        written.append(name)
    for task, smp in samples.items():
        if not smp:
            continue
        order = [
            k
            for k in (
                "noisy",
                "bilinear",
                "menon",
                "menon+nlm",
                "nlm",
                "rcl (0 labels)",
                f"scratch+SL{protocol.labels}",
                f"rcl+SL{protocol.labels}",
            )
            if k in smp
        ]
        first = smp[order[0]] if order else next(iter(smp.values()))
        h, w = first["target"].shape[:2]
        cy, cx, c = h // 2, w // 2, min(96, h // 2, w // 2)
        panels = (
            [("input", first["input"])]
            + [(k, smp[k]["output"]) for k in order]
            + [("target", first["target"])]
        )
        fig, axes = plt.subplots(1, len(panels), figsize=(2.0 * len(panels), 2.3))
        for ax, (name, img) in zip(np.atleast_1d(axes), panels, strict=True):
            ax.imshow(img[cy - c // 2 : cy + c // 2, cx - c // 2 : cx + c // 2], interpolation="nearest")
            ax.set_title(name, fontsize=7)
            ax.axis("off")
        fig.suptitle(f"{task}: {first['name']} (centre crop), noise {protocol.noise}", fontsize=8)
        fig.tight_layout()
        name = f"fig_samples_{task}.png"
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        written.append(name)
    return written


def list_images_cached(records: list[dict], task: str) -> list[str]:
    g = [r for r in records if r["task"] == task and r["labels"] == "all"]
    return g[0]["label_files"] if g else []
