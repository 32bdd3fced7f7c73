"""`rtenv push` vs Ray 2.60's own packaging and job-submit upload, side by side in one run.

Tree (deterministic, seed 0): 9,500 text files of 0.3-8 KB,
440 random files of 40-160 KB, 60 random files of ~1.9 MB (in data/): 10,000 files, ~200 MB.
Each measured phase runs in a fresh child process (time measured inside, peak RSS from wait4).
The HTTP comparison uses the tree minus data/ (~83 MB, under Ray's 100 MiB limit) against a real
head started here.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.common import RAY_DRIVER_PUSH, Row, ray_gcs_put_floor, ray_put_floor, run_measured

ROOT = Path(tempfile.gettempdir()) / "rtenv_bench_push"
WORDS = ["alpha", "beta", "gamma", "delta", "ray", "task", "actor", "import", "def", "return",
         "self", "value", "numpy", "train", "model", "batch", "=", "(", ")", ":", "\n"]


def make_tree(root: Path, quick: bool) -> Path:
    marker = root / ".complete"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(0)
    scale = 10 if quick else 1
    for i in range(9500 // scale):
        d = root / "src" / f"pkg{i % 200}" / f"sub{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        n = rng.randint(300, 8000)
        text = " ".join(rng.choice(WORDS) for _ in range(n // 5))[:n]
        (d / f"m{i}.py").write_text(text)
    for i in range(440 // scale):
        d = root / "assets" / f"a{i % 6}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"blob{i}.bin").write_bytes(rng.randbytes(rng.randint(40_000, 160_000)))
    (root / "data").mkdir(parents=True, exist_ok=True)
    for i in range(60 // scale):
        (root / "data" / f"shard{i}.bin").write_bytes(rng.randbytes(1_900_000 + i))
    marker.write_text("ok")
    (root / ".gitignore").write_text(".complete\n")
    return root


RAY_COLD = """
import json, sys, time, logging
logging.disable(logging.WARNING)
from pathlib import Path
from ray._private.runtime_env.packaging import get_uri_for_directory, create_package
from ray._private.ray_constants import get_runtime_env_default_excludes as d
t0 = time.perf_counter()
uri = get_uri_for_directory(sys.argv[1], True, d())
t1 = time.perf_counter()
out = Path(sys.argv[2]) / f"ray-{time.time_ns()}.zip"
create_package(sys.argv[1], out, include_gitignore=True, excludes=d())
t2 = time.perf_counter()
print(json.dumps({"uri": uri, "hash": t1 - t0, "zip": t2 - t1, "total": t2 - t0,
                  "zip_bytes": out.stat().st_size}))
"""

RTENV_COLD = """
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from rtenv_cli.core.packaging.build import build_package
b = build_package(Path(sys.argv[1]), kind="working_dir", dest_dir=Path(sys.argv[2]))
t1 = time.perf_counter()
print(json.dumps({"uri": b.uri, "total": t1 - t0, "zip_bytes": b.zip_bytes}))
"""

RAY_PUSH = """
import json, sys, time, logging
logging.disable(logging.WARNING)
from ray.job_submission import JobSubmissionClient
c = JobSubmissionClient(sys.argv[1])
env = {"working_dir": sys.argv[2]}
t0 = time.perf_counter()
c._upload_working_dir_if_needed(env)
print(json.dumps({"uri": env["working_dir"], "total": time.perf_counter() - t0}))
"""

RTENV_PUSH = """
import json, sys, time
t0 = time.perf_counter()
from rtenv_cli.core.push import push
from rtenv_cli.core.transport.resolve import resolve_target
r = push(sys.argv[2], target=resolve_target(None, sys.argv[1]))
p = r.packages[0]
print(json.dumps({"uri": p.ray_uri, "total": time.perf_counter() - t0,
                  "uploaded": p.uploaded, "zip_bytes": p.zip_bytes or 0}))
"""


# Ablations: the same re-push with one fast path switched off by its module switch, to show what
# each buys on its own (a clever path stays only if its row shows a gain).
ABLATIONS = {
    "sendfile": "import rtenv_cli.core.transport.grpc_unary as m; m.SENDFILE = False\n",
}  # background splice (the zip written by a thread while the upload followed it): removed, it
# did not pay (0.59 s without it, 0.63 s with it, in two runs)


def make_big_tree(root: Path, base: Path, quick: bool) -> Path:
    """The 200 MB tree plus 400 random 2 MB files: about 1 GB (quick: about 100 MB)."""
    marker = root / ".complete"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(base, root)
    rng = random.Random(1)
    for i in range(40 if quick else 400):
        d = root / "big" / f"b{i % 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"chunk{i}.bin").write_bytes(rng.randbytes(2_000_000))
    marker.write_text("ok")
    return root


# Peak RSS from inside the child: /proc/self/status VmHWM is the peak of the process's own
# memory. (wait4's ru_maxrss would also count the parent's pages the child held between fork
# and exec, i.e. this harness's own size.) Worker processes rtenv forks report separately.
_MEMORY = """
import resource as _r
_hwm = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
print("MEM", _hwm, _r.getrusage(_r.RUSAGE_CHILDREN).ru_maxrss)
"""


def child(code: str, *args: str, env: dict[str, str] | None = None) -> dict:
    res = run_measured([sys.executable, "-c", code + _MEMORY, *args], env=env)
    if res["returncode"] != 0:
        raise RuntimeError(res["stderr"][-3000:])
    lines = res["stdout"].strip().splitlines()
    data = json.loads(next(ln for ln in reversed(lines) if ln.startswith("{")))
    _tag, hwm, children = next(ln for ln in reversed(lines) if ln.startswith("MEM ")).split()
    data["peak_rss_mib"] = int(hwm) / 1024
    data["cpu_s"] = res["cpu_s"]
    data["worker_peak_rss_mib"] = int(children) / 1024
    return data


def _drop_outputs(work: Path) -> None:
    """Delete the zips a run wrote: 200 MB of dirty page cache left per run would make the next
    run's writes wait for reclaim (this VM's ext4 then writes at ~250 MB/s instead of GB/s)."""
    for z in work.glob("*.zip"):
        z.unlink()


def cold_pairs(tree: Path, work: Path, n: int) -> tuple[list[dict], list[dict]]:
    """`n` cold hash+zip runs of Ray and of rtenv, alternating, each in a fresh process (rtenv
    with an empty digest cache), outputs deleted between runs: (Ray's, rtenv's)."""
    rays, ours = [], []
    for i in range(n):
        rays.append(child(RAY_COLD, str(tree), str(work)))
        _drop_outputs(work)
        ours.append(child(RTENV_COLD, str(tree), str(work),
                          env={"RTENV_HOME": str(work / f"cold{i}")}))
        _drop_outputs(work)
        shutil.rmtree(work / f"cold{i}", ignore_errors=True)
    assert ours[0]["uri"] == rays[0]["uri"], (ours[0]["uri"], rays[0]["uri"])
    return rays, ours


def _edit(path: Path, n: int) -> None:
    path.write_text(path.read_text() + f"\n# edit {n}\n")


def _big_tree_rss(tree: Path, work: Path, quick: bool) -> Row:
    big = make_big_tree(ROOT / ("big-quick" if quick else "big"), tree, quick)
    big_bytes = sum(f.stat().st_size for f in big.rglob("*") if f.is_file())
    ours = child(RTENV_COLD, str(big), str(work), env={"RTENV_HOME": str(work / "big")})
    (work / ours["uri"].removeprefix("gcs://")).unlink(missing_ok=True)
    ray = child(RAY_COLD, str(big), str(work))
    assert ours["uri"] == ray["uri"]
    for leftover in work.glob("*.zip"):
        leftover.unlink()
    return Row("push", f"cold hash+zip peak RSS, {big_bytes / 1e9:.2f} GB tree", "MiB",
               round(ours["peak_rss_mib"], 1), round(ray["peak_rss_mib"], 1), "< 150 MB",
               ours["peak_rss_mib"] < 150,
               f"rtenv {ours['total']:.1f} s, Ray {ray['total']:.1f} s; VmHWM of the process; "
               f"rtenv's forked workers peak at {ours['worker_peak_rss_mib']:.0f} MiB each, "
               "most of it pages shared with the parent; fresh digest cache")


def run(quick: bool) -> list[Row]:  # noqa: PLR0915 - one linear script of measurements
    tree = make_tree(ROOT / ("tree-quick" if quick else "tree"), quick)
    work = Path(tempfile.mkdtemp(prefix="rtenv-bench-push-"))
    rows: list[Row] = []
    try:
        home = {"RTENV_HOME": str(work / "home")}
        # cold: each in a fresh process, warm page cache, empty digest cache for rtenv
        for _ in range(2):
            child(RTENV_COLD, str(tree), str(work), env={"RTENV_HOME": str(work / "warmup")})
            _drop_outputs(work)
        rays, ours = cold_pairs(tree, work, 7)
        med = lambda xs, k: sorted(x[k] for x in xs)[len(xs) // 2]  # noqa: E731 - local
        r_t, o_t = med(rays, "total"), med(ours, "total")
        rows.append(Row("push", "cold hash+zip, 10k files/200 MB", "s", round(o_t, 3),
                        round(r_t, 3), ">= 1.4x faster than Ray", r_t / o_t >= 1.4,
                        f"Ray hash {med(rays, 'hash'):.2f}s + zip {med(rays, 'zip'):.2f}s; "
                        "same URI; median of 7 pairs, fresh processes, outputs deleted between "
                        "runs"))
        o_rss, r_rss = med(ours, "peak_rss_mib"), med(rays, "peak_rss_mib")
        rows.append(Row("push", "cold hash+zip peak RSS", "MiB", round(o_rss, 1),
                        round(r_rss, 1), "< 150 MB", o_rss < 150,
                        "VmHWM of the process; rtenv's forked workers peak at "
                        f"{med(ours, 'worker_peak_rss_mib'):.0f} MiB each, mostly pages shared "
                        "with the parent"))
        rows.append(_big_tree_rss(tree, work, quick))
        rows.append(Row("push", "package size (zip)", "MB", round(med(ours, "zip_bytes") / 1e6, 1),
                        round(med(rays, "zip_bytes") / 1e6, 1), "", None,
                        "both store every member (rtenv deflates only a package that would not "
                        "fit its target's upload limit)"))
        # HTTP: the tree minus data/ against a real head
        sub = work / "sub"
        shutil.copytree(tree, sub, ignore=shutil.ignore_patterns("data"))
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.support.ray_head import ray_head

        with ray_head() as head:
            url = head.dashboard_url
            env = dict(home, **{k: v for k, v in head.client_env().items() if k != "RAY_ADDRESS"})
            child(RTENV_PUSH, url, str(sub), env=env)  # first push: warms the digest cache
            child(RAY_PUSH, url, str(sub), env=env)
            files = sorted((sub / "src").rglob("*.py"))
            ray_edit, our_edit = [], []
            for n in range(3):
                _edit(files[n], n)
                ray_edit.append(child(RAY_PUSH, url, str(sub), env=env))
                _edit(files[n + 10], n)
                our_edit.append(child(RTENV_PUSH, url, str(sub), env=env))
            noop_ray = child(RAY_PUSH, url, str(sub), env=env)
            noop_ours = child(RTENV_PUSH, url, str(sub), env=env)
            # the cluster's GCS address (host:6379, RAY_ADDRESS's usual form): rtenv streams the
            # zip to the GCS itself; Ray's own GCS path is the driver's (ray.init)
            # Each round measures Ray's job-submit re-push, Ray's driver re-push and rtenv's, one
            # after the other, so that all three meet the GCS holding the same packages (its
            # puts slow down as it holds more: 0.17 -> 0.45 s over a run here).
            gcs = head.address
            child(RTENV_PUSH, gcs, str(sub), env=env)
            drv_edit, gcs_edit, ray_side = [], [], []
            ablated: dict[str, list[dict]] = {name: [] for name in ABLATIONS}
            for n in range(5):
                _edit(files[n + 20], n)
                ray_side.append(child(RAY_PUSH, url, str(sub), env=env))
                _edit(files[n + 30], n)
                drv_edit.append(child(RAY_DRIVER_PUSH, gcs, str(sub), env=env))
                _edit(files[n + 40], n)
                gcs_edit.append(child(RTENV_PUSH, gcs, str(sub), env=env))
                for i, (name, prelude) in enumerate(ABLATIONS.items()):
                    _edit(files[n + 50 + 10 * i], n)
                    ablated[name].append(child(prelude + RTENV_PUSH, gcs, str(sub), env=env))
            from rtenv_cli.core.packaging.build import build_package

            package = build_package(sub, kind="working_dir", env={}, dest_dir=work / "floor",
                                    use_cache=False)
            floor = ray_put_floor(url, package.path)
            gcs_floor = ray_gcs_put_floor(gcs, package.path)
        r_e, o_e = med(ray_edit, "total"), med(our_edit, "total")
        o_g, r_d, r_s = med(gcs_edit, "total"), med(drv_edit, "total"), med(ray_side, "total")
        rows.append(Row("push", "re-push after a one-file edit (83 MB), to the GCS address", "s",
                        round(o_g, 3), round(r_s, 3), ">= 10x faster than Ray's job-submit",
                        r_s / o_g >= 10,
                        "median of 5 rounds, each Ray then rtenv on the same cluster state; "
                        "rtenv: stats + 1 re-hash, zip from byte ranges of the last build, one "
                        "streamed gRPC put to the GCS; Ray: job-submit path (hash x2 + zip + "
                        f"dashboard PUT). Ray's driver path (ray.init, GCS): {r_d:.2f} s = "
                        f"{r_d / o_g:.1f}x"))
        for name, runs in ablated.items():
            off = med(runs, "total")
            rows.append(Row("push", f"ablation: GCS re-push without {name}", "s", round(off, 3),
                            None, f"slower than {o_g:.3f} s (with it)", off > o_g,
                            f"what {name} buys on its own: {off - o_g:+.3f} s per re-push "
                            "(median of 5, in the same rounds)"))
        rows.append(Row("push", "re-push after a one-file edit (83 MB), to the dashboard URL", "s",
                        round(o_e, 3), round(r_e, 3), "", None,
                        "same work, then an HTTP PUT to Ray's /api/packages (no delta there)"))
        rows.append(Row("push", "Ray's driver path re-push (ray.init: hash x2 + zip + GCS put)",
                        "s", round(o_g, 3), round(r_d, 3), "", None,
                        "Ray's fastest own path, vs rtenv to the GCS address"))
        rows.append(Row("push", "Ray dashboard taking one PUT of that package", "s",
                        round(floor, 3), round(r_e, 3), "", None,
                        f"the floor of any push through the dashboard: at best {r_e / floor:.1f}x"
                        " Ray's job-submit"))
        rows.append(Row("push", "GCS taking one KV put of that package (Ray's own client)", "s",
                        round(gcs_floor, 3), round(r_s, 3), "", None,
                        "Ray's own client putting that package once, after the rounds above "
                        "(the GCS takes puts more slowly as it holds more packages)"))
        rows.append(Row("push", "bytes uploaded per one-file edit", "MB",
                        round(med(our_edit, "zip_bytes") / 1e6, 1),
                        round((sum(f.stat().st_size for f in sub.rglob("*") if f.is_file())
                               ) / 1e6, 1), "", None, "Ray: stored zip ~= tree bytes"))
        rows.append(Row("push", "no-op re-push (unchanged, HTTP)", "s",
                        round(noop_ours["total"], 3), round(noop_ray["total"], 3), "", None,
                        "rtenv: stat walk + digest cache + GET; Ray: two full hashes + GET"))
        rows.append(Row("push", "re-push peak RSS", "MiB", round(med(our_edit, "peak_rss_mib"), 1),
                        round(med(ray_edit, "peak_rss_mib"), 1), "< 150 MB",
                        med(our_edit, "peak_rss_mib") < 150, "to the dashboard URL"))
        rows.append(Row("push", "re-push peak RSS, to the GCS address", "MiB",
                        round(med(gcs_edit, "peak_rss_mib"), 1),
                        round(med(drv_edit, "peak_rss_mib"), 1), "< 150 MB",
                        med(gcs_edit, "peak_rss_mib") < 150,
                        "the zip streamed from disk in 1 MiB chunks; Ray: its driver path, which "
                        "holds the whole zip in memory"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows
