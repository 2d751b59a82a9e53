"""RTL testbench infrastructure (depends on the RTL; the golden specification in
:mod:`snpu.verif` does not):

* :mod:`.amaranth_sim` — block tests with the Amaranth simulator: async stream helpers, a
  watchdog, seeded random tests;
* :mod:`.mx_driver` — driver of the matrix unit's block tests and benchmark;
* :mod:`.axi_ram` — the simulation top: the core plus an AXI RAM with back-pressure;
* :mod:`.cocotb_core` — the cocotb testbench (driver, monitor, golden model, checker);
* :mod:`.rtl_sim` — the runner: builds Verilator once per configuration and runs jobs.
"""
