"""snpu: a sparse neural processing unit.

The installed package maps the repository's fixed layout under one namespace:

==================  =====================  ============================================
import name         repository folder      contents
==================  =====================  ============================================
``snpu``            ``snpu/``              CLI, core configuration, error types
``snpu.verif``      ``verif/``             golden model: ISA, index formats, numerics
``snpu.rtl``        ``rtl/``               Amaranth hardware blocks and the core
``snpu.compiler``   ``compiler/``          ONNX front end, passes, code generation
==================  =====================  ============================================
"""

__version__ = "0.1.0"
