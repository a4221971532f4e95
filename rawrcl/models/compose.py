"""A RAW denoiser as a JDD model: denoise the packed mosaic, then demosaic it — bilinearly, or with a
learned JDD network told the little noise the denoiser left (the two-stage JDD). The same two stages also
make a RAW denoiser (output ``"raw"``): the JDD network's RGB sampled back at the CFA sites, averaged with
the first stage's output (the CFA-site blend).

Why bilinear: a RAW denoiser can be trained with no clean images at all (Noise2Self masking on the noisy
mosaic is well posed), while a JDD network trained self-supervised has no signal for the two colours a
pixel does not sample (docs/benchmarks.md). Chaining the self-supervised (or adapted) denoiser with a
fixed demosaic gives a usable 0-label RGB pipeline.

Why a learned second stage: the noise-aware RAW denoiser is the better-trained denoiser; a noise-aware JDD
network told λ·``residual`` (what is left after it) then mostly demosaics. Measured (docs/weights.md,
"Two-stage JDD"): above the single JDD network at high noise and on smooth full-resolution content, at
about 1.5× its time (whole `rawrcl jdd` command). A blind JDD network is not a good second stage (it
removes the noise it was trained on, which is no longer there: −3 dB on low-noise rows).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn

from rawrcl.cfa import TRANSPOSED_PLANES, mosaic_packed, pack, unpack
from rawrcl.models.geometry import pad_to_multiple, size_multiple, turn, turn_back
from rawrcl.models.heads import bilinear_demosaic_packed
from rawrcl.noise import std_map

#: λ multiplier the second stage is told by default: σ × 0.1 of the input's noise (chosen on the training
#: sources' validation split and measured on the burst; docs/weights.md)
RESIDUAL = 0.01

#: weight of the JDD network's RGB at the CFA sites in a two-stage model's RAW output (the rest: the first
#: stage's own output) — the plain average, chosen on the validation rows (docs/weights.md, "CFA-site blend")
BLEND = 0.5

#: the JDD stage runs twice (on its input and on the transposed mosaic, averaged) in a two-stage model's RGB
#: output by default when the file's noise std at mid-grey, √(λshot·0.18 + λread) (plane means, [0, 1] units;
#: :func:`mid_grey_sigma`), is at most this: the ladder's L3 is 0.0134, L4 0.0192, `low` 0.0235. At low noise
#: the JDD stage's error is mostly its variance across orientations (demosaicking fine detail), and this pass
#: alone adds +0.26 … +0.48 dB at 1× L1/L2 on the validation photos, +0.02 … +0.11 at L4 and above (stop 95,
#: docs/weights.md, "The JDD stage's second pass at low noise"); the gate, 0.015 in stop 95, takes in L4 since
#: stop 97 (held out: +0.06 / +0.08 at 1× L4, "The pair up to L4"); it costs ≈ 1.55× the command's time.
#: The first stage has its own, higher gate: :data:`FIRST_GATE`.
SIGMA_GATE = 0.021

#: the first stage (both outputs) runs on its input and on the transposed mosaic, averaged, when the told std
#: at mid-grey is at most this (:meth:`DenoiseThenDemosaic.first_passes`): since stop 98 at the JDD stage's
#: :data:`SIGMA_GATE` (docs/weights.md, "The first stage's orientations at low noise"), since stop 101 also at
#: `low` (0.0235), L5 (0.0268) and L6 (0.0486) — the geometric mean of L6 and `high` (0.058), which stays one
#: pass — for +0.06 … +0.10 dB on held-out photos at ≈ 1.3× the command's time (docs/weights.md, "The first
#: stage's pair up to L6"). The first stage is about a third of either command; the JDD stage's pair there
#: would add as much again for 1.7–1.8× in all, so it keeps :data:`SIGMA_GATE`.
FIRST_GATE = 0.053

#: at or below this std at mid-grey (the ladder's L2 is 0.0047, L3 0.0134) the default JDD stage averages all
#: four :data:`ORIENTATIONS`, not two: +0.16 … +0.30 dB more than the pair at 1× L1/L2 on the validation
#: photos, +0.06 … +0.08 at L3 (stop 96, docs/weights.md, "Four orientations at the lowest noise"); ≈ 2.5×
#: the one-pass command's time.
QUAD_GATE = 0.008

#: the orientations both stages' passes run in, in this order, as :func:`rawrcl.models.geometry.turn`
#: codes: as it is, transposed, rotated 180° (both flips), rotated 180° and transposed
ORIENTATIONS = (0, 1, 6, 7)

#: what a two-stage model outputs: RGB (``"jdd"``) or the packed mosaic (``"raw"``, the CFA-site blend)
OUTPUTS = ("jdd", "raw")


class DenoiseThenDemosaic(nn.Module):
    """``demosaicker(denoiser(x))``, or ``bilinear_demosaic_packed(denoiser(x))`` without a demosaicker.

    ``denoiser``: packed RAW → packed RAW (head ``"raw"``); ``demosaicker``: None or a JDD model (head
    ``"jdd"``); a noise-aware demosaicker is told the noise with λ × ``residual``. Shapes: (B, 4, h, w)
    [R, G1, G2, B] in RGGB geometry, [0, 1] → (B, 3, 2h, 2w) linear camera RGB in the same units. Noise
    aware when either stage is; then called ``model(x, noise)``, ``noise`` (B, 2 or 3, 4) [λshot; λread
    (; σ_row²)] per plane. Row-aware (reads σ_row²) when the denoiser is; the demosaicker is told the
    white part only (the denoiser removes the banding).

    ``output="raw"`` (needs a demosaicker) makes it a RAW denoiser, (B, 4, h, w) → (B, 4, h, w):
    w × the RGB sampled at the CFA sites (:func:`rawrcl.cfa.mosaic_packed`) + (1 − w) × the first stage's
    output, w = ``blend``, or with ``blend_sigma`` σ₀ > 0 (and the noise given) per pixel
    ``blend`` · v / (v + σ₀²), v the input's noise variance there (:func:`rawrcl.noise.std_map`² of the first
    stage's output; [0, 1]² units): near-clean pixels keep the first stage's value. :meth:`with_output`
    gives the other view of the same stages.
    """

    #: in eval mode, each stage as the mean of two passes, on its input and on the transposed mosaic (RGGB
    #: stays RGGB, G1 ↔ G2 and their noise swap; the JDD stage's RGB is transposed back): the networks' errors
    #: differ between the two, the truth does not. ``True`` (``--two-pass``): both stages — the first stage
    #: (stop 84) +0.07 / +0.14 dB (RAW) and +0.06 / +0.12 (JDD) on the held-out rows at 1× / 4×, for ≈ 25 % of
    #: the command, the JDD stage too (stop 90; RGB output only): docs/weights.md, "A transposed second pass";
    #: ``None`` (the default): only for samples whose told noise is at most :data:`FIRST_GATE` the first
    #: stage (both outputs, since stop 98: :meth:`first_passes`), at most :data:`SIGMA_GATE` the JDD stage of
    #: the RGB output too (:meth:`jdd_passes`) — over all four :data:`ORIENTATIONS` at most
    #: :data:`QUAD_GATE`; ``True`` keeps those four too; ``False`` (``--one-pass``): one pass of each.
    #: Training keeps one pass; so does a row-aware (banding) first stage (a transpose turns rows into
    #: columns).
    two_pass: bool | None = None
    #: in eval mode with :attr:`two_pass` ``None``: (first stage, JDD stage) — this many :data:`ORIENTATIONS`
    #: of each whatever the told noise (the JDD stage of the RGB output only) — what an exported graph with a
    #: noise input holds for ``rawrcl jdd|denoise --backend onnxruntime``, which picks the graph by each
    #: file's gates; None: the gates (:func:`gated_passes`)
    fixed_passes: tuple[int, int] | None = None

    def __init__(
        self,
        denoiser: nn.Module,
        demosaicker: nn.Module | None = None,
        residual: float = RESIDUAL,
        output: str = "jdd",
        blend: float = BLEND,
        blend_sigma: float = 0.0,
    ):
        super().__init__()
        if not 0 < residual <= 1:
            raise ValueError(f"residual must be in (0, 1], got {residual}")
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        if output == "raw" and demosaicker is None:
            raise ValueError("a two-stage RAW output needs a JDD network (demosaicker)")
        if not 0 < blend <= 1:
            raise ValueError(f"blend must be in (0, 1], got {blend}")
        if not blend_sigma >= 0:
            raise ValueError(f"blend_sigma must be ≥ 0, got {blend_sigma}")
        self.denoiser = denoiser
        self.demosaicker = demosaicker
        self.residual = float(residual)
        self.output = output
        self.blend = float(blend)
        self.blend_sigma = float(blend_sigma)
        self.noise_aware = _aware(denoiser) or _aware(demosaicker)
        self.row_aware = bool(getattr(denoiser, "row_aware", False))
        self.deband = getattr(denoiser, "deband", None)  # rawrcl.models.conditioning.camera_rows
        self.size_multiple = max(size_multiple(denoiser), size_multiple(demosaicker) if demosaicker else 1)

    @property
    def head_name(self) -> str:
        return self.output

    def replace(self, **changes) -> DenoiseThenDemosaic:
        """A new model with the given constructor arguments changed (e.g. ``denoiser=``, ``output=``), the
        rest — stages included — shared, not copied."""
        args = dict(
            denoiser=self.denoiser,
            demosaicker=self.demosaicker,
            residual=self.residual,
            output=self.output,
            blend=self.blend,
            blend_sigma=self.blend_sigma,
        )
        return DenoiseThenDemosaic(**{**args, **changes}).train(self.training)

    def with_output(self, output: str) -> DenoiseThenDemosaic:
        """The same stages (shared, not copied) with output ``output`` (``"jdd"`` or ``"raw"``)."""
        return self if output == self.output else self.replace(output=output)

    @property
    def config(self) -> dict:
        """The checkpoint config (arch ``two_stage``; :func:`rawrcl.models.registry.build_model`)."""
        sub = {"denoiser": dict(getattr(self.denoiser, "config", {}))}
        sub["demosaicker"] = (
            None if self.demosaicker is None else dict(getattr(self.demosaicker, "config", {}))
        )
        return {
            "arch": "two_stage",
            "head": self.output,
            "in_channels": 4,
            "noise_aware": self.noise_aware,
            "row_aware": self.row_aware,
            **sub,
            "residual": self.residual,
            **({"blend": self.blend, "blend_sigma": self.blend_sigma} if self.output == "raw" else {}),
        }

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """``noise``: the input's noise parameters (required when :attr:`noise_aware`)."""
        if self.output == "raw":
            return self.blend_parts(*self.parts(x, noise), noise)
        y = self.first(x, noise)
        if self.demosaicker is None:
            with torch.autocast(y.device.type, enabled=False):
                return bilinear_demosaic_packed(y.float())
        return self.second(x, y, noise)

    def first(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """The RAW denoiser (first stage) on ``x`` (B, 4, h, w): what the JDD network runs behind. In eval
        mode each sample's result is the mean over the first :meth:`first_passes` :data:`ORIENTATIONS` of
        ``x`` (each output turned back onto the mosaic's grid)."""
        y = self.first_pass(x, noise)
        return self._mean_over_orientations(y, self.first_passes(noise, x.shape[0]), x, noise, packed=True)

    def first_pass(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        """One pass of the first stage on ``x`` (B, 4, h, w) as it is → (B, 4, h, w)."""
        return self.denoiser(x, noise) if _aware(self.denoiser) else self.denoiser(x)

    def first_passes(self, noise: torch.Tensor | None, batch: int = 1) -> torch.Tensor:
        """(B,) int64: over how many of the :data:`ORIENTATIONS` :meth:`first` averages the first stage for
        each sample of ``noise`` (B, K, planes) (``batch`` B when ``noise`` is None): one in training, for a
        row-aware first stage and with :attr:`two_pass` ``False``; by default (``None``) as many as
        :func:`gated_passes` gives under :data:`FIRST_GATE` (both outputs), one without ``noise``, or
        :attr:`fixed_passes` when set; with :attr:`two_pass` ``True`` at least two."""
        on = not (self.training or self.two_pass is False or self.row_aware)
        return self._pass_counts(noise, batch, on, gate=noise is not None, stage="first")

    def second(self, x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        """The JDD network on the first stage's output ``y`` (B, 4, h, w), told λ × :attr:`residual` of the
        input ``x``'s ``noise`` (``x`` gives the dtype): (B, 3, 2h, 2w) RGB. In eval mode and output
        ``"jdd"`` each sample's result is the mean over the first :meth:`jdd_passes` :data:`ORIENTATIONS` of
        ``y`` (each output turned back); the RAW output (the CFA-site blend) keeps one pass: there a second
        added +0.01 dB for 0.5× more time (docs/weights.md, "A transposed second pass")."""
        rgb = self._second_pass(x, y, noise)
        n = self.jdd_passes(noise, y.shape[0])  # on the CPU: x, y and noise may sit on other devices
        return self._mean_over_orientations(rgb, n, y, noise, x=x)

    def _mean_over_orientations(
        self,
        out: torch.Tensor,
        n: torch.Tensor,
        src: torch.Tensor,
        noise: torch.Tensor | None,
        packed: bool = False,
        x: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``out`` (B, C, H, W), one stage's pass on ``src`` (B, 4, h, w) as it is, averaged per sample with
        that stage's passes on the next ``n`` − 1 (``n`` (B,) int64) :data:`ORIENTATIONS` of ``src``, each
        turned back: the first stage (``packed``: packed outputs) or, with ``x`` (the model's input, for
        the dtype), the JDD stage. Unindexed where every sample has the same count (an exported graph)."""
        if int(n.max()) == 1:
            return out
        acc = out.float()
        multiple = size_multiple(self.denoiser) if packed else self.size_multiple
        for k in range(1, int(n.max())):
            idx = (n > k).nonzero().flatten().tolist()
            whole = len(idx) == len(n)
            sel = slice(None) if whole else idx
            t = ORIENTATIONS[k]
            turned_src = _oriented(src[sel], None if noise is None else noise[sel], t, multiple)
            if packed:
                mosaic = unpack(self.first_pass(*turned_src), "RGGB")[:, None]
                back = pack(_turned_back(mosaic, t, src.shape[-2:])[:, 0], "RGGB").float()
            else:
                back = _turned_back(self._second_pass(x[sel], *turned_src), t, src.shape[-2:]).float()
            acc = acc + back if whole else acc.index_add(0, torch.tensor(idx, device=acc.device), back)
        return (acc / n.view(-1, 1, 1, 1).to(acc)).to(out.dtype)

    def jdd_passes(self, noise: torch.Tensor | None, batch: int = 1) -> torch.Tensor:
        """(B,) int64: over how many of the :data:`ORIENTATIONS` :meth:`second` averages the JDD stage for
        each sample of ``noise`` (B, K, planes) (``batch`` B when ``noise`` is None): one in training, for the
        RAW output and with :attr:`two_pass` ``False``; by default (``None``, a noise-aware JDD stage) four
        where :func:`mid_grey_sigma` is at most :data:`QUAD_GATE`, two where at most :data:`SIGMA_GATE`,
        else one, or :attr:`fixed_passes` when set; with :attr:`two_pass` ``True`` at least two."""
        on = not (self.training or self.two_pass is False or self.output != "jdd" or self.demosaicker is None)
        gate = noise is not None and _aware(self.demosaicker)
        return self._pass_counts(noise, batch, on, gate=gate, stage="jdd")

    def _pass_counts(
        self, noise: torch.Tensor | None, batch: int, on: bool, gate: bool, stage: str
    ) -> torch.Tensor:
        """(B,) int64 pass counts of ``stage`` ("first" or "jdd"): one where it is not ``on``; else its
        :attr:`fixed_passes` when set (and :attr:`two_pass` is ``None``), :func:`gated_passes` of ``noise``
        where ``gate``, else one — at least two with :attr:`two_pass` ``True``."""
        n = torch.ones(batch if noise is None else noise.shape[0], dtype=torch.long)
        if not on:
            return n
        if self.fixed_passes is not None and self.two_pass is None:
            return n.fill_(self.fixed_passes[0 if stage == "first" else 1])
        if gate:
            n = gated_passes(noise, stage)
        return n.clamp(min=2) if self.two_pass else n

    def _second_pass(self, x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor | None) -> torch.Tensor:
        if not _aware(self.demosaicker):
            return self.demosaicker(y.to(x.dtype))
        told = None if noise is None else noise[:, :2].to(y.device) * self.residual  # no σ_row²
        return self.demosaicker(y.to(x.dtype), told)

    @property
    def raw_parts(self) -> bool:
        """Whether the output is a combination of RAW estimates (:meth:`parts`) that
        :class:`~rawrcl.models.sure.SureShrink` may re-weight: the CFA-site blend."""
        return self.output == "raw" and self.demosaicker is not None

    #: names of :meth:`parts`, for logs
    part_names = ("first stage", "JDD stage")

    @property
    def sure_low_band(self) -> bool:
        """:class:`~rawrcl.models.sure.SureShrink` also weighs each part's high band (the input's low band
        kept; :data:`rawrcl.models.sure.LOW_BAND`): the CFA-site blend."""
        return self.raw_parts

    @property
    def sure_classes(self) -> bool:
        """:class:`~rawrcl.models.sure.SureShrink` weighs per texture class
        (:data:`rawrcl.models.sure.CLASSES`), not per tile: the CFA-site blend."""
        return self.raw_parts

    @property
    def sure_dct(self) -> bool:
        """:class:`~rawrcl.models.sure.SureShrink` also weighs a sliding-DCT Wiener estimate with the first
        stage as pilot (:func:`rawrcl.models.sure.dct_estimate`): the CFA-site blend."""
        return self.raw_parts

    def parts(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The two estimates a RAW output combines, each (B, 4, h, w): the first stage's output and the JDD
        network's RGB sampled at the CFA sites (needs a demosaicker)."""
        y = self.first(x, noise)
        return y, mosaic_packed(self.second(x, y, noise), "RGGB").to(y.dtype)

    def blend_parts(
        self, first: torch.Tensor, sites: torch.Tensor, noise: torch.Tensor | None
    ) -> torch.Tensor:
        """The CFA-site blend of :meth:`parts`: w × ``sites`` + (1 − w) × ``first``, w = :attr:`blend`, or
        with :attr:`blend_sigma` σ₀ > 0 per pixel ``blend`` · v / (v + σ₀²)."""
        w = self.blend
        if self.blend_sigma > 0 and noise is not None:  # less of the JDD stage where there is little noise
            v = std_map(first.float(), noise[:, :2].to(first.device)).square()
            w = (self.blend * v / (v + self.blend_sigma**2)).to(first.dtype)
        return w * sites + (1 - w) * first


def mid_grey_sigma(noise: torch.Tensor) -> torch.Tensor:
    """(B,) noise std at mid-grey, √(λshot·0.18 + λread) with each parameter's mean over the planes, of
    ``noise`` (B, K ≥ 2, planes) [λshot; λread; …] in [0, 1] units: the level the pass gates read."""
    lam = noise[:, :2].float().mean(-1)
    return (lam[:, 0] * 0.18 + lam[:, 1]).clamp(min=0).sqrt()


def gated_passes(noise: torch.Tensor, stage: str = "jdd") -> torch.Tensor:
    """(B,) int64 on the CPU: ``stage``'s default pass count for each sample of ``noise`` (B, K, planes) —
    four where :func:`mid_grey_sigma` is at most :data:`QUAD_GATE`, two at most the stage's pair gate
    (:data:`FIRST_GATE` for ``"first"``, :meth:`DenoiseThenDemosaic.first_passes`; :data:`SIGMA_GATE` for
    ``"jdd"``, :meth:`DenoiseThenDemosaic.jdd_passes` of a noise-aware JDD stage), else one."""
    pair = {"first": FIRST_GATE, "jdd": SIGMA_GATE}[stage]
    sigma = mid_grey_sigma(noise).cpu()
    return torch.where(sigma <= QUAD_GATE, 4, torch.where(sigma <= pair, 2, 1))


def passes(two_pass: bool | None, self_ensemble: bool = False) -> bool | None:
    """:attr:`DenoiseThenDemosaic.two_pass` for a run: ``two_pass`` as asked, except that the self-ensemble
    (whose eight passes already average the orientations) turns the default low-noise pass (``None``) off."""
    return False if self_ensemble and two_pass is None else two_pass


@contextmanager
def two_pass_stages(model: nn.Module, on: bool | None = True) -> Iterator[None]:
    """Within the block, every two-stage model inside ``model`` (its module tree: SURE weights, blind-spot
    composites and the self-ensemble included) sets :attr:`DenoiseThenDemosaic.two_pass` = ``on``: ``True``
    each stage as two passes, ``None`` the low-noise passes of the JDD stage, ``False`` one pass of
    each; restored after."""
    mods = [m for m in model.modules() if isinstance(m, DenoiseThenDemosaic)]
    before = [m.two_pass for m in mods]
    for m in mods:
        m.two_pass = on
    try:
        yield
    finally:
        for m, b in zip(mods, before, strict=True):
            m.two_pass = b


def _transposed(packed: torch.Tensor, noise: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The packed RGGB mosaic (B, 4, h, w) of the transposed mosaic (RGGB stays RGGB, G1 ↔ G2), and its
    per-plane ``noise`` (B, K, 4) with the same planes swapped; its own inverse."""
    swap = TRANSPOSED_PLANES
    return packed[:, swap].transpose(-1, -2), None if noise is None else noise[..., swap]


def _oriented(
    packed: torch.Tensor, noise: torch.Tensor | None, t: int, multiple: int = 1
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The packed RGGB mosaic (B, 4, h, w) turned by :func:`~rawrcl.models.geometry.turn` code ``t`` (its
    Bayer phase kept: a flipped axis grows by one packed pixel), padded bottom/right to ``multiple``, and
    its per-plane ``noise`` (B, K, 4) (G1 ↔ G2 under a transpose). :func:`_turned_back` undoes it."""
    if t == 1:
        return _transposed(packed, noise)
    mosaic = turn(unpack(packed, "RGGB")[:, None], t)[:, 0]
    if noise is not None and t & 1:
        noise = noise[..., TRANSPOSED_PLANES]
    return pad_to_multiple(pack(mosaic, "RGGB"), multiple), noise


def _turned_back(rgb: torch.Tensor, t: int, packed_hw: tuple[int, int]) -> torch.Tensor:
    """An output (B, C, H', W') at mosaic resolution computed on :func:`_oriented` turn ``t`` of a packed
    (h, w) mosaic, cropped to the turned mosaic and turned back onto the mosaic's grid: (B, C, 2h, 2w)."""
    h, w = 2 * packed_hw[0] + 2 * bool(t & 4), 2 * packed_hw[1] + 2 * bool(t & 2)
    return turn_back(rgb[..., : (w if t & 1 else h), : (h if t & 1 else w)], t)


def first_stage(model: nn.Module) -> nn.Module:
    """The RAW denoiser inside ``model``: a two-stage model's first stage, else ``model`` itself."""
    return model.denoiser if isinstance(model, DenoiseThenDemosaic) else model


class FirstStage(nn.Module):
    """A two-stage model's first stage as its commands run it — :meth:`DenoiseThenDemosaic.first`, with its
    default passes over the :data:`ORIENTATIONS` — as a RAW denoiser module: ``forward(x (B, 4, h, w),
    noise)`` → (B, 4, h, w) packed. What ``rawrcl jdd --fuse-bm3d`` fuses with GAT+BM3D between the stages."""

    head_name = "raw"

    def __init__(self, model: DenoiseThenDemosaic) -> None:
        super().__init__()
        self.model = model
        self.noise_aware = _aware(model.denoiser)
        self.row_aware = model.row_aware
        self.size_multiple = size_multiple(model.denoiser)

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        return self.model.first(x, noise)


def _aware(model: nn.Module | None) -> bool:
    """Whether a stage takes the noise parameters (its ``noise_aware``; the stages are bare models)."""
    return bool(getattr(model, "noise_aware", False))


def serves(head: str | None, wanted: str) -> bool:
    """Whether a model with output head ``head`` can run a task that needs head ``wanted``: the same
    head, or a RAW denoiser (``"raw"``) for ``"jdd"`` (through :func:`adapt`)."""
    return head == wanted or (head, wanted) == ("raw", "jdd")


def adapt(model: nn.Module, head: str | None, wanted: str) -> nn.Module:
    """``model`` ready for head ``wanted``: a two-stage model with a JDD network in the view ``wanted``
    (:meth:`DenoiseThenDemosaic.with_output`); for ``"jdd"`` another RAW denoiser wrapped in
    :class:`DenoiseThenDemosaic` — in front of its start's JDD network for a composite whose start (``base``)
    is a two-stage model (a blind-spot run, ``rawrcl adapt --method blindspot``: the start's first stage and
    the blind-spot network combined with the input by their SURE weights), else of bilinear demosaicking (an
    exported RAW denoiser keeps its values at the CFA sites so); anything else unchanged (check
    :func:`serves` first). Measured (docs/adaptation.md, "Task"): with the start's SURE-weighted RAW output
    as its first part such a run's JDD lost up to 0.16 dB on held-out photos against the JDD default, with
    the first stage at most 0.013; bilinear demosaicking of a RAW output is 0.8–5.4 dB below."""
    if isinstance(model, DenoiseThenDemosaic) and model.demosaicker is not None and wanted in OUTPUTS:
        return model.with_output(wanted)
    if (head, wanted) != ("raw", "jdd"):
        return model
    base = getattr(model, "base", None)  # a composite beside its start (WithBlindSpot)
    composite = getattr(model, "raw_parts", False) and isinstance(base, DenoiseThenDemosaic)
    if not (composite and base.demosaicker is not None):
        return DenoiseThenDemosaic(model)
    from rawrcl.models.sure import SureShrink

    # the composite's start part is the first stage the JDD network is trained behind (as `rawrcl jdd`'s
    # default feeds it), not the start's own SURE-weighted RAW output
    view = model.with_start(base.first, "start's first stage")
    return DenoiseThenDemosaic(SureShrink(view), base.demosaicker, base.residual, "jdd")
