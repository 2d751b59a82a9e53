"""Neuron-level mapping onto a many-core mesh (seed 003).

The flow is in :mod:`.mapper`; one step per module: :mod:`.store` (varint zip store),
:mod:`.coarsen`, :mod:`.bisect`, :mod:`.refine`, :mod:`.place`, :mod:`.force`,
:mod:`.metrics`; inputs from :mod:`.generate` and :mod:`.importers`; pictures from
:mod:`.heatmap`.  ``snpu map`` and ``snpu topology`` are the command line.
"""
