"""The probe's feasibility check: a request no node could ever run is refused up front."""

from __future__ import annotations

from rtenv_cli.core.explain.probe import infeasible, needs

NODE = {"Resources": {"CPU": 2.0, "GPU": 8.0, "TPU": 8.0}}


def _probe(num_cpus: float | None = None, num_gpus: float = 0, **resources: float) -> dict:
    return {"num_cpus": num_cpus, "num_gpus": num_gpus, "resources": resources}


def test_a_request_a_node_has_is_feasible() -> None:
    assert infeasible(needs(_probe(1, 8, TPU=4)), [NODE]) is None
    assert infeasible(needs(_probe()), [NODE]) is None


def test_more_than_any_node_has() -> None:
    assert infeasible(needs(_probe(num_gpus=9)), [NODE]) == \
        "infeasible: needs GPU=9, the cluster has 8"
    assert infeasible(needs(_probe(FOO=1)), [NODE]) == \
        "infeasible: needs FOO=1, the cluster has 0"


def test_the_sum_of_nodes_is_not_one_node() -> None:
    two = [NODE, {"Resources": {"CPU": 2.0, "GPU": 4.0}}]
    assert infeasible(needs(_probe(num_gpus=12)), two) == \
        "infeasible: needs GPU=12, the cluster has 12 (8 at most on one node)"
    split = [{"Resources": {"CPU": 4.0}}, {"Resources": {"GPU": 1.0}}]
    assert infeasible(needs(_probe(num_cpus=4, num_gpus=1)), split) == \
        "infeasible: no single node has CPU=4, GPU=1 together"
