"""Which samples a training step sees: :class:`PairBatchSampler` (step ``s`` is a pure function of
``(seed, s)``; DDP ranks take disjoint slices) and the DataLoader over it."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from rawrcl.errors import RawrclError

Key = tuple[int, int]  # (image index, sample seed)


class PairBatchSampler:
    """Yields, for steps ``start_step .. steps-1``, this rank's list of keys ``(image index, sample seed)``.

    Step ``s`` draws the global batch (``batch_size × world_size`` keys) from
    ``numpy.random.default_rng([seed, s])``: images without replacement (a fresh permutation, extended by
    further permutations only when the global batch is larger than the number of images), one 63-bit
    sample seed per slot. Rank ``r`` takes slots ``[r·B, (r+1)·B)``. The sampler's whole state is the
    step: resuming at step k needs only ``start_step=k``.
    """

    def __init__(
        self,
        n_images: int,
        batch_size: int,
        seed: int = 0,
        steps: int | None = None,
        start_step: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if n_images < 1 or batch_size < 1:
            raise RawrclError("the sampler needs at least one image and a batch size ≥ 1")
        self.n_images, self.batch_size, self.seed = n_images, batch_size, seed
        self.steps, self.start_step, self.rank, self.world_size = steps, start_step, rank, world_size

    def batch(self, step: int) -> list[Key]:
        rng = np.random.default_rng([self.seed, step])
        need = self.batch_size * self.world_size
        idx = np.concatenate([rng.permutation(self.n_images) for _ in range(-(-need // self.n_images))])[
            :need
        ]
        seeds = rng.integers(0, 2**63 - 1, size=need, dtype=np.int64)
        lo = self.rank * self.batch_size
        return [
            (int(i), int(s))
            for i, s in zip(idx[lo : lo + self.batch_size], seeds[lo : lo + self.batch_size], strict=True)
        ]

    def state_dict(self) -> dict:
        return {"seed": self.seed, "step": self.start_step}

    def __iter__(self) -> Iterator[list[Key]]:
        step = self.start_step
        while self.steps is None or step < self.steps:
            yield self.batch(step)
            step += 1

    def __len__(self) -> int:
        return max((self.steps or 0) - self.start_step, 0)


# ------------------------------------------------------------------------------------------- datasets


def make_loader(
    dataset: torch.utils.data.Dataset,
    sampler: PairBatchSampler,
    num_workers: int = 0,
    pin_memory: bool = False,
) -> torch.utils.data.DataLoader:
    """DataLoader over a :class:`PairBatchSampler` (deterministic whatever ``num_workers``)."""
    kwargs: dict = {}
    if num_workers > 0:
        kwargs.update(persistent_workers=False, prefetch_factor=2)
    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=num_workers,
        pin_memory=pin_memory,
        generator=torch.Generator(),  # never touch the global RNG
        **kwargs,
    )
