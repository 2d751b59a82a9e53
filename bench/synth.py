"""The synthesis helper the bench scripts use: :mod:`snpu.verif.tb.synth` (also what
``snpu sweep --synth`` runs per configuration)."""

from snpu.verif.tb.synth import _tool, synthesize  # noqa: F401
