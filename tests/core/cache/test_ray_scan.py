"""What each node's scan task does, on real directories: nodes sharing a temp dir count a
session folder once, deleting is safe alongside another deleter, and an interrupted gc is
finished by the next one (the functions are the ones the task runs on the cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rtenv_cli.core.cache import ray_scan
from rtenv_cli.core.cache.ray_nodes import _failure, _totals, mark_shared, node_errors, plan_from

OLD = "session_2020-01-01_00-00-00_000000_1"
LIVE = "session_2026-01-01_00-00-00_000000_2"


def _temp(tmp_path: Path, files: int = 3) -> Path:
    temp = tmp_path / "ray"
    venv = temp / OLD / "runtime_resources" / "pip" / ("a" * 40) / "virtualenv"
    venv.mkdir(parents=True)
    for i in range(files):
        (venv / f"f{i}.bin").write_bytes(b"\1" * 8192)
    (temp / OLD / "logs").mkdir()
    (temp / LIVE / "runtime_resources" / "working_dir_files" / "_ray_pkg_1").mkdir(parents=True)
    (temp / LIVE / "runtime_resources" / "working_dir_files" / "_ray_pkg_1" / "m.py").write_text(
        "x = 1\n" * 1000)
    os.utime(temp / OLD, (1_600_000_000, 1_600_000_000))
    return temp


def _node(node_id: str, temp: Path, mode: str = "scan") -> dict:
    sessions, errors = ray_scan.scan_temp(str(temp), {LIVE}, mode=mode, older_than_s=None,
                                          tag=node_id)
    return {"node_id": node_id, "node_ip": "10.0.0.1", "sessions": sessions, "errors": errors,
            "removed": [os.path.join(s["path"], "runtime_resources") for s in sessions
                        if s["removed"]]}


def test_nodes_sharing_a_temp_dir_count_each_folder_once(tmp_path: Path) -> None:
    temp = _temp(tmp_path)
    nodes = mark_shared((_node("a" * 56, temp), _node("b" * 56, temp)))
    alone = mark_shared((_node("a" * 56, temp),))
    assert _totals(nodes) == _totals(alone)
    assert _totals(alone)["old_sessions_bytes"] >= 3 * 8192
    old = [s for n in nodes for s in n["sessions"] if s["name"] == OLD]
    assert [s["counted"] for s in old] == [True, False]
    assert old[0]["nodes"] == ["a" * 56, "b" * 56]  # reported per node where it lives
    plan = plan_from("addr", nodes, dry_run=True)
    assert [(r["session"], r["nodes"]) for r in plan.removable] == [(OLD, ["a" * 56, "b" * 56])]
    assert plan.freed_bytes == plan_from("addr", alone, dry_run=True).freed_bytes


def test_a_second_deleter_finds_the_work_done_and_reports_no_error(tmp_path: Path) -> None:
    temp = _temp(tmp_path)
    first = _node("a" * 56, temp, "clean")
    second = _node("b" * 56, temp, "clean")  # its rename finds nothing: another node won it
    assert first["errors"] == second["errors"] == []
    assert not (temp / OLD / "runtime_resources").exists()
    assert [p.name for p in (temp / OLD).iterdir()] == ["logs"]  # no tombstone left
    # clean_session itself, when the folder was renamed away between scan and delete
    assert ray_scan.clean_session(str(temp / OLD), "c", condemn=True) == []
    plan = plan_from("addr", mark_shared((first, second)), dry_run=False)
    assert len(plan.removable) == 1
    assert plan.removed == (str(temp / OLD / "runtime_resources"),)


def test_deleters_running_at_once_both_succeed(tmp_path: Path) -> None:
    temp = _temp(tmp_path, files=2000)
    code = ("import json, sys; from rtenv_cli.core.cache.ray_scan import scan_temp; "
            "s, e = scan_temp(sys.argv[1], set(), mode='clean', older_than_s=None, "
            "tag=sys.argv[2]); print(json.dumps(e))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(temp), tag], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for tag in ("n1", "n2")]
    results = [p.communicate(timeout=120) for p in procs]
    assert [(p.returncode, out.strip(), err) for p, (out, err) in zip(procs, results,
                                                                       strict=True)] == \
        [(0, "[]", ""), (0, "[]", "")]
    assert sorted(p.name for p in (temp / OLD).iterdir()) == ["logs"]


def test_an_interrupted_gc_is_listed_with_its_size_and_finished_by_the_next(
        tmp_path: Path) -> None:
    temp = _temp(tmp_path)
    old = temp / OLD
    # a gc killed mid-delete: the cache is renamed to its tombstone, partly deleted
    tomb = old / "runtime_resources.rtenv-deleting-4242"
    os.rename(old / "runtime_resources", tomb)
    listed = _node("a" * 56, temp)
    (session,) = [s for s in listed["sessions"] if s["name"] == OLD]
    assert session["size_bytes"] >= 3 * 8192  # not 0 B
    assert [t["path"] for t in session["deleting"]] == [str(tomb)]
    assert session["removable"] is True
    cleaned = _node("a" * 56, temp, "clean")
    assert cleaned["errors"] == []
    assert not tomb.exists()
    assert cleaned["removed"] == [str(old / "runtime_resources")]
    again = _node("a" * 56, temp)
    assert [s["removable"] for s in again["sessions"] if s["name"] == OLD] == [False]


def test_failures_are_one_line_each() -> None:
    script_echo = "\n".join(["Traceback (most recent call last):", '  File "<string>", line 9',
                             "    def du(path):", "RuntimeError: the GCS went away"])
    assert _failure(script_echo) == "RuntimeError: the GCS went away"
    assert _failure("noise\nRTENV_SCAN_ERROR cannot connect to the cluster: x\n") == \
        "cannot connect to the cluster: x"
    nodes = ({"node_id": "n" * 56, "node_ip": "10.0.0.2", "error": "node died",
              "sessions": [], "errors": ["cannot delete /t/x: Permission denied"]},)
    assert node_errors(nodes) == (f"node {'n' * 12} (10.0.0.2): node died",
                                  f"node {'n' * 12} (10.0.0.2): cannot delete /t/x: "
                                  "Permission denied")


def test_a_node_without_rtenvs_plugin_reports_no_rtenv_store(tmp_path: Path) -> None:
    """RTENV_HOME of a node whose Ray does not load rtenv's plugin is nobody's plugin store (on
    one machine, it is the user's own): it is not listed as the node's."""
    from rtenv_cli.core.store.store import Store

    home = tmp_path / "home"
    Store(home / "store").close()  # a store that exists, with its index
    env = {"RTENV_HOME": str(home)}
    assert ray_scan.rtenv_store("scan", None, env) is None
    plugin = json.dumps([{"class": "rtenv_cli.ray_plugin.RtenvPlugin", "priority": 10}])
    listed = ray_scan.rtenv_store("scan", None, {**env, ray_scan.PLUGINS_VAR: plugin})
    assert listed is not None
    assert listed["root"] == str(home / "store")
