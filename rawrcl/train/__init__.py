"""The training engine (:class:`Trainer`), pre-training and fine-tuning."""

from __future__ import annotations

from rawrcl.device import select_device
from rawrcl.train.config import DataConfig, ModelConfig, PretrainConfig, TrainingConfig
from rawrcl.train.engine import TRAINER_DEFAULTS, Trainer, distributed_env
from rawrcl.train.finetuning import (
    FINETUNE_PROTOCOLS,
    PROTOCOLS,
    LabelledCrops,
    finetune,
    prepare_model,
    select_labels,
)
from rawrcl.train.pretraining import build_dataset, pretext_task, pretrain, run_pretrain
from rawrcl.train.rundir import load_resume_config
from rawrcl.train.schedule import WeightEMA, lr_schedule, step_seed
from rawrcl.train.signals import TrainingInterrupted

__all__ = [
    "DataConfig",
    "ModelConfig",
    "PretrainConfig",
    "run_pretrain",
    "TrainingConfig",
    "build_dataset",
    "distributed_env",
    "finetune",
    "FINETUNE_PROTOCOLS",
    "LabelledCrops",
    "load_resume_config",
    "lr_schedule",
    "prepare_model",
    "pretext_task",
    "pretrain",
    "PROTOCOLS",
    "select_device",
    "select_labels",
    "step_seed",
    "Trainer",
    "TRAINER_DEFAULTS",
    "TrainingInterrupted",
    "WeightEMA",
]
