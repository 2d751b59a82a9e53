"""The golden model of the tiled array: traffic patterns against an independent numpy
reference, the network's timing rules, deadlock and race detection, and the mesh-program
files."""

import json

import numpy as np
import pytest

from snpu.config import CoreConfig
from snpu.errors import ExecutionError, ImageError, SnpuError
from snpu.verif import isa, meshgen, timing
from snpu.verif.mesh import Network, xy_route
from snpu.verif.mesh_program import MeshProgram, parse_mesh
from snpu.verif.core_model import Packet

CFG = CoreConfig(lanes=4, nbuf_bytes=4096, nidx_bytes=1024, wbuf_bytes=4096, widx_bytes=2048,
                 acc_words=256, obuf_bytes=2048, param_rows=32)
MESHES = [(1, 1), (2, 2), (1, 4), (4, 1), (3, 3), (2, 3)]


def _expected_ok(mp, res):
    img = mp.placed()
    for name, want in mp.meta["expected"].items():
        r = img.region(name)
        got = res.ext[r.addr:r.addr + want.size].view(np.int8)
        np.testing.assert_array_equal(got, want, err_msg=name)


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: f"{m[0]}x{m[1]}")
@pytest.mark.parametrize("pattern", meshgen.PATTERNS)
def test_patterns_match_numpy(mesh, pattern):
    for seed in range(3):
        mp = meshgen.mesh_program(np.random.default_rng(seed), CFG, mesh, pattern)
        res = mp.run_golden()
        _expected_ok(mp, res)
        assert mp.meta["expected"], "the program checks nothing"
        # every byte sent arrives
        sent = sum(c.stats.net_bytes_sent for c in res.cores.values())
        assert sent == sum(c.stats.net_bytes_received for c in res.cores.values())
        assert sent > 0 or (pattern == "ring" and mesh == (1, 1))  # a ring of one


def test_route_is_x_then_y():
    assert xy_route((0, 0), (2, 1)) == [((0, 0), "E"), ((1, 0), "E"), ((2, 0), "N")]
    assert xy_route((2, 2), (0, 0)) == [((2, 2), "W"), ((1, 2), "W"), ((0, 2), "S"),
                                         ((0, 1), "S")]
    assert xy_route((1, 1), (1, 1)) == []


def _packet(src, dst, nbytes, t=0):
    return Packet(src, dst, 0, 0, np.zeros(nbytes, np.uint8), t)


def test_network_latency_and_contention():
    net = Network()
    net.inject(_packet((0, 0), (2, 0), 64))  # 9 flits over 2 links
    (arrival, _, _), = net.in_flight
    # the head takes HOP_CYCLES per router (2 links + the destination) and INJECT_CYCLES
    # more in the first, the tail f - 1 more
    assert arrival == timing.INJECT_CYCLES + 3 * timing.HOP_CYCLES + 9 - 1
    # a second packet over the same first link waits for the first one's 9 flits
    net.inject(_packet((0, 0), (1, 0), 8))
    second, = (a for a, _, p in net.in_flight if p.dst == (1, 0))
    assert second == timing.INJECT_CYCLES + 9 + 2 * timing.HOP_CYCLES + 2 - 1
    s = net.stats()
    assert s["link_flits"] == {"0,0E": 11, "1,0E": 9, "2,0L": 9, "1,0L": 2}
    assert s["busiest_link_flits"] == 11


def _two_core(build):
    mp = MeshProgram.new(CFG, (2, 1), 1 << 16)
    build(mp.core((0, 0)), mp.core((1, 0)))
    return mp.finish()


def test_deadlock_names_core_pc_and_tag():
    def build(a, b):
        a.emit("recv", tag=5, dst=0, bytes=8)
        b.emit("recv", tag=2, dst=0, bytes=16)

    with pytest.raises(ExecutionError) as e:
        _two_core(build).run_golden()
    msg = str(e.value)
    assert "deadlock" in msg and e.value.fault is None
    assert "core (0, 0): NET waits at ROM word 0 (recv tag 5)" in msg
    assert "core (1, 0): NET waits at ROM word 0 (recv tag 2): 0 of 16 bytes" in msg


def test_recv_waits_for_all_its_bytes():
    # core 0 sends 8 bytes; core 1 waits for 16: a deadlock, not a silent partial receive
    def build(a, b):
        a.emit("send", x=1, y=0, src=0, dst=64, bytes=8, tag=1)
        b.emit("recv", tag=1, dst=64, bytes=16)

    with pytest.raises(ExecutionError, match=r"recv tag 1\): 8 of 16 bytes arrived"):
        _two_core(build).run_golden()


def test_landing_race_is_detected():
    # core 1 stores into the region a packet lands in, with no recv ordering them
    mp = MeshProgram.new(CFG, (2, 1), 1 << 16)
    mp.core((0, 0)).emit("send", x=1, y=0, src=0, dst=0, bytes=2048, tag=0)
    mp.core((1, 0)).emit("st", src=0, ext=isa.LOCAL_BASE, cols=2048)
    mp.finish()
    with pytest.raises(ExecutionError, match="lands in local memory .* no recv orders them"):
        mp.run_golden()


@pytest.mark.parametrize("case, fault", [
    (dict(x=2, y=0, src=0, dst=0, bytes=8, tag=0), "RANGE"),      # outside the 2x1 mesh
    (dict(x=1, y=1, src=0, dst=0, bytes=8, tag=0), "RANGE"),
    (dict(x=1, y=0, src=4, dst=0, bytes=8, tag=0), "ALIGN"),
    (dict(x=1, y=0, src=0, dst=CFG.local_bytes - 8, bytes=16, tag=0), "RANGE"),
])
def test_send_faults_name_the_core(case, fault):
    def build(a, b):
        b.emit("send", **case)

    with pytest.raises(ExecutionError) as e:
        _two_core(build).run_golden()
    assert e.value.fault == fault and e.value.core == (1, 0) and e.value.address == 0
    assert str(e.value).startswith("core (1, 0): ROM word 0")


def test_packets_between_a_pair_arrive_in_order():
    # two sends to the same place on one tag: the second one's data is what remains
    mp = MeshProgram.new(CFG, (2, 1), 1 << 16)
    a, b = mp.core((0, 0)), mp.core((1, 0))
    a.emit("send", x=1, y=0, src=0, dst=0, bytes=64, tag=0)
    a.emit("send", x=1, y=0, src=64, dst=0, bytes=64, tag=0)
    b.emit("recv", tag=0, dst=0, bytes=128)
    mp.finish()
    local = {(0, 0): np.arange(CFG.local_bytes, dtype=np.uint8)}
    res = mp.run_golden(local=local)
    np.testing.assert_array_equal(res.local((1, 0))[:64], local[(0, 0)][64:128])


def test_save_and_load_round_trip(tmp_path):
    mp = meshgen.mesh_program(np.random.default_rng(3), CFG, (2, 2), "all_to_all")
    manifest = mp.save(tmp_path / "prog")
    back = MeshProgram.load(manifest)
    assert back.mesh == (2, 2) and back.config == CFG and back.roms == mp.roms
    a, b = mp.run_golden(), back.run_golden()
    np.testing.assert_array_equal(a.ext, b.ext)
    assert a.cycles == b.cycles


def _manifest(tmp_path):
    mp = meshgen.mesh_program(np.random.default_rng(0), CFG, (2, 1), "neighbour")
    path = mp.save(tmp_path / "p")
    return path, json.loads(path.read_text())


@pytest.mark.parametrize("edit, match", [
    (lambda m: m.update(format="other"), "not a mesh-program manifest"),
    (lambda m: m.update(version=7), "version 7"),
    (lambda m: m.update(mesh=[2]), "field 'mesh'"),
    (lambda m: m.update(mesh=[40, 1]), "each side must be"),
    (lambda m: m["cores"].pop(), r"no ROM for core\(s\) \(1, 0\)"),
    (lambda m: m["cores"][1].update(x=5), r"core \(5, 0\) is outside"),
    (lambda m: m["cores"][1].update(x=0), r"core \(0, 0\) appears twice"),
    (lambda m: m["cores"][0].update(sha256="0" * 64), "do not match the manifest's sha256"),
    (lambda m: m["cores"][0].update(rom="missing.hex"), "no such ROM image"),
    (lambda m: m["config"].update(lanes=3), "lanes"),
    (lambda m: m.update(memory_ports=3), r"memory ports: 3 must be in 1..2"),
    (lambda m: m.update(memory_ports="2"), "field 'memory_ports' must be an integer"),
])
def test_bad_manifests_are_named(tmp_path, edit, match):
    path, man = _manifest(tmp_path)
    edit(man)
    path.write_text(json.dumps(man))
    with pytest.raises(ImageError, match=match):
        MeshProgram.load(path)


def test_not_json(tmp_path):
    p = tmp_path / "manifest.json"
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(ImageError, match="not a JSON"):
        MeshProgram.load(p)


@pytest.mark.parametrize("text", ["2", "2x", "0x2", "17x1", "axb", "2x2x2"])
def test_parse_mesh_rejects(text):
    with pytest.raises(SnpuError, match="mesh"):
        parse_mesh(text)


def test_idle_cores_halt():
    mp = MeshProgram.new(CFG, (3, 1), 1 << 16)
    mp.core((1, 0)).emit("cfg", reg="net.packet_log2", value=3)
    mp.finish()
    assert all(mp.roms[xy] for xy in mp.coords)
    res = mp.run_golden()
    assert set(res.cores) == set(mp.coords)


def _loads(mesh, ports, nbytes=8192):
    """Every core of ``mesh`` loads (its own) ``nbytes`` into nbuf: cycles of the array."""
    mp = MeshProgram.new(CFG, mesh, 1 << 17)
    for k, xy in enumerate(mp.coords):
        src = mp.image.alloc(f"src{k}", nbytes, "input").addr
        p = mp.core(xy)
        for off in range(0, nbytes, CFG.nbuf_bytes):
            p.emit("ld", buf="nbuf", ext=src + off, dst=0, cols=min(CFG.nbuf_bytes, nbytes - off))
    mp.finish()
    mp.memory_ports = ports
    return mp.run_golden().cycles


def test_memory_ports_serve_their_columns_in_parallel():
    # a 4x1 array: one port serves all four cores' loads one after the other, four ports
    # (one per column) serve them at once, two ports two columns each
    one, two, four = (_loads((4, 1), p) for p in (1, 2, 4))
    beats = 4 * 8192 // CFG.axi_bytes
    assert one >= beats and four < one / 3 and two < one / 1.8 and two > four * 1.5
    # the default is one port per column
    assert _loads((4, 1), None) == four
    # a column's cores share their port: 1x4 has one column
    assert _loads((1, 4), None) >= beats


def test_a_port_shares_its_time_between_cores():
    delays = {"a": [], "b": []}
    bus = timing.SharedBus()
    assert bus.read(0, 100, "a", delays["a"].append) == 0
    # another core's transfer interleaves with the 90 beats "a" has left: it waits (and
    # delays "a") by its own 40 beats; the port's time is conserved
    assert bus.read(10, 40, "b", delays["b"].append) == 50
    assert delays == {"a": [40], "b": []} and bus.read_free == 140
    # a core's own transfers are first come, first served: after its beats (at 90), and
    # sharing what "a" has left then
    assert bus.read(20, 10, "b") == 100 and delays["a"] == [40, 10]
    # requesters slower than the port (40 beats over 100 cycles each) fit side by side
    slow = timing.SharedBus()
    assert slow.read(0, 40, "a", span=100) == 0 and slow.read(10, 40, "b", span=100) == 10
    # with one requester, as before: first come, first served
    one = timing.SharedBus()
    assert [one.read(0, 100), one.read(10, 40), one.write(5, 8)] == [0, 100, 5]


def test_cores_sharing_a_port_finish_their_loads_together():
    # a column of two cores (one port) loading as much each: the port interleaves their
    # bursts, so neither gets it to itself while the other waits (as on the RTL)
    mp = MeshProgram.new(CFG, (1, 2), 1 << 17)
    for k, xy in enumerate(mp.coords):
        src = mp.image.alloc(f"src{k}", 4 * CFG.nbuf_bytes, "input").addr
        for off in range(0, 4 * CFG.nbuf_bytes, CFG.nbuf_bytes):
            mp.core(xy).emit("ld", buf="nbuf", ext=src + off, dst=0, cols=CFG.nbuf_bytes)
    mp.finish()
    res = mp.run_golden()
    alone = _loads((1, 1), None, 4 * CFG.nbuf_bytes)
    first, second = sorted(c.stats.cycles for c in res.cores.values())
    assert second - first < 0.05 * second and first > 1.8 * alone


def test_memory_port_of_a_column():
    from snpu.config import memory_port, memory_ports

    assert [memory_port(x, 4, 2) for x in range(4)] == [0, 0, 1, 1]
    assert [memory_port(x, 3, 2) for x in range(3)] == [0, 0, 1]
    assert memory_ports((3, 2)) == 3 and memory_ports((3, 2), 1) == 1
    with pytest.raises(SnpuError, match="must be in 1..3"):
        memory_ports((3, 2), 4)


def test_saved_program_keeps_its_memory_ports(tmp_path):
    mp = meshgen.mesh_program(np.random.default_rng(1), CFG, (2, 2), "all_to_all")
    mp.memory_ports = 1
    back = MeshProgram.load(mp.save(tmp_path / "p"))
    assert back.memory_ports == 1
    assert back.run_golden().cycles == mp.run_golden().cycles
