"""How far the re-roller could shrink the zoo's ROMs (issue 19: ROM <= 1/20 of the
instructions at filing time), measured by re-rolling transformed instruction streams.

    .venv/bin/python bench/rom_bounds.py [--models squeezenet,resnet50]

For each network of the onnx wheel's zoo, compiled as shipped (its own weights, the default
core, ``--optimize size`` and ``speed``), prints as JSON the ROM words:

* ``rom``: what the compiler emits;
* ``without_tokens``: the same streams re-rolled with every wait and signal removed -- the
  best any token scheme could reach with today's ISA;
* ``halves_alike``: as well, the ping-pong half of every local-buffer operand cleared
  (nbuf / nidx / acc / obuf) -- what a loop that flips buffer halves on alternate
  iterations would give, with tokens that repeat every tile;
* ``goal``: 1/20 of the instructions the model compiled to when issue 19 was filed (d34b462).

The transformed streams are not programs (they would race); only their re-rolled length is
measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import provenance  # noqa: E402

from snpu.compiler.passes import codegen as codegen_pass  # noqa: E402
from snpu.compiler.pipeline import CompileOptions, compile_model  # noqa: E402
from snpu.config import CoreConfig  # noqa: E402
from snpu.verif import isa  # noqa: E402
from snpu.verif.isa import Instr  # noqa: E402

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
#: instructions per model when issue 19 was filed (d34b462, fully unrolled programs)
AT_FILING = {"bvlc_alexnet": 24282, "densenet121": 49853, "inception_v1": 28216,
             "inception_v2": 34156, "resnet50": 86918, "shufflenet": 17473,
             "squeezenet": 11141, "vgg19": 580892, "zfnet512": 68910}


def _halves(config: CoreConfig) -> dict[str, dict[str, int]]:
    """Per opcode: the operands addressing a ping-pong buffer, and the half's size."""
    nb, acc, ob = config.nbuf_bytes // 2, config.acc_elems // 2, config.obuf_bytes // 2
    return {"fc": {"nbuf": nb, "nidx": nb // 8, "acc": acc}, "vred": {"dst": acc, "src": acc},
            "vew": {"dst": acc, "a": acc, "b": acc}, "req": {"src": acc, "dst": ob},
            "st": {"src": ob}, "stc": {"src": ob}}


def _transform(instrs: list[Instr], config: CoreConfig, halves: bool) -> list[Instr]:
    """``instrs`` without tokens, and with ``halves`` every ping-pong operand in half 0."""
    fields = _halves(config)
    loads = {isa.BUFFERS["nbuf"]: config.nbuf_bytes // 2, isa.BUFFERS["acc"]: config.acc_elems // 2}
    out = []
    for ins in instrs:
        args = dict(ins.args)
        if halves:
            for name, half in fields.get(ins.op, {}).items():
                args[name] &= ~half
            if ins.op in ("ld", "ldc") and args["buf"] in loads:
                args["dst"] &= ~loads[args["buf"]]
        out.append(Instr(ins.op, args, frozenset(), frozenset()))
    return out


def measure(name: str, optimize: str) -> dict:
    rolled = {"without_tokens": 0, "halves_alike": 0}
    reroll = codegen_pass.reroll

    def spy(instrs, **kw):
        rolled["without_tokens"] += len(reroll(_transform(instrs, CoreConfig(), False), **kw))
        rolled["halves_alike"] += len(reroll(_transform(instrs, CoreConfig(), True), **kw))
        return reroll(instrs, **kw)

    codegen_pass.reroll = spy
    try:
        c = compile_model(ZOO / f"light_{name}.onnx", CompileOptions(optimize=optimize))
    finally:
        codegen_pass.reroll = reroll
    return {"rom": sum(s.get("instructions", 0) for s in c.report["segments"]), **rolled}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(AT_FILING))
    args = ap.parse_args()
    out = {"benchmark": "rom_bounds", "provenance": provenance(), "models": {}}
    for name in args.models.split(","):
        row = {"goal": AT_FILING[name] // 20}
        for optimize in ("size", "speed"):
            row[optimize] = measure(name, optimize)
            print(f"{name} {optimize}: {row[optimize]}", file=sys.stderr, flush=True)
        out["models"][name] = row
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
