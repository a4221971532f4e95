"""The training engine (:class:`Trainer`), pre-training and fine-tuning."""

from __future__ import annotations

from rawrcl.train.engine import (
    TRAINER_DEFAULTS,
    Trainer,
    TrainingInterrupted,
    WeightEMA,
    build_dataset,
    distributed_env,
    load_resume_config,
    lr_schedule,
    pretext_task,
    pretrain,
    select_device,
    step_seed,
)
from rawrcl.train.finetuning import (
    PROTOCOLS,
    LabelledCrops,
    finetune,
    prepare_model,
    select_labels,
)

__all__ = [
    "build_dataset",
    "distributed_env",
    "finetune",
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
