"""A picture of a mapping: core load (left) and mesh link traffic under XY routing (right)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from snpu.fileio import atomic_write

from .metrics import link_loads
from .topology import Topology


def heatmap(path: str | Path, t: Topology, quotient: Topology, group: np.ndarray,
            pos: np.ndarray, capacity: int, mesh: tuple[int, int], title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    W, H = mesh
    load = np.full((H, W), np.nan)
    gl = np.bincount(group, weights=t.sizes, minlength=quotient.n_vertices)
    load[pos[:, 1], pos[:, 0]] = gl / capacity
    hor, ver = link_loads(quotient.indptr, quotient.indices, quotient.weights.astype(np.int64), pos, W, H)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 5.5))
    im = a.imshow(load, origin="lower", cmap="viridis", vmin=0, vmax=1)
    a.set_title("core load / capacity (blank: unused)")
    fig.colorbar(im, ax=a, fraction=0.046)
    segs, vals = [], []
    for y in range(H):
        for x in range(W - 1):
            segs.append([(x, y), (x + 1, y)])
            vals.append(hor[y, x])
    for y in range(H - 1):
        for x in range(W):
            segs.append([(x, y), (x, y + 1)])
            vals.append(ver[y, x])
    lc = LineCollection(segs, array=np.asarray(vals, float), cmap="inferno", linewidths=3)
    b.add_collection(lc)
    b.set_xlim(-0.5, W - 0.5)
    b.set_ylim(-0.5, H - 0.5)
    b.set_aspect("equal")
    b.set_facecolor("#202020")
    b.set_title(f"link traffic, XY routing (busiest {int(max(vals, default=0))})")
    fig.colorbar(lc, ax=b, fraction=0.046)
    if title:
        fig.suptitle(title)
    buf = io.BytesIO()
    # the Software tag lets a later run recognise the file as an snpu output it may replace
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": "snpu"})
    plt.close(fig)
    atomic_write(path, buf.getvalue())
