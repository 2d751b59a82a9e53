"""Cycle estimates per instruction: the cost model of the golden model and the compiler.

These are estimates from the hardware parameters, not a cycle-exact model of the RTL (seed
002 allows either "measured by running" or "estimated from the hardware parameters").  The
constants are calibrated against RTL runs (``bench/core_perf.py`` reports both side by
side).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: cycles from issuing an AXI burst to its first beat, including address generation
DMA_LATENCY = 12
#: extra cycles per DMA row (address generation, burst split, realignment)
DMA_ROW_OVERHEAD = 2
#: cycles a lane spends per row besides its chunks (rows follow each other without bubbles
#: on the AND path; measured on the RTL, bench/datapath.py)
FC_ROW_OVERHEAD = 0
#: pipeline fill/drain of the MX unit per instruction (measured: 22 cycles from start to the
#: last sum beyond the lane's work)
FC_PIPELINE = 22
#: pipeline fill/drain of the VX unit per instruction
VX_PIPELINE = 5
#: cycles of a cfg instruction
CFG_CYCLES = 1
#: cycles to dispatch one instruction once its word is in the instruction cache
DISPATCH_CYCLES = 1
#: cycles of a send besides one per flit (reading the first word of local memory, the last
#: flits draining into the router; measured on the RTL, bench/noc.py)
NET_SEND_OVERHEAD = 3
#: cycles between the packets of one send (the next head waits for the reads in flight)
NET_PACKET_GAP = 1
#: cycles of a recv whose bytes are there
RECV_CYCLES = 3
#: cycles from an instruction's end on one unit to a dependency token it gives being seen
#: by the unit that waits for it (front end done -> token channel -> other front end)
TOKEN_CYCLES = 2
#: cycles a head flit spends in each router (input stage, output stage)
HOP_CYCLES = 2
#: cycles lost when the sequencer jumps back to the start of a loop body
LOOP_JUMP_CYCLES = 1
#: cycles from requesting an instruction-cache line fill to its first beat
FETCH_LATENCY = DMA_LATENCY
#: beats of one line fill (64 bytes over the 8-byte bus)
LINE_FILL_BEATS = 8


@dataclass(frozen=True)
class DmaShape:
    n3: int
    rows: int
    cols: int
    axi_bytes: int
    beat_cycles: int = 1  #: cycles the destination takes per beat (acc: 8 / lanes)


def dma_cycles(s: DmaShape) -> int:
    if s.n3 * s.rows * s.cols == 0:
        return 1
    beats_per_row = -(-s.cols // s.axi_bytes) + 1  # +1: unaligned start may need one more
    return DMA_LATENCY + s.n3 * s.rows * (beats_per_row * s.beat_cycles + DMA_ROW_OVERHEAD)


def fc_lane_cycles(row_cycles: np.ndarray, lanes: int) -> np.ndarray:
    """Sum per-(vector, row) cycles into per-lane cycles (row r runs on lane r % lanes)."""
    nvec, rows = row_cycles.shape
    pad = (-rows) % lanes
    rc = np.pad(row_cycles, ((0, 0), (0, pad)))
    return rc.reshape(nvec, -1, lanes).sum(axis=(0, 1))


def fc_row_cycles_bitmap(chunk_pairs: np.ndarray) -> np.ndarray:
    """Cycles per (vector, row) when a lane scans chunks: one cycle per pair, at least one per
    chunk.  ``chunk_pairs[v, r, c]`` is the pairs in chunk ``c``."""
    return np.maximum(chunk_pairs, 1).sum(axis=-1) + FC_ROW_OVERHEAD


def fc_row_cycles_merge(pairs: np.ndarray, n_entries: np.ndarray, w_entries: np.ndarray) -> np.ndarray:
    """Cycles per (vector, row) of the stride-merge path: one entry of each list per cycle,
    both advance on a pair, plus the terminators."""
    merge = n_entries[:, None] + w_entries[None, :] - pairs + 1
    return np.maximum(merge, 1) + FC_ROW_OVERHEAD


def fc_row_cycles_estimate(n_in: int, w_kept: float, n_density: float, chunk_bits: int,
                           merge: bool) -> float:
    """Expected cycles of one (vector, row) of an fc from densities alone (the compiler's
    choice between the two mixed-format paths): ``w_kept`` weights kept in the row, a
    fraction ``n_density`` of the neurons kept, independently.  The bitmap path scans
    ``ceil(n_in / chunk_bits)`` chunks at max(pairs, 1) cycles each (pairs per chunk taken
    as Poisson); the merge path walks both lists (:func:`fc_row_cycles_merge`)."""
    pairs = w_kept * n_density
    if merge:
        return float(n_in * n_density + w_kept - pairs + 1 + FC_ROW_OVERHEAD)
    chunks = -(-n_in // chunk_bits)
    lam = pairs / chunks if chunks else 0.0
    return float(chunks * (lam + np.exp(-lam)) + FC_ROW_OVERHEAD)


def vx_cycles(iterations: int, reads_per_iteration: int) -> int:
    return VX_PIPELINE + iterations * max(1, reads_per_iteration)


@dataclass
class SharedBus:
    """The external-memory port's read and write data channels, one beat per cycle each,
    shared by every requester of every core of an array (instruction-cache fills and LD
    reads; ST writes).  A request is served after the ones before it: its first beat goes
    when the channel is free, and it holds the channel for its beats."""

    read_free: int = 0
    write_free: int = 0

    def read(self, t: int, beats: int) -> int:
        """Reserve ``beats`` read beats wanted from time ``t``; returns when they start."""
        start = max(t, self.read_free)
        self.read_free = start + beats
        return start

    def write(self, t: int, beats: int) -> int:
        start = max(t, self.write_free)
        self.write_free = start + beats
        return start
