"""The resource plan: devices, GPU shares and placement decided against what a cluster has,
and every refusal as one line before anything starts (no Ray needed)."""

import pytest

from syncswitch.config import TrainConfig
from syncswitch.errors import ConfigError
from syncswitch.runtime.ray.resources import ClusterView, ResourcePlan, plan_resources


def cluster(cpus: float = 16, node_gpus: tuple[float, ...] = (), nodes: int = 1) -> ClusterView:
    return ClusterView(
        cpus=cpus,
        gpus=sum(node_gpus),
        nodes=max(nodes, len(node_gpus)),
        max_node_gpus=max(node_gpus, default=0.0),
        where="the test cluster",
        node_gpus=node_gpus,
    )


def test_the_default_is_one_cpu_per_actor_packed_on_the_cpu():
    plan = plan_resources(TrainConfig(workers=4), cluster())
    assert plan == ResourcePlan(placement="pack")
    assert plan.bundles(4, 1) == [{"CPU": 1.0}] * 6  # server, evaluator, 4 workers
    assert (plan.server_bundle(0), plan.evaluator_bundle(1), plan.worker_bundle(0, 1)) == (0, 1, 2)


def test_auto_means_cuda_when_the_cluster_has_gpus_and_workers_share_them_evenly():
    plan = plan_resources(TrainConfig(workers=8), cluster(node_gpus=(1.0,)))
    # 8 workers and the evaluator on one GPU; the servers stay on the CPU by default.
    assert plan.worker.device == "cuda" and plan.evaluator.device == "cuda"
    assert plan.server.device == "cpu" and plan.server.num_gpus == 0
    assert plan.worker.num_gpus == pytest.approx(0.1111)
    assert plan.gpus(8, 1) <= 1.0
    assert plan.bundles(8, 1)[2] == {"CPU": 1.0, "GPU": plan.worker.num_gpus}


def test_an_explicit_share_and_every_role_on_its_own_device():
    config = TrainConfig(
        workers=4, device="cuda", evaluator_device="cpu", server_device="cuda", gpus_per_worker=0.25
    )
    plan = plan_resources(config, cluster(node_gpus=(1.0, 1.0)))
    assert (plan.worker.device, plan.evaluator.device, plan.server.device) == (
        "cuda",
        "cpu",
        "cuda",
    )
    assert plan.worker.num_gpus == plan.server.num_gpus == 0.25
    assert plan.evaluator.num_gpus == 0


@pytest.mark.parametrize(
    ("config", "view", "fragment"),
    [
        (dict(device="cuda"), cluster(), "--device cuda: the test cluster has no CUDA GPU"),
        (dict(evaluator_device="cuda"), cluster(), "--evaluator-device cuda"),
        (dict(gpus_per_worker=0.5), cluster(), "asks for GPUs, but the test cluster reports none"),
        (
            dict(workers=8, gpus_per_worker=0.5),
            cluster(node_gpus=(2.0,)),
            "asks for 4.5 GPUs in all (8 workers, 1 evaluator on cuda); the test cluster has 2",
        ),
        (
            dict(workers=2, gpus_per_worker=2),
            cluster(node_gpus=(1.0, 1.0, 1.0, 1.0, 1.0, 1.0)),
            "does not fit on one node: the largest node of the test cluster has 1 GPUs",
        ),
        (dict(workers=8, placement="strict-spread"), cluster(nodes=3), "has 3 node(s)"),
        (dict(workers=20), cluster(cpus=8), "has 8 CPUs; this job needs 22"),
    ],
)
def test_what_does_not_fit_is_refused_in_one_line(config, view, fragment):
    with pytest.raises(ConfigError) as refused:
        plan_resources(TrainConfig(**config), view)
    message = str(refused.value)
    assert fragment in message and "\n" not in message


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        (dict(gpus_per_worker=1.5), "above 1 it must be a whole number"),
        (dict(gpus_per_worker=-1.0), "gpus_per_worker = -1.0"),
        (dict(device="cpu", gpus_per_worker=0.5), "every device is cpu"),
        (dict(device="gpu"), "choose one of auto, cpu, cuda"),
        (dict(placement="scatter"), "choose one of pack, spread, strict-spread"),
    ],
)
def test_device_and_placement_options_are_checked_with_the_config(values, fragment):
    with pytest.raises(ConfigError) as refused:
        TrainConfig(**values)
    assert fragment in str(refused.value)
