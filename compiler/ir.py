"""The compiler's IR: seed 001's dataflow hypergraph.

A graph is ``(N, E)``.  A :class:`Node` is ``(f, I, O)``: an operator, named input slots and
named output slots.  A :class:`Tensor` is a hyperedge ``(s, H)``: one node output ``s`` (its
producer) feeding a set ``H`` of node inputs (its consumers).  Constants (ONNX initializers
and folded values) are tensors without a producer that carry their value.

Every compiler pass takes a :class:`Graph` and returns a new one (:meth:`Graph.copy` shares
the constant arrays, so copies are cheap); the pipeline in :mod:`.pipeline` lists them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snpu.errors import CompileError


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...] | None = None
    dtype: str = "float32"
    value: np.ndarray | None = None  #: constant value (initializer or folded)
    #: quantisation: int8 activations are ``q * scale`` (symmetric); None while float
    scale: float | None = None

    @property
    def is_const(self) -> bool:
        return self.value is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape)) if self.shape is not None else 0


@dataclass
class Node:
    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    device: str | None = None  #: "core" or "host", set by the partition pass
    #: compiler annotations (fused activation, quantisation parameters, kernel plan, ...)
    meta: dict[str, Any] = field(default_factory=dict)

    def where(self) -> str:
        return f"node {self.name!r} ({self.op})"


@dataclass
class Graph:
    name: str
    nodes: list[Node]
    tensors: dict[str, Tensor]
    inputs: list[str]
    outputs: list[str]
    meta: dict[str, Any] = field(default_factory=dict)

    # ------------------------------------------------------------------------------------
    def copy(self) -> "Graph":
        """A copy whose nodes and tensors can be changed; constant arrays are shared."""
        tensors = {k: Tensor(t.name, t.shape, t.dtype, t.value, t.scale) for k, t in self.tensors.items()}
        nodes = [Node(n.name, n.op, list(n.inputs), list(n.outputs), dict(n.attrs), n.device,
                      copy.copy(n.meta)) for n in self.nodes]
        return Graph(self.name, nodes, tensors, list(self.inputs), list(self.outputs),
                     copy.copy(self.meta))

    def tensor(self, name: str) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise CompileError(f"graph {self.name!r}: no tensor named {name!r}") from None

    def node(self, name: str) -> Node:
        """The node called ``name`` (KeyError naming it if there is none)."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"{self.name}: no node {name!r}")

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
        return out

    def const(self, name: str) -> np.ndarray | None:
        t = self.tensors.get(name)
        return None if t is None else t.value

    def add_const(self, name: str, value: np.ndarray) -> str:
        base, k = name, 0
        while name in self.tensors:
            k += 1
            name = f"{base}_{k}"
        self.tensors[name] = Tensor(name, tuple(value.shape), str(value.dtype), value)
        return name

    def remove_unused(self) -> None:
        """Drop nodes whose outputs nobody needs and tensors nothing refers to."""
        needed = set(self.outputs)
        keep = []
        for n in reversed(self.nodes):
            if any(o in needed for o in n.outputs):
                keep.append(n)
                needed.update(i for i in n.inputs if i)
        self.nodes = keep[::-1]
        live = needed | set(self.inputs) | {o for n in self.nodes for o in n.outputs}
        self.tensors = {k: t for k, t in self.tensors.items() if k in live}

    def toposort(self) -> None:
        """Order nodes so every node follows the producers of its inputs (stable)."""
        produced = self.producers()
        ready = set(self.inputs) | {k for k, t in self.tensors.items() if t.is_const}
        done: set[int] = set()
        order = []
        pending = list(range(len(self.nodes)))
        while pending:
            progressed = False
            rest = []
            for k in pending:
                n = self.nodes[k]
                if all((not i) or i in ready or i not in produced for i in n.inputs):
                    order.append(n)
                    ready.update(n.outputs)
                    done.add(k)
                    progressed = True
                else:
                    rest.append(k)
            if not progressed:
                n = self.nodes[rest[0]]
                raise CompileError(f"graph {self.name!r}: {n.where()} is on a cycle")
            pending = rest
        self.nodes = order

    def summary(self) -> dict:
        ops: dict[str, int] = {}
        for n in self.nodes:
            ops[n.op] = ops.get(n.op, 0) + 1
        return {"nodes": len(self.nodes), "ops": dict(sorted(ops.items()))}

    def check(self) -> None:
        """Structural invariants: single producers, no dangling inputs."""
        produced: dict[str, str] = {}
        for n in self.nodes:
            for o in n.outputs:
                if o in produced:
                    raise CompileError(f"tensor {o!r} is produced twice ({produced[o]}, {n.name})")
                produced[o] = n.name
        for n in self.nodes:
            for i in n.inputs:
                if i and i not in self.tensors:
                    raise CompileError(f"{n.where()}: input {i!r} does not exist")
