"""Driver for MatrixUnit block tests and benchmarks: load an FcCase, run it, collect sums."""

import numpy as np

from snpu.rtl.side_source import Fmt

FMT = {0: Fmt.DENSE, 1: Fmt.DIRECT, 2: Fmt.STRIDE}


def _words(buf: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(buf).view("<u8")


async def load_case(ctx, dut, case, *, only_nonzero=True):
    """Write the case's buffers through the unit's write ports (skipping zero words)."""
    for name, port in (("nbuf", dut.nbuf_w), ("nidx", dut.nidx_w)):
        words = _words(getattr(case, name))
        full = (1 << len(port.en)) - 1
        for a, w in enumerate(words):
            if w or not only_nonzero:
                ctx.set(port.addr, a)
                ctx.set(port.data, int(w))
                ctx.set(port.en, full)
                await ctx.tick()
        ctx.set(port.en, 0)
    for name, port in (("wbuf", dut.wbuf_w), ("widx", dut.widx_w)):
        for g in range(case.config.lanes):
            ctx.set(dut.w_lane, g)
            for a, w in enumerate(_words(getattr(case, name)[g])):
                if w or not only_nonzero:
                    ctx.set(port.addr, a)
                    ctx.set(port.data, int(w))
                    ctx.set(port.en, 0xFF)
                    await ctx.tick()
            ctx.set(port.en, 0)


def fc_config(case) -> dict:
    r, i = case.regs, case.instr
    return {
        "nfmt": FMT[r["mx.nfmt"]], "npacked": r["mx.npacked"], "wfmt": FMT[r["mx.wfmt"]],
        "mixed_to_stride": r["mx.mixed"], "n_in": i.n_in, "nvec": r["mx.nvec"], "rows": i.rows,
        "nbuf": i.nbuf, "nidx": i.nidx, "wbuf": i.wbuf, "widx": i.widx,
        "nstride": r["mx.nstride"], "nidx_stride": r["mx.nidx_stride"],
        "results": r["mx.nvec"] * i.rows,
    }


async def run_case(ctx, dut, case, rng=None, idle=0.0):
    """Start the fc and collect every lane's sums under random back-pressure.

    Returns ``(acc, cycles)``: the sums placed where the golden model puts them and the
    cycles from ``start`` to the last sum."""
    P = case.config.lanes
    nvec, rows = case.regs["mx.nvec"], case.instr.rows
    astride, abase = case.regs["mx.acc_stride"], case.instr.acc
    ctx.set(dut.cfg, fc_config(case))
    ctx.set(dut.start, 1)
    await ctx.tick()
    ctx.set(dut.start, 0)
    acc = np.zeros(case.config.acc_elems, np.int64)
    order = {g: [(v, r) for v in range(nvec) for r in range(g, rows, P)] for g in range(P)}
    got = {g: 0 for g in range(P)}
    total = sum(len(o) for o in order.values())
    done, cycles = 0, 1
    valids = [dut.results[g].valid for g in range(P)]
    sums = [dut.results[g].payload.sum for g in range(P)]
    while done < total:
        readies = [1 if rng is None or rng.random() >= idle else 0 for _ in range(P)]
        for g in range(P):
            ctx.set(dut.results[g].ready, readies[g])
        _, _, *sampled = await ctx.tick().sample(*valids, *sums)
        cycles += 1
        for g in range(P):
            if sampled[g] and readies[g]:
                v, r = order[g][got[g]]
                acc[abase + v * astride + r] = sampled[P + g]
                got[g] += 1
                done += 1
        if cycles > 200_000:
            raise AssertionError("matrix unit did not finish")
    for g in range(P):
        ctx.set(dut.results[g].ready, 0)
    return acc, cycles
