"""One validated configuration per run: :class:`PretrainConfig` (pre-training), :class:`AdaptConfig`
(label-free adaptation, ``rawrcl adapt``).

``rawrcl pretrain`` builds it from its options, :func:`rawrcl.train.pretrain` builds it from its keyword
arguments, and ``rawrcl bench`` builds it for its grid. All three run it with
:func:`rawrcl.train.pretraining.run_pretrain`, which saves it in the run's ``config.json`` under
``"run_config"`` (:meth:`PretrainConfig.to_dict`; read back with :meth:`PretrainConfig.from_dict`).

The four parts are the data (:class:`DataConfig`), the model (:class:`ModelConfig`), the method (name and
options) and the training loop (:class:`TrainingConfig`). Each part is checked when it is built, and every
refusal is a one-line :class:`~rawrcl.errors.RawrclError` that names the option. The keys of
``config.json`` written by earlier releases (``task``, ``model``, ``method``, ``data_options`` and the
trainer options at the top level) are still written and still read by ``--resume``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from rawrcl.data.noisy_crops import HELD_OUT_CROPS
from rawrcl.device import normalize_precision
from rawrcl.errors import RawrclError
from rawrcl.noise import SYNTHETIC, parse_noise


def check_numbers(cfg: dict) -> None:
    """Refuse a learning rate or gradient cap that is not a finite number ≥ 0 (e.g. ``--lr nan``); a
    missing ``grad_clip`` (None) is allowed. One home for the trainer and the run configuration."""
    for key, option in (("lr", "--lr"), ("grad_clip", "--grad-clip")):
        value = cfg.get(key)
        if value is None and key == "grad_clip":
            continue
        try:
            ok = math.isfinite(float(value)) and float(value) >= 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise RawrclError(f"{option} must be a finite number ≥ 0, got {value!r}")


@dataclass(frozen=True)
class DataConfig:
    """The pair dataset (:func:`rawrcl.train.build_dataset`). ``crop`` is in file pixels (CFA pixels for
    RAW). ``overlap`` is the area fraction shared by the two crops of a positive pair
    (``--pair-overlap``). ``noise`` is the synthetic noise in the ``--noise`` grammar (the SYNTHETIC kinds).
    ``noise_profile`` is how run folders of earlier releases spell ``noise=FILE``."""

    crop: int = 128
    overlap: float = 0.5
    augment: bool = False
    synthetic: bool = False
    noise: str = "paper"
    noise_profile: str | None = None
    unprocess: bool = False
    cache_dir: str | None = None
    clean_dir: str | None = None

    def __post_init__(self) -> None:
        parse_noise(self.noise_profile if self.noise_profile else self.noise, SYNTHETIC)

    def options(self) -> dict:
        """The keyword arguments of :func:`~rawrcl.train.build_dataset`: the options ``rawrcl pretrain`` has
        always recorded in ``config.json`` (``data_options``), plus any other field that is not at its
        default."""
        always = ("crop", "overlap", "augment", "synthetic", "noise", "cache_dir")
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name in always or getattr(self, f.name) != f.default
        }


@dataclass(frozen=True)
class ModelConfig:
    """The network: ``arch`` (a key of :data:`rawrcl.models.ARCHS`), ``width``/``depth`` (``None``: the
    arch's default; sizes are checked by :func:`rawrcl.models.model_config` when the model is built),
    ``skip`` (U-Net: learn a correction of a classical estimate) and ``demosaic`` (the estimate for JDD, a
    key of :data:`rawrcl.models.heads.DEMOSAICS`)."""

    arch: str = "unet"
    width: int | None = None
    depth: int | None = None
    skip: bool = True
    demosaic: str = "bilinear"

    def __post_init__(self) -> None:
        from rawrcl.models import ARCHS
        from rawrcl.models.heads import DEMOSAICS

        if self.arch not in ARCHS:
            raise RawrclError(f"unknown --arch {self.arch!r}; expected one of {', '.join(ARCHS)}")
        if self.demosaic not in DEMOSAICS:
            raise RawrclError(f"unknown --demosaic {self.demosaic!r}; expected one of {', '.join(DEMOSAICS)}")


@dataclass(frozen=True)
class TrainingConfig:
    """The training loop (:class:`rawrcl.train.Trainer`). The fields and their meaning are those of
    :data:`rawrcl.train.TRAINER_DEFAULTS`. ``precision`` is spelt as in :mod:`rawrcl.device`."""

    steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-7
    grad_clip: float | None = None
    ema: float | None = None
    lr_schedule: str = "constant"
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"
    channels_last: bool | str = "auto"
    compile: bool = False
    num_workers: int | None = None
    log_every: int = 10
    save_every: int = 100
    keep_every: int = 1000

    def __post_init__(self) -> None:
        if int(self.steps) < 0 or int(self.batch_size) < 1:
            raise RawrclError("--steps must be ≥ 0 and --batch-size ≥ 1")
        check_numbers({"lr": self.lr, "grad_clip": self.grad_clip})
        if self.ema is not None and not 0.0 < float(self.ema) < 1.0:
            raise RawrclError(f"--ema must lie in (0, 1) (a decay such as 0.999), got {self.ema}")
        if self.lr_schedule not in ("constant", "cosine"):
            raise RawrclError(f"--lr-schedule {self.lr_schedule!r}: expected constant or cosine")
        object.__setattr__(self, "precision", normalize_precision(self.precision))
        object.__setattr__(self, "betas", tuple(self.betas))

    @classmethod
    def from_options(cls, options: dict | None) -> TrainingConfig:
        """From a ``trainer_options`` dict (the old key ``amp`` is read as ``precision``)."""
        opts = dict(options or {})
        if "amp" in opts:
            amp = opts.pop("amp")
            opts.setdefault("precision", amp)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(opts) - known)
        if unknown:
            raise RawrclError(
                f"unknown training option {unknown[0]!r}; expected one of {', '.join(sorted(known))}"
            )
        return cls(**opts)


@dataclass(frozen=True)
class PretrainConfig:
    """One self-supervised pre-training run: data folder, run folder, task, method, and the four parts.

    ``resume`` continues the run in ``out`` (then its saved configuration wins for the model, method, data
    and seed), ``force`` overwrites it; they exclude each other.
    """

    data_dir: str
    out: str
    task: str = "jdd"
    method: str = "rcl"
    method_options: dict = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    resume: bool = False
    force: bool = False

    def __post_init__(self) -> None:
        from rawrcl.methods import ADAPT_ONLY, PRETEXT_METHODS
        from rawrcl.tasks import PRETEXT_TASKS

        object.__setattr__(self, "data_dir", str(self.data_dir))
        object.__setattr__(self, "out", str(self.out))
        if self.resume and self.force:
            raise RawrclError("--resume and --force exclude each other")
        if self.task not in PRETEXT_TASKS:
            raise RawrclError(f"unknown --task {self.task!r}; expected one of {', '.join(PRETEXT_TASKS)}")
        if self.method in ADAPT_ONLY:
            raise RawrclError(
                f"--method {self.method} is an objective of `rawrcl adapt` (it needs each file's noise "
                f"model): use rawrcl adapt DNG_DIR --method {self.method}"
            )
        if self.method not in PRETEXT_METHODS:
            raise RawrclError(
                f"unknown --method {self.method!r}; expected one of {', '.join(PRETEXT_METHODS)}"
            )
        if self.method == "m2m" and self.task != "jdd":
            raise RawrclError("--method m2m is a JDD method: use --task jdd")

    def to_dict(self) -> dict:
        """A JSON-ready dict (``from_dict(to_dict())`` gives the same configuration)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> PretrainConfig:
        """The configuration :meth:`to_dict` wrote."""
        d = dict(d)
        parts = {"model": ModelConfig, "data": DataConfig, "training": TrainingConfig}
        for key, kind in parts.items():
            if key in d:
                d[key] = kind(**d[key])
        return cls(**d)


#: ``rawrcl adapt``'s objectives (:func:`rawrcl.train.adapt_objective.make_objective`; ``blindspot``: a
#: blind-spot network trained from scratch beside the start, :mod:`rawrcl.train.adapt_blindspot`) and
#: selection scores; ``burst``: for a burst folder, that network's composite beside a frame-to-frame fine-tune
#: of the start (:mod:`rawrcl.train.adapt_burst`)
ADAPT_METHODS = ("r2r", "r2r-plain", "sure", "n2s", "rcl", "blindspot", "burst")
ADAPT_SELECT = ("sure", "r2r", "last")
#: steps between two ``last.pt`` of an adaptation run at most: a hard kill (SIGKILL, power loss) loses no more
#: (a blind-spot run keeps one checkpoint, at its 6000th step, ≈ 1–2 s a step on 2 CPU cores; before stop 74
#: its last.pt was written there only, so a kill lost the whole run; SIGTERM / Ctrl-C save where they stop)
ADAPT_SAVE_EVERY = 200
#: defaults of the options left unset (None), by method: fine-tuning the start (every method but
#: ``blindspot``) vs. training a new network from scratch (docs/adaptation.md, "A blind-spot network …")
ADAPT_DEFAULTS = {"steps": 400, "lr": 3e-5, "evals": 4, "ema": None, "batch_size": 4, "crop": 128}
#: the blind-spot network: 16 crops of 64 px per step since stop 67 (the same pixels as 4 of 128 px; a more
#: diverse batch of a small folder: adapt's held-out gain +0.109 / +0.128 on eight frames / one against
#: +0.094 / +0.112; docs/adaptation.md, "Smaller, more training crops")
ADAPT_METHOD_DEFAULTS = {
    "blindspot": {"steps": 6000, "lr": 1e-3, "evals": 1, "ema": 0.999, "batch_size": 16, "crop": 64}
}
#: ``burst``'s first stage is the blind-spot network's run: the same defaults
ADAPT_METHOD_DEFAULTS["burst"] = ADAPT_METHOD_DEFAULTS["blindspot"]
#: steps of ``--method burst``'s frame-to-frame fine-tune (stop 106's F′, docs/adaptation.md)
BURST_STEPS = 1200


@dataclass(frozen=True)
class AdaptConfig:
    """One label-free adaptation run (``rawrcl adapt`` and :func:`rawrcl.train.adapt.adapt` build it from
    their options; saved in the run's ``config.json`` under ``"run_config"`` and in ``adapt.json``).

    ``method``: the self-supervised objective; ``steps`` × ``batch_size`` crop pairs of ``crop`` mosaic
    px; Adam at constant ``lr`` (``steps``, ``batch_size``, ``crop``, ``lr``, ``evals``, ``ema`` left None get
    the method's defaults,
    :data:`ADAPT_DEFAULTS`, :data:`ADAPT_METHOD_DEFAULTS`; ``blindspot`` trains its own network from scratch
    with a cosine schedule and ignores the guards); guards against forgetting: ``anchor`` (weight of
    Σ(θ − θ₀)²), ``mix`` (weight of the synthetic supervised crops; ``mix_own`` of them with the files' own
    noise, default 0.5, or 1 when a row switch serves a banded camera: the camera-sampler half then has
    nothing to protect);
    ``distill`` (weight of the distance to the *starting* model's outputs on the same synthetic crops,
    normalised like the mix; 0: off) and ``mix_zoom`` (share of those crops enlarged up to 8×: smooth
    content) — API-only, measured and not the default (docs/adaptation.md, "Where the forgetting is");
    ``alpha`` the recorruption strength of R2R; ``evals`` checkpoints scored on the held-out crops;
    ``select`` the score that picks among those within ``forget_tol`` dB on the forgetting check;
    ``train_only`` name fragments of the only parameters adapted (None: all); ``ema`` weight averaging;
    ``row_noise`` the files' row (banding) noise std in [0, 1] units: ``"off"`` (default: the estimate
    takes strong horizontal scene edges for banding on 5–20 % of small photos, docs/adaptation.md),
    ``"auto"`` (estimated per file, :mod:`rawrcl.calibration.rows`; used where significant), or a number
    for every file. Banded files make the model row-aware, and ``row_switch`` (default on) keeps the starting
    weights for files told no row noise (config ``row_switch`` of :mod:`rawrcl.models.registry`), so it
    forgets nothing on them. ``deband`` (API-only, off): instead remove the camera's row offsets from its
    files before training and have the adapted model remove them before it runs
    (:func:`rawrcl.train.adapt.deband_files`) — better on banded files, but up to 12 dB worse on a
    banding-free file whose horizontal scene edges read as banding (docs/adaptation.md, "De-banding as the
    adaptation"). ``held_out``: about how many fixed crops of the files' held-out bands score the
    candidates (:meth:`rawrcl.data.noisy_crops.NoisyCrops.held_out`; more = a more precise choice, slower).
    ``noise_slack`` (≥ 1; default 1: the told noise is trusted): with ``select`` ``"sure"`` a checkpoint is
    kept only if its held-out SURE beats the start's for every noise variance within ×[1/``noise_slack``,
    ``noise_slack``] of the told one (:func:`rawrcl.train.adapt_signal.sure_scale_range`; 1.2, an image
    estimate's uncertainty, rejected true gains on a synthetic burst: docs/adaptation.md, "Stop 77").
    ``burst_steps``: steps of ``burst``'s frame-to-frame fine-tune (its first stage, the blind-spot network,
    takes ``steps`` and the other settings; the fine-tune's own are :data:`rawrcl.train.adapt_burst.F2F`).
    Measured defaults: docs/adaptation.md.
    """

    method: str = "sure"
    steps: int | None = None
    batch_size: int | None = None
    crop: int | None = None
    lr: float | None = None
    anchor: float = 0.05
    mix: float = 0.5
    mix_own: float | None = None
    distill: float = 0.0
    mix_zoom: float = 0.0
    alpha: float = 0.5
    evals: int | None = None
    select: str = "sure"
    forget_tol: float = 0.1
    train_only: tuple[str, ...] | None = None
    ema: float | None = None
    seed: int = 0
    row_noise: str = "off"
    deband: bool = False
    row_switch: bool = True
    held_out: int = HELD_OUT_CROPS
    noise_slack: float = 1.0
    burst_steps: int = BURST_STEPS

    def __post_init__(self) -> None:
        from rawrcl.calibration.rows import parse_row_noise

        object.__setattr__(self, "row_noise", parse_row_noise(self.row_noise))
        if self.method not in ADAPT_METHODS:
            raise RawrclError(f"--method {self.method!r}: expected one of {', '.join(ADAPT_METHODS)}")
        for key, v in {**ADAPT_DEFAULTS, **ADAPT_METHOD_DEFAULTS.get(self.method, {})}.items():
            if getattr(self, key) is None:
                object.__setattr__(self, key, v)
        if self.select not in ADAPT_SELECT:
            raise RawrclError(f"--select {self.select!r}: expected {', '.join(ADAPT_SELECT)}")
        for key in ("steps", "batch_size", "evals", "held_out", "burst_steps"):
            if int(getattr(self, key)) < 1:
                raise RawrclError(f"--{key.replace('_', '-')} must be ≥ 1")
            object.__setattr__(self, key, int(getattr(self, key)))
        if int(self.crop) < 16 or int(self.crop) % 2:
            raise RawrclError(f"--crop must be an even number ≥ 16, got {self.crop}")
        object.__setattr__(self, "crop", int(self.crop))
        check_numbers({"lr": self.lr})
        for key, lo, hi in (
            ("anchor", 0, math.inf),
            ("mix", 0, math.inf),
            ("mix_own", 0, 1),
            ("distill", 0, math.inf),
            ("mix_zoom", 0, 1),
            ("alpha", 0, 10),
        ):
            if getattr(self, key) is None:  # mix_own: resolved by adapt (see the docstring)
                continue
            v = float(getattr(self, key))
            if not (math.isfinite(v) and lo <= v <= hi) or (key == "alpha" and v == 0):
                raise RawrclError(
                    f"--{key.replace('_', '-')} must be a finite number in [{lo}, {hi}], got {v}"
                )
            object.__setattr__(self, key, v)
        if self.distill > 0 and self.mix == 0:
            raise RawrclError("distill scores the synthetic mix crops: it needs mix > 0")
        if not (math.isfinite(float(self.noise_slack)) and float(self.noise_slack) >= 1):
            raise RawrclError(f"--noise-slack must be a finite number ≥ 1, got {self.noise_slack}")
        object.__setattr__(self, "noise_slack", float(self.noise_slack))
        if not math.isfinite(float(self.forget_tol)):
            raise RawrclError(f"--forget-tol must be a finite number, got {self.forget_tol}")
        if self.train_only is not None:
            object.__setattr__(self, "train_only", tuple(str(t) for t in self.train_only) or None)

    @classmethod
    def from_options(cls, base: AdaptConfig | None = None, **options) -> AdaptConfig:
        """``base`` (default: the defaults) with every option that is not None; unknown names refused."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise RawrclError(
                f"unknown adaptation option {unknown[0]!r}; expected one of {', '.join(sorted(known))}"
            )
        d = asdict(base) if base is not None else {}  # unset options: the method's defaults
        d.update({k: v for k, v in options.items() if v is not None})
        return cls(**d)

    def to_dict(self) -> dict:
        """A JSON-ready dict (``AdaptConfig(**to_dict())`` gives the same configuration)."""
        d = asdict(self)
        d["train_only"] = list(self.train_only) if self.train_only else None
        return d

    def trainer_config(
        self, crop: int, source: str, resume: bool, force: bool, progress: bool | None, **more
    ) -> dict:
        """The :class:`rawrcl.train.Trainer` configuration of an adaptation run with these settings: ``crop``
        the data's crop, ``source`` the start's description, ``more`` further keys (e.g. ``lr_schedule``)."""
        keep = max(1, self.steps // self.evals)
        cfg = {"steps": self.steps, "batch_size": self.batch_size, "crop": crop, "lr": self.lr}
        cfg.update(lr_schedule="constant", seed=self.seed, grad_clip=1.0, ema=self.ema, source=source)
        save = min(keep, ADAPT_SAVE_EVERY)  # last.pt for --resume after a hard kill, apart from the kept ones
        cfg.update(run_config=self.to_dict(), save_every=save, keep_every=keep, log_every=10)
        return {**cfg, "resume": bool(resume), "force": bool(force), "progress": progress, **more}
