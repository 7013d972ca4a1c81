"""The autodiff engine: numpy only. Knows nothing of YAML, click or rich."""

from gradflow.engine.ops import ALIASES, OPS, Op, resolve_op
from gradflow.engine.quiet import gc_paused, quiet
from gradflow.engine.tape import Tape
from gradflow.engine.tensor import Tensor, unbroadcast

__all__ = ["ALIASES", "OPS", "Op", "Tape", "Tensor", "gc_paused", "quiet", "resolve_op", "unbroadcast"]
