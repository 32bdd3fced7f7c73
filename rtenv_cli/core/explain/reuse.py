"""Worker reuse: can a worker started for one allocation serve another?

Ray 2.60 pools workers per (job, runtime_env hash); accelerator variables and OMP_NUM_THREADS are
written at task start and restored after a normal task, so a pooled worker serves any allocation.
A proposed change (draft Ray PR #63327, not merged; seed 000) sets those variables when the worker
starts instead; a worker could then be reused only for the same allocated instances and the same
variables. We report both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from rtenv_cli.core.explain.worker_env import EnvPreview

RAY_SET = ("OMP_NUM_THREADS",)


def runtime_env_hash(preview: EnvPreview) -> str:
    canon = json.dumps(preview.runtime_env, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def reuse_key(preview: EnvPreview) -> dict[str, object]:
    # slots are always a list here (worker_env and allocation build them)
    instances = {str(d["resource"]): list(slots) for d in preview.devices
                 if isinstance(slots := d.get("slots"), list) and slots}
    return {"runtime_env_hash": runtime_env_hash(preview), "allocated_instances": instances}


PROPOSAL = ("if Ray set accelerator variables when a worker starts (the proposal of draft Ray "
            "PR #63327, not merged)")


def instances_text(instances: object) -> str:
    """`GPU 0,1; TPU 0,1,2,3`, or `none`: the allocated instances of a reuse key."""
    if not isinstance(instances, Mapping) or not instances:
        return "none"
    return "; ".join(f"{resource} {','.join(map(str, ids))}"
                     for resource, ids in sorted(instances.items()))


def key_text(key: Mapping[str, object]) -> str:
    """A reuse key for people: `runtime_env a7c1b947418296ce, allocated GPU 0,1`."""
    return (f"runtime_env {key.get('runtime_env_hash')}, allocated "
            f"{instances_text(key.get('allocated_instances'))}")


def value_text(value: str | None) -> str:
    """A variable's value for people: `"0,1"`, or `unset`."""
    return "unset" if value is None else json.dumps(value)


def _task_env(preview: EnvPreview) -> dict[str, str | None]:
    """The variables Ray writes per allocation (accelerator visibility and OMP)."""
    keys = {k for k, s in preview.sources.items() if s.startswith("ray:") or s == "unset"}
    return {k: preview.env.get(k) for k in sorted(keys | set(RAY_SET))}


@dataclass(frozen=True)
class ReuseVerdict:
    key_a: dict[str, object]
    key_b: dict[str, object]
    ray_2_60: bool
    pr_63327: bool
    same_effective_env: bool
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"key_a": self.key_a, "key_b": self.key_b, "ray_2_60_reusable": self.ray_2_60,
                "pr_63327_reusable": self.pr_63327, "same_effective_env": self.same_effective_env,
                "reasons": list(self.reasons)}


def compare(a: EnvPreview, b: EnvPreview) -> ReuseVerdict:
    ka, kb = reuse_key(a), reuse_key(b)
    reasons: list[str] = []
    same_hash = ka["runtime_env_hash"] == kb["runtime_env_hash"]
    if not same_hash:
        reasons.append("runtime_env differs (different hash): never the same worker pool")
    actor = "actor" in (a.kind, b.kind)
    if actor:
        reasons.append("an actor keeps its worker: it is never reused for another allocation")
    ea, eb = _task_env(a), _task_env(b)
    diff = [k for k in sorted(set(ea) | set(eb)) if ea.get(k) != eb.get(k)]
    same_inst = ka["allocated_instances"] == kb["allocated_instances"]
    if not same_inst:
        reasons.append(f"allocated instances differ: {instances_text(ka['allocated_instances'])} "
                       f"vs {instances_text(kb['allocated_instances'])} (with the variables set "
                       "when the worker starts, it would keep the first allocation's)")
    if diff:
        reasons.append("Ray-written variables differ: " + ", ".join(
            f"{k} {value_text(ea.get(k))} vs {value_text(eb.get(k))}" for k in diff))
    else:
        reasons.append("Ray-written variables are identical (e.g. 0.5 and 1 CPU both give "
                       "OMP_NUM_THREADS=1)")
    ray_260 = same_hash and not actor
    pr = ray_260 and same_inst and not diff
    return ReuseVerdict(ka, kb, ray_260, pr, not diff, tuple(reasons))
