"""Cold push on every tree shape of the scaling set (benchmarks/scaling.py), side by side with
Ray in one run: rtenv vs Ray 2.60's own packaging.

Per shape, each in fresh processes (warm page cache, empty digest and zip caches for rtenv),
alternating Ray and rtenv, median of REPEAT:
- hash+zip: Ray's `get_uri_for_directory` + `create_package` vs rtenv's `build_package`;
- push to the GCS address of a real head whose node loads rtenv's plugin: Ray's driver path
  (`upload_working_dir_if_needed`, as `ray.init` uploads) vs `rtenv push --address <gcs>`
  in-process, on the zip path (`--via zip`: Ray's gcs:// zip, byte-identical) and on the tree
  path (what `rtenv push --address` does by default on such a cluster: packs and a manifest in
  the GCS KV, trees/publish.py), the package (or every pack and manifest) deleted from the GCS
  before each run, so every run uploads. Shapes whose stored zip passes Ray's 512 MiB GCS limit
  have no zip push rows (Ray refuses them).
- ablation rows: each fast path of the cold zip path and of the cold tree path switched off by
  its module switch; for the workers that prepare stored members, the side
  `build.stored_by_forks` did not choose for the shape (threads where it chose forked workers,
  forked workers where it chose threads).
- 1 GB shapes (RTENV_BENCH_BIG=1): Ray refuses their stored zip on the GCS (over 512 MiB); the
  zip push row shows what rtenv does instead (deflate what shrinks, if that makes it fit). Their
  trees are deleted after use (RTENV_BENCH_KEEP=1 keeps them for a re-run).

RTENV_BENCH_SHAPES (scaling.py) measures some shapes only; the rows of the other shapes (and of
the 1 GB shapes, without RTENV_BENCH_BIG=1) are then carried over from the results file, marked
with the run they come from.

Target (issue 23): cold push >= 1.2x faster than Ray on every shape.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import scaling
from benchmarks.bench_push import RTENV_COLD, RTENV_PUSH, _drop_outputs, child, cold_pairs
from benchmarks.common import RAY_DRIVER_PUSH, RESULTS_DIR, Row

TARGET = 1.2
GCS_LIMIT = 512 * 1024 * 1024

# rtenv push on the plugin-enabled head: the zip path asked for, or the tree path
ZIP_PUSH = RTENV_PUSH.replace("target=resolve_target(None, sys.argv[1]))",
                              "target=resolve_target(None, sys.argv[1]), trees='zip')")
TREE_PUSH = """
import json, sys, time
t0 = time.perf_counter()
from rtenv_cli.core.push import push
from rtenv_cli.core.transport.resolve import resolve_target
r = push(sys.argv[2], target=resolve_target(None, sys.argv[1]), trees="tree")
p = r.packages[0]
print(json.dumps({"uri": p.ray_uri, "total": time.perf_counter() - t0, "path": r.path,
                  "bytes": p.bytes_sent, "packs": p.tree["packs_sent"]}))
"""
assert ZIP_PUSH != RTENV_PUSH

# the ablations: one fast path switched off each (its module's switch)
WORKERS = "import rtenv_cli.core.packaging.build as m; m.STORED_WORKERS = {!r}\n"
HASH_TWICE = "import rtenv_cli.core.packaging.build as m; m.HASH_ONCE = False\n"
H2_FRAMES = "import rtenv_cli.core.transport.grpc_unary as m; m.DIRECT_FRAMES = False\n"
# every file hashed again as it is read into its pack, as if all were racy (publish.RACY_NS)
REHASH = "import rtenv_cli.core.trees.publish as m; m.RACY_NS = 1 << 80\n"
# deflate what shrinks, as if the package did not fit stored (what deflate costs or buys on
# this link: packaging/build.py stores unless the target's limit needs it)
DEFLATE = "import rtenv_cli.core.packaging.build as m; m.fits_stored = lambda *a: False\n"


def _repeat(shape: scaling.Shape) -> int:
    return 1 if shape.big else 3


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def _cpu(runs: list[dict]) -> str:
    """The median CPU seconds of `runs`' processes (user + sys, their workers included, and
    their imports: Ray's `import ray` among them): what a loaded box cannot distort."""
    return f"{_median([x['cpu_s'] for x in runs]):.2f}"


def _warm(tree: Path) -> None:
    """Read the tree once: the page cache of a shared box may have dropped it, and the first run
    (Ray's) would pay the disk."""
    for d, _dirs, files in os.walk(tree):
        for name in files:
            with open(os.path.join(d, name), "rb") as fh:
                while fh.read(1 << 20):
                    pass


def _hash_zip(shape: scaling.Shape, tree: Path, work: Path) -> tuple[list[Row], dict]:
    from rtenv_cli.core.packaging.build import STORED_FORK_MIN_FILES, stored_by_forks

    _warm(tree)
    before = _load()
    rays, ours = cold_pairs(tree, work, _repeat(shape))
    # the other side of the workers' choice for this shape (every file of the set is small)
    forks = stored_by_forks(shape.files)
    chose, other = ("forked workers", "threads") if forks else ("threads", "forked workers")
    threaded = []
    for i in range(_repeat(shape)):
        threaded.append(child(WORKERS.format("threads" if forks else "forks") + RTENV_COLD,
                              str(tree), str(work), env={"RTENV_HOME": str(work / f"other{i}")}))
        _drop_outputs(work)
        shutil.rmtree(work / f"other{i}", ignore_errors=True)
    load = f"load avg {before} -> {_load()} on 2 cores"
    o, r = _median([x["total"] for x in ours]), _median([x["total"] for x in rays])
    f = _median([x["total"] for x in threaded])
    zipped = ours[0]["zip_bytes"] / 1e6
    return [Row("cold", f"hash+zip, {shape.name}", "s", round(o, 3), round(r, 3),
                f">= {TARGET}x faster than Ray", r / o >= TARGET,
                f"median of {len(ours)} pairs, fresh processes; same URI; zip {zipped:.0f} MB "
                f"(Ray {rays[0]['zip_bytes'] / 1e6:.0f} MB); CPU s {_cpu(ours)} vs Ray "
                f"{_cpu(rays)}; stored members by {chose}; {load}"),
            Row("cold", f"ablation: hash+zip, stored members by {other}, {shape.name}", "s",
                round(f, 3), round(r, 3), f"slower than {o:.3f} s ({chose})", f > o,
                f"median of {len(threaded)}; build.STORED_WORKERS forces {other} where "
                f"`stored_by_forks` chose {chose} ({shape.files} small files, forked workers "
                f"from {STORED_FORK_MIN_FILES}): {f - o:+.3f} s; CPU s {_cpu(threaded)} vs "
                f"{_cpu(ours)}; {load}")], rays[0]


def _delete(gcs: str, uri: str) -> None:
    from ray._raylet import GcsClient

    GcsClient(address=gcs).internal_kv_del(uri.encode(), False, None)


def _delete_trees(gcs: str) -> None:
    """Every pack, index and manifest rtenv's pushes left in the GCS (the plugin's node
    announcements stay)."""
    from rtenv_cli.core.transport.ray_kv import RayKV

    kv = RayKV.connect(gcs, env={})
    try:
        for prefix in ("m:", "t:", "x:", "p:"):
            kv.delete(prefix, by_prefix=True)
    finally:
        kv.close()


def _ours(code: str, gcs: str, tree: Path, work: Path, *, env: dict[str, str], name: str) -> dict:
    out = child(code, gcs, str(tree), env={**env, "RTENV_HOME": str(work / name)})
    shutil.rmtree(work / name, ignore_errors=True)
    return out


def _push(shape: scaling.Shape, tree: Path, work: Path, gcs: str, *, env: dict[str, str],
          uri: str) -> list[Row]:
    runs: dict[str, list[dict]] = {k: [] for k in ("ray", "ours", "twice", "deflate")}
    before = _load()
    for i in range(_repeat(shape)):
        _delete(gcs, uri)
        runs["ray"].append(child(RAY_DRIVER_PUSH, gcs, str(tree), env=env))
        for key, code in (("ours", ZIP_PUSH), ("twice", HASH_TWICE + ZIP_PUSH)) + (
                (("deflate", DEFLATE + ZIP_PUSH),) if shape.content == "text" else ()):
            _delete(gcs, uri)
            runs[key].append(_ours(code, gcs, tree, work, env=env, name=f"{key}{i}"))
            assert runs[key][-1]["uploaded"], runs[key][-1]
    _delete(gcs, uri)
    load = f"load avg {before} -> {_load()} on 2 cores"
    assert runs["ours"][0]["uri"] == runs["ray"][0]["uri"] == uri
    med = {k: _median([x["total"] for x in v]) for k, v in runs.items() if v}
    o, r = med["ours"], med["ray"]
    rows = [Row("cold", f"push to the GCS, {shape.name}", "s", round(o, 3), round(r, 3),
                f">= {TARGET}x faster than Ray", r / o >= TARGET,
                f"median of {len(runs['ours'])} pairs; Ray: driver path (ray.init's hash + zip "
                "+ KV put); rtenv: `rtenv push --address <gcs> --via zip` in a fresh process, "
                f"streamed put; zip {runs['ours'][0]['zip_bytes'] / 1e6:.0f} MB; "
                f"CPU s {_cpu(runs['ours'])} vs Ray {_cpu(runs['ray'])}; {load}"),
            Row("cold", f"ablation: push hashing twice, {shape.name}", "s",
                round(med["twice"], 3), round(r, 3), f"slower than {o:.3f} s (hashing once)",
                med["twice"] > o,
                "build.HASH_ONCE off: the zip pass hashes again what push's URI check hashed "
                f"(the code before): {med['twice'] - o:+.3f} s; CPU s {_cpu(runs['twice'])} vs "
                f"{_cpu(runs['ours'])}; {load}")]
    if runs["deflate"]:
        d = med["deflate"]
        rows.append(Row("cold", f"ablation: push with deflate, {shape.name}", "s",
                        round(d, 3), round(r, 3), f"slower than {o:.3f} s (stored)", d > o,
                        f"text deflated: zip {runs['deflate'][0]['zip_bytes'] / 1e6:.0f} MB; "
                        f"what deflate costs on this loopback link: {d - o:+.3f} s per push (it "
                        "pays only where the link is slower than deflate saves bytes, or "
                        f"where the stored package would not fit); CPU s "
                        f"{_cpu(runs['deflate'])} vs {_cpu(runs['ours'])}; {load}"))
    return rows


def _push_over_limit(shape: scaling.Shape, tree: Path, work: Path, gcs: str, *,
                     env: dict[str, str], uri: str, ray_zip: int) -> Row:
    """A shape whose stored zip Ray refuses on the GCS: what `rtenv push --via zip` does (it
    deflates what shrinks when the stored package would not fit)."""
    before = _load()
    _delete(gcs, uri)
    try:
        ours: dict | None = _ours(ZIP_PUSH, gcs, tree, work, env=env, name="over")
        why = ""
    except RuntimeError as exc:  # rtenv refuses too: the deflated zip does not fit either
        ours, why = None, str(exc).strip().splitlines()[-1][:200]
    _delete(gcs, uri)
    load = f"load avg {before} -> {_load()} on 2 cores"
    ray_why = f"Ray refuses: its stored zip is {ray_zip / 1e6:.0f} MB, over the GCS's 512 MiB"
    if ours is None:
        return Row("cold", f"push to the GCS, {shape.name}", "s", None, None,
                   "a clear error where nothing fits", None,
                   f"{ray_why}; rtenv deflated and still over, so it refuses with: {why}; {load}")
    return Row("cold", f"push to the GCS, {shape.name}", "s", round(ours["total"], 3), None,
               "pushes what Ray refuses", bool(ours["uploaded"]),
               f"1 run; {ray_why}; rtenv deflated what shrinks: zip "
               f"{ours['zip_bytes'] / 1e6:.0f} MB, uploaded; CPU s {ours['cpu_s']:.2f}; {load}")


def _tree_push(shape: scaling.Shape, tree: Path, work: Path, gcs: str, *, env: dict[str, str],
               ray: Row | None) -> list[Row]:
    """A cold tree push (the cluster holds no pack) vs Ray's cold zip push of the same tree,
    and its ablations."""
    before = _load()
    codes = {"ours": TREE_PUSH, "h2": H2_FRAMES + TREE_PUSH, "rehash": REHASH + TREE_PUSH}
    runs: dict[str, list[dict]] = {k: [] for k in codes}
    for i in range(_repeat(shape)):
        # each variant first in one round: the first push of a round was slower whichever it
        # was (the last run's upload of the zip rows, or the GCS's freed pages)
        order = list(codes.items())
        for key, code in order[i % len(order):] + order[:i % len(order)]:
            _delete_trees(gcs)
            runs[key].append(_ours(code, gcs, tree, work, env=env, name=f"tree{i}"))
            assert runs[key][-1]["path"] == "tree", runs[key][-1]
            assert runs[key][-1]["packs"] > 0, runs[key][-1]
    _delete_trees(gcs)
    load = f"load avg {before} -> {_load()} on 2 cores"
    med = {k: _median([x["total"] for x in v]) for k, v in runs.items()}
    o, ours = med["ours"], runs["ours"]
    r = ray.ray if ray is not None else None
    ray_cpu = ray.notes.split("vs Ray ", 1)[1].split(";")[0] if ray is not None else "-"
    return [Row("cold", f"push to the GCS as a tree, {shape.name}", "s", round(o, 3), r,
                f">= {TARGET}x faster than Ray", r / o >= TARGET if r is not None else None,
                f"median of {len(ours)}; `rtenv push --address <gcs>` (the tree path: every node "
                f"loads rtenv's plugin) in a fresh process, {ours[0]['packs']} packs, "
                f"{ours[0]['bytes'] / 1e6:.0f} MB sent; Ray column: its driver push of the same "
                "tree (row above)" + ("" if ray is not None else " (over its 512 MiB limit)")
                + f"; CPU s {_cpu(ours)} vs Ray {ray_cpu}; {load}"),
            Row("cold", f"ablation: tree push with packs framed by h2, {shape.name}", "s",
                round(med["h2"], 3), r, f"slower than {o:.3f} s (frames written from the pack)",
                med["h2"] > o,
                f"median of {len(runs['h2'])}; grpc_unary.DIRECT_FRAMES off: each pack copied "
                f"through h2's send_data instead of sent by sendmsg from its buffer: "
                f"{med['h2'] - o:+.3f} s; CPU s {_cpu(runs['h2'])} vs {_cpu(ours)}; {load}"),
            Row("cold", f"ablation: tree push hashing each file again, {shape.name}", "s",
                round(med["rehash"], 3), r, f"slower than {o:.3f} s (checked by stat)",
                med["rehash"] > o,
                f"median of {len(runs['rehash'])}; trees/publish.RACY_NS unbounded: every file "
                "read into its pack is hashed again, as the scan did (the code before), instead "
                f"of checked by its stat: {med['rehash'] - o:+.3f} s; CPU s "
                f"{_cpu(runs['rehash'])} vs {_cpu(ours)}; {load}")]


def _carried(measured: list[scaling.Shape]) -> list[Row]:
    """The rows of the shapes this run did not measure (RTENV_BENCH_SHAPES; the 1 GB shapes
    unless RTENV_BENCH_BIG=1), from the results file, marked with their run."""
    names = {s.name for s in measured}
    try:
        old = json.loads((RESULTS_DIR / "cold.json").read_text())
    except (OSError, ValueError):
        return []
    when = old.get("measured_at", "?")
    out = []
    for row in old.get("rows", []):
        shape = row["metric"].rsplit(", ", 1)[-1]
        if ", " in row["metric"] and shape not in names:
            row.pop("ratio", None)
            notes = row["notes"] if row["notes"].startswith("(run of") else \
                f"(run of {when}) {row['notes']}"
            out.append(Row(**{**row, "notes": notes}))
    return out


def run(quick: bool) -> list[Row]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from rtenv_cli.core.rayplugin.setup import ray_env_vars
    from rtenv_cli.core.transport.ray_kv import RayKV
    from rtenv_cli.core.trees.cluster import readiness
    from tests.support.ray_head import RayHead

    work = Path(tempfile.mkdtemp(prefix="rtenv-bench-cold-"))
    rows: list[Row] = []
    shapes = scaling.shapes(quick=quick)
    repo = str(Path(__file__).resolve().parent.parent)
    head = RayHead(env={**ray_env_vars(root=work / "node-home"), "PYTHONPATH": repo}).start()
    try:
        kv = RayKV.connect(head.address, env={})
        while not readiness(kv).ok:  # the plugin announces itself once the agent built it
            time.sleep(0.2)
        kv.close()
        env = {k: v for k, v in head.client_env().items() if k != "RAY_ADDRESS"}
        for shape in shapes:
            tree = scaling.make(shape)
            hz, ray_cold = _hash_zip(shape, tree, work)
            rows.extend(hz)
            print(hz, flush=True, file=sys.stderr)
            ray_push = None
            if ray_cold["zip_bytes"] < GCS_LIMIT:
                pushed = _push(shape, tree, work, head.address, env=env, uri=ray_cold["uri"])
                ray_push = pushed[0]
                rows.extend(pushed)
            else:
                rows.append(_push_over_limit(shape, tree, work, head.address, env=env,
                                             uri=ray_cold["uri"], ray_zip=ray_cold["zip_bytes"]))
            rows.extend(_tree_push(shape, tree, work, head.address, env=env, ray=ray_push))
            scaling.release(shape)
            print(rows[-7:], flush=True, file=sys.stderr)
    finally:
        head.stop()
        shutil.rmtree(work, ignore_errors=True)
    if not quick:  # the 1 GB shapes without RTENV_BENCH_BIG=1, the others' of SHAPES_ENV
        rows += _carried(shapes)
    return rows
