"""What the RTL simulator's build does to the generated Verilog (``verif/tb/rtl_sim.py``,
``verif/tb/axi_ram.py``), without building it: the builds themselves run in ``tests/rtl``."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from snpu.config import CoreConfig
from snpu.verif.tb import rtl_sim
from snpu.verif.tb.axi_ram import RamArray

TOP = f"""module other(a, b);
  input a;
  output b;
endmodule

module {rtl_sim.TOP}(clk, rst, start, rom_base, busy, counters);
  wire [63:0] axi__0__rdata;
  input clk;
  wire clk;
  input rst;
  input start;
  input [63:0] rom_base;
  output busy;
  output [3327:0] counters;
  reg \\rst$20  = 1'h1;
endmodule
"""


def test_public_config_names_the_ports_and_the_memories_only():
    lines = rtl_sim._public_config(TOP).splitlines()
    assert lines[0] == "`verilator_config"
    top = f'-module "{rtl_sim.TOP}"'
    assert set(lines[1:]) == {
        f'public_flat_rw {top} -var "clk"', f'public_flat_rw {top} -var "rst"',
        f'public_flat_rw {top} -var "start"', f'public_flat_rw {top} -var "rom_base"',
        f'public_flat_rd {top} -var "busy"', f'public_flat_rd {top} -var "counters"',
        'public_flat_rw -module "*" -var "mem"'}
    # internal wires (the AXI wires between array and RAM) and other modules stay private
    assert not any("axi__0__rdata" in x or '"a"' in x for x in lines)


def test_public_config_without_the_top_module_is_an_error():
    try:
        rtl_sim._public_config("module other(a);\n  input a;\nendmodule\n")
    except rtl_sim.RtlError as e:
        assert rtl_sim.TOP in str(e)
    else:
        raise AssertionError("no error")


def test_only_all_zero_memory_initialisers_are_dropped():
    verilog = ("module m();\n"
               "  reg [63:0] mem [2:0];\n"
               "  initial begin\n"
               "    mem[0] = 64'h0000000000000000;\n"
               "    mem[1] = 64'h0000000000000000;\n"
               "    mem[2] = 64'h0000000000000000;\n"
               "  end\n"
               "  reg [31:0] \\bank0  [1:0];\n"
               "  initial begin\n"
               "    \\bank0 [0] = 32'd0;\n"
               "    \\bank0 [1] = 32'd0;\n"
               "  end\n"
               "  reg [7:0] rom [1:0];\n"
               "  initial begin\n"
               "    rom[0] = 8'h00;\n"
               "    rom[1] = 8'h2a;\n"
               "  end\n"
               "endmodule\n")
    out = rtl_sim.drop_zero_memory_inits(verilog)
    assert "mem[0]" not in out and "\\bank0 [0]" not in out
    assert "rom[1] = 8'h2a;" in out and "rom[0] = 8'h00;" in out  # a non-zero word: kept
    assert out.count("initial begin") == 1
    assert "reg [63:0] mem [2:0];" in out and "endmodule" in out


def test_ram_array_verilog():
    ram = RamArray(depth=1 << 16, ports=2)
    ram._MustUse__silence = True  # only its Verilog text is wanted here, not its elaboration
    v = ram.verilog()
    assert v.startswith(f"module {RamArray.MODULE}(")
    assert "reg [63:0] mem [65535:0];" in v
    assert "mem[i] = 64'd0;" in v  # zero at time 0 in every simulator
    assert f'if (dump) $writememh("{RamArray.DUMP_FILE}", mem);' in v
    for p in range(2):
        assert f"input wire [15:0] r{p}_addr" in v and f"output reg [63:0] r{p}_data" in v
        assert f"if (r{p}_en) r{p}_data <= mem[r{p}_addr];" in v
        assert f"if (w{p}_en[7]) mem[w{p}_addr][63:56] <= w{p}_data[63:56];" in v


def test_ram_array_verilog_with_wide_ports():
    """A 128-bit bus: the ports take two 64-bit words at once; the storage stays 64-bit
    words (what the testbench loads and dumps)."""
    ram = RamArray(depth=1 << 10, ports=1, word_bytes=16)
    ram._MustUse__silence = True
    v = ram.verilog()
    assert "reg [63:0] mem [1023:0];" in v
    assert "input wire [8:0] r0_addr" in v and "output reg [127:0] r0_data" in v
    assert "if (r0_en) r0_data <= {mem[{r0_addr, 1'd1}], mem[{r0_addr, 1'd0}]};" in v
    assert "input wire [15:0] w0_en" in v
    assert "if (w0_en[9]) mem[{w0_addr, 1'd1}][15:8] <= w0_data[79:72];" in v


def test_concurrent_builds_of_one_simulator_take_turns(monkeypatch, tmp_path):
    """Two builders needing the same simulator at once (a farm's workers): one compiles,
    the other waits for the directory's lock and finds it built.  Two compilers in one
    directory broke each other's precompiled headers.  (The compile itself is replaced by
    a slow stand-in that records how many run at once.)"""
    monkeypatch.setattr(rtl_sim, "CACHE", tmp_path)
    running, calls = [], []

    def slow_build(bdir, *args):
        running.append(bdir)
        calls.append(len(running))
        time.sleep(0.3)
        (bdir / "built").write_text("built")
        running.remove(bdir)

    monkeypatch.setattr(rtl_sim, "_build_into", slow_build)
    with ThreadPoolExecutor(2) as pool:
        dirs = list(pool.map(lambda _: rtl_sim.build(CoreConfig()), range(2)))
    assert dirs[0] == dirs[1]
    assert calls == [1]  # built once, by one builder alone


def test_the_core_verilog_is_converted_once_per_configuration(monkeypatch, tmp_path):
    """Builds of one configuration for different memories and meshes share the core
    module's Verilog (``core-<hash>.v``); another configuration converts its own.  (The
    conversion is replaced by a stand-in that counts its calls.)"""
    from snpu.verif.tb import axi_ram

    monkeypatch.setattr(rtl_sim, "CACHE", tmp_path)
    calls = []

    def convert(config, name):
        calls.append(config.lanes)
        return f"module {name}_core; // {config.lanes} lanes\nendmodule\n"

    monkeypatch.setattr(axi_ram, "core_verilog", convert)
    small = CoreConfig(lanes=2)
    first = rtl_sim.cached_core_verilog(small)
    assert rtl_sim.cached_core_verilog(small) == first and calls == [2]
    assert rtl_sim.cached_core_verilog(CoreConfig(lanes=4)) != first and calls == [2, 4]
    assert len(list(tmp_path.glob("core-*.v"))) == 2
    assert not list(tmp_path.glob(".core-*"))   # no temporary file left behind


def test_the_model_optimisation_is_part_of_the_build_key(monkeypatch):
    args = (CoreConfig(), "hdl", 1 << 18, None, "verilator", (1, 1), 1)
    monkeypatch.delenv("SNPU_SIM_OPT", raising=False)
    assert rtl_sim.model_optimisation() == "-O1"
    default = rtl_sim._source_hash(*args)
    monkeypatch.setenv("SNPU_SIM_OPT", "-O2")
    assert rtl_sim._source_hash(*args) != default
    monkeypatch.setenv("SNPU_SIM_OPT", "-O9; rm -rf /")
    with pytest.raises(rtl_sim.RtlError, match="SNPU_SIM_OPT"):
        rtl_sim.model_optimisation()
