"""Instruction control unit: program sequencer (loops), decode, legality check, dispatch."""

import operator
from functools import reduce

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from snpu.config import CoreConfig
from snpu.verif import isa
from snpu.verif.isa import HEADER_BITS, LOOP_DEPTH, NUM_UNIT_BITS, OPCODE_BITS, Unit
from snpu.verif.sequencer import (FLIP_BITS, LINE_WORDS, PING_PONG_LOADS, PING_PONG, STREAMS,
                                  half_sizes)

from .icache import FETCH_REQ, FETCHED
from .predecode import Kind
from .microcode import PC_BITS, UNITS, micro_layout, op_codes
from .status import ErrorCode

_LINE_BITS = (LINE_WORDS - 1).bit_length()   # a ROM word's index inside its cache line

_LOOP = isa.OPCODE_BY_NAME["loop"]
_INC_BITS = _LOOP.field("in_inc").width
FRAME = data.StructLayout({
    "start": PC_BITS, "end": PC_BITS, "left": _LOOP.field("count").width,
    # the cache line after the start's (what the fetcher's next-line register takes when
    # the frame jumps back): kept beside the start, so no sum lies on the walk
    "start_line": PC_BITS - _LINE_BITS,
    **{f"inc_{s}": signed(_INC_BITS) for s in STREAMS},
    # the loops' offset for each stream so far: this frame's iteration number times its
    # increment, plus the frame below's offset (what a walking word at this depth adds)
    **{f"off_{s}": 32 for s in STREAMS},
    "flip": _LOOP.field("flip").width,  # the kinds of ping-pong operands (FLIP_BITS) the
    # loop flips on odd iterations
    "odd": 1,           # its current iteration is odd
})


def _field(word, opcode: isa.Opcode, name: str):
    f = opcode.field(name)
    v = word[opcode.offsets[name]:opcode.offsets[name] + f.width]
    return v.as_signed() if f.kind == "sint" else v


class Dispatcher(wiring.Component):
    """Sequences the program, decodes each instruction word into a microinstruction and
    appends it to the queue of the unit that executes it, in program order.

    **Sequencing** (specification: :class:`snpu.verif.sequencer.Sequencer`).  Words are
    requested from the instruction cache by ROM index, from 0 on.  A ``loop`` word pushes a
    frame (body start and end, iterations left, increments, offsets); after the last word
    of a body the next request goes back to its start while iterations remain, else the
    frame pops (enclosing frames ending on the same word are handled in the same cycle).  A
    ``ld`` / ``st`` with ``walk=1`` is dispatched with the sum of the frames' offsets for its
    stream (each frame's offset is its iteration number times its increment) beside its
    ``ext`` (``walk``: the unit's front end adds the two).  Each frame keeps that sum up to
    itself (a pushed frame starts from the one below, a jump back adds the frame's
    increment), so the dispatched offset is the top frame's: a multiplexer, no adder.
    Inside ``flip`` loops, the ping-pong operands of the word
    (:func:`snpu.verif.sequencer.ping_pong`) of a kind an odd number of the loops flipping it
    are on odd iterations have their half bit inverted: an XOR of one bit per operand, from
    registers.

    **Fetch timing.**  The next word's address is registered in the cycle the current one
    is dispatched and held until the cache takes it; the cache looks it up and reads it the
    cycle after, so a word takes two cycles on cache hits
    (:data:`~snpu.verif.timing.DISPATCH_CYCLES`), a jump back to a body's start no more
    than the next word.  The address is chosen among registers: each word's successor is
    walked through the frames while the word's own request is out (from which frames end
    at the word, compared as its address was chosen); a zero-trip loop goes on after its
    body or as the walk from the innermost frame's end goes, which is made every cycle;
    so no path runs from the fetched word, nor from the frames' walk, through the cache's
    lookup into its block RAM.  A
    ``loop`` word takes two cycles more (:data:`~snpu.verif.timing.LOOP_WORD_CYCLES`: its
    body's end and entry are registered, then its legality, before it is consumed), and its
    successor, even for a zero-trip loop or one entering its body at ``entry``, comes
    from those registers.

    **Legality** is generated from the ISA tables (:mod:`snpu.verif.isa`).  What depends on
    the word alone (known opcode, reserved bits, enumerations, tokens, ``cfg`` registers and
    values, a loop body of at least one word) comes predecoded with it
    (:class:`~.predecode.Predecoder`, run by the instruction cache as the line fills); here
    a ``loop`` is checked against where it runs: its body stays inside the ROM and its
    enclosing body, at most :data:`~snpu.verif.isa.LOOP_DEPTH` deep.  Requesting a word at
    or past ``rom_words`` (no ``halt``) is illegal too.  An illegal word (or one whose fetch failed) stops
    dispatching with ``ILLEGAL`` (``FETCH``) and its ROM index.  ``sync`` waits until
    ``units_idle``; ``halt`` does the same and then raises ``halted``.
    """

    def __init__(self, config: CoreConfig | None = None):
        #: the bit of each ping-pong buffer's half (its size is a power of two)
        self._half_bit = {b: h.bit_length() - 1 for b, h in half_sizes(config or CoreConfig()).items()}
        super().__init__({
            "start": In(1),          # request word 0 (the cycle after the core's start)
            "rom_words": In(PC_BITS + 1),
            "fetch_req": Out(stream.Signature(FETCH_REQ)),
            "fetch_next_pc": Out(PC_BITS), "fetch_next_load": Out(1),
            "fetch_next_line": Out(PC_BITS - _LINE_BITS),
            "fetch_resp": In(stream.Signature(FETCHED)),
            **{f"q_{u.name.lower()}": Out(stream.Signature(micro_layout(u))) for u in UNITS},
            "units_idle": In(1),
            "stop": In(1),
            "halted": Out(1),
            "error": Out(ErrorCode),
            "error_pc": Out(PC_BITS),
        })

    def queue(self, unit: Unit):
        return getattr(self, f"q_{unit.name.lower()}")

    def _flip_mask(self, word, o: isa.Opcode, name: str, flipped):
        """What inverts operand ``name`` of opcode ``o``'s ``word`` into the other half of
        its buffer while its kind is ``flipped`` (a ``FLIP_BITS`` mask): its half bit, or 0
        if it is no ping-pong operand."""
        width = o.field(name).width
        if o.mnemonic in ("ld", "ldc") and name == "dst":
            buf = word[o.offsets["buf"]:o.offsets["buf"] + o.field("buf").width]
            mask = C(0, width)
            for code, b in PING_PONG_LOADS.items():
                mask = Mux((buf == code) & (flipped & FLIP_BITS[b]).any(),
                           C(1 << self._half_bit[b], width), mask)
            return mask
        b = PING_PONG.get(o.mnemonic, {}).get(name)
        if b is None:
            return C(0, width)
        return Mux((flipped & FLIP_BITS[b]).any(), C(1 << self._half_bit[b], width), 0)

    def elaborate(self, platform):
        m = Module()
        word = self.fetch_resp.payload.word
        pc = self.fetch_resp.payload.pc
        opcode = word[:OPCODE_BITS]
        wait = word[OPCODE_BITS:OPCODE_BITS + NUM_UNIT_BITS]
        signal = word[OPCODE_BITS + NUM_UNIT_BITS:HEADER_BITS]

        # ---- Loop frames: frames[0] is the outermost; `depth` of them are valid.
        frames = [Signal(FRAME, name=f"frame{k}") for k in range(LOOP_DEPTH)]
        depth = Signal(range(LOOP_DEPTH + 1))
        depth_is = Signal(LOOP_DEPTH)  # one-hot: bit k is depth == k + 1 (0 for depth 0)
        offset = {s: Signal(32, name=f"offset_{s}") for s in STREAMS}
        with m.Switch(depth):
            for k in range(1, LOOP_DEPTH + 1):
                with m.Case(k):
                    m.d.comb += [offset[s].eq(frames[k - 1][f"off_{s}"]) for s in STREAMS]
        # per kind of ping-pong operand (FLIP_BITS), an odd number of the loops flipping it
        # on odd iterations: its operands in the other half.  A register, the XOR over the
        # valid frames of `flip` where `odd`, kept up to date with the frame updates (see
        # there): the decode does not wait for a multiplexer on `depth`.
        flipped = Signal.like(frames[0].flip)

        # ---- Decode: legality, kind and target come predecoded with the word; here the
        # operand fields become the target unit's microinstruction.
        pre = self.fetch_resp.payload.pre
        legal = pre.legal
        is_loop = pre.kind == Kind.LOOP
        micro = {u: Signal(micro_layout(u), name=f"micro_{u.name.lower()}") for u in UNITS}
        for u in UNITS:
            m.d.comb += [micro[u].pc.eq(pc), micro[u].wait.eq(wait), micro[u].signal.eq(signal)]

        weight_bufs = [isa.BUFFERS[b] for b in ("wbuf", "widx", "param")]
        with m.Switch(opcode):
            for o in isa.OPCODES:
                if o.reserved or (o.unit is None and o.mnemonic != "cfg"):
                    continue
                with m.Case(o.code):
                    if o.mnemonic == "cfg":
                        reg, value, reg2, value2, two, reg3, value3, three = (
                            _field(word, o, f) for f in ("reg", "value", "reg2", "value2", "two",
                                                         "reg3", "value3", "three"))
                        with m.Switch(reg):
                            for r in isa.REGISTERS:
                                with m.Case(r.number):
                                    mu = micro[r.unit]
                                    m.d.comb += [mu.op.eq(op_codes(r.unit)["cfg"]),
                                                 mu.args.cfg.index.eq(r.index),
                                                 mu.args.cfg.value.eq(value),
                                                 # predecoded legal: reg2 and reg3
                                                 # are registers of the same unit
                                                 mu.args.cfg.two.eq(two),
                                                 mu.args.cfg.index2.eq(reg2[:5]),
                                                 mu.args.cfg.value2.eq(value2),
                                                 mu.args.cfg.three.eq(three),
                                                 mu.args.cfg.index3.eq(reg3[:5]),
                                                 mu.args.cfg.value3.eq(value3)]
                    else:
                        u = o.unit
                        mu = micro[u]
                        m.d.comb += mu.op.eq(op_codes(u)[o.mnemonic])
                        member = getattr(mu.args, o.mnemonic)
                        for f in o.fields:
                            v = word[o.offsets[f.name]:o.offsets[f.name] + f.width]
                            v = v ^ self._flip_mask(word, o, f.name, flipped)
                            m.d.comb += getattr(member, f.name).eq(v)
                        if "walk" in o.offsets:
                            # the loops' offset for ext goes beside it (the unit's front
                            # end adds it)
                            walk = word[o.offsets["walk"]]
                            if o.mnemonic == "st":
                                off = offset["out"]
                            else:
                                buf = word[o.offsets["buf"]:o.offsets["buf"] + 3]
                                is_w = Cat(*[buf == b for b in weight_bufs]).any()
                                off = Mux(is_w, offset["w"], offset["in"])
                            m.d.comb += mu.walk.eq(Mux(walk, off, 0))

        def line_after(pc, plus_one=False):
            """The cache line after ``pc``'s (after ``pc + 1``'s with ``plus_one``): one sum
            from ``pc``'s register, in parallel with the choice among the successors."""
            step = Mux(pc[:_LINE_BITS].all(), 2, 1) if plus_one else 1
            return (pc[_LINE_BITS:] + step)[:PC_BITS - _LINE_BITS]

        # ---- The loop word's context checks.  A loop word takes three cycles: in the first
        # its body's end and entry are computed into registers, in the second the checks
        # against the ROM and the frames are computed from those, in the third it is
        # consumed (or faults) from them: no sum over the fetched word lies before a
        # comparison, nor any of them on the path to the next request.
        body = _field(word, _LOOP, "body")
        count = _field(word, _LOOP, "count")
        # The innermost frame's end, registered every cycle: the frames change only the
        # cycle after a word is consumed, which is before the next word arrives
        # (DISPATCH_CYCLES), so from a loop word's first cycle to its consumption they
        # hold, and its checks (its second cycle) read it a cycle late without a
        # multiplexer on `depth` before the comparison.  The depth's tests come from the
        # one-hot `depth_is`.
        top_end = Signal(PC_BITS)
        with m.Switch(depth):
            for k in range(1, LOOP_DEPTH + 1):
                with m.Case(k):
                    m.d.sync += top_end.eq(frames[k - 1].end)

        # ---- Next word: after `last` is done, go on after it or back to a body's start.
        # Walking down from the top frame: a frame ending at `last` with no iterations left
        # pops and the walk goes on to the frame below; one with iterations left jumps back.
        # `ends`: which frames end at `last`; `last_trip` (a register, written with `left`):
        # which frames have no iterations left.  The walk is made a cycle before its result
        # is used, into registers (see `seq_*` and `top_*`): the successor's choice, which
        # the cache's block RAM address waits for, is then a few multiplexers.
        last_trip = Signal(LOOP_DEPTH)

        def walk(after, after_line, ends, trips, depth_one_hot, starts, start_lines, tag):
            """The successor of a body's word ``last`` (``after`` = ``last + 1`` and
            ``after_line`` = the line after its line), with ``ends`` the frames ending at
            ``last``, ``trips`` those on their last iteration, ``depth_one_hot`` the depth,
            ``starts`` the frames' body starts and ``start_lines`` the lines after theirs:
            which frames pop and jump there, their number, and where the word after it is
            (and the line after that word's)."""
            reach = [Signal(name=f"{tag}_reach{k}") for k in range(LOOP_DEPTH)]
            popped = Signal(LOOP_DEPTH, name=f"{tag}_popped")
            jump = Signal(LOOP_DEPTH, name=f"{tag}_jump")
            for k in reversed(range(LOOP_DEPTH)):
                below_top = (reach[k + 1] & popped[k + 1]) if k + 1 < LOOP_DEPTH else C(0)
                m.d.comb += [reach[k].eq(depth_one_hot[k] | below_top),
                             popped[k].eq(reach[k] & ends[k] & trips[k]),
                             jump[k].eq(reach[k] & ends[k] & ~trips[k])]
            nxt = Signal(PC_BITS + 1, name=f"{tag}_next")
            nxt_line = Signal(PC_BITS - _LINE_BITS, name=f"{tag}_next_line")
            # (at most one frame jumps: the frames jumping back are ORed, not chained)
            back = reduce(operator.or_, [Mux(jump[k], starts[k], 0) for k in range(LOOP_DEPTH)])
            back_line = reduce(operator.or_, [Mux(jump[k], start_lines[k], 0)
                                              for k in range(LOOP_DEPTH)])
            m.d.comb += [nxt.eq(Mux(jump.any(), back, after)),
                         nxt_line.eq(Mux(jump.any(), back_line, after_line))]
            return nxt, nxt_line, popped, jump, sum(popped[k] for k in range(LOOP_DEPTH))

        def walk_registers(tag):
            return (Signal(PC_BITS + 1, name=f"{tag}_next_r"),
                    Signal(PC_BITS - _LINE_BITS, name=f"{tag}_next_line_r"),
                    Signal(LOOP_DEPTH, name=f"{tag}_popped_r"),
                    Signal(LOOP_DEPTH, name=f"{tag}_jump_r"),
                    Signal(range(LOOP_DEPTH + 1), name=f"{tag}_pops_r"))

        loop_seen = Signal()               # the next four registers hold the current loop word's
        loop_end = Signal(PC_BITS + 1)     # its body's last word
        loop_zero = Signal()               # it runs its body zero times
        loop_late = Signal()               # it runs zero times or enters inside its body
        loop_entry = Signal(PC_BITS + 1)   # its first iteration's first word
        loop_checked = Signal()            # the next three hold its checks
        loop_ok = Signal()                 # its body fits the ROM and the enclosing body
        loop_end_last = Signal()           # its body ends the ROM
        # and what its frame is pushed with, registered in its first cycle: no adder or
        # comparison over the fetched word lies before the frames
        loop_start = Signal(PC_BITS)       # its body's first word
        # (from its second cycle) the line after its body's first word's
        loop_start_line = Signal(PC_BITS - _LINE_BITS)
        # (from its second cycle) it goes on at its entry or after its body (`loop_late`,
        # set with `loop_checked`), and there: its successor and the line after that
        # word's, chosen into registers (no choice between them as it goes)
        going_late = Signal()
        late_next = Signal(PC_BITS + 1)
        late_line = Signal(PC_BITS - _LINE_BITS)
        loop_left = Signal.like(frames[0].left)
        loop_one = Signal()                # it runs its body once
        loop_two = Signal()                # ... twice
        loop_flip = Signal.like(frames[0].flip)
        loop_inc = {s: Signal(signed(_INC_BITS), name=f"loop_inc_{s}") for s in STREAMS}
        # A loop word's successor when it skips its body (zero trips).  A legal loop lies
        # inside the innermost frame's body (its end at or before `top_end`), and every
        # frame's body inside the one below it, so frames end at the loop's last word only
        # if it is the innermost frame's last: then the frames ending there are those ending
        # where the innermost does, and the walk is the same for every loop word.  That walk
        # (`top_*`) is made every cycle from registers into registers.  Which frames end
        # where the innermost does: a frame's end changes only as it is pushed, when the
        # frames below it stay, so as a loop word pushes frame `p`, the frames below ending
        # where it does come from `end_is_loop_end` (every frame's end compared with the loop
        # word's, registered from its second cycle on) into `same_end[k, p]`; those ending
        # where the innermost does are registered every cycle (`ends_top`).  Both are current
        # the cycle after a word goes, the walk's registers two cycles later; a loop word's
        # third cycle, where they are used, is four cycles after its predecessor went at the
        # earliest.  The loop word's second cycle compares its end with `top_end` and takes
        # the walk it skips to into registers (`skip_*`, below); its third then chooses
        # between registers.
        end_is_loop_end = Signal(LOOP_DEPTH)
        m.d.sync += end_is_loop_end.eq(Cat(*[f.end == loop_end for f in frames]))
        same_end = {(k, j): Signal(name=f"same_end{k}_{j}")
                    for k in range(LOOP_DEPTH) for j in range(k + 1, LOOP_DEPTH)}
        ends_top = Signal(LOOP_DEPTH)
        m.d.sync += ends_top.eq(Cat(*[depth_is[k] | Cat(*[depth_is[j] & same_end[k, j]
                                                          for j in range(k + 1, LOOP_DEPTH)]).any()
                                      for k in range(LOOP_DEPTH)]))
        top_walk = walk(C(0, PC_BITS + 1), C(0, PC_BITS - _LINE_BITS), ends_top, last_trip,
                        depth_is, [f.start for f in frames], [f.start_line for f in frames],
                        "top")
        top_back, top_back_line, top_popped, top_jump, top_pops = top_regs = walk_registers("top")
        m.d.sync += [r.eq(v) for r, v in zip(top_regs, top_walk)]
        # the zero-trip loop's walk, chosen in the loop word's second cycle (the `top_*`
        # registers are current by then): the innermost frame's if the skipped body ends
        # where the innermost does, else none (the word after the body, and the line after
        # that word's; those go into `late_next` and `late_line`)
        skip_popped = Signal(LOOP_DEPTH, name="skip_popped_r")
        skip_jump = Signal(LOOP_DEPTH, name="skip_jump_r")
        skip_pops = Signal(range(LOOP_DEPTH + 1), name="skip_pops_r")

        consume = Signal()       # the current word is dispatched / executed this cycle
        # The loop word's values are taken while it is held, whether or not it goes: they
        # are the same every cycle it is held (the frames change only after a word goes),
        # so `consume`, which waits for the fetched word and the queues, enables none of
        # them; it only clears the flags below.
        loop_held = self.fetch_resp.valid & is_loop
        with m.If(loop_held):
            entry = _field(word, _LOOP, "entry")
            m.d.sync += [loop_end.eq(pc + body), loop_zero.eq(count == 0),
                         loop_late.eq((count == 0) | (entry != 0)), loop_entry.eq(pc + 1 + entry),
                         loop_start.eq(pc + 1), loop_left.eq(count - 1), loop_one.eq(count == 1),
                         loop_two.eq(count == 2),
                         loop_flip.eq(_field(word, _LOOP, "flip"))]
            m.d.sync += [loop_inc[s].eq(_field(word, _LOOP, name)) for s, name in STREAMS.items()]
            with m.If(loop_seen):
                end_after = loop_end + 1
                m.d.sync += loop_start_line.eq(line_after(loop_start))
                m.d.sync += [loop_ok.eq((loop_end < self.rom_words) & ~depth_is[-1]
                                        & (~depth_is.any() | (loop_end <= top_end))),
                             loop_end_last.eq(end_after == self.rom_words)]
                at_top = loop_end == top_end
                # a zero-trip loop skips to the innermost frame's jump back when its body
                # ends where that frame's does, else to the word after its body; any other
                # late loop enters at its entry.  (The comparison selects last, between the
                # jump back and the other choice made beside it.)
                skip_back = at_top & loop_zero & top_jump.any()
                m.d.sync += [late_next.eq(Mux(skip_back, top_back,
                                              Mux(loop_zero, end_after, loop_entry))),
                             late_line.eq(Mux(skip_back, top_back_line,
                                              Mux(loop_zero, line_after(loop_end, plus_one=True),
                                                  line_after(loop_entry))))]
                m.d.sync += [skip_popped.eq(Mux(at_top, top_popped, 0)),
                             skip_jump.eq(Mux(at_top, top_jump, 0)),
                             skip_pops.eq(Mux(at_top, top_pops, 0))]
        with m.If(consume):
            m.d.sync += [loop_seen.eq(0), loop_checked.eq(0), going_late.eq(0)]
        with m.Elif(loop_held):
            m.d.sync += loop_seen.eq(1)
            with m.If(loop_seen):
                m.d.sync += [loop_checked.eq(1), going_late.eq(loop_late)]

        # What the word consumed last cycle does to the frames (see "Frame updates").  The
        # depth, its one-hot form and the frames' last trips are few registers and change as
        # the word goes (`consume` enables them); the frames' fields change the cycle after.
        upd_push = Signal(LOOP_DEPTH)       # the frame pushed (one-hot)
        upd_jump = Signal(LOOP_DEPTH)       # frames jumping back to their start
        upd_popped = Signal(LOOP_DEPTH)     # frames popped
        left_one = Signal(LOOP_DEPTH)       # frames with one iteration left (`left == 1`)

        # ---- Requests to the cache, from registers only: the address of the word after the
        # current one is registered in the cycle that word is consumed (word 0: in the start
        # cycle) and held until the cache takes it, so no path runs from the fetched word
        # through the cache's lookup into its block RAM.  A word then takes two cycles
        # (:data:`~snpu.verif.timing.DISPATCH_CYCLES`): a request cycle, then its read.
        # The successor's address is chosen among registers: the walks' results are made
        # before it is needed, `top_*` (for a loop word skipping its body) every cycle,
        # `seq_*` (every other word) while the word's request is out, from
        # which frames end at the word (`ends_pc`, compared as its address is chosen, the
        # cycle before), the depth and the last trips (current from the cycle after the
        # previous word went).
        go = Signal()            # the current word goes on to a successor (or start)
        m.d.comb += go.eq((consume & ~pre.halt) | self.start)
        # Everything below is used only as a word goes, and a loop word goes only once
        # checked: while a word goes, `loop_checked` (a register) says it is a loop word.
        going_loop = loop_checked
        zero_trip = going_loop & loop_zero
        # a loop word going on at the word after its body (zero trips) or at its entry
        late = going_loop & loop_late
        push_here = Signal(LOOP_DEPTH)      # the frame a going loop word pushes (one-hot)
        m.d.comb += push_here.eq(Mux(going_loop & ~loop_zero,
                                     Cat(~depth_is.any(), depth_is[:-1]), 0))
        req_pending = Signal()
        req_pc = Signal(PC_BITS)
        ends_pc = Signal(LOOP_DEPTH)        # which frames end at the word `req_pc` asks for
        pc_last = Signal()                  # ... and it is the ROM's last
        req_after = Signal(PC_BITS + 1)
        m.d.comb += req_after.eq(req_pc + 1)
        seq_walk = walk(req_after, line_after(req_pc, plus_one=True), ends_pc,
                        last_trip, depth_is,
                        [Mux(upd_push[k], loop_start, frames[k].start) for k in range(LOOP_DEPTH)],
                        [Mux(upd_push[k], loop_start_line, frames[k].start_line)
                         for k in range(LOOP_DEPTH)],
                        "seq")
        seq_next, seq_line, seq_popped, seq_jump, seq_pops = seq_regs = walk_registers("seq")
        jump = Mux(going_loop, skip_jump, seq_jump)
        pops = Mux(going_loop, skip_pops, seq_pops)
        nxt = Signal(PC_BITS + 1)
        # (a zero-trip loop word is late too: `late_next` is where its skip goes then)
        m.d.comb += nxt.eq(Mux(self.start, 0, Mux(going_late, late_next, seq_next)))
        # the line after the successor's, chosen the same way from sums made in parallel
        # (the cache's next-line register takes it: no adder after the choice)
        m.d.comb += self.fetch_next_line.eq(
            Mux(self.start, 1, Mux(going_late, late_line, seq_line)))
        # the successor lies past the ROM (no halt): ILLEGAL at that word.  A jump goes back
        # into a body and an entry lies inside one, both inside the ROM; pc + 1 lies past it
        # only after the last word (`pc_last`, compared while the word's request was out),
        # a skipped body's end + 1 only when that body ends the ROM (`loop_end_last`).
        past_rom = Signal()
        m.d.comb += past_rom.eq(go & Mux(self.start, self.rom_words == 0,
                                         Mux(zero_trip, ~skip_jump.any() & loop_end_last,
                                             ~late & ~seq_jump.any() & pc_last)))
        m.d.comb += [self.fetch_req.valid.eq(req_pending & ~self.stop),
                     self.fetch_req.payload.pc.eq(req_pc)]
        # the cache reads the successor's word from its block RAM as the current word goes
        # (`fetch_next_pc`; `fetch_next_load`: it goes, so the request holds it next cycle)
        m.d.comb += [self.fetch_next_pc.eq(nxt), self.fetch_next_load.eq(go)]
        with m.If(go):
            # (the frames are current but for the one the going word pushes: its end is
            # `loop_end`; a program starts with none)
            m.d.sync += [req_pending.eq(~past_rom), req_pc.eq(nxt),
                         ends_pc.eq(Mux(self.start, 0,
                                        Cat(*[Mux(push_here[k], loop_end, frames[k].end) == nxt
                                              for k in range(LOOP_DEPTH)])))]
        with m.Elif(self.fetch_req.ready):
            m.d.sync += req_pending.eq(0)
        # While a request is out the frames are those its word will run under (the previous
        # word's updates are made in the request's first cycle, a frame it pushed taken from
        # the loop word's registers): its successor is walked then, into registers.
        with m.If(req_pending):
            m.d.sync += [pc_last.eq(req_after == self.rom_words)]
            m.d.sync += [r.eq(v) for r, v in zip(seq_regs, seq_walk)]

        # ---- Frame updates.  As the word goes: the depth and the last trips (a pushed
        # frame's is `loop_one`; a jumping frame's, `left == 1`, is kept ready in
        # `left_one`).  The cycle after: the frames' fields, from what the word did
        # (`upd_*`, registered as it goes), so `consume`, which waits for the fetched word,
        # enables only those few registers, not every frame's.  The frames' fields are next
        # read as the following request is out (the walk, which takes a pushed frame's
        # start from `loop_start`) and as the next word goes, two cycles after this one at
        # the earliest (DISPATCH_CYCLES): by then they are current.
        pushing = consume & going_loop & ~loop_zero
        m.d.sync += [upd_push.eq(Mux(consume, push_here, 0)),
                     upd_jump.eq(Mux(consume & ~pushing, jump, 0)),
                     upd_popped.eq(Mux(consume & ~pushing,
                                       Mux(going_loop, skip_popped, seq_popped), 0))]
        with m.If(consume):
            with m.If(pushing):
                m.d.sync += [depth.eq(depth + 1), depth_is.eq(push_here)]
            with m.Else():
                depth_after = depth - pops
                m.d.sync += [depth.eq(depth_after),
                             depth_is.eq(Cat(*[depth_after == k + 1 for k in range(LOOP_DEPTH)]))]
            for k in range(LOOP_DEPTH):
                with m.If(push_here[k]):
                    m.d.sync += last_trip[k].eq(loop_one)
                    m.d.sync += [same_end[j, k].eq(end_is_loop_end[j]) for j in range(k)]
                with m.Elif(~pushing & jump[k]):
                    m.d.sync += last_trip[k].eq(left_one[k])
        for k in range(LOOP_DEPTH):
            f = frames[k]
            with m.If(upd_push[k]):
                m.d.sync += [f.start.eq(loop_start), f.start_line.eq(loop_start_line),
                             f.end.eq(loop_end), f.left.eq(loop_left),
                             f.flip.eq(loop_flip), f.odd.eq(0), left_one[k].eq(loop_two)]
                for s in STREAMS:
                    below = frames[k - 1][f"off_{s}"] if k else 0
                    m.d.sync += [f[f"inc_{s}"].eq(loop_inc[s]), f[f"off_{s}"].eq(below)]
            with m.If(upd_jump[k]):
                m.d.sync += [f.left.eq(f.left - 1), left_one[k].eq(f.left == 2), f.odd.eq(~f.odd)]
                for s in STREAMS:
                    m.d.sync += f[f"off_{s}"].eq(f[f"off_{s}"] + f[f"inc_{s}"])
        # `flipped` loses the popped frames' flips (where odd) and toggles the jumping
        # frames' (their `odd` toggles); a pushed frame starts even: no change
        m.d.sync += flipped.eq(reduce(operator.xor,
                                      [Mux(upd_popped[k] & frames[k].odd, frames[k].flip, 0)
                                       ^ Mux(upd_jump[k], frames[k].flip, 0)
                                       for k in range(LOOP_DEPTH)], flipped))

        # ---- Dispatch.
        for u in UNITS:
            m.d.comb += self.queue(u).payload.eq(micro[u])
        # The word goes (is consumed) when it is legal in its context and its taker is
        # ready: from the predecoded one-hot decisions, an OR of a few ANDs.
        resp = self.fetch_resp
        running = Signal()
        offered = Signal()      # a fetched word without a fetch error, while running
        m.d.comb += offered.eq(running & ~self.stop & resp.valid & ~resp.payload.error)
        queue_ready = Cat(*[self.queue(u).ready for u in UNITS])
        m.d.comb += consume.eq(offered & ((pre.to_unit & queue_ready).any()
                                          | (pre.wait_idle & self.units_idle)
                                          | (pre.loop & loop_checked & loop_ok)))
        m.d.comb += resp.ready.eq(consume)
        for k, u in enumerate(UNITS):
            m.d.comb += self.queue(u).valid.eq(offered & pre.to_unit[k])
        # A fault's ROM index: the word's own, or for a successor past the ROM the
        # successor's, which is `req_pc` from then on (no path from the successor's
        # computation to a second register).
        fault_pc = Signal(PC_BITS)
        fault_past_rom = Signal()
        past_rom_seen = Signal()
        m.d.comb += self.error_pc.eq(Mux(fault_past_rom, req_pc, fault_pc))
        with m.FSM():
            with m.State("RUN"):
                m.d.comb += running.eq(1)
                with m.If(self.stop):
                    m.next = "DRAIN"
                with m.Elif(resp.valid):
                    with m.If(resp.payload.error):
                        m.d.sync += [self.error.eq(ErrorCode.FETCH), fault_pc.eq(pc)]
                        m.next = "DRAIN"
                    with m.Elif(~legal | (is_loop & loop_checked & ~loop_ok)):
                        m.d.sync += [self.error.eq(ErrorCode.ILLEGAL), fault_pc.eq(pc)]
                        m.next = "DRAIN"
                    with m.Elif(consume & pre.halt):
                        m.next = "DRAIN"
                # a successor past the ROM faults the cycle after (no word is requested,
                # so none is offered meanwhile): no path from `consume` to `error`
                m.d.sync += past_rom_seen.eq(past_rom & ~self.stop)
                with m.If(past_rom_seen):
                    m.d.sync += [self.error.eq(ErrorCode.ILLEGAL), fault_past_rom.eq(1)]
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                with m.If(self.units_idle):
                    m.d.sync += self.halted.eq(1)
        return m
