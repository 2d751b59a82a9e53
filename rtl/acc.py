"""Accumulator banks: ``lanes`` banks of int32, shared by the MX, VX and LD units."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig

from .ld_unit import acc_write_layout
from .target import NO_RW_CHECK, checked_read


class Accumulators(wiring.Component):
    """``acc``: element ``e`` lives in bank ``e % lanes``, row ``e // lanes``.

    Each bank has one read and one write port; the units share them by fixed priority, which
    is safe because the ISA's tokens keep the units on disjoint elements:

    * VX (a whole row of every bank per access) always wins, so the vector pipeline never
      stalls;
    * then the LD unit (writes of up to one row, masked);
    * then MX lane ``g``, which only ever touches bank ``g`` (a write, or a read for
      accumulation).

    Reads return data the cycle after the request.  A request is taken when its ``ready`` is
    high in the same cycle.
    """

    def __init__(self, config: CoreConfig):
        self._cfg = config
        P = config.lanes
        row = range(config.acc_words)
        self._banks = [Memory(shape=signed(32), depth=config.acc_words, init=[], attrs=NO_RW_CHECK)
                       for _ in range(P)]
        super().__init__({
            "vx_rd_en": In(1), "vx_rd_row": In(row),
            "vx_rd_data": Out(data.ArrayLayout(signed(32), P)),
            "vx_wr_en": In(1), "vx_wr": In(acc_write_layout(config)),
            "ld_w": In(stream.Signature(acc_write_layout(config))),
            "mx_w": In(stream.Signature(data.StructLayout({"row": row, "data": signed(32)}))).array(P),
            "mx_rd": In(stream.Signature(data.StructLayout({"row": row}))).array(P),
            "mx_rd_data": Out(signed(32)).array(P),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.ld_w.ready.eq(~self.vx_wr_en)
        for g, bank in enumerate(self._banks):
            m.submodules[f"bank{g}"] = bank
            wp, rp = bank.write_port(), bank.read_port()
            vx_w = self.vx_wr_en & self.vx_wr.en[g]
            ld_w = self.ld_w.valid & ~self.vx_wr_en & self.ld_w.payload.en[g]
            mx_ok = ~vx_w & ~(self.ld_w.valid & ~self.vx_wr_en & self.ld_w.payload.en[g])
            m.d.comb += self.mx_w[g].ready.eq(mx_ok)
            with m.If(vx_w):
                m.d.comb += [wp.addr.eq(self.vx_wr.row), wp.data.eq(self.vx_wr.data[g]), wp.en.eq(1)]
            with m.Elif(ld_w):
                m.d.comb += [wp.addr.eq(self.ld_w.payload.row), wp.data.eq(self.ld_w.payload.data[g]),
                             wp.en.eq(1)]
            with m.Else():
                m.d.comb += [wp.addr.eq(self.mx_w[g].payload.row), wp.data.eq(self.mx_w[g].payload.data),
                             wp.en.eq(self.mx_w[g].valid)]
            word = checked_read(m, platform, rp, [wp], f"bank{g}")
            m.d.comb += [
                self.mx_rd[g].ready.eq(~self.vx_rd_en),
                rp.addr.eq(Mux(self.vx_rd_en, self.vx_rd_row, self.mx_rd[g].payload.row)),
                rp.en.eq(self.vx_rd_en | self.mx_rd[g].valid),
                self.vx_rd_data[g].eq(word),
                self.mx_rd_data[g].eq(word),
            ]
        return m
