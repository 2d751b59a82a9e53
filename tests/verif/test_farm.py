"""Scale-out on Dask (issue 16): a LocalCluster of 2 workers runs a small regression (golden
and RTL) and a small sweep; a worker killed mid-run loses no result; reruns come from the
cache; bad input is one clear error."""

import json
import os
import signal
import xml.etree.ElementTree as ET

import pytest

from snpu.errors import SnpuError
from snpu.verif import farm, regress
from snpu import sweep_report
from snpu.verif.tb import sweep

from ..compiler.models import TEST_CORE


@pytest.fixture(scope="module")
def client():
    c = farm.connect(None, workers=2)
    yield c
    farm.close(c)


def _ids(rows):
    return [(r["kind"], r["seed"]) for r in rows]


def test_a_small_regression_on_two_workers_golden_and_rtl(client, tmp_path):
    specs = regress.chunk_specs(8, list(regress.KINDS), 500, rtl=True, config=TEST_CORE,
                                chunk=2, waves_dir=str(tmp_path / "waves"))
    cache = farm.ResultCache(tmp_path / "cache")
    out = farm.run_tasks(client, "regress", regress.run_chunk, specs, cache)
    rows = regress.flatten(out.results)
    assert _ids(rows) == [(list(regress.KINDS)[i % len(regress.KINDS)], 500 + i) for i in range(8)]
    assert all(r["ok"] and r["rtl_cycles"] > 0 and r["golden_cycles"] > 0 for r in rows), rows
    suite = ET.fromstring(regress.junit_xml(rows))
    assert suite.get("tests") == "8" and suite.get("failures") == "0"
    # resumable: the same regression again comes entirely from the cache
    again = farm.run_tasks(client, "regress", regress.run_chunk, specs, cache)
    assert again.cached == len(specs) and again.ran == 0 and again.results == out.results


def test_a_killed_worker_loses_no_result(client, tmp_path):
    """Kill one worker process while tasks run: the scheduler reruns its tasks elsewhere
    and every result arrives exactly once."""
    specs = regress.chunk_specs(120, ["fc", "conv"], 1000, config=TEST_CORE, chunk=4)
    pids = client.run(os.getpid)
    killed = []

    def progress(done, total):
        if done >= 3 and not killed:
            victim = sorted(pids.values())[0]
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    out = farm.run_tasks(client, "regress", regress.run_chunk, specs,
                         farm.ResultCache(tmp_path / "cache"), progress=progress)
    assert killed
    rows = regress.flatten(out.results)
    assert _ids(rows) == [(["fc", "conv"][i % 2], 1000 + i) for i in range(120)]
    assert all(r["ok"] for r in rows)
    assert len(list((tmp_path / "cache").glob("*.json"))) == len(specs)
    client.wait_for_workers(2, timeout=60)  # the nanny restarted the killed worker


def test_a_small_sweep_with_plots_and_a_page(client, tmp_path):
    vary = sweep.parse_vary(["lanes=1,4"])
    cfgs = sweep.configs(TEST_CORE, vary)
    specs = sweep.points(cfgs, densities=[0.1, 1.0], formats=["direct"], n_in=64, rows=8,
                         nvec=2, rtl_sample=1.0)
    specs = [s for s in specs if s["config"]["lanes"] == 4] + \
        [dict(s, rtl=False) for s in specs if s["config"]["lanes"] == 1]  # one RTL build
    out = farm.run_tasks(client, "sweep", sweep.run_point, specs, farm.ResultCache(tmp_path / "c"))
    rows = sweep_report.table(specs, out.results, {}, list(vary))
    assert len(rows) == 4 and not any(r["problem"] for r in rows), rows
    sparse = {(r["lanes"], r["w_density"]): r for r in rows}
    assert sparse[(4, 0.1)]["speedup"] > sparse[(4, 1.0)]["speedup"]
    assert all(sparse[(4, d)]["rtl_cycles"] > 0 for d in (0.1, 1.0))
    images = sweep_report.plots(rows, list(vary))
    assert images["speedup"].startswith(b"\x89PNG") and "pareto" not in images
    sweep_report.write_report(tmp_path / "out", rows, images, {"format": "snpu-sweep/1"})
    page = (tmp_path / "out" / "report.html").read_text()
    assert "data:image/png;base64," in page and "<table>" in page
    assert json.loads((tmp_path / "out" / "results.json").read_text())["rows"] == rows
    with_synth = sweep_report.table(specs, out.results, {json.dumps(s["config"], sort_keys=True):
                                                  {"luts": 1000 * s["config"]["lanes"], "fmax_mhz": 50}
                                                  for s in specs}, list(vary))
    assert sweep_report.plots(with_synth, list(vary))["pareto"].startswith(b"\x89PNG")


def test_a_failing_program_names_its_seed_replay_and_waveform(monkeypatch, tmp_path):
    """A program the RTL disagrees on: the entry says so, with a replay command and a
    waveform of the failing run alone."""
    real = regress._rtl
    calls = []

    def broken(progs, mesh, config, stall, seed, waves=None):
        results = real(progs, mesh, config, stall, seed, waves)
        calls.append(waves)
        if waves is None:
            results[0].problems.append("ext[0x40]: RTL 0x01, golden 0x02")
        return results

    monkeypatch.setattr(regress, "_rtl", broken)
    spec = regress.chunk_specs(2, ["fc"], 77, rtl=True, config=TEST_CORE,
                               waves_dir=str(tmp_path / "waves"))[0]
    rows = regress.run_chunk(spec)["programs"]
    bad, good = rows
    assert not bad["ok"] and good["ok"] and "ext[0x40]" in bad["problem"]
    assert bad["replay"].startswith("snpu regress --programs 1 --kinds fc --seed-start 77 --rtl")
    assert bad["waves"] and os.path.getsize(bad["waves"]) > 0 and calls[-1] == bad["waves"]
    failure = ET.fromstring(regress.junit_xml(rows)).find("testcase/failure")
    assert "replay: snpu regress" in failure.get("message")


def test_bad_input_is_one_clear_error():
    with pytest.raises(farm.FarmError, match=r"scheduler tcp://127.0.0.1:9: unreachable"):
        farm.connect("tcp://127.0.0.1:9", timeout=1)
    with pytest.raises(SnpuError, match=r"kind 'matmul': the kinds for one core are fc"):
        regress.check_kinds(["matmul"], (1, 1))
    with pytest.raises(SnpuError, match=r"kind 'fc': the kinds for a 2x2 array are neighbour"):
        regress.check_kinds(["fc"], (2, 2))
    with pytest.raises(SnpuError, match=r"'lane' is not a core parameter"):
        sweep.parse_vary(["lane=1,2"])
    with pytest.raises(SnpuError, match=r"lanes takes int values"):
        sweep.parse_vary(["lanes=1,x"])
    with pytest.raises(SnpuError, match=r"index format 'bitmap'"):
        sweep.points([TEST_CORE], densities=[0.5], formats=["bitmap"])


def test_cache_keys_follow_the_code_that_decides_the_result():
    """A task's cache key covers the source that decides its result: a synthesis is keyed
    by the RTL, not by the compiler; presentation (snpu/sweep_report.py) keys nothing."""
    assert farm.code_version(sweep.SYNTH_CODE) == farm.code_version(("rtl", "verif/tb/synth.py"))
    assert farm.code_version(sweep.SYNTH_CODE) != farm.code_version(sweep.POINT_CODE)
    assert farm.code_version(regress.CODE) != farm.code_version(sweep.POINT_CODE)
    spec = {"config": TEST_CORE.to_dict(), "device": "85k"}
    assert farm.task_key("synth", spec, "a") != farm.task_key("synth", spec, "b")
    assert farm.task_key("synth", spec, "a") == farm.task_key("synth", dict(spec), "a")
