"""``python -m rawrcl.cli`` (used with torchrun for distributed training)."""

from rawrcl.cli import main

if __name__ == "__main__":
    main(prog_name="rawrcl")
