"""``rawrcl bench``: the grid runner behind the paper's Tables 1–4 / App. D, at CPU (``quick``) or GPU
(``paper``) scale, writing ``report.md``, ``results.json`` and plots.

Grid, for each task of the protocol (all on the *same* test photos and noisy inputs, test seed 0):

1. classical baselines that apply to the task (``rawrcl.eval.BASELINES``);
2. self-supervised pre-training on the *unlabelled* noisy training photos, one run per pretext
   (``rcl`` EMD α=1e-3, the consistency-only ablation ``rcl α=0``, ``n2s``; the ``paper`` protocol adds
   RCL-BD, RCL-MMD, N2N and M2M), via ``rawrcl pretrain`` (the engine); the pre-trained model is evaluated
   as is when its head already solves the task ("0 labels"); for JDD also a Noise2Self RAW denoiser
   (pre-trained on ``raw-denoise``) followed by a bilinear demosaic, the 0-label row ``n2s-raw+bilinear``;
3. few-label fine-tuning (``full`` protocol, L1) of every pre-trained model with N labels, and supervised
   learning from scratch (SL) with the same N labels, budget and seeds; the Oracle is SL with all
   training photos labelled; the label sweep (paper Table 3) repeats SL and RCL+SL at several N;
4. the paper's *linear* proxy protocol (frozen body, fresh head) for each pretext, N labels.

Every run is recorded with its exact CLI command, seed and wall time; completed runs are cached under
``REPORT_DIR/runs`` so ``--resume`` continues an interrupted bench.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rawrcl.errors import RawrclError
from rawrcl.eval import baseline_applies, evaluate
from rawrcl.io import atomic_write_text, list_photos, load_images
from rawrcl.tasks import DOMAIN_PRETEXT, TASKS
from rawrcl.train.finetuning import finetune


@dataclass(frozen=True)
class Pretext:
    """A pre-training configuration: ``rawrcl pretrain --method METHOD [extra args]``."""

    key: str
    label: str
    method: str
    args: tuple[str, ...] = ()


PRETEXTS: dict[str, Pretext] = {
    p.key: p
    for p in (
        Pretext("rcl", "RCL-EMD (α=1e-3)", "rcl", ("--distance", "emd", "--alpha", "1e-3")),
        Pretext("rcl-a0", "consistency only (α=0)", "rcl", ("--distance", "emd", "--alpha", "0")),
        Pretext("n2s", "N2S", "n2s"),
        Pretext("n2n", "N2N", "n2n"),
        Pretext("m2m", "M2M", "m2m"),
        Pretext("rcl-bd", "RCL-BD (α=1e-3)", "rcl", ("--distance", "bd", "--alpha", "1e-3")),
        Pretext("rcl-mmd", "RCL-MMD (α=1e-3)", "rcl", ("--distance", "mmd", "--alpha", "1e-3")),
    )
}


@dataclass(frozen=True)
class Protocol:
    """Budget of a bench protocol (crop sizes in clean-photo pixels)."""

    name: str
    tasks: tuple[str, ...]
    pretexts: tuple[str, ...]
    arch: str = "unet"
    width: int = 16
    depth: int | None = None
    skip: bool = False  # the paper's plain U-Net; True adds the classical skip (docs/training.md)
    crop: int = 64
    pretrain_batch: int = 16
    pretrain_steps: int = 300
    finetune_batch: int = 8
    finetune_steps: int = 300
    labels: int = 10
    sweep: tuple[int, ...] = (2,)
    seeds: int = 3
    linear: bool = True
    noise: str = "high"
    device: str = "cpu"
    extra: dict = field(default_factory=dict)


BENCH_PROTOCOLS: dict[str, Protocol] = {
    "quick": Protocol(
        "quick",
        tasks=("jdd", "denoise"),
        pretexts=("rcl", "rcl-a0", "n2s"),
        width=16,
        crop=64,
        pretrain_batch=16,
        pretrain_steps=500,
        finetune_batch=8,
        finetune_steps=400,
        labels=10,
        sweep=(2,),
        seeds=3,
    ),
    "paper": Protocol(
        "paper",
        tasks=("denoise", "sr", "jdensr", "jdd", "jdemsr", "jddsr"),
        pretexts=("rcl", "rcl-a0", "rcl-bd", "rcl-mmd", "n2n", "n2s", "m2m"),
        width=32,
        crop=128,
        pretrain_batch=64,
        pretrain_steps=20000,
        finetune_batch=64,
        finetune_steps=2000,
        labels=10,
        sweep=(100, 1000),
        seeds=5,
        device="cuda",
    ),
}
#: old name (fine-tuning's linear/full are :data:`rawrcl.train.FINETUNE_PROTOCOLS`)
PROTOCOLS = BENCH_PROTOCOLS

#: method label of the 0-label JDD row built from a Noise2Self RAW denoiser (pre-trained on task
#: raw-denoise) followed by a bilinear demosaic (rawrcl.models.DenoiseThenDemosaic)
ZERO_LABEL_RAW = "n2s-raw+bilinear"


def _cmd(args: list[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in args)


class Bench:
    """Runs a protocol; see the module docstring. Use :func:`run_bench`."""

    def __init__(
        self,
        protocol: Protocol,
        train_dir: Path,
        test_dir: Path,
        out: Path,
        *,
        seeds: int,
        limit: int | None,
        resume: bool,
        log=print,
    ) -> None:
        self.p, self.train_dir, self.test_dir, self.out = protocol, train_dir, test_dir, out
        self.seeds = list(range(seeds))
        self.limit, self.resume, self.log = limit, resume, log
        self.runs_dir = out / "runs"
        self.records: list[dict] = []
        self.commands: list[str] = []
        self.t_start = time.perf_counter()
        self.test_images = load_images(test_dir, limit)
        self.train_files = [f.name for f in list_photos(train_dir)]
        self.samples: dict[str, dict[str, Any]] = {}

    # -------------------------------------------------------------------------------------- caching
    @property
    def _skip_tag(self) -> str:
        """Run-name suffix keeping runs with the classical skip apart from plain-U-Net runs."""
        return "__skip" if self.p.skip else ""

    @property
    def _skip_flag(self) -> str:
        return "--skip" if self.p.skip else "--no-skip"

    def _cached(self, key: str) -> dict | None:
        path = self.runs_dir / key / "result.json"
        if self.resume and path.exists():
            return json.loads(path.read_text())
        return None

    def _store(self, key: str, rec: dict) -> dict:
        atomic_write_text(self.runs_dir / key / "result.json", json.dumps(rec, indent=2, default=str))
        self.records.append(rec)
        return rec

    def _eval(self, model, task: str, key: str, keep: bool) -> dict:
        res = evaluate(model, task, self.test_images, self.p.noise, 0, device=self.p.device)
        if keep:
            self._sample(model, task, key)
        return res

    def _sample(self, model, task: str, label: str) -> None:
        """8-bit crops of test photo 0 (same noisy input as in the metrics: seed 0, index 0) for figures."""
        one = self.test_images[:1]
        res = evaluate(model, task, one, self.p.noise, 0, device=self.p.device, keep_samples=1)
        self.samples.setdefault(task, {})[label] = res["samples"][0]

    def _eval_cmd(self, model: str, task: str) -> str:
        args = [
            "rawrcl",
            "eval",
            model,
            "--task",
            task,
            "--clean-dir",
            self.test_dir,
            "--noise",
            self.p.noise,
            "--seed",
            "0",
            "--json",
        ]
        if self.limit:
            args += ["--limit", str(self.limit)]
        return _cmd(args)

    # ------------------------------------------------------------------------------------- baselines
    def baselines(self, task: str) -> None:
        from rawrcl.eval import BASELINE_NAMES

        t = TASKS[task]
        for name in BASELINE_NAMES:
            if not baseline_applies(name, t) or (name == "noisy" and t.raw_input and t.head != "raw"):
                continue  # for RAW→RGB tasks "noisy" is bilinear demosaicing, listed already
            key = f"{task}__baseline__{name}"
            rec = self._cached(key)
            if rec is None:
                t0 = time.perf_counter()
                res = self._eval(name, task, name, keep=False)
                rec = {
                    "kind": "baseline",
                    "task": task,
                    "method": name,
                    "labels": 0,
                    "seed": 0,
                    "protocol": "-",
                    **_metrics(res),
                    "wall_s": round(time.perf_counter() - t0, 1),
                    "commands": [self._eval_cmd(name, task)],
                }
                self._store(key, rec)
            else:
                self.records.append(rec)
            if name in ("bilinear", "menon", "menon+nlm", "nlm", "noisy"):
                self._sample(name, task, name)
            self.log(f"[bench] {task} {name}: {rec['psnr']:.2f} dB")

    # ------------------------------------------------------------------------------------- pretrain
    def pretrain(self, pretext: str, task: str) -> tuple[Path | None, dict]:
        """One ``rawrcl pretrain --task TASK`` run (RAW tasks on synthetic noisy mosaics)."""
        pt = PRETEXTS[pretext]
        raw = TASKS[task].raw_input
        run = self.runs_dir / f"pretrain__{task}__{pretext}{self._skip_tag}"
        args = [
            "rawrcl",
            "pretrain",
            str(self.train_dir),
            "--out",
            str(run),
            "--task",
            task,
            "--method",
            pt.method,
            *pt.args,
            "--arch",
            self.p.arch,
            "--width",
            str(self.p.width),
            self._skip_flag,
            "--steps",
            str(self.p.pretrain_steps),
            "--batch-size",
            str(self.p.pretrain_batch),
            "--crop",
            str(self.p.crop),
            "--seed",
            "0",
            "--device",
            self.p.device,
            "--noise",
            self.p.noise,
        ]
        if raw:
            args.append("--synthetic")
        if self.p.depth:
            args += ["--depth", str(self.p.depth)]
        args += list(self.p.extra.get("pretrain_args", ()))
        info = {"pretext": pretext, "task": task, "command": _cmd(args), "ok": False}
        ckpt = run / "checkpoints" / "last.pt"
        done = run / "bench_done.json"
        if self.resume and done.exists():
            prev = json.loads(done.read_text())
            if prev.get("command") == info["command"]:  # same budget and options: reuse
                return ckpt, prev
        if run.exists():
            import shutil

            shutil.rmtree(run)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "rawrcl.cli", *args[1:]], capture_output=True, text=True)
        info["wall_s"] = round(time.perf_counter() - t0, 1)
        if proc.returncode != 0 or not ckpt.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            info["error"] = " | ".join(tail)
            self.log(f"[bench] pretrain {pretext} ({task}) FAILED: {info['error']}")
            return None, info
        info["ok"] = True
        atomic_write_text(done, json.dumps(info, indent=2))
        self.log(f"[bench] pretrain {pretext} ({task}) done in {info['wall_s']} s")
        return ckpt, info

    # ------------------------------------------------------------------------------------- finetune
    def finetune_eval(
        self,
        task: str,
        source: str,
        ckpt: Path | str,
        labels: int | str,
        seed: int,
        protocol: str,
        keep: bool = False,
    ) -> dict | None:
        n = "all" if labels == "all" else int(labels)
        key = f"{task}__{source}__{protocol}__n{n}__s{seed}__t{self.p.finetune_steps}{self._skip_tag}"
        rec = self._cached(key)
        run = self.runs_dir / key
        if rec is not None:
            self.records.append(rec)
            if keep:
                self._sample(str(run / "ft" / "checkpoints" / "last.pt"), task, f"{source}+SL{n}")
            return rec
        t0 = time.perf_counter()
        kw = dict(
            labels=n,
            protocol=protocol,
            steps=self.p.finetune_steps,
            arch=self.p.arch,
            width=self.p.width,
            depth=self.p.depth,
            skip=self.p.skip,
            seed=seed,
            batch_size=self.p.finetune_batch,
            crop=self.p.crop,
            noise=self.p.noise,
            device=self.p.device if self.p.device != "cpu" else None,
            force=True,
        )
        summary = finetune(str(ckpt), task, self.train_dir, run / "ft", **kw)
        res = self._eval(summary["checkpoint"], task, f"{source}+SL{n}", keep)
        args = [
            "rawrcl",
            "finetune",
            str(ckpt),
            "--task",
            task,
            "--clean-dir",
            str(self.train_dir),
            "--labels",
            str(n),
            "--protocol",
            protocol,
            "--steps",
            str(self.p.finetune_steps),
            "--out",
            str(run / "ft"),
            "--seed",
            str(seed),
            "--batch-size",
            str(self.p.finetune_batch),
            "--crop",
            str(self.p.crop),
            "--noise",
            self.p.noise,
        ]
        if str(ckpt) == "scratch":
            args += ["--arch", self.p.arch, "--width", str(self.p.width)]
            args += [self._skip_flag]
        rec = {
            "kind": "finetune",
            "task": task,
            "method": source,
            "labels": n,
            "seed": seed,
            "protocol": protocol if source != "scratch" else "scratch",
            **_metrics(res),
            "label_files": summary["labels"],
            "final_loss": summary["final_loss"],
            "wall_s": round(time.perf_counter() - t0, 1),
            "commands": [_cmd(args), self._eval_cmd(summary["checkpoint"], task)],
        }
        self.log(
            f"[bench] {task} {source} {protocol} N={n} seed={seed}: {rec['psnr']:.2f} dB ({rec['wall_s']} s)"
        )
        return self._store(key, rec)

    def zero_label(self, task: str, pretext: str, ckpt: Path) -> None:
        from rawrcl.models import read_checkpoint, serves

        if not serves(read_checkpoint(ckpt)["config"].get("head"), TASKS[task].head):
            return
        key = f"{task}__{pretext}__zero{self._skip_tag}"
        rec = self._cached(key)
        if rec is None:
            t0 = time.perf_counter()
            res = self._eval(str(ckpt), task, f"{pretext} (0 labels)", keep=False)
            rec = {
                "kind": "zero",
                "task": task,
                "method": pretext,
                "labels": 0,
                "seed": 0,
                "protocol": "none",
                **_metrics(res),
                "wall_s": round(time.perf_counter() - t0, 1),
                "commands": [self._eval_cmd(str(ckpt), task)],
            }
            self._store(key, rec)
        else:
            self.records.append(rec)
        if pretext == "rcl":
            self._sample(str(ckpt), task, f"{pretext} (0 labels)")
        self.log(f"[bench] {task} {pretext} 0 labels: {rec['psnr']:.2f} dB")

    def inspect(self, ckpt: Path, name: str) -> dict:
        """Residual-EMD density (paper Fig. 2) through the engine's ``rawrcl inspect``, if it exists."""
        run = ckpt.parent.parent
        plot = self.out / f"fig_density_{name}.png"
        args = ["rawrcl", "inspect", str(run), "--plot", str(plot), "--json", "--force"]
        proc = subprocess.run([sys.executable, "-m", "rawrcl.cli", *args[1:]], capture_output=True, text=True)
        info: dict[str, Any] = {"command": _cmd(args), "plot": plot.name if plot.exists() else None}
        if proc.returncode == 0:
            try:
                info["result"] = json.loads(proc.stdout[proc.stdout.index("{") :])
            except (ValueError, json.JSONDecodeError):
                info["result"] = proc.stdout.strip()[-500:]
        else:
            info["error"] = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
        return info

    # -------------------------------------------------------------------------------------- the grid
    def run(self) -> dict:
        p = self.p
        pre: dict[tuple[str, str], tuple[Path | None, dict]] = {}  # (pretext, data task) -> run
        density: dict[str, dict] = {}

        def pretrained(pretext: str, data: str) -> Path | None:
            if (pretext, data) not in pre:
                pre[(pretext, data)] = self.pretrain(pretext, data)
            return pre[(pretext, data)][0]

        for task in p.tasks:
            t = TASKS[task]
            domain = t.domain
            data = DOMAIN_PRETEXT[domain]
            self.baselines(task)
            for pretext in p.pretexts:
                if pretext == "m2m" and not t.raw_input:
                    continue
                first = (pretext, data) not in pre
                ckpt = pretrained(pretext, data)
                if first and ckpt is not None and pretext == "rcl":
                    density[domain] = self.inspect(ckpt, domain)
                if ckpt is not None:
                    self.zero_label(task, pretext, ckpt)
            if t.head == "jdd" and "n2s" in p.pretexts:
                # 0-label JDD that is well posed: a Noise2Self RAW denoiser, then a bilinear demosaic
                ckpt = pretrained("n2s", "raw-denoise")
                if ckpt is not None:
                    self.zero_label(task, ZERO_LABEL_RAW, ckpt)
            for seed in self.seeds:
                for n in (p.labels, *p.sweep):
                    keep = seed == 0 and n == p.labels
                    self.finetune_eval(task, "scratch", "scratch", n, seed, "full", keep)
                    for pretext in p.pretexts:
                        ckpt = pre.get((pretext, data), (None, {}))[0]
                        if ckpt is None or (n != p.labels and pretext != "rcl"):
                            continue
                        self.finetune_eval(task, pretext, ckpt, n, seed, "full", keep and pretext == "rcl")
                self.finetune_eval(task, "scratch", "scratch", "all", seed, "full")  # Oracle
            if p.linear:
                for pretext in p.pretexts:
                    ckpt = pre.get((pretext, data), (None, {}))[0]
                    if ckpt is not None:
                        self.finetune_eval(task, pretext, ckpt, p.labels, 0, "linear")
        label = {v: k for k, v in DOMAIN_PRETEXT.items()}  # report keys: "rcl (raw)", …
        return {
            "pretrain": {f"{k[0]} ({label.get(k[1], k[1])})": v[1] for k, v in pre.items()},
            "density": density,
        }


def _metrics(res: dict) -> dict:
    out = {k: res[k] for k in ("psnr", "ssim", "n_images") if k in res}
    if "psnr_linear" in res:
        out["psnr_linear"] = res["psnr_linear"]
    out["per_image_psnr"] = [round(r["psnr"], 3) for r in res.get("per_image", [])]
    return out


# ------------------------------------------------------------------------------------------- summary
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


def write_report(
    out: Path,
    protocol: Protocol,
    bench: Bench,
    extra: dict,
    summary: dict,
    figures: list[str],
    wall: float,
    command: str,
) -> str:
    p = protocol
    recs = bench.records
    L = []  # noqa: N806
    L.append(f"# rawrcl bench — protocol `{p.name}`\n")
    run_s = sum(float(r.get("wall_s") or 0) for r in recs)
    run_s += sum(float(i.get("wall_s") or 0) for i in extra["pretrain"].values())
    L.append(
        f"Command: `{command}`  \nWall time of this invocation: {wall / 60:.1f} min; sum of the recorded "
        f"run times (pre-training, fine-tuning, evaluation; cached runs included): {run_s / 60:.1f} min; "
        f"{platform.machine()}, {os.cpu_count()} CPUs visible, torch threads {_threads()}, "
        f"Python {platform.python_version()}.\n"
    )
    L.append("## Data and budget\n")
    L.append(
        "- Training photos (unlabelled for pre-training; the N labels are drawn from them): "
        f"`{bench.train_dir}` "
        f"({len(bench.train_files)} photos: {', '.join(bench.train_files[:6])}"
        f"{' …' if len(bench.train_files) > 6 else ''})."
    )
    L.append(
        f"- Test photos (never seen in training): `{bench.test_dir}` ({len(bench.test_images)} photos: "
        f"{', '.join(n for n, _ in bench.test_images[:6])}{' …' if len(bench.test_images) > 6 else ''})."
    )
    L.append(
        f"- Noise: preset `{p.noise}` (λshot, λread in [0,1] units: see `rawrcl.noise.PRESETS`) "
        "for the test set "
        "(test seed 0: image i degraded with `default_rng([0, i])`, identical for every method) and for the "
        "fine-tuning labels. Pre-training data: the engine's `rawrcl pretrain` default photo dataset "
        "(noise as recorded in each pre-training run's config.json)."
    )
    L.append(
        f"- Model: {p.arch}, width {p.width}{', depth ' + str(p.depth) if p.depth else ''}, "
        f"{'with the classical skip (--skip)' if p.skip else 'plain (--no-skip, the paper backbone)'}. "
        "Pre-training: "
        f"{p.pretrain_steps} steps × batch {p.pretrain_batch}, crop {p.crop}, seed 0 (one run per pretext). "
        f"Fine-tuning: {p.finetune_steps} steps × batch {p.finetune_batch}, crop {p.crop}, L1, Adam lr 1e-3; "
        f"seeds {bench.seeds} (seed = label choice + head/model init + crop sampling)."
    )
    L.append(
        "- Metrics: PSNR/SSIM (scikit-image defaults) on 8-bit sRGB, 8-px border crop (paper App. C.3); "
        "RAW tasks from photos without unprocess treat the photo values as linear RGB, so the 'linear' "
        "output is shown as is. Mean ± std over fine-tuning seeds.\n"
    )
    L.append("## Verdicts\n")
    L.append("| task | claim | measured (± larger seed std of the two rows) | met? |\n|---|---|---|---|")
    for v in summary["verdicts"]:
        spread = v.get("spread", 0.0)
        note = f" ± {spread:.2f}" if spread else ""
        flag = " (within seed spread)" if spread and abs(v.get("delta", 0.0)) < spread else ""
        L.append(
            f"| {v['task']} | {v['claim']} | {v['value']}{note} | {'yes' if v['met'] else '**no**'}{flag} |"
        )
    L.append("")
    L.append(f"## Few-label fine-tuning, N = {p.labels} labels, `full` protocol (all tasks)\n")
    for task, rows in summary["tasks"].items():
        L.append(f"### {task} (noise {p.noise})\n")
        L.append("| method | PSNR (dB) | SSIM | Δ vs SL |\n|---|---|---|---|")
        slm = rows.get(f"SL{p.labels} (scratch)", (float("nan"),))[0]
        for name, (m, s, n, ms, ss, ns) in rows.items():
            d = f"{m - slm:+.2f}" if np.isfinite(m) and np.isfinite(slm) else "—"
            L.append(f"| {name} | {_fmt(m, s, n)} | {_fmt(ms, ss, ns, 4)} | {d} |")
        L.append("")
    L.append("## Label sweep (paper Table 3 shape): SL vs RCL + SL, `full` protocol\n")
    for task in p.tasks:
        L.append(
            f"### {task}\n\n| # labels | SL PSNR | SL SSIM | RCL + SL PSNR | RCL + SL SSIM |\n"
            "|---|---|---|---|---|"
        )
        z = _group(recs, task=task, kind="zero", method="rcl")
        if z:
            L.append(f"| 0 | — | — | {z[0]['psnr']:.2f} | {z[0]['ssim']:.4f} |")
        for n in sorted({p.labels, *p.sweep}) + ["all"]:
            sl = _group(recs, task=task, method="scratch", labels=n)
            rc = _group(recs, task=task, method="rcl", labels=n, protocol="full")
            if not sl and not rc:
                continue
            L.append(
                f"| {n} | {_fmt(*_ms(sl))} | {_fmt(*_ms(sl, 'ssim'), 4)} | {_fmt(*_ms(rc))} | "
                f"{_fmt(*_ms(rc, 'ssim'), 4)} |"
            )
        L.append("")
    if p.linear:
        L.append(
            f"## Proxy evaluation, `linear` protocol (paper Tables 1, 2, 4 shape; frozen body, fresh head, "
            f"N = {p.labels}, seed 0)\n"
        )
        L.append("| method | " + " | ".join(f"{t} PSNR | {t} SSIM" for t in p.tasks) + " |")
        L.append("|---|" + "---|---|" * len(p.tasks))
        for pt in p.pretexts:
            cells = []
            for t in p.tasks:
                g = _group(recs, task=t, method=pt, protocol="linear")
                cells += [f"{g[0]['psnr']:.2f}", f"{g[0]['ssim']:.4f}"] if g else ["—", "—"]
            L.append(f"| {PRETEXTS[pt].label} | " + " | ".join(cells) + " |")
        cells = []
        for t in p.tasks:
            g = _group(recs, task=t, method="scratch", labels="all")
            m, s, n = _ms(g)
            ms_, ss_, ns_ = _ms(g, "ssim")
            cells += [_fmt(m, s, n), _fmt(ms_, ss_, ns_, 4)]
        L.append("| *Oracle* (SL, all labels, full) | " + " | ".join(cells) + " |")
        L.append("")
    L.append("## Pre-training runs\n")
    L.append("| pretext | data task | wall (s) | status | command |\n|---|---|---|---|---|")
    for k, info in extra["pretrain"].items():
        st = "ok" if info.get("ok") else f"FAILED: {info.get('error', '')}"
        L.append(f"| {k} | {info.get('task')} | {info.get('wall_s', '—')} | {st} | `{info.get('command')}` |")
    L.append("")
    if extra.get("density"):
        L.append("## Residual statistics (paper Fig. 2) via `rawrcl inspect`\n")
        for k, info in extra["density"].items():
            res = info.get("result")
            L.append(
                f"- {k}: `{info['command']}` → "
                + (f"![density]({info['plot']})" if info.get("plot") else "(no plot)")
                + (f" {_gaps(res)}" if res else f" {info.get('error', '')}")
            )
        L.append("")
    if figures:
        L.append("## Figures\n")
        for f in figures:
            L.append(f"![{f}]({f})\n")
    L.append("## Where pre-training does not help\n")
    neg = [v for v in summary["verdicts"] if not v["met"]]
    if neg:
        for v in neg:
            L.append(f"- {v['task']}: {v['claim']} — not met ({v['value']}).")
    else:
        L.append("- Every checked claim was met in this run.")
    L.append(
        "\nNumbers come from a small CPU budget; differences below the seed spread (± column) are not "
        "evidence either way.\n"
    )
    L.append("## Every run (exact commands and seeds)\n")
    L.append(
        "| task | method | protocol | labels | seed | PSNR | SSIM | wall (s) | commands |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    for r in recs:
        cmds = "<br>".join(f"`{c}`" for c in r.get("commands", []))
        L.append(
            f"| {r['task']} | {r['method']} | {r['protocol']} | {r['labels']} | {r['seed']} | "
            f"{r['psnr']:.2f} | "
            f"{r['ssim']:.4f} | {r.get('wall_s', '—')} | {cmds} |"
        )
    return "\n".join(L) + "\n"


def _gaps(res) -> str:
    """One line with the inspect gaps (EMD(neg) − EMD(pos), means) if present."""
    if not isinstance(res, dict):
        return f"`{str(res)[:300]}`"
    keys = [k for k in ("gap_before", "gap_after", "gap_true") if isinstance(res.get(k), int | float)]
    if not keys:
        return f"`{json.dumps(res)[:300]}`"
    vals = ", ".join(f"{k} = {res[k]:.2f}" for k in keys)
    return f"{vals} ({res.get('unit', '')}); training should move gap_after towards gap_true."


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def run_bench(
    protocol: str | Protocol,
    train_dir: str | Path,
    test_dir: str | Path,
    out: str | Path,
    *,
    seeds: int | None = None,
    limit: int | None = None,
    resume: bool = False,
    force: bool = False,
    tasks: tuple[str, ...] | None = None,
    overrides: dict | None = None,
    command: str = "",
    log=print,
) -> dict:
    """Run a bench protocol and write ``report.md``, ``results.json`` and figures into ``out``.

    ``overrides`` replaces Protocol fields (e.g. ``{"finetune_steps": 100}``); ``tasks`` restricts tasks.
    Returns the results dict (also written to ``results.json``).
    """
    from dataclasses import replace

    if isinstance(protocol, str):
        if protocol not in BENCH_PROTOCOLS:
            raise RawrclError(f"--protocol {protocol!r}: expected one of {', '.join(BENCH_PROTOCOLS)}")
        proto = BENCH_PROTOCOLS[protocol]
    else:
        proto = protocol
    if tasks:
        bad = [t for t in tasks if t not in TASKS]
        if bad:
            raise RawrclError(f"--tasks: unknown task {bad[0]!r}")
        proto = replace(proto, tasks=tuple(tasks))
    if overrides:
        proto = replace(proto, **overrides)
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (resume or force):
        raise RawrclError(f"{out}: report directory exists and is not empty (use --resume or --force)")
    if force and out.exists() and not resume:
        import shutil

        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    train_dir, test_dir = Path(train_dir).resolve(), Path(test_dir).resolve()
    if train_dir == test_dir:
        raise RawrclError("--train-dir and --test-dir must differ (held-out test photos)")
    overlap = {f.name for f in list_photos(train_dir)} & {f.name for f in list_photos(test_dir)}
    if overlap:
        log(f"[bench] warning: {len(overlap)} file names appear in both train and test folders")
    t0 = time.perf_counter()
    bench = Bench(
        proto,
        train_dir,
        test_dir,
        out,
        seeds=seeds if seeds is not None else proto.seeds,
        limit=limit,
        resume=resume,
        log=log,
    )
    extra = bench.run()
    summary = summarise(bench.records, proto)
    figures = _plots(out, bench.records, proto, bench.samples)
    figures += [info["plot"] for info in extra["density"].values() if info.get("plot")]
    wall = time.perf_counter() - t0
    results = {
        "protocol": asdict(proto),
        "train_dir": str(train_dir),
        "test_dir": str(test_dir),
        "train_files": bench.train_files,
        "test_files": [n for n, _ in bench.test_images],
        "seeds": bench.seeds,
        "wall_s": round(wall, 1),
        "records": bench.records,
        "summary": summary,
        "pretrain": extra["pretrain"],
        "density": extra["density"],
        "command": command,
    }
    atomic_write_text(out / "results.json", json.dumps(results, indent=2, default=str))
    report = write_report(out, proto, bench, extra, summary, figures, wall, command)
    atomic_write_text(out / "report.md", report)
    return results
