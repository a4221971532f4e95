"""Residual Contrastive Learning (paper Sec. 3, Eq. 3–5; App. B.2 for RAW → RGB).

    L_total = α · L_contrast(n̂(x_a), n̂(x_b)) + L_consistency

- Residuals: n̂(x) = x − f(x) for same-domain heads (rgb on RGB, raw on packed RAW), and
  n̂(x) = x − mosaic(f(x)) for the JDD head (App. B.2), via :mod:`rawrcl.losses`.
- Contrast: :class:`rawrcl.losses.ResidualContrastiveLoss` on the two overlapping crops of each image
  (positives on the diagonal, the other images' second crops as negatives; Algorithm 1). Under DDP the
  second crops of every rank are all-gathered, so the negatives are the global batch's.
- Consistency, chosen by the output domain:
  * JDD: mosaic consistency ‖x − mosaic(T(f(x)))‖ (App. B.2, :class:`rawrcl.losses.MosaicConsistency`);
  * RGB: perceptual consistency ‖φ(g_e(x)) − φ(g_e(f(x)))‖² (Eq. 4) with a frozen encoder g_e — ImageNet
    ResNet-50 when torchvision and its cached weights are available, else the self-supervised encoder of
    :mod:`rawrcl.methods.encoder` given by ``encoder=CKPT``, else (logged once) L1 of the residual;
  * same-domain RAW: L1 of the residual, mean |x − f(x)|.
- α = 1e-3 by default (paper Sec. 4).
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist
import torch.nn as nn

from rawrcl.errors import RawrclError
from rawrcl.losses import MosaicConsistency, PerceptualConsistency, ResidualContrastiveLoss, resnet50_imagenet
from rawrcl.methods.base import Method, domain, input_residual

log = logging.getLogger("rawrcl.methods.rcl")


def load_perceptual_encoder(spec: str | None, in_channels: int = 3) -> tuple[nn.Module | None, str]:
    """Frozen encoder g_e (a module returning a list/dict of feature maps) and a description.

    ``spec``: ``None``/``"auto"`` (ImageNet ResNet-50 via ``rawrcl.losses.resnet50_imagenet`` when torchvision
    and cached weights exist, else none), ``"imagenet"`` (must succeed), ``"none"``, or a checkpoint path
    written by ``rawrcl pretrain --method simclr`` (arch ``"encoder"``).
    """
    if spec in (None, "auto", "imagenet"):
        try:
            return _freeze(resnet50_imagenet()), "imagenet-resnet50"
        except Exception as exc:  # noqa: BLE001 - no torchvision, or no cached weights
            if spec == "imagenet":
                raise RawrclError(f"--encoder imagenet: {exc}") from None
            return None, f"none (ImageNet ResNet-50 unavailable: {str(exc).splitlines()[0]})"
    if spec == "none":
        return None, "none"
    from rawrcl.models import load_checkpoint

    enc, cfg = load_checkpoint(spec)
    if cfg.get("arch") != "encoder":
        raise RawrclError(
            f"{spec}: --encoder needs an encoder checkpoint (pretrain --method simclr), "
            f"got arch {cfg.get('arch')!r}"
        )
    if cfg.get("in_channels") != in_channels:
        raise RawrclError(
            f"{spec}: encoder takes {cfg.get('in_channels')} channels, the data has {in_channels}"
        )
    return _freeze(_FeaturesOf(enc)), f"self-supervised encoder {spec}"


def _freeze(m: nn.Module) -> nn.Module:
    m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


class _FeaturesOf(nn.Module):
    """Module view of ``encoder.features`` (list of stage feature maps)."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.encoder.features(x)


class RCL(Method):
    """RCL pretext method. Options: ``distance`` (emd|bd|mmd), ``tau``, ``scale``, ``normalize``, ``center``
    (subtract each residual's per-channel mean before the distance; default on: it stops the contrastive
    term from rewarding a per-image colour cast, +2.5 dB RGB PSNR at 0 labels for JDD, docs/losses.md),
    ``alpha`` (1e-3), ``encoder`` (perceptual encoder spec, RGB only), ``layers`` (encoder layers),
    ``transform`` (MosaicConsistency's interpolation), ``quantiles`` (fast EMD)."""

    name = "rcl"
    needs = ("x_a", "x_b")

    def __init__(
        self,
        distance: str = "emd",
        tau: float | None = None,
        scale: float | None = None,
        normalize: str = "none",
        center: bool = True,
        alpha: float = 1e-3,
        encoder: str | None = None,
        layers: list[int] | None = None,
        transform: str | None = None,
        quantiles: int | None = None,
        **options,
    ) -> None:
        super().__init__(
            distance=distance,
            tau=tau,
            scale=scale,
            normalize=normalize,
            center=center,
            alpha=alpha,
            encoder=encoder,
            layers=layers,
            transform=transform,
            quantiles=quantiles,
            **options,
        )
        kw: dict = {
            "distance": {"bd": "bhattacharyya"}.get(distance, distance),
            "scale": scale,
            "normalize": normalize,
            "center": bool(center),
        }
        if tau is not None:
            kw["tau"] = float(tau)
        if quantiles is not None and distance == "emd":
            kw["distance_options"] = {"quantiles": int(quantiles)}
        self.contrast = ResidualContrastiveLoss(**kw)
        self.alpha = float(alpha)
        self.encoder_spec, self.layers, self.transform = encoder, layers, transform
        self._consistency: dict[str, nn.Module | None] = {}
        self.consistency_kind: str | None = None
        # random draws of the consistency term (e.g. MosaicConsistency's translation) are re-seeded from
        # torch's global RNG at every call, which the trainer re-seeds per step: resumable and reproducible
        self._gen = torch.Generator()

    def _consistency_for(self, dom: str, channels: int, device: torch.device) -> tuple[nn.Module | None, str]:
        key = f"{dom}{channels}"
        if key not in self._consistency:
            mod: nn.Module | None
            if dom == "jdd":
                kw = {"transform": self.transform} if self.transform else {}
                mod, kind = MosaicConsistency(generator=self._gen, **kw), "mosaic"
            elif channels == 3:
                enc, desc = load_perceptual_encoder(self.encoder_spec, 3)
                if enc is None:
                    mod, kind = None, "residual-l1"
                    log.warning(
                        "rcl: no perceptual encoder (%s); consistency falls back to L1 of the residual", desc
                    )
                else:
                    mod, kind = PerceptualConsistency(enc, self.layers or None), f"perceptual ({desc})"
            else:
                mod, kind = None, "residual-l1"
            if mod is not None:
                mod = mod.to(device)
            self._consistency[key] = mod
            self.consistency_kind = kind
            log.info("rcl consistency: %s", kind)
        return self._consistency[key], self.consistency_kind or ""

    def __call__(self, batch: dict, model: torch.nn.Module) -> dict:
        self.check_batch(batch)
        xa, xb = batch["x_a"].float(), batch["x_b"].float()
        if xa.shape != xb.shape:
            raise RawrclError("rcl needs the two crops of a pair to have the same shape")
        n = xa.shape[0]
        x = torch.cat([xa, xb])
        out = model(x).float()
        dom = domain(x, out)
        r = input_residual(x, out)
        contrast, offset = self._contrast(r[:n], r[n:], xa, xb)
        cons_mod, _ = self._consistency_for(dom, x.shape[1], x.device)
        self._gen.manual_seed(int(torch.randint(0, 2**62, (1,))))
        if cons_mod is None:
            consistency = r.abs().mean()
        else:
            consistency = cons_mod(x, out)
        loss = self.alpha * contrast + consistency
        d = self.contrast.last_distances
        logs = {
            "loss": loss,
            "contrast": float(contrast.detach()),
            "consistency": float(consistency.detach()),
        }
        if d is not None and d.shape[1] > 1:
            pos = torch.zeros_like(d, dtype=torch.bool)
            pos[torch.arange(d.shape[0]), offset + torch.arange(d.shape[0])] = True
            logs["d_pos"] = float(d[pos].mean())
            logs["d_neg"] = float(d[~pos].mean())
        return logs

    def _contrast(
        self, r_a: torch.Tensor, r_b: torch.Tensor, x_a: torch.Tensor, x_b: torch.Tensor
    ) -> tuple[torch.Tensor, int]:
        """Contrastive term and the row of r_a[0]'s positive among the candidates.

        Single process: Algorithm 1 on the batch. Under DDP (initialised process group, world > 1) the
        second crops of *every* rank are all-gathered with gradients, so each anchor meets the negatives
        of the global batch as in single-process training on it; the local sum is multiplied by the world
        size because DDP averages gradients over ranks (reduction "sum": the gradients then equal those
        of the global batch's loss). Every rank must hold the same number of equally sized crops.
        """
        noisy = self.contrast.normalize == "noise_level"  # σ estimated from the noisy crops
        kw = {"x_a": x_a, "x_b": x_b} if noisy else {}
        if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return self.contrast(r_a, r_b, **kw), 0
        from torch.distributed.nn.functional import all_gather

        world, rank = dist.get_world_size(), dist.get_rank()
        r_all = torch.cat(all_gather(r_b.contiguous()))
        if noisy:
            kw["x_b"] = torch.cat([t.detach() for t in all_gather(x_b.contiguous())])
        offset = rank * r_a.shape[0]
        loss = self.contrast(r_a, r_all, offset=offset, **kw)
        return (loss * world if self.contrast.reduction == "sum" else loss), offset
