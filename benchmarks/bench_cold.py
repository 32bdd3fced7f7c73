"""Cold push on every tree shape of the scaling set (benchmarks/scaling.py), side by side with
Ray in one run: rtenv vs Ray 2.60's own packaging.

Per shape, each in fresh processes (warm page cache, empty digest and zip caches for rtenv),
alternating Ray and rtenv, median of REPEAT:
- hash+zip: Ray's `get_uri_for_directory` + `create_package` vs rtenv's `build_package`;
- push to the GCS address of a real head: Ray's driver path (`upload_working_dir_if_needed`, as
  `ray.init` uploads) vs `rtenv push --address <gcs>` in-process, the package deleted from the
  GCS before each run (so every run uploads). Shapes whose stored zip passes Ray's 512 MiB GCS
  limit have no push row.

Target (issue 23): cold push >= 1.2x faster than Ray on every shape.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from benchmarks import scaling
from benchmarks.bench_push import RTENV_PUSH, child, cold_pairs
from benchmarks.common import RAY_DRIVER_PUSH, Row

TARGET = 1.2
GCS_LIMIT = 512 * 1024 * 1024


def _repeat(shape: scaling.Shape) -> int:
    return 1 if shape.big else 3


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _hash_zip(shape: scaling.Shape, tree: Path, work: Path) -> tuple[Row, dict]:
    rays, ours = cold_pairs(tree, work, _repeat(shape))
    o, r = _median([x["total"] for x in ours]), _median([x["total"] for x in rays])
    zipped = ours[0]["zip_bytes"] / 1e6
    return Row("cold", f"hash+zip, {shape.name}", "s", round(o, 3), round(r, 3),
               f">= {TARGET}x faster than Ray", r / o >= TARGET,
               f"median of {len(ours)} pairs, fresh processes; same URI; zip {zipped:.0f} MB "
               f"(Ray {rays[0]['zip_bytes'] / 1e6:.0f} MB)"), rays[0]


def _delete(gcs: str, uri: str) -> None:
    from ray._raylet import GcsClient

    GcsClient(address=gcs).internal_kv_del(uri.encode(), False, None)


# the ablation: deflate what shrinks, as if the package did not fit stored (what deflate costs
# or buys on this link: packaging/build.py stores unless the target's limit needs it)
DEFLATE = "import rtenv_cli.core.packaging.build as m; m.fits_stored = lambda *a: False\n"


def _push(shape: scaling.Shape, tree: Path, work: Path, gcs: str, *, env: dict[str, str],
          uri: str) -> list[Row]:
    rays, ours, deflated = [], [], []
    for i in range(_repeat(shape)):
        _delete(gcs, uri)
        rays.append(child(RAY_DRIVER_PUSH, gcs, str(tree), env=env))
        _delete(gcs, uri)
        ours.append(child(RTENV_PUSH, gcs, str(tree),
                          env={**env, "RTENV_HOME": str(work / f"push{i}")}))
        shutil.rmtree(work / f"push{i}", ignore_errors=True)
        assert ours[-1]["uploaded"], ours[-1]
        if shape.content == "text":
            _delete(gcs, uri)
            deflated.append(child(DEFLATE + RTENV_PUSH, gcs, str(tree),
                                  env={**env, "RTENV_HOME": str(work / f"deflate{i}")}))
            shutil.rmtree(work / f"deflate{i}", ignore_errors=True)
    _delete(gcs, uri)
    assert ours[0]["uri"] == rays[0]["uri"] == uri
    o, r = _median([x["total"] for x in ours]), _median([x["total"] for x in rays])
    rows = [Row("cold", f"push to the GCS, {shape.name}", "s", round(o, 3), round(r, 3),
                f">= {TARGET}x faster than Ray", r / o >= TARGET,
                f"median of {len(ours)} pairs; Ray: driver path (ray.init's hash + zip + KV "
                "put); rtenv: `rtenv push --address <gcs>` in a fresh process, streamed put; "
                f"zip {ours[0]['zip_bytes'] / 1e6:.0f} MB")]
    if deflated:
        d = _median([x["total"] for x in deflated])
        rows.append(Row("cold", f"ablation: push with deflate, {shape.name}", "s",
                        round(d, 3), round(r, 3), f"slower than {o:.3f} s (stored)", d > o,
                        f"text deflated: zip {deflated[0]['zip_bytes'] / 1e6:.0f} MB; what "
                        f"deflate costs on this loopback link: {d - o:+.3f} s per push (it "
                        "pays only where the link is slower than deflate saves bytes, or "
                        "where the stored package would not fit)"))
    return rows


def run(quick: bool) -> list[Row]:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.ray_head import ray_head

    work = Path(tempfile.mkdtemp(prefix="rtenv-bench-cold-"))
    rows: list[Row] = []
    try:
        with ray_head() as head:
            env = {k: v for k, v in head.client_env().items() if k != "RAY_ADDRESS"}
            for shape in scaling.shapes(quick=quick):
                tree = scaling.make(shape)
                row, ray_cold = _hash_zip(shape, tree, work)
                rows.append(row)
                print(row, flush=True, file=sys.stderr)
                if ray_cold["zip_bytes"] < GCS_LIMIT:
                    rows.extend(_push(shape, tree, work, head.address, env=env,
                                      uri=ray_cold["uri"]))
                    print(rows[-2:], flush=True, file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not quick and os.environ.get(scaling.BIG_ENV) != "1":
        rows.append(Row("cold", "1 GB shapes", "", None, None, "", None,
                        f"not measured in this run (set {scaling.BIG_ENV}=1)"))
    return rows
