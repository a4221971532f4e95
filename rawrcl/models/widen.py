"""Function-preserving growth of a U-Net: wider (Net2WiderNet, Chen, Goodfellow & Shlens 2016) or deeper.

A trained U-Net of width w becomes one of width W > w that computes the same function, so that a longer
training can use the extra capacity without starting again (how the width-32 JDD stage was made from the
width-24 one, docs/weights.md). Every feature space (the output of one convolution) gets a map
new channel → old channel: the identity for the first w channels (per level: w·2^i), random replicas
after. A layer reads replicas of one old channel with weights split in random proportions that sum to 1,
so the sum it computes is unchanged while the replicas receive different gradients (symmetry broken).
LeakyReLU, max-pooling and the concatenated skips act channel by channel, so they commute with the map.
Deeper (:func:`deepen`): residual blocks at the top level whose last convolution starts at zero
(Net2DeeperNet's identity, in residual form), so the model is unchanged until trained.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from rawrcl.errors import RawrclError
from rawrcl.models.unet import level_channels


def widen_state(state: dict, config: dict, width: int, seed: int = 0) -> dict:
    """The state dict of the width-``width`` copy of a U-Net :class:`RestorationModel` (``state``,
    ``config``: its state dict and model config). Raises :class:`RawrclError` for another arch or a
    width not above the current one."""
    if config.get("arch", "unet") != "unet":
        raise RawrclError(f"only a U-Net can be widened, not arch {config.get('arch')!r}")
    w, depth = int(config["width"]), int(config["depth"])
    if width <= w:
        raise RawrclError(f"the new width must exceed the current {w}, got {width}")
    gen = torch.Generator().manual_seed(seed)
    old, new = level_channels(w, depth), level_channels(width, depth)
    out: dict[str, torch.Tensor] = {}

    def space(level: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(map new → old channel, read weight of each new channel) of one new feature space."""
        g = torch.cat(
            [
                torch.arange(old[level]),
                torch.randint(0, old[level], (new[level] - old[level],), generator=gen),
            ]
        )
        r = 1.0 + 0.3 * (torch.rand(len(g), generator=gen) - 0.5)
        return g, r / torch.zeros(old[level]).index_add_(0, g, r)[g]

    def layer(
        key: str, src: tuple[torch.Tensor, torch.Tensor], dst: torch.Tensor, transposed: bool = False
    ) -> None:
        weight, bias = state[key + ".weight"].float(), state[key + ".bias"].float()
        g_in, split = src
        if transposed:  # ConvTranspose2d weight: (in, out, k, k)
            weight = weight[g_in][:, dst] * split[:, None, None, None]
        else:  # Conv2d weight: (out, in, k, k)
            weight = weight[dst][:, g_in] * split[None, :, None, None]
        dtype = state[key + ".weight"].dtype
        out[key + ".weight"], out[key + ".bias"] = weight.to(dtype), bias[dst].to(dtype)

    def block(
        prefix: str, src: tuple[torch.Tensor, torch.Tensor], level: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        a = space(level)
        layer(f"{prefix}.0", src, a[0])
        b = space(level)
        layer(f"{prefix}.2", a, b[0])
        return b

    n_in = state["body.down.0.0.weight"].shape[1]
    x = (torch.arange(n_in), torch.ones(n_in))
    skips = []
    for i in range(depth):
        x = block(f"body.down.{i}", x, i)
        skips.append(x)
    x = block("body.bottom", x, depth)
    for j, level in enumerate(range(depth - 1, -1, -1)):
        up = space(level)
        layer(f"body.up.{j}", x, up[0], transposed=True)
        skip = skips.pop()  # the decoder reads cat([up, skip]): the skip's old channels follow the up's
        x = block(
            f"body.dec.{j}", (torch.cat([up[0], skip[0] + old[level]]), torch.cat([up[1], skip[1]])), level
        )
    for k in range(int(config.get("refine", 0))):  # x + block(x): the block's output lives in x's space
        a = space(0)
        layer(f"body.refine.{k}.0", x, a[0])
        layer(f"body.refine.{k}.2", a, x[0])
    layer("head.conv", x, torch.arange(state["head.conv.weight"].shape[0]))
    if set(out) != set(state):
        raise RawrclError(f"unexpected U-Net layers: {sorted(set(state) ^ set(out))[:3]}")
    return out


def widen(model: nn.Module, width: int, seed: int = 0) -> nn.Module:
    """A width-``width`` copy of the U-Net ``model`` (:class:`RestorationModel`) computing the same function
    (to float rounding), on the model's device and dtype."""
    from rawrcl.models.registry import build_model, unwrap

    base = unwrap(model)
    config = dict(getattr(base, "config", {}))
    state = widen_state(base.state_dict(), config, width, seed)
    p = next(base.parameters())
    wide = build_model({**config, "width": width}).to(device=p.device, dtype=p.dtype)
    wide.load_state_dict(state)
    return wide.train(base.training)


def deepen(model: nn.Module, blocks: int) -> nn.Module:
    """A copy of the U-Net ``model`` (:class:`RestorationModel`) with ``blocks`` more residual blocks at the
    top level (config ``refine``), each starting as the identity, so it computes the same function; on the
    model's device and dtype. The new blocks' first convolutions keep PyTorch's random initialisation."""
    from rawrcl.models.registry import build_model, unwrap
    from rawrcl.models.unet import residual_block

    base = unwrap(model)
    config = dict(getattr(base, "config", {}))
    if config.get("arch", "unet") != "unet" or config.get("row_switch"):
        raise RawrclError("only a plain U-Net model can be deepened")
    if blocks < 1:
        raise RawrclError(f"deepen adds ≥ 1 block, got {blocks}")
    have = int(config.get("refine", 0))
    p = next(base.parameters())
    deep = build_model({**config, "refine": have + blocks})
    for k in range(have, have + blocks):
        deep.body.refine[k] = residual_block(deep.body.width, identity=True)
    state = deep.state_dict()
    state.update(base.state_dict())
    deep.load_state_dict(state)
    return deep.to(device=p.device, dtype=p.dtype).train(base.training)
