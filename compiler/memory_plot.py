"""A picture of the memory plan (``snpu compile --memory-profile FILE.png``): bytes live in
fast memory after every kernel, before and after the plan's rewrite, with the budget."""

from __future__ import annotations

import io
from pathlib import Path

from snpu.fileio import atomic_write


def plot_profile(path: str | Path, memory: dict, title: str = "") -> None:
    """``memory``: a compile report's ``memory`` section (:mod:`.passes.memory_budget`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    before, after = memory["profile_before"], memory["profile_after"]
    ax.step(range(len(before)), [b / 1024 for b in before], where="post",
            label=f"without swapping (peak {memory['peak_before'] / 1024:.1f} KiB)")
    ax.step(range(len(after)), [b / 1024 for b in after], where="post",
            label=f"planned: {len(memory['swapped'])} tensors swapped "
                  f"(peak {memory['peak_after'] / 1024:.1f} KiB)")
    if memory.get("budget"):
        ax.axhline(memory["budget"] / 1024, color="red", linestyle="--",
                   label=f"budget {memory['budget'] / 1024:.1f} KiB")
    ax.set_xlabel("kernel (program order)")
    ax.set_ylabel("activation KiB in fast memory")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title or "memory profile")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": "snpu"})
    plt.close(fig)
    atomic_write(path, buf.getvalue())
