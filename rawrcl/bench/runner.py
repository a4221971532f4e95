"""``rawrcl bench``: the grid runner behind the paper's Tables 1–4 / App. D, at CPU (``quick``) or GPU
(``paper``) scale, writing ``report.md``, ``results.json`` and plots.

Grid, for each task of the protocol (all on the *same* test photos and noisy inputs, test seed 0):

1. classical baselines that apply to the task (``rawrcl.eval.BASELINES``);
2. self-supervised pre-training on the *unlabelled* noisy training photos, one run per pretext
   (``rcl`` EMD α=1e-3, the consistency-only ablation ``rcl α=0``, ``n2s``; the ``paper`` protocol adds
   RCL-BD, RCL-MMD, N2N and M2M), as ``rawrcl pretrain`` does (the engine); the pre-trained model is evaluated
   as is when its head already solves the task ("0 labels"); for JDD also a Noise2Self RAW denoiser
   (pre-trained on ``raw-denoise``) followed by a bilinear demosaic, the 0-label row ``n2s-raw+bilinear``;
3. few-label fine-tuning (``full`` protocol, L1) of every pre-trained model with N labels, and supervised
   learning from scratch (SL) with the same N labels, budget and seeds; the Oracle is SL with all
   training photos labelled; the label sweep (paper Table 3) repeats SL and RCL+SL at several N;
4. the paper's *linear* proxy protocol (frozen body, fresh head) for each pretext, N labels.

Every run is a library call in this process (``rawrcl.train.pretrain``, ``finetune``,
``rawrcl.eval.evaluate``, ``rawrcl.inspect``) and is recorded with the equivalent CLI command, its seed and
wall time; completed runs are cached under ``REPORT_DIR/runs`` so ``--resume`` continues an interrupted bench.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rawrcl.bench.pretext import density_run, pretrain_run
from rawrcl.bench.protocols import ZERO_LABEL_RAW, Protocol, _cmd
from rawrcl.eval import baseline_applies, evaluate
from rawrcl.io import atomic_write_text, list_photos, load_images
from rawrcl.tasks import DOMAIN_PRETEXT, TASKS
from rawrcl.train.finetuning import finetune


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
        """One pre-training run (:func:`rawrcl.bench.pretext.pretrain_run`)."""
        return pretrain_run(self, pretext, task)

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
        """Residual-EMD density figure (:func:`rawrcl.bench.pretext.density_run`)."""
        return density_run(self, ckpt, name)

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
