"""rawrcl: RAW-first camera-pipeline toolkit built on Residual Contrastive Learning (RCL).

Data flow (one direction): raw I/O (``raw``) → packing (``cfa``) → noise (``noise``) → models →
losses → methods → trainer (``train``), with ``tasks``/``eval``/``infer`` on top and the CLI a thin
layer over library calls. RAW values are float32 in [0, 1] after black-level subtraction and
division by (white − black); noise parameters λshot, λread are in those units
(variance = λshot·x + λread).
"""

from rawrcl.errors import RawrclError

__version__ = "0.1.0"
__all__ = ["RawrclError", "__version__"]
