"""How far the re-roller could shrink the zoo's ROMs (issue 19: ROM <= 1/20 of the
instructions at filing time), measured by re-rolling transformed instruction streams.

    .venv/bin/python bench/rom_bounds.py [--models squeezenet,resnet50]

For each network of the onnx wheel's zoo, compiled as shipped (its own weights, the default
core, ``--optimize size`` and ``speed``), prints as JSON the ROM words:

* ``rom``: what the compiler emits;
* ``without_tokens``: the same streams re-rolled with every wait and signal removed -- the
  best any token scheme could reach with today's ISA.  Loops flipping the ping-pong halves
  (``loop flip=1``) are in both: in ``rom`` where a tile's tokens repeat every tile, here
  everywhere (before the ISA had them, this bench measured them apart, as ``halves_alike``);
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
from snpu.verif.isa import Instr  # noqa: E402

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
#: instructions per model when issue 19 was filed (d34b462, fully unrolled programs)
AT_FILING = {"bvlc_alexnet": 24282, "densenet121": 49853, "inception_v1": 28216,
             "inception_v2": 34156, "resnet50": 86918, "shufflenet": 17473,
             "squeezenet": 11141, "vgg19": 580892, "zfnet512": 68910}


def _without_tokens(instrs: list[Instr]) -> list[Instr]:
    return [Instr(ins.op, ins.args, frozenset(), frozenset()) for ins in instrs]


def measure(name: str, optimize: str) -> dict:
    rolled = {"without_tokens": 0}
    reroll = codegen_pass.reroll

    def spy(instrs, **kw):
        rolled["without_tokens"] += len(reroll(_without_tokens(instrs), **kw))
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
