"""The topology store (seed 003): varints, connections grouped per vertex group, one zip.

A store is a zip archive, every member deflate-compressed:

``topology.json``
    ``{"format": "snpu-topology/1", "name", "vertices", "connections", "group_size",
    "groups", "level"}``.
``groups/NNNNNN.bin`` (one per group of ``group_size`` consecutive vertices)
    for each vertex of the group, in order: its size, its connection count, then per
    connection: flag (bit 0: this vertex sends, bit 1: it receives), the other vertex's
    index, the other vertex's size, the weight.  Every number is a varint
    (:mod:`.varint`).  Each connection appears in both endpoints' records.
``projection/NNNNNN.bin`` (coarsened levels only)
    for each vertex of group ``NNNNNN`` of the *finer* level, the index of the coarse
    vertex it was merged into.

Writing and reading go one group at a time, so a store never needs more memory than the
graph it holds plus one group; coarsening writes every level the same way.  Any damage —
a bad zip, a CRC error, a truncated member, a value out of range — is a
:class:`~.topology.TopologyError` naming the store, the member and the byte offset.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Callable

import numba
import numpy as np

from . import varint
from .topology import Topology, TopologyError

FORMAT = "snpu-topology/1"
GROUP_SIZE = 1 << 15


def _member(prefix: str, g: int) -> str:
    return f"{prefix}/{g:06d}.bin"


def rows_values(own_sizes: np.ndarray, degrees: np.ndarray, flags, others: np.ndarray,
                other_sizes: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The numbers of one group file (see the module docstring) from its vertices' rows:
    ``degrees[i]`` entries per vertex, entries concatenated in vertex order."""
    n = own_sizes.size
    m = others.size
    rowstart = np.zeros(n, np.int64)
    np.cumsum(degrees[:-1], out=rowstart[1:])
    out = np.empty(2 * n + 4 * m, np.uint64)
    head = 2 * np.arange(n, dtype=np.int64) + 4 * rowstart  # vertex i's record starts here
    out[head] = own_sizes
    out[head + 1] = degrees
    ent = np.repeat(head + 2, degrees) + 4 * (np.arange(m) - np.repeat(rowstart, degrees))
    out[ent] = flags
    out[ent + 1] = others
    out[ent + 2] = other_sizes
    out[ent + 3] = weights
    return out


def _group_values(t: Topology, v0: int, v1: int) -> np.ndarray:
    e0, e1 = int(t.indptr[v0]), int(t.indptr[v1])
    nb = t.indices[e0:e1]
    return rows_values(t.sizes[v0:v1], np.diff(t.indptr[v0:v1 + 1]),
                       3 if t.flags is None else t.flags[e0:e1], nb, t.sizes[nb], t.weights[e0:e1])


def write(path: str | Path, t: Topology, *, group_size: int = GROUP_SIZE, level: int = 0,
          projection: np.ndarray | None = None, progress: Callable[[int, int], None] | None = None) -> None:
    """Write ``t`` (and, for a coarsened level, the finer level's ``projection``) to ``path``,
    atomically (a temporary file renamed into place)."""
    V = t.n_vertices
    groups = max(1, -(-V // group_size))
    write_groups(path, name=t.name, vertices=V, connections=t.n_edges, group_size=group_size,
                 directed=t.flags is not None, level=level, projection=projection,
                 groups=(_group_values(t, g * group_size, min(V, (g + 1) * group_size))
                         for g in range(groups)), progress=progress)


def write_groups(path: str | Path, *, name: str, vertices: int, connections: int, group_size: int,
                 groups, directed: bool = True, level: int = 0, projection: np.ndarray | None = None,
                 progress: Callable[[int, int], None] | None = None) -> None:
    """Write a store from an iterable of group payloads (:func:`rows_values` arrays, one per
    group of ``group_size`` vertices, in order): the streaming path for graphs too large to
    build in memory first."""
    path = Path(path)
    n_groups = max(1, -(-vertices // group_size))
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent or ".")
    os.close(fd)
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
            meta = {"format": FORMAT, "name": name, "vertices": vertices, "connections": connections,
                    "group_size": group_size, "groups": n_groups, "level": level,
                    "directed": directed}
            if projection is not None:
                meta["projection_vertices"] = int(projection.size)
                meta["projection_groups"] = max(1, -(-projection.size // group_size))
            z.writestr("topology.json", json.dumps(meta))
            written = 0
            for g, values in enumerate(groups):
                z.writestr(_member("groups", g), varint.encode(values))
                written += 1
                if progress:
                    progress(g + 1, n_groups)
            if written != n_groups:
                raise TopologyError(f"{path}: {written} groups written, {n_groups} expected")
            if projection is not None:
                for g in range(meta["projection_groups"]):
                    z.writestr(_member("projection", g),
                               varint.encode(projection[g * group_size:(g + 1) * group_size]))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _open(path: Path) -> zipfile.ZipFile:
    if not path.exists():
        raise TopologyError(f"{path}: no such topology store")
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise TopologyError(f"{path}: not a readable zip archive ({e})") from None


def _read_member(path: Path, z: zipfile.ZipFile, name: str) -> bytes:
    try:
        return z.read(name)
    except KeyError:
        raise TopologyError(f"{path}: member {name} is missing") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as e:
        raise TopologyError(f"{path}: member {name} is damaged ({e})") from None


def _decode_member(path: Path, z: zipfile.ZipFile, name: str) -> tuple[bytes, np.ndarray, np.ndarray]:
    """A member's bytes, its varints and the byte offset where each starts."""
    data = _read_member(path, z, name)
    try:
        values, starts = varint.decode(data)
    except varint.VarintError as err:
        raise TopologyError(f"{path}: member {name}, byte {err.offset}: {err}") from None
    return data, values, starts


def read_meta(path: str | Path) -> dict:
    path = Path(path)
    with _open(path) as z:
        return _meta(path, z)


def _meta(path: Path, z: zipfile.ZipFile) -> dict:
    raw = _read_member(path, z, "topology.json")
    try:
        meta = json.loads(raw)
    except ValueError as e:
        raise TopologyError(f"{path}: member topology.json is not JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise TopologyError(f"{path}: member topology.json: format is not {FORMAT!r}")
    for k in ("vertices", "connections", "group_size", "groups"):
        if not isinstance(meta.get(k), int) or meta[k] < 0:
            raise TopologyError(f"{path}: member topology.json: field {k!r} is missing or invalid")
    return meta


@numba.njit(cache=True)
def _parse_group(values, v0, n, V, indptr, indices, weights, flags, e_at, own_size_out):
    """Fill rows v0..v0+n from one group's numbers.  Returns (status, value index, entries
    written): status 0 ok, 1 truncated, 2 vertex out of range, 3 too many entries, 4 bad
    flag, 5 trailing data, 6 weight out of range."""
    p = 0
    e = e_at
    for i in range(n):
        if p + 2 > values.size:
            return 1, p, e
        own_size_out[v0 + i] = values[p]
        cnt = values[p + 1]
        p += 2
        if p + 4 * cnt > values.size:
            return 1, p, e
        if e + cnt > indices.size:
            return 3, p - 1, e
        for k in range(cnt):
            f, u, w = values[p], values[p + 1], values[p + 3]  # (p + 2: the synapse slot, unchecked)
            if f < 1 or f > 3:
                return 4, p, e
            if u >= V:
                return 2, p + 1, e
            if w < 1 or w >= 2**31:
                return 6, p + 3, e
            if flags.size:
                flags[e] = f
            indices[e] = u
            weights[e] = w
            e += 1
            p += 4
        indptr[v0 + i + 1] = e
    if p != values.size:
        return 5, p, e
    return 0, p, e


_PROBLEMS = {1: "ends in the middle of a vertex record", 2: "names a vertex out of range",
             3: "holds more connections than topology.json says", 4: "has a flag other than 1, 2 or 3",
             5: "has data after its last vertex", 6: "has a weight out of range 1..2**31-1"}


def read(path: str | Path, *, flags: bool = True,
         progress: Callable[[int, int], None] | None = None) -> Topology:
    """Read a store into memory, one group at a time (``flags=False``: drop the direction
    bits, one byte per entry, which partitioning does not use)."""
    path = Path(path)
    with _open(path) as z:
        meta = _meta(path, z)
        V, E2, B = meta["vertices"], 2 * meta["connections"], meta["group_size"]
        if B < 1 or meta["groups"] != max(1, -(-V // B)):
            raise TopologyError(f"{path}: member topology.json: groups / group_size do not match "
                                f"{V} vertices")
        indptr = np.zeros(V + 1, np.int64)
        indices = np.empty(E2, np.int32)
        weights = np.empty(E2, np.int32)
        fl = np.empty(E2 if flags else 0, np.uint8)
        sizes = np.empty(V, np.uint64)
        e = 0
        for g in range(meta["groups"]):
            name = _member("groups", g)
            data, values, starts = _decode_member(path, z, name)
            v0 = g * B
            n = min(V, v0 + B) - v0
            status, at, e = _parse_group(values, v0, n, V, indptr, indices, weights, fl, e, sizes)
            if status:
                off = int(starts[at]) if at < starts.size else len(data)
                raise TopologyError(f"{path}: member {name}, byte {off}: the group {_PROBLEMS[status]}")
            if progress:
                progress(g + 1, meta["groups"])
        if e != E2:
            raise TopologyError(f"{path}: the groups hold {e} connection entries, topology.json "
                                f"says {E2}")
        if sizes.size and (sizes.min() < 1 or sizes.max() >= 2**31):
            raise TopologyError(f"{path}: a vertex size is out of range 1..2**31-1")
    directed = bool(meta.get("directed", True))
    keep = flags and directed and not np.all(fl == 3)  # all "both": undirected
    t = Topology(indptr, indices, weights, sizes.astype(np.int32), fl if keep else None,
                 meta.get("name", path.stem))
    return t


def read_projection(path: str | Path) -> np.ndarray:
    """The finer level's vertex -> coarse vertex map stored with a coarsened level."""
    path = Path(path)
    with _open(path) as z:
        meta = _meta(path, z)
        if "projection_vertices" not in meta:
            raise TopologyError(f"{path}: not a coarsened level (no projection)")
        parts = []
        for g in range(meta["projection_groups"]):
            name = _member("projection", g)
            data, values, starts = _decode_member(path, z, name)
            if values.size and values.max() >= meta["vertices"]:
                k = int(np.argmax(values >= meta["vertices"]))
                raise TopologyError(f"{path}: member {name}, byte {int(starts[k])}: coarse vertex "
                                    "out of range")
            parts.append(values.astype(np.int32))
        proj = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        if proj.size != meta["projection_vertices"]:
            raise TopologyError(f"{path}: projection has {proj.size} entries, expected "
                                f"{meta['projection_vertices']}")
        return proj
