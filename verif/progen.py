"""Seeded random programs: whole ROM images with their memory images.

Each generator builds a :class:`~snpu.verif.program.Program` that a real compiler could have
produced: data placed in external memory, loads, compute and stores ordered by dependency
tokens with double buffering, ``halt`` at the end.  The golden model checks every program for
races, so a generator bug shows up as an error rather than as a silent mismatch.

* :func:`fc_program` - sparse or dense fully connected layers, every neuron / weight index
  format, thresholding and group pruning at load, tiles accumulated over the input
  dimension, requantisation with ReLU;
* :func:`conv_program` - a convolution lowered to fc over im2col patches (3-D loads of a
  zero-padded channels-last tensor), one output row per tile, ping-pong buffers;
* :func:`pool_program` - max or average pooling windows with ``vred`` and ``req``;
* :func:`eltwise_program` - a scaled residual add with ReLU (``vew``, or ``vewp`` with
  its multipliers in the parameter memory);
* :func:`compress_program` - activations stored compressed and expanded back (``stc``,
  ``ldc``);
* :func:`random_program` - one of the above with random shapes and densities.
"""

from __future__ import annotations

import numpy as np

from snpu.config import CoreConfig

from . import index as ix
from . import act_compress, isa, layout, numerics
from .index import FORMAT_CODES
from .isa import Unit
from .program import Program
from .sequencer import half_sizes

LD, MX, VX, ST, NET = Unit.LD, Unit.MX, Unit.VX, Unit.ST, Unit.NET
FMT = FORMAT_CODES


def sparse_int8(rng, shape, density, low=-128, high=128):
    x = rng.integers(low, high, shape).astype(np.int8)
    x[x == 0] = 1
    x[rng.random(shape) >= density] = 0
    return x


def _params(rng, channels, relu_scale=True):
    bias = rng.integers(-3000, 3000, channels)
    mult = rng.integers(2000, 30000, channels)
    shift = rng.integers(12, 20, channels)
    return numerics.pack_params(bias, mult, shift)


def _round(x, m):
    return -(-x // m) * m


class _Tokens:
    """Bookkeeping of token channels so generated programs always balance."""

    def __init__(self):
        self.count = {}

    def give(self, a, b):
        self.count[(a, b)] = self.count.get((a, b), 0) + 1

    def take(self, a, b):
        assert self.count.get((a, b), 0) > 0, f"no token {a.name}->{b.name}"
        self.count[(a, b)] -= 1


def fc_program(rng, cfg: CoreConfig, *, n_in=None, rows=None, nvec=None, nfmt=None, wfmt=None,
               npacked=None, mixed=None, n_density=None, w_density=None, ktiles=None,
               group=None, operands=None, mem_bytes=1 << 18) -> Program:
    """``y = ReLU(requant(W x))`` for ``nvec`` vectors, the input dimension split into
    ``ktiles`` tiles accumulated in ``acc``.  ``operands``: the fc and the req take nvec and
    their strides in register operands (:func:`_operands`)."""
    P = cfg.lanes
    n_in = n_in or int(rng.integers(8, 400))
    rows = rows or int(rng.integers(1, 3 * P + 3))
    nvec = nvec or int(rng.integers(1, 4))
    operands = _operands(operands, n_in + rows, nvec)
    drawn_wfmt, drawn_mixed = wfmt is None, mixed is None
    nfmt = nfmt or str(rng.choice(["dense", "direct", "direct", "stride"]))
    wfmt = wfmt or str(rng.choice(["dense", "direct", "stride"]))
    npacked = int(rng.integers(0, 2)) if npacked is None else npacked
    if nfmt == "dense":
        npacked = 0
    mixed = int(rng.integers(0, 2)) if mixed is None else mixed
    # the merge exactly with stride weights (the lanes convert no weight index): what was
    # drawn at random is made legal, what the caller asked for is kept
    if wfmt == "stride" and nfmt == "dense" and drawn_wfmt:
        wfmt = "direct"
    elif drawn_mixed and {nfmt, wfmt} == {"direct", "stride"}:
        mixed = int(wfmt == "stride")
    n_density = float(rng.choice([0.05, 0.3, 0.6, 1.0])) if n_density is None else n_density
    w_density = float(rng.choice([0.05, 0.1, 0.25, 0.5, 1.0])) if w_density is None else w_density
    ktiles = ktiles or int(rng.integers(1, 3))
    thresh = int(rng.integers(0, 10))
    group = int(rng.choice([0, 0, 2, 3])) if group is None else group

    p = Program(cfg, mem_bytes=mem_bytes, rom_bytes=1 << 14)
    x = sparse_int8(rng, (nvec, n_in), n_density)
    w = sparse_int8(rng, (rows, n_in), w_density)
    kt = _round(-(-n_in // ktiles), 8)
    bounds = [(lo, min(n_in, lo + kt)) for lo in range(0, n_in, kt)]
    acc_stride = _round(rows, P)
    prm = p.data("params", _params(rng, _round(rows, P)), "params")
    p.emit("ld", buf="param", ext=prm, dst=0, cols=8 * _round(rows, P))
    tok = _Tokens()
    out = p.space("y", (nvec, rows))
    # what the neurons keep, per input tile: (threshold, (group size, t3, t4) or None)
    p.meta = {"kind": "fc", "x": x, "w": w, "tiles": [], "nfmt": nfmt}
    nvec_stride = _round(max(hi - lo for lo, hi in bounds), 64)
    half = cfg.nbuf_bytes // 2
    if nvec * nvec_stride > half:
        raise ValueError("fc_program: tile does not fit half of nbuf; use a bigger config")
    for t, (lo, hi) in enumerate(bounds):
        n = hi - lo
        xs, ws = x[:, lo:hi], w[:, lo:hi]
        nbase = (t % 2) * half
        wb, ib = (t % 2) * (cfg.wbuf_bytes // 2), (t % 2) * (cfg.widx_bytes // 2)
        waits = [MX] if t >= 2 else []
        if waits:
            tok.take(MX, LD)
        # neurons
        if nfmt != "dense" and not npacked and nfmt == "direct":
            use_group = group and n % (1 << group) == 0 and nbase % 8 == 0
            t3, t4 = int(rng.integers(0, 40)), int(rng.integers(0, 3))
            p.cfgs(ld__nidx_mode=1, ld__thresh=thresh, ld__group_log2=group if use_group else 0,
                   ld__group_t3=t3, ld__group_t4=t4,
                   ld__ext_stride=n, ld__dst_stride=nvec_stride)
            p.meta["tiles"].append((lo, hi, thresh, (1 << group, t3, t4) if use_group else None))
            p.emit("ld", buf="nbuf", ext=p.data(f"x{t}", np.ascontiguousarray(xs)), dst=nbase,
                   rows=nvec, cols=n, wait=waits)
            nidx_base, nidx_stride = nbase // 8, nvec_stride // 8
            p.cfgs(ld__nidx_mode=0)
        else:
            mask = ix.threshold(xs, thresh) if nfmt != "dense" else np.ones_like(xs, bool)
            p.meta["tiles"].append((lo, hi, thresh if nfmt != "dense" else -1, None))
            vals = np.zeros((nvec, nvec_stride), np.int8)
            enc = []
            for v in range(nvec):
                kept = xs[v][mask[v]] if npacked else xs[v]
                vals[v, :kept.size] = kept
                if nfmt == "direct":
                    enc.append(ix.encode_direct(mask[v], 64))
                elif nfmt == "stride":
                    enc.append(ix.encode_stride(ix.direct_to_stride(mask[v])))
            p.cfgs(ld__nidx_mode=0, ld__ext_stride=nvec_stride, ld__dst_stride=nvec_stride)
            p.emit("ld", buf="nbuf", ext=p.data(f"x{t}", vals), dst=nbase, rows=nvec,
                   cols=nvec_stride, wait=waits)
            nidx_base, nidx_stride = (t % 2) * (cfg.nidx_bytes // 2), 0
            if enc:
                nidx_stride = _round(max(len(e) for e in enc), 8)
                buf = np.zeros((nvec, nidx_stride), np.uint8)
                for v, e in enumerate(enc):
                    buf[v, :len(e)] = np.frombuffer(e, np.uint8)
                if nvec * nidx_stride > cfg.nidx_bytes // 2:
                    raise ValueError("fc_program: neuron index does not fit; use a bigger config")
                p.cfgs(ld__ext_stride=nidx_stride, ld__dst_stride=nidx_stride)
                p.emit("ld", buf="nidx", ext=p.data(f"xi{t}", buf), dst=nidx_base, rows=nvec,
                       cols=nidx_stride)
        # weights
        banks = layout.encode_weight_tile(ws, wfmt, P, cfg.chunk_bits)
        if max(len(b.wbuf) for b in banks) > cfg.wbuf_bytes // 2 or \
                max(len(b.widx) for b in banks) > cfg.widx_bytes // 2:
            raise ValueError("fc_program: weight tile does not fit; use a bigger config")
        loads = [(buf, g, raw) for g, b in enumerate(banks)
                 for buf, raw in (("wbuf", b.wbuf), ("widx", b.widx)) if raw]
        for k, (buf, g, raw) in enumerate(loads):
            p.emit("ld", buf=buf, lane=g, ext=p.data(f"{buf}{t}_{g}", np.frombuffer(raw, np.uint8),
                                                     "weights", 8),
                   dst=wb if buf == "wbuf" else ib, cols=len(raw),
                   signal=[MX] if k == len(loads) - 1 else [])
        tok.give(LD, MX)
        # compute
        p.cfgs(mx__nfmt=FMT[nfmt], mx__npacked=npacked, mx__wfmt=FMT[wfmt],
               mx__nvec=_decoy(nvec) if operands else nvec,
               mx__nstride=nvec_stride, mx__nidx_stride=nidx_stride, mx__acc_stride=acc_stride,
               mx__mixed=mixed)
        sig = [LD] if t + 2 < len(bounds) else []
        last = t == len(bounds) - 1
        if last:
            sig.append(VX)
        tok.take(LD, MX)
        p.emit("fc", nbuf=nbase, nidx=nidx_base, wbuf=wb, widx=ib, acc=0, n_in=n,
               rows=rows, accumulate=int(t > 0), nvec=nvec if operands else 0, wait=[LD],
               signal=sig)
        for s in sig:
            tok.give(MX, s)
    tok.take(MX, VX)
    _req_strides(p, acc_stride, operands)
    relu = int(rng.integers(0, 2))
    p.meta["relu"] = relu
    p.emit("req", dst=0, src=0, param=0, n_o=nvec, n_i=acc_stride // P,
           relu=relu, wait=[MX], signal=[ST], **_req_operands(acc_stride, operands))
    _store_stride(p, acc_stride, operands, st__ext_stride=rows)
    p.emit("st", src=0, ext=out, rows=nvec, cols=rows, wait=[VX],
           **_st_operand(acc_stride, operands))
    p.emit("halt")
    return p


def _operands(operands: bool | None, shape: int, nvec: int) -> bool:
    """Does a program take nvec and its strides in register operands (isa: Register
    operands)?  ``operands``, or if ``None`` on half of the shapes (chosen
    from the shape, so the random stream stays as it was); never for more vectors than the
    operand holds."""
    fits = nvec < 1 << isa.OPCODE_BY_NAME["fc"].field("nvec").width
    return fits and (shape % 2 == 1 if operands is None else operands)


def _decoy(value: int) -> int:
    """A register value other than ``value``: what the register holds while an operand
    stands in for it, so that a unit reading the register would compute something else."""
    return value % 3 + 1


def _req_strides(p: Program, stride: int, operands: bool) -> None:
    """The VX strides a ``req`` over rows ``stride`` apart reads: in the registers, or in
    its operands (:func:`_req_operands`) with the registers holding decoys."""
    P = p.config.lanes
    reg = stride + P if operands else stride
    p.cfgs(vx__src_stride=reg, vx__dst_stride=reg)


def _req_operands(stride: int, operands: bool) -> dict[str, int]:
    return {"src_stride": stride, "dst_stride": stride} if operands else {}


def _store_stride(p: Program, stride: int, operands: bool, **regs: int) -> None:
    """The ST registers ``regs`` and ``st.src_stride``: ``stride``, or with ``operands`` a
    decoy (the stores carry ``stride``: :func:`_st_operand`)."""
    p.cfgs(st__src_stride=stride + p.config.lanes if operands else stride, **regs)


def _st_operand(stride: int, operands: bool) -> dict[str, int]:
    return {"src_stride": stride} if operands else {}


def conv_program(rng, cfg: CoreConfig, *, c_in=None, c_out=None, h=None, w=None, k=None,
                 stride=None, w_density=None, wfmt=None, operands=None,
                 mem_bytes=1 << 18) -> Program:
    """A k x k convolution of a zero-padded channels-last input, one output row per tile:
    3-D loads gather the row's im2col patches (plane = output pixel, rows = kernel rows,
    cols = k * c_in bytes), fc computes all output channels, req + st write the row."""
    P = cfg.lanes
    c_in = c_in or int(rng.integers(1, 9))
    c_out = c_out or int(rng.integers(1, 2 * P + 2))
    k = k or int(rng.choice([1, 3]))
    stride = stride or int(rng.choice([1, 1, 2]))
    h = h or int(rng.integers(k, 9))
    w = w or int(rng.integers(k, 9))
    pad = k // 2
    w_density = float(rng.choice([0.1, 0.3, 1.0])) if w_density is None else w_density
    wfmt = wfmt or str(rng.choice(["dense", "direct", "stride"]))
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    n_in = k * k * c_in
    nstride = _round(n_in, 64)
    if wo * nstride > cfg.nbuf_bytes // 2:
        raise ValueError("conv_program: a row of patches does not fit half of nbuf")
    p = Program(cfg, mem_bytes=mem_bytes, rom_bytes=1 << 14)
    x = np.maximum(sparse_int8(rng, (h, w, c_in), 0.7), 0)  # post-ReLU activations
    xp = np.zeros((h + 2 * pad, w + 2 * pad, c_in), np.int8)
    xp[pad:pad + h, pad:pad + w] = x
    xa = p.data("x", xp)
    weights = sparse_int8(rng, (c_out, k, k, c_in), w_density).reshape(c_out, n_in)
    acc_stride = _round(c_out, P)
    obuf_row = wo * acc_stride
    if 2 * wo * acc_stride > cfg.acc_elems or 2 * obuf_row > cfg.obuf_bytes:
        raise ValueError("conv_program: output row does not fit")
    prm = p.data("params", _params(rng, acc_stride), "params")
    p.emit("ld", buf="param", ext=prm, dst=0, cols=8 * acc_stride)
    p.load_weight_tile("w", weights, wfmt, signal_last=[])
    out = p.space("y", (ho, wo, c_out))
    row_bytes = (w + 2 * pad) * c_in
    p.cfgs(ld__nidx_mode=1, ld__thresh=0, ld__ext_stride=row_bytes, ld__dst_stride=k * c_in,
           ld__ext_stride3=stride * c_in, ld__dst_stride3=nstride)
    # direct neurons: stride weights take the merge (claim 10)
    operands = _operands(operands, h + w + c_out, wo)
    p.cfgs(mx__nfmt=1, mx__wfmt=FMT[wfmt], mx__nvec=_decoy(wo) if operands else wo,
           mx__nstride=nstride, mx__nidx_stride=nstride // 8, mx__acc_stride=acc_stride,
           mx__mixed=int(wfmt == "stride"))
    _req_strides(p, acc_stride, operands)
    _store_stride(p, acc_stride, operands, st__ext_stride=c_out)
    for oy in range(ho):
        b = oy % 2
        nbase, abase, obase = b * (cfg.nbuf_bytes // 2), b * wo * acc_stride, b * obuf_row
        p.emit("ld", buf="nbuf", ext=xa + oy * stride * row_bytes, dst=nbase, n3=wo, rows=k,
               cols=k * c_in, wait=[MX] if oy >= 2 else [], signal=[MX])
        sig = [VX] + ([LD] if oy + 2 < ho else [])
        p.emit("fc", nbuf=nbase, nidx=nbase // 8, wbuf=0, widx=0, acc=abase, n_in=n_in,
               rows=c_out, nvec=wo if operands else 0, wait=[LD] + ([VX] if oy >= 2 else []),
               signal=sig)
        p.emit("req", dst=obase, src=abase, param=0, n_o=wo, n_i=acc_stride // P, relu=1,
               wait=[MX] + ([ST] if oy >= 2 else []),
               signal=[ST] + ([MX] if oy + 2 < ho else []), **_req_operands(acc_stride, operands))
        p.emit("st", src=obase, ext=out + oy * wo * c_out, rows=wo, cols=c_out, wait=[VX],
               signal=[VX] if oy + 2 < ho else [], **_st_operand(acc_stride, operands))
    p.emit("halt")
    p.meta = {"x": x, "w": weights, "k": k, "stride": stride, "pad": pad, "c_out": c_out}
    return p


def pool_program(rng, cfg: CoreConfig, *, c=None, h=None, w=None, k=None, mode=None,
                 operands=None, mem_bytes=1 << 18) -> Program:
    """k x k, stride k pooling (max, or sum followed by requantisation by 1/k^2);
    ``operands``: the vred, the req and the st carry their strides (:func:`_operands`)."""
    P = cfg.lanes
    c = c or int(rng.integers(1, 2 * P + 1))
    k = k or int(rng.choice([2, 3]))
    h, w = (h or int(rng.integers(1, 4))) * k, (w or int(rng.integers(1, 4))) * k
    mode = mode or str(rng.choice(["max", "sum"]))
    operands = _operands(operands, h + w + c, 1)
    cw = _round(c, P)
    if h * w * cw > cfg.acc_elems // 2:
        raise ValueError("pool_program: input does not fit acc")
    p = Program(cfg, mem_bytes=mem_bytes, rom_bytes=1 << 14)
    x = sparse_int8(rng, (h, w, c), 0.8)
    p.cfgs(ld__ext_stride=c, ld__dst_stride=cw)
    p.emit("ld", buf="acc", ext=p.data("x", x), dst=0, rows=h * w, cols=c)
    scale = 1.0 if mode == "max" else 1.0 / (k * k)
    mult, shift = numerics.quantize_multiplier(scale)
    prm = numerics.pack_params(np.zeros(cw, np.int64), np.full(cw, mult), np.full(cw, shift))
    p.emit("ld", buf="param", ext=p.data("params", prm, "params"), dst=0, cols=prm.size,
           signal=[VX])
    ho, wo = h // k, w // k
    out_base = _round(h * w * cw, P)
    decoy = P if operands else 0  # registers off by a word where the operands stand in
    p.cfgs(vx__src_stride=k * cw + decoy, vx__dst_stride=cw + decoy, vx__k1_stride=cw,
           vx__k2_stride=w * cw)
    window = {"src_stride": k * cw, "dst_stride": cw} if operands else {}
    for oy in range(ho):
        p.emit("vred", mode=mode, dst=out_base + oy * wo * cw, src=oy * k * w * cw, n_o=wo,
               n_i=cw // P, k1=k, k2=k, wait=[LD] if oy == 0 else [], **window)
    p.cfgs(vx__src_stride=cw + decoy, vx__dst_stride=cw + decoy)
    p.emit("req", dst=0, src=out_base, param=0, n_o=ho * wo, n_i=cw // P, signal=[ST],
           **_req_operands(cw, operands))
    y = p.space("y", (ho, wo, c))
    _store_stride(p, cw, operands, st__ext_stride=c)
    p.emit("st", src=0, ext=y, rows=ho * wo, cols=c, wait=[VX], **_st_operand(cw, operands))
    p.emit("halt")
    return p


def eltwise_program(rng, cfg: CoreConfig, *, c=None, n=None, in_params: bool | None = None,
                    mem_bytes=1 << 18) -> Program:
    """``y = ReLU(requant(a * ma + b * mb))`` over ``n`` pixels of ``c`` channels; with
    ``in_params`` (drawn when None) the multipliers are in the parameter memory (``vewp``)."""
    P = cfg.lanes
    c = c or int(rng.integers(1, 2 * P + 1))
    n = n or int(rng.integers(1, 12))
    cw = _round(c, P)
    p = Program(cfg, mem_bytes=mem_bytes, rom_bytes=1 << 14)
    a, b = sparse_int8(rng, (n, c), 0.9), sparse_int8(rng, (n, c), 0.9)
    p.cfgs(ld__ext_stride=c, ld__dst_stride=cw)
    p.emit("ld", buf="acc", ext=p.data("a", a), dst=0, rows=n, cols=c)
    p.emit("ld", buf="acc", ext=p.data("b", b), dst=n * cw, rows=n, cols=c)
    mult, shift = numerics.quantize_multiplier(float(rng.uniform(0.002, 0.02)))
    ma, mb = int(rng.integers(-300, 300)), int(rng.integers(-300, 300))
    # vew carries its multipliers, vewp reads them from the row after the requantisation's
    drawn = bool(rng.integers(2))
    in_params = drawn if in_params is None else in_params
    prm = numerics.pack_params(np.zeros(cw, np.int64), np.full(cw, mult), np.full(cw, shift))
    if in_params:
        prm = np.concatenate([prm, numerics.pack_ew_multipliers(ma, mb, cfg.param_row_bytes)])
    p.emit("ld", buf="param", ext=p.data("params", prm, "params"), dst=0, cols=prm.size,
           signal=[VX])
    p.cfgs(vx__src_stride=cw, vx__b_stride=cw, vx__dst_stride=cw)
    p.meta = {"kind": "eltwise", "a": a, "b": b, "ma": ma, "mb": mb}
    scaled = dict(param=cw // P) if in_params else dict(ma=ma, mb=mb)
    p.emit("vewp" if in_params else "vew", dst=2 * n * cw, a=0, b=n * cw, n_o=n, n_i=cw // P,
           relu=1, wait=[LD], **scaled)
    p.emit("req", dst=0, src=2 * n * cw, param=0, n_o=n, n_i=cw // P, signal=[ST])
    y = p.space("y", (n, c))
    p.cfgs(st__src_stride=cw, st__ext_stride=c)
    p.emit("st", src=0, ext=y, rows=n, cols=c, wait=[VX])
    p.emit("halt")
    return p


GENERATORS = {"fc": fc_program, "conv": conv_program, "pool": pool_program,
              "eltwise": eltwise_program}


def random_program(rng, cfg: CoreConfig, kind: str | None = None) -> Program:
    """A random program of ``kind`` (default: random), retried until it fits ``cfg``."""
    for _ in range(50):
        k = kind or str(rng.choice(list(GENERATORS)))
        try:
            return GENERATORS[k](rng, cfg)
        except ValueError:
            continue
    raise ValueError(f"could not generate a {kind or 'random'} program that fits {cfg}")


def loop_program(rng, cfg: CoreConfig, *, shape=None, rotated: bool | None = None,
                 flip: bool | None = None, mem_bytes=1 << 18) -> Program:
    """Hardware loops: ``y = requant(x)`` over tiles ``x[..., t0, t1, t2]`` of ``n`` int8
    values, walked by :data:`~snpu.verif.isa.LOOP_DEPTH` nested loops (activation and
    output streams move): three over ``t0, t1, t2`` and, around them, loops over one or two
    blocks of those (the leading dimensions of ``x``), with a
    zero-trip loop and a one-trip loop in the middle and random ``cfg`` padding in the
    bodies (so bodies cross instruction-cache lines).  The innermost loop is one of
    (``flip`` and ``rotated``, default random):

    * plain: each iteration loads, requantises and stores one tile;
    * rotated: iteration t stores tile t - 1, then loads and computes tile t; its first
      iteration enters the body at the load (``entry``), the last tile is stored after it;
    * ``flip``: software-pipelined over the two halves of acc and obuf: iteration t
      requantises and stores tile t - 1 while it loads tile t into the other half; the
      body is written for even iterations and the loop flips its halves on odd ones, so
      the requantisation reads what the previous iteration loaded only if the flips are
      right.  Rotated too (the first iteration only loads).

    Each tile follows the load / compute / store token protocol whose tokens balance over
    one iteration: LD -> VX (acc loaded), VX -> LD (acc free), VX -> ST (obuf ready), ST ->
    VX (obuf free)."""
    P = cfg.lanes
    t0, t1, t2 = shape or (int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 6)))
    n = P * int(rng.integers(1, 4))
    blocks = tuple(int(rng.integers(1, 3)) for _ in range(isa.LOOP_DEPTH - 3))
    dims = (*blocks, t0, t1, t2)
    p = Program(cfg, mem_bytes=mem_bytes, rom_bytes=1 << 13)
    x = sparse_int8(rng, (*dims, n), 0.9)
    xa = p.data("x", x)
    y = p.space("y", (*dims, n))
    mult, shift = numerics.quantize_multiplier(float(rng.uniform(0.3, 0.9)))
    prm = numerics.pack_params(np.zeros(n, np.int64), np.full(n, mult), np.full(n, shift))
    p.emit("ld", buf="param", ext=p.data("params", prm, "params"), dst=0, cols=prm.size,
           signal=[VX])
    p.emit("cfg", reg="vx.src_stride", value=0, wait=[LD], signal=[LD])  # acc starts free
    p.emit("cfg", reg="st.src_stride", value=0, signal=[VX])              # obuf starts free
    relu = int(rng.integers(0, 2))
    p.meta = {"kind": "loop", "x": x, "mult": mult, "shift": shift, "relu": relu}
    halves = half_sizes(cfg)
    acc1, ob1 = halves["acc"], halves["obuf"]

    def pad():  # cfg no-ops of random length: bodies of any size
        return [isa.make("cfg", reg="vx.k1_stride", value=0)
                for _ in range(int(rng.integers(0, 4)))]

    def store(ext, src=0):
        return isa.make("st", src=src, ext=ext & 0xFFFFFFFF, cols=n, walk=1, wait=[VX],
                        signal=[VX])

    def load(dst=0):
        return isa.make("ld", buf="acc", ext=xa, dst=dst, cols=n, walk=1, wait=[VX], signal=[VX])

    def compute(src=0, dst=0):
        return isa.make("req", dst=dst, src=src, param=0, n_i=n // P, relu=relu, wait=[LD, ST],
                        signal=[LD, ST])

    load_and_compute = [load(), *pad(), compute()]
    if flip is None:
        flip = not rng.integers(0, 3)
    if rotated is None:
        rotated = not rng.integers(0, 2)
    if flip:  # iteration t (even as written): tile t - 1 from the halves 1, tile t into 0
        tile = [compute(acc1, ob1), store(y - n, ob1), *pad(), load(0)]
        last = (t2 - 1) % 2  # the last tile's halves, after the loop
        inner = [isa.make("loop", count=t2, body=len(tile), in_inc=n, out_inc=n,
                          entry=len(tile) - 1, flip=1),
                 *tile, compute(last * acc1, last * ob1), store(y + (t2 - 1) * n, last * ob1)]
    elif not rotated:  # the tile's words in order
        tile = [*load_and_compute, *pad(), store(y)]
        inner = [isa.make("loop", count=t2, body=len(tile), in_inc=n, out_inc=n), *tile]
    else:  # rotated: iteration t stores tile t - 1, then loads and computes tile t; the
        # first iteration enters at the load, the last tile is stored after the loop
        tile = [store(y - n), *pad(), *load_and_compute]
        inner = [isa.make("loop", count=t2, body=len(tile), in_inc=n, out_inc=n,
                          entry=len(tile) - len(load_and_compute)),
                 *tile, store(y + (t2 - 1) * n)]
    skipped = [isa.make("loop", count=0, body=2), isa.make("cfg", reg="vx.k2_stride", value=1),
               isa.make("halt")]  # never dispatched: a zero-trip body
    once = [isa.make("loop", count=1, body=1), isa.make("cfg", reg="vx.k2_stride", value=0)]
    middle = [*pad(), *skipped, *inner, *once]
    mid_loop = [isa.make("loop", count=t1, body=len(middle), in_inc=t2 * n, out_inc=t2 * n),
                *middle]
    outer = [isa.make("loop", count=t0, body=len(mid_loop), in_inc=t1 * t2 * n,
                      out_inc=t1 * t2 * n), *mid_loop]
    for k in reversed(range(len(blocks))):  # the loops over blocks, around the rest
        step = int(np.prod(dims[k + 1:])) * n
        outer = [isa.make("loop", count=blocks[k], body=len(outer), in_inc=step, out_inc=step),
                 *outer]
    p.instrs += outer
    p.emit("cfg", reg="ld.thresh", value=0, wait=[VX])      # the last iteration's tokens
    p.emit("cfg", reg="vx.dst_stride", value=0, wait=[ST])
    p.emit("halt")
    return p


GENERATORS["loop"] = loop_program


def net_program(rng, cfg: CoreConfig, *, n=None, mem_bytes=1 << 18) -> Program:
    """Local memory and the NET unit on one core (a 1 x 1 mesh: sends come back to it):
    ``x`` is requantised into local memory, sent (in packets of a random size) to another
    local region, received, loaded from local memory, requantised again and stored to
    ``y``.  The parameters are the identity, so ``y == x``."""
    from .isa import LOCAL_BASE

    P = cfg.lanes
    n = n or P * int(rng.integers(1, 9))
    p = Program(cfg, mem_bytes=mem_bytes, rom_bytes=1 << 12)
    x = sparse_int8(rng, (n,), 0.8)
    a = 8 * int(rng.integers(0, (cfg.local_bytes // 2 - n) // 8))
    b = cfg.local_bytes // 2 + 8 * int(rng.integers(0, (cfg.local_bytes // 2 - n) // 8))
    tag = int(rng.integers(0, 16))
    prm = numerics.pack_params(np.zeros(n, np.int64), np.full(n, 1 << 14), np.full(n, 14))
    p.meta = {"kind": "net", "x": x}
    y = p.space("y", (n,))
    p.emit("ld", buf="param", ext=p.data("params", prm, "params"), dst=0, cols=prm.size,
           signal=[VX])
    p.emit("cfg", reg="vx.src_stride", value=0, wait=[LD])
    p.emit("ld", buf="acc", ext=p.data("x", x), dst=0, cols=n, signal=[VX])
    p.emit("req", dst=0, src=0, param=0, n_i=n // P, wait=[LD], signal=[ST])
    p.emit("st", src=0, ext=LOCAL_BASE + a, cols=n, wait=[VX], signal=[NET, VX])
    p.emit("cfg", reg="net.packet_log2", value=int(rng.integers(0, 4)))
    p.emit("send", x=0, y=0, src=a, dst=b, bytes=n, tag=tag, wait=[ST])
    p.emit("recv", tag=tag, dst=b, bytes=n, signal=[LD])
    p.emit("ld", buf="acc", ext=LOCAL_BASE + b, dst=P * 8, cols=n, wait=[NET], signal=[VX])
    p.emit("req", dst=P * 8, src=P * 8, param=0, n_i=n // P, wait=[LD, ST], signal=[ST])
    p.emit("st", src=P * 8, ext=y, cols=n, wait=[VX])
    p.emit("halt")
    return p


GENERATORS["net"] = net_program


def compress_program(rng, cfg: CoreConfig, *, n=None, c=None, density=None,
                     mem_bytes=1 << 18) -> Program:
    """Compressed activations (``stc`` / ``ldc``) both ways: ``x`` (``n`` rows of ``c``
    values at a random density) is loaded into the accumulators, requantised by the
    identity into the output cache and stored compressed (``stc``).  The stream is expanded
    back into the accumulators (``ldc buf=acc``), requantised and stored dense to ``y``; and
    expanded into nbuf with its neuron index (``ldc buf=nbuf``), multiplied by identity
    weights in an ``fc`` reading the direct neuron index, requantised and stored to ``z``.
    So ``y == z == x``, the stream is :func:`~.act_compress.encode_stream` of ``x``, and
    every channel's index bit and value is read back.  Half the time the stream lives in
    the core's local memory."""
    P = cfg.lanes
    c = c or int(rng.integers(1, min(200, cfg.param_rows * P, cfg.acc_elems // 3 - 8) + 1))
    density = float(rng.choice([0.0, 0.1, 0.4, 0.8, 1.0])) if density is None else density
    cw = _round(c, max(P, 8))   # row pitch in acc, obuf and the parameters: whole words
    nw = _round(c, 64)          # row pitch in nbuf: whole 64-bit index chunks
    most = min(8, cfg.acc_elems // (3 * cw), cfg.obuf_bytes // (2 * cw), cfg.nbuf_bytes // nw,
               8 * cfg.nidx_bytes // nw)
    n = n or int(rng.integers(1, max(1, most) + 1))
    if 3 * n * cw > cfg.acc_elems or 2 * n * cw > cfg.obuf_bytes or n * nw > cfg.nbuf_bytes \
            or n * nw // 8 > cfg.nidx_bytes or cw > cfg.param_rows * P:
        raise ValueError("compress_program: does not fit; use a bigger config")
    p = Program(cfg, mem_bytes=mem_bytes, rom_bytes=1 << 12)
    x = sparse_int8(rng, (n, c), density)
    prm = numerics.pack_params(np.zeros(cw, np.int64), np.full(cw, 1 << 14), np.full(cw, 14))
    p.meta = {"kind": "compress", "x": x}
    bound = act_compress.stream_bound(n, c)
    if rng.random() < 0.5 and bound <= cfg.local_bytes:  # the stream in local memory
        stream = isa.LOCAL_BASE + 8 * int(rng.integers(0, (cfg.local_bytes - bound) // 8 + 1))
        p.meta["local_stream"] = stream - isa.LOCAL_BASE
    else:
        stream = p.space("stream", (bound,), "uint8", "scratch", align=8)
    y, z = p.space("y", (n, c)), p.space("z", (n, c))
    p.emit("ld", buf="param", ext=p.data("params", prm, "params"), dst=0, cols=prm.size)
    p.cfgs(ld__ext_stride=c, ld__dst_stride=cw)
    p.emit("ld", buf="acc", ext=p.data("x", x), dst=0, rows=n, cols=c, signal=[VX])
    p.cfgs(vx__src_stride=cw, vx__dst_stride=cw)
    p.emit("req", dst=0, src=0, param=0, n_o=n, n_i=cw // P, wait=[LD], signal=[ST])
    p.cfgs(st__src_stride=cw, st__ext_stride=c)
    p.emit("stc", src=0, ext=stream, rows=n, cols=c, wait=[VX], signal=[LD])
    p.emit("ldc", buf="acc", dst=n * cw, ext=stream, rows=n, cols=c, wait=[ST], signal=[VX])
    p.emit("req", dst=n * cw, src=n * cw, param=0, n_o=n, n_i=cw // P, wait=[LD],
           signal=[ST])
    p.emit("st", src=n * cw, ext=y, rows=n, cols=c, wait=[VX])
    # the same stream into nbuf with its index, through identity weights
    p.load_weight_tile("eye", np.eye(c, dtype=np.int8), "direct")
    p.cfgs(ld__dst_stride=nw)
    p.emit("ldc", buf="nbuf", dst=0, ext=stream, rows=n, cols=c, signal=[MX])
    p.cfgs(mx__nfmt=FMT["direct"], mx__npacked=0, mx__wfmt=FMT["direct"], mx__nvec=n,
           mx__nstride=nw, mx__nidx_stride=nw // 8, mx__acc_stride=cw, mx__mixed=0)
    p.emit("fc", nbuf=0, nidx=0, wbuf=0, widx=0, acc=2 * n * cw, n_in=c, rows=c, wait=[LD],
           signal=[VX])
    p.emit("req", dst=0, src=2 * n * cw, param=0, n_o=n, n_i=cw // P, wait=[MX],
           signal=[ST])
    p.emit("st", src=0, ext=z, rows=n, cols=c, wait=[VX])
    p.emit("halt")
    return p


GENERATORS["compress"] = compress_program
