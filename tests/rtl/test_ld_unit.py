"""LD unit against the golden model's ld: every buffer, 3-D patterns, sparse processing unit."""

import random

import numpy as np

from snpu.rtl.microcode import op_codes
from snpu.verif.isa import Unit
import pytest

from snpu.config import CoreConfig
from snpu.rtl.ld_unit import LoadUnit
from snpu.rtl.status import ErrorCode
from snpu.verif import isa
from snpu.verif.golden import Machine

from .axi_model import AxiMemory
from snpu.verif.tb.amaranth_sim import seeded, simulate

REGS = ("ext_stride", "dst_stride", "ext_stride3", "dst_stride3", "nidx_mode", "thresh",
        "group_log2", "group_t3", "group_t4")


def small_config(lanes, axi_data_bits=64):
    return CoreConfig(lanes=lanes, nbuf_bytes=1024, nidx_bytes=256, wbuf_bytes=512,
                      widx_bytes=256, acc_words=64, obuf_bytes=256, param_rows=8,
                      axi_data_bits=axi_data_bits)


class Buffers:
    """What the LD unit wrote, applied the way the hardware memories apply writes."""

    def __init__(self, c: CoreConfig):
        self.c = c
        self.nbuf = np.zeros(c.nbuf_bytes, np.uint8)
        self.nidx = np.zeros(c.nidx_bytes, np.uint8)
        self.wbuf = np.zeros((c.lanes, c.wbuf_bytes), np.uint8)
        self.widx = np.zeros((c.lanes, c.widx_bytes), np.uint8)
        self.acc = np.zeros(c.acc_elems, np.int32)
        self.param = np.zeros(c.param_bytes, np.uint8)

    @staticmethod
    def _write_bytes(arr, word, data, en, n=8):
        for j in range(n):
            if en >> j & 1:
                arr[n * word + j] = (data >> (8 * j)) & 0xFF

    def monitor(self, dut, rng):
        c = self.c

        async def process(ctx):
            while True:
                ready = int(rng.random() > 0.3)
                ctx.set(dut.acc_w.ready, ready)
                _, _, *v = await ctx.tick().sample(
                    dut.nbuf_w.addr, dut.nbuf_w.data, dut.nbuf_w.en,
                    dut.nidx_w.addr, dut.nidx_w.data, dut.nidx_w.en,
                    dut.wbuf_w.addr, dut.wbuf_w.data, dut.wbuf_w.en,
                    dut.widx_w.addr, dut.widx_w.data, dut.widx_w.en, dut.w_lane,
                    dut.param_w.addr, dut.param_w.data, dut.param_w.en,
                    dut.acc_w.valid, dut.acc_w.payload)
                (na, nd, ne, ia, idt, ie, wa, wd, we, xa, xd, xe, lane, pa, pd, pe, av, ap) = v
                n = c.axi_bytes  # the buffers' write ports are a bus word wide
                self._write_bytes(self.nbuf, na, nd, ne, n)
                self._write_bytes(self.wbuf[lane], wa, wd, we, n)
                self._write_bytes(self.widx[lane], xa, xd, xe, n)
                for j in range(len(dut.param_w.en)):  # consecutive channel records
                    if pe >> j & 1:
                        self.param[8 * pa + j] = (pd >> (8 * j)) & 0xFF
                if ie:
                    bits = np.unpackbits(self.nidx[n * ia:n * ia + n], bitorder="little")
                    for b in range(8 * n):
                        if ie >> b & 1:
                            bits[b] = idt >> b & 1
                    self.nidx[n * ia:n * ia + n] = np.packbits(bits, bitorder="little")
                if av and ready:
                    for g in range(c.lanes):
                        if ap.en >> g & 1:
                            self.acc[ap.row * c.lanes + g] = ap.data[g]

        return process


def _random_ld(rng, c: CoreConfig, ext_size):
    buf = rng.choice(list(isa.BUFFERS))
    size = {"nbuf": c.nbuf_bytes, "nidx": c.nidx_bytes, "wbuf": c.wbuf_bytes,
            "widx": c.widx_bytes, "acc": c.acc_elems, "param": c.param_bytes}[buf]
    regs = {k: 0 for k in REGS}
    group = 1
    if buf == "nbuf" and rng.random() < 0.6:
        regs.update(nidx_mode=1, thresh=rng.randrange(20), group_log2=rng.choice([0, 0, 1, 2, 3]),
                    group_t3=rng.randrange(30), group_t4=rng.randrange(5))
        group = 1 << regs["group_log2"]
    cols = group * rng.randrange(1, max(2, min(40, size // 8) // group))
    rows, n3 = rng.randrange(1, 4), rng.randrange(1, 3)
    regs["dst_stride"] = cols + group * rng.randrange(0, 3)
    regs["dst_stride3"] = rows * regs["dst_stride"] + group * rng.randrange(0, 3)
    span = (n3 - 1) * regs["dst_stride3"] + (rows - 1) * regs["dst_stride"] + cols
    if span > size:
        n3, rows = 1, 1
        span = cols
    dst = group * rng.randrange(0, (size - span) // group + 1)
    regs["ext_stride"] = rng.randrange(0, 100)
    regs["ext_stride3"] = rng.randrange(0, 300)
    ext = rng.randrange(0, ext_size - 1000)
    lane = 0
    if buf in ("wbuf", "widx"):  # plane p goes to lane + p: a striped load of several lanes
        lane = rng.randrange(c.lanes)
        n3 = min(n3 + rng.randrange(0, 3), c.lanes - lane)
        regs["dst_stride3"] = rng.choice([0, regs["dst_stride3"]])
        if (n3 - 1) * regs["dst_stride3"] + (rows - 1) * regs["dst_stride"] + cols > size:
            n3, rows = 1, 1
        dst = min(dst, size - ((n3 - 1) * regs["dst_stride3"] + (rows - 1) * regs["dst_stride"] + cols))
    return regs, dict(buf=isa.BUFFERS[buf], lane=lane, ext=ext, dst=dst, n3=n3, rows=rows,
                      cols=cols)


def _run(c, ops, mem, rng, error_ranges=()):
    dut = LoadUnit(c)
    bufs = Buffers(c)
    axi = AxiMemory(dut, mem, rng, idle=0.25, error_ranges=error_ranges, id_bits=False,
                    beat_bytes=c.axi_bytes)
    results = []

    async def driver(ctx):
        for regs, args in ops:
            ctx.set(dut.regs, regs)
            ctx.set(dut.op, op_codes(Unit.LD)["ld"])
            ctx.set(dut.args.ld, args)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            await ctx.tick().until(dut.done)
            results.append(ctx.get(dut.error))
            await ctx.tick().repeat(2)

    simulate(dut, driver, processes=[axi.ar, axi.r, bufs.monitor(dut, rng)])
    return bufs, results


@pytest.mark.parametrize("lanes,bus", [(4, 64), (16, 64), (1, 128), (4, 128), (16, 256)])
@pytest.mark.parametrize("seed", range(3))
@seeded
def test_loads_match_golden(lanes, bus, seed):
    """Random loads into every buffer on a 64-bit bus and on the wider ones (bus-wide
    writes, acc and param in sub-writes)."""
    rng = random.Random(seed)
    c = small_config(lanes, bus)
    mem = bytearray(rng.randrange(256) for _ in range(8192))
    ops = [_random_ld(rng, c, len(mem)) for _ in range(12)]
    bufs, errors = _run(c, ops, mem, rng)
    assert errors == [ErrorCode.NONE] * len(ops)
    gold = Machine(c, np.frombuffer(bytes(mem), np.uint8).copy())
    for regs, args in ops:
        for k, v in regs.items():
            gold.regs[f"ld.{k}"] = v
        gold.execute(isa.make("ld", **args))
    np.testing.assert_array_equal(bufs.nbuf, gold.nbuf)
    np.testing.assert_array_equal(bufs.nidx, gold.nidx)
    np.testing.assert_array_equal(bufs.wbuf, gold.wbuf)
    np.testing.assert_array_equal(bufs.widx, gold.widx)
    np.testing.assert_array_equal(bufs.acc, gold.acc)
    np.testing.assert_array_equal(bufs.param, gold.param)


@pytest.mark.parametrize("case,code", [
    ("range", ErrorCode.RANGE), ("lane", ErrorCode.RANGE), ("align", ErrorCode.ALIGN),
    ("bus", ErrorCode.LOAD_BUS),
    # a later row's or plane's checks (each row the unit can move to is checked ahead)
    ("range_of_second_plane", ErrorCode.RANGE), ("lane_of_second_plane", ErrorCode.RANGE),
    ("align_of_second_row", ErrorCode.ALIGN), ("align_of_second_plane", ErrorCode.ALIGN),
    # a step to the next row or plane that alone passes the buffer's end (the checks
    # compare the row's end with the buffer's size less the step)
    ("range_of_second_row", ErrorCode.RANGE), ("second_row_past_the_buffer", ErrorCode.RANGE),
    ("second_plane_past_the_buffer", ErrorCode.RANGE),
])
def test_errors_end_the_instruction(case, code):
    rng = random.Random(0)
    c = small_config(4)
    mem = bytearray(4096)
    regs = {k: 0 for k in REGS}
    args = dict(buf=isa.BUFFERS["nbuf"], lane=0, ext=64, dst=0, n3=1, rows=2, cols=16)
    regs["dst_stride"] = 16
    if case == "range":
        args["dst"] = c.nbuf_bytes - 20
    elif case == "lane":
        args.update(buf=isa.BUFFERS["wbuf"], lane=4)
    elif case == "align":
        regs.update(nidx_mode=1, group_log2=3)
        args["dst"] = 4
    elif case == "range_of_second_plane":
        args.update(n3=2, rows=1)
        regs["dst_stride3"] = c.nbuf_bytes - 8
    elif case == "lane_of_second_plane":
        args.update(buf=isa.BUFFERS["wbuf"], lane=3, n3=2, rows=1)
    elif case == "align_of_second_row":
        regs.update(nidx_mode=1, group_log2=3, dst_stride=12)
    elif case == "align_of_second_plane":
        regs.update(nidx_mode=1, group_log2=3, dst_stride3=36)
        args.update(n3=2, rows=1)
    elif case == "range_of_second_row":
        regs["dst_stride"] = c.nbuf_bytes - 8
    elif case == "second_row_past_the_buffer":
        regs["dst_stride"] = (1 << 20) - 8
    elif case == "second_plane_past_the_buffer":
        regs["dst_stride3"] = (1 << 20) - 8
        args.update(n3=2, rows=1)
    _, errors = _run(c, [(regs, args)], mem, rng, error_ranges=[(64, 72)] if case == "bus" else ())
    assert errors == [code]
