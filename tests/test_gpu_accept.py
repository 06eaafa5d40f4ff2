"""benchmarks/gpu_accept.py, the GPU acceptance script, run on the tiny twins on CPU so it cannot rot while no
GPU is lent: every section (build, sdxl end to end with the VLM judge, capture, the mini quickstart, the DiT,
--compile) finishes and writes the figures the GPU run reports. With --tiny on CPU the script imports torch and
diffusers once and forks its sections and their `t2i-audit` commands (each still a process of its own): about
50 CPU-s here, where a fresh interpreter for each of its ~17 processes cost ~165."""

import json
import subprocess
import sys

import pytest

SCRIPT = "benchmarks/gpu_accept.py"


@pytest.mark.slow
def test_every_section_runs_on_the_tiny_twins(repo_root, tmp_path):
    out = tmp_path / "gpu_accept.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--tiny", "--device", "cpu", "--out", str(out),
                           "--work", str(tmp_path / "work"), "--budget", "1200"],
                          cwd=repo_root, capture_output=True, text=True, timeout=1500)
    result = json.loads(out.read_text())
    failed = {k: v.get("error", v["status"])[-1500:] for k, v in result["sections"].items() if v["status"] != "ok"}
    assert proc.returncode == 0 and not failed, failed
    s = result["summary"]
    assert s["sections_ok"] == sorted(["env", "build", "sdxl", "capture", "mini", "compile", "sd35"])
    assert s["sdxl_generate_ratio_vs_bare"] > 0 and s["sd35_generate_ratio_vs_bare"] > 0
    assert s["early_capture_ratio"] > 0 and s["judge_questions_per_s"] > 0 and 0 < s["judge_share_of_generation"]
    assert set(s["sdxl_stage_seconds"]) == {"generate", "score", "probe", "probe_early", "select"}
    assert s["compile_seconds"] > 0 and s["mini_quickstart_seconds"] > 0
    sdxl = result["sections"]["sdxl"]
    assert sdxl["generate"]["images"] == result["workload"]["n"] and sdxl["generate"]["flags"] == {}
    assert sdxl["bare"]["flops_per_image"] > 0  # counted as benchmarks/gpu.py counts them
    assert result["sections"]["env"]["versions"]["t2i-audit"]


def test_a_failed_section_is_recorded_and_the_others_still_report(repo_root, tmp_path):
    """sdxl without `build` has no model folder: it fails with the command's own message; env still reports."""
    out = tmp_path / "partial.json"
    proc = subprocess.run([sys.executable, SCRIPT, "--tiny", "--device", "cpu", "--out", str(out), "--work",
                           str(tmp_path / "work"), "--sections", "env,sdxl"],
                          cwd=repo_root, capture_output=True, text=True, timeout=300)
    result = json.loads(out.read_text())
    assert result["sections"]["env"]["status"] == "ok"
    sdxl = result["sections"]["sdxl"]
    assert sdxl["status"] == "failed (exit 1)" and "no such folder" in sdxl["error"]
    assert proc.returncode == 1 and result["summary"]["sections_ok"] == ["env"]


def test_sections_past_the_budget_are_skipped(repo_root, tmp_path):
    out = tmp_path / "skipped.json"
    subprocess.run([sys.executable, SCRIPT, "--tiny", "--out", str(out), "--work", str(tmp_path / "w"),
                    "--sections", "env,build", "--budget", "19"], cwd=repo_root, capture_output=True, timeout=120)
    assert {v["status"] for v in json.loads(out.read_text())["sections"].values()} == {
        "skipped: no time left in the budget"}
    bad = subprocess.run([sys.executable, SCRIPT, "--tiny", "--sections", "env,gpu"], cwd=repo_root,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--sections: unknown gpu" in bad.stderr
