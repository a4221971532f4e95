"""Models: U-Net / DnCNN bodies with named replaceable heads, registry and checkpoints.

See :mod:`rawrcl.models.registry` for the config keys and the output convention.
"""

from rawrcl.models.compose import DenoiseThenDemosaic, adapt, serves
from rawrcl.models.dncnn import DnCNNBody
from rawrcl.models.ensemble import SelfEnsemble
from rawrcl.models.heads import HEADS, Head, skip_map
from rawrcl.models.registry import (
    ARCHS,
    RestorationModel,
    build_model,
    load_checkpoint,
    model_config,
    read_checkpoint,
    save_checkpoint,
    unwrap,
)
from rawrcl.models.unet import UNetBody

__all__ = [
    "ARCHS",
    "DenoiseThenDemosaic",
    "HEADS",
    "DnCNNBody",
    "Head",
    "RestorationModel",
    "SelfEnsemble",
    "UNetBody",
    "adapt",
    "build_model",
    "load_checkpoint",
    "model_config",
    "read_checkpoint",
    "save_checkpoint",
    "serves",
    "skip_map",
    "unwrap",
]
