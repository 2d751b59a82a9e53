"""The output cache and the requantisation parameter memory."""

from amaranth import *
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig

from .ld_unit import param_records_per_write, param_write_signature
from .target import NO_RW_CHECK, checked_read


class OutputCache(wiring.Component):
    """``obuf``: int8 results of ``req`` waiting for ``st``.

    Stored as ``max(1, V // 8)`` banks of 64-bit words so the VX unit writes one ``V``-byte
    word per cycle (``V = vx_width``, its requantisers; at a byte address that is a
    multiple of ``V``) while the ST unit reads one 64-bit word per cycle (data the next
    cycle).
    """

    def __init__(self, config: CoreConfig):
        self._cfg = config
        V = config.vx_width
        self._nb = max(1, V // 8)
        words = config.obuf_bytes // 8
        self._banks = [Memory(shape=64, depth=words // self._nb, init=[], attrs=NO_RW_CHECK)
                       for _ in range(self._nb)]
        super().__init__({
            "w_en": In(1), "w_addr": In(range(config.obuf_bytes)), "w_data": In(8 * V),
            "r_en": In(1), "r_word": In(range(words)), "r_data": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        V, nb = self._cfg.vx_width, self._nb
        sel = Signal(range(max(nb, 2)))  # bank read last cycle
        rdata = []
        for b, bank in enumerate(self._banks):
            m.submodules[f"bank{b}"] = bank
            wp, rp = bank.write_port(granularity=8), bank.read_port()
            if V >= 8:
                m.d.comb += [wp.addr.eq(self.w_addr // V), wp.data.eq(self.w_data[64 * b:64 * b + 64]),
                             wp.en.eq(Mux(self.w_en, 0xFF, 0))]
            else:
                lane = self.w_addr[:3]
                m.d.comb += [wp.addr.eq(self.w_addr >> 3), wp.data.eq(self.w_data << (lane << 3)),
                             wp.en.eq(Mux(self.w_en, ((1 << V) - 1) << lane, 0))]
            m.d.comb += [rp.addr.eq(self.r_word // nb), rp.en.eq(self.r_en)]
            rdata.append(checked_read(m, platform, rp, [wp], f"bank{b}"))
        if nb > 1:
            with m.If(self.r_en):
                m.d.sync += sel.eq(self.r_word % nb)
            m.d.comb += self.r_data.eq(Array(rdata)[sel])
        else:
            m.d.comb += self.r_data.eq(rdata[0])
        return m


class ParamMemory(wiring.Component):
    """Requantisation parameters: channel record ``w`` (8 bytes: bias, mult, shift) is word
    ``w``, kept in bank ``w % lanes`` so the VX unit reads the records of ``lanes``
    consecutive channels (one parameter row) per cycle, data the next cycle.  A write
    (``w``) puts up to :func:`~.ld_unit.param_records_per_write` consecutive records, from
    channel ``w.addr`` on, into as many banks."""

    def __init__(self, config: CoreConfig):
        self._cfg = config
        P = config.lanes
        self._banks = [Memory(shape=64, depth=config.param_rows, init=[], attrs=NO_RW_CHECK)
                       for _ in range(P)]
        super().__init__({
            "w": In(param_write_signature(config)),
            "r_en": In(1), "r_row": In(range(config.param_rows)),
            "r_data": Out(data.ArrayLayout(64, P)),
        })

    def elaborate(self, platform):
        m = Module()
        P = self._cfg.lanes
        n = param_records_per_write(self._cfg)
        first = self.w.addr % P
        for g, bank in enumerate(self._banks):
            m.submodules[f"bank{g}"] = bank
            wp, rp = bank.write_port(granularity=8), bank.read_port()
            # this bank's record of the write: the k-th, k = (g - first) mod P
            k = Signal(range(P), name=f"record{g}")
            m.d.comb += k.eq((g - first)[:(P - 1).bit_length()]) if P > 1 else k.eq(0)
            part = k[:(n - 1).bit_length()] if n > 1 else 0  # its part of the write
            m.d.comb += [wp.addr.eq((self.w.addr + k) // P),
                         wp.data.eq(self.w.data.word_select(part, 64)),
                         wp.en.eq(Mux(k < n, self.w.en.word_select(part, 8), 0)),
                         rp.addr.eq(self.r_row), rp.en.eq(self.r_en),
                         self.r_data[g].eq(checked_read(m, platform, rp, [wp], f"bank{g}"))]
        return m
