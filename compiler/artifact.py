"""The compiled model on disk (``snpu compile -o DIR``) and in memory.

``DIR/`` holds:

==================  ==========================================================================
``model.json``      the quantised IR (nodes, devices, tensors, scales), tensor layouts in
                    external memory, the segments in dispatch order, the core configuration
``arrays.npz``      constant tensors and the integer parameters of every core node
``mem.bin``         the external-memory image (weights, parameters, ROMs, zeroed activations)
``mem.json``        its manifest (what lives where)
``seg<k>.hex``      the ROM of core segment ``k`` (also inside ``mem.bin`` at region ``rom:<k>``)
``seg<k>_<x>_<y>``  compiled for a tiled array (``--mesh``): core (x, y)'s ROM of segment ``k``
``.hex``            (region ``rom:<k>:<x>_<y>``; the segment lists them under ``roms``)
``report.json``     per-layer densities, index formats, tiles; compile time; device split
``source.onnx``     the ONNX model as given (``snpu run`` compares with onnxruntime on it)
==================  ==========================================================================

``model.json`` is written last and lists every other file with its size and sha256, and
carries the sha256 of its own content (``"sha256"``, over the document without that key,
keys sorted), so :meth:`Compiled.load` names a missing, truncated or edited file --
``model.json`` included -- instead of failing later.
Everything is written to a temporary directory beside ``DIR`` and renamed into place, so a
failed compile never leaves a half-written model and a previous one stays until the new one
is complete.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from snpu.config import CoreConfig
from snpu.errors import CompileError, ImageError
from snpu.fileio import replace_dir, temp_dir_beside
from snpu.verif.image import MemoryImage, rom_from_bin, write_rom

from .ir import Graph, Node, Tensor
from .memory import TensorLayout

FORMAT = "snpu-model/1"


@dataclass
class Compiled:
    graph: Graph
    image: MemoryImage
    layouts: dict[str, TensorLayout]
    segments: list[dict]
    config: CoreConfig
    report: dict
    source: bytes | None = None  #: the ONNX model compiled (for reference runs)

    def rom(self, region: str) -> list[int]:
        r = self.image.region(region)
        return rom_from_bin(self.image.data[r.addr:r.end].tobytes(), source=region)

    # ------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the artifact to the directory ``path`` (see the module docstring).  The
        caller checks first that ``path`` may be replaced (:func:`snpu.fileio.check_output`)."""
        path = Path(path)
        tmp = temp_dir_beside(path)
        try:
            arrays: dict[str, np.ndarray] = {}
            doc = {"format": FORMAT, "config": self.config.to_dict(),
                   "graph": _graph_doc(self.graph, arrays),
                   "layouts": {k: v.to_dict() for k, v in self.layouts.items()},
                   "segments": [{k: v for k, v in s.items() if k != "words"} for s in self.segments]}
            np.savez(tmp / "arrays.npz", **arrays)
            self.image.save(tmp / "mem.bin")
            for k, s in enumerate(self.segments):
                if s["kind"] == "core" and "roms" in s:  # an array: one ROM per core
                    for xy, region in s["roms"].items():
                        write_rom(tmp / f"seg{k}_{xy}.hex", self.rom(region))
                elif s["kind"] == "core":
                    write_rom(tmp / f"seg{k}.hex", self.rom(s["rom"]))
            (tmp / "report.json").write_text(json.dumps(self.report, indent=1, default=_jsonable))
            if self.source is not None:
                (tmp / "source.onnx").write_bytes(self.source)
            # model.json last: it lists every other file with its size and checksum
            doc["files"] = {f.name: _digest(f) for f in sorted(tmp.iterdir())}
            doc = json.loads(json.dumps(doc, default=_jsonable))  # as load() will see it
            doc["sha256"] = _doc_digest(doc)
            (tmp / "model.json").write_text(json.dumps(doc, indent=1))
            replace_dir(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Compiled":
        path = Path(path)
        try:
            doc = json.loads((path / "model.json").read_text())
        except FileNotFoundError:
            raise CompileError(f"{path}: not a compiled model (no model.json)") from None
        except json.JSONDecodeError as e:
            raise CompileError(f"{path}/model.json: not valid JSON ({e.msg} at line {e.lineno})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            fmt = doc.get("format") if isinstance(doc, dict) else None
            raise CompileError(f"{path}/model.json: format {fmt!r} is not {FORMAT}")
        if doc.get("sha256") != _doc_digest({k: v for k, v in doc.items() if k != "sha256"}):
            raise CompileError(f"{path}/model.json: contents changed since it was written (its "
                               "sha256 does not match); the compiled model is damaged, compile "
                               "it again")
        _verify_files(path, doc.get("files"))
        try:
            arrays = dict(np.load(path / "arrays.npz", allow_pickle=False))
            image = MemoryImage.load(path / "mem.bin")
        except (OSError, ValueError, ImageError) as e:
            raise CompileError(f"{path}: {e}") from None
        try:
            graph = _graph_from_doc(doc["graph"], arrays)
            layouts = {k: TensorLayout(**v) for k, v in doc["layouts"].items()}
            segments, config = doc["segments"], CoreConfig.from_dict(doc["config"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CompileError(f"{path}/model.json: malformed ({type(e).__name__}: {e})") from None
        report = json.loads((path / "report.json").read_text()) if (path / "report.json").exists() else {}
        source = (path / "source.onnx").read_bytes() if (path / "source.onnx").exists() else None
        return cls(graph, image, layouts, segments, config, report, source)


def _doc_digest(doc: dict) -> str:
    """sha256 of model.json's own content (keys sorted), stored in it as ``sha256``."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _digest(f: Path) -> dict:
    return {"bytes": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}


def _verify_files(path: Path, files) -> None:
    """Every file the manifest lists is present, whole and unchanged."""
    if not isinstance(files, dict):
        raise CompileError(f"{path}/model.json: no file list (written by an older snpu; "
                           "compile the model again)")
    for name, want in files.items():
        f = path / name
        if not f.is_file():
            raise CompileError(f"{f}: missing (the compiled model lists it)")
        size = f.stat().st_size
        if size != want.get("bytes"):
            what = "short" if size < want.get("bytes", 0) else "longer than written"
            raise CompileError(f"{f}: {size} bytes, {what} (written with {want.get('bytes')}); "
                               "the compiled model is damaged, compile it again")
        if hashlib.sha256(f.read_bytes()).hexdigest() != want.get("sha256"):
            raise CompileError(f"{f}: contents changed since it was written (sha256 mismatch); "
                               "compile the model again")


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (set, frozenset, tuple)):
        return list(v)
    if isinstance(v, bytes):  # a STRINGS attribute of an ONNX operator
        return v.decode("utf-8", "replace")
    if hasattr(v, "to_dict"):  # e.g. a layer's parts on an array (passes/parallelize.Part)
        return v.to_dict()
    raise TypeError(f"cannot store {type(v).__name__} in model.json")


def _encode(value, key: str, arrays: dict):
    if isinstance(value, np.ndarray):
        arrays[key] = value
        return {"__array__": key}
    if isinstance(value, dict):
        if all(isinstance(k, (int, np.integer)) for k in value):
            return {"__intkeys__": [[int(k), _encode(v, f"{key}/{k}", arrays)] for k, v in value.items()]}
        return {str(k): _encode(v, f"{key}/{k}", arrays) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, f"{key}/{k}", arrays) for k, v in enumerate(value)]
    return value


def _decode(value, arrays: dict):
    if isinstance(value, dict):
        if "__array__" in value:
            return arrays[value["__array__"]]
        if "__intkeys__" in value:
            return {k: tuple(_decode(v, arrays)) if isinstance(v, list) else _decode(v, arrays)
                    for k, v in value["__intkeys__"]}
        return {k: _decode(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    return value


def _graph_doc(g: Graph, arrays: dict) -> dict:
    tensors = {}
    for name, t in g.tensors.items():
        d = {"shape": list(t.shape) if t.shape is not None else None, "dtype": t.dtype, "scale": t.scale}
        if t.is_const:
            d["value"] = _encode(t.value, f"tensor/{name}", arrays)
        tensors[name] = d
    nodes = [{"name": n.name, "op": n.op, "inputs": n.inputs, "outputs": n.outputs,
              "attrs": _encode(n.attrs, f"attr/{n.name}", arrays), "device": n.device,
              "meta": _encode({k: v for k, v in n.meta.items() if k != "core_reason"},
                              f"meta/{n.name}", arrays)} for n in g.nodes]
    meta = {k: v for k, v in g.meta.items() if k in ("subgraphs", "opset")}
    return {"name": g.name, "inputs": g.inputs, "outputs": g.outputs, "tensors": tensors,
            "nodes": nodes, "meta": meta}


def _graph_from_doc(d: dict, arrays: dict) -> Graph:
    tensors = {}
    for name, t in d["tensors"].items():
        value = _decode(t["value"], arrays) if "value" in t else None
        tensors[name] = Tensor(name, tuple(t["shape"]) if t["shape"] is not None else None,
                               t["dtype"], value, t["scale"])
    nodes = []
    for n in d["nodes"]:
        meta = _decode(n["meta"], arrays)
        if "geometry" in meta:
            meta["geometry"] = tuple(meta["geometry"])
        nodes.append(Node(n["name"], n["op"], n["inputs"], n["outputs"], _decode(n["attrs"], arrays),
                          n["device"], meta))
    return Graph(d["name"], nodes, tensors, d["inputs"], d["outputs"], d.get("meta", {}))
