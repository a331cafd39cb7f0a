"""A simulated worker computes the gradient its Ray twin would, from one shared model."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from syncswitch.core.cluster.emulation import EmulationConfig
from syncswitch.core.sync.optimizer import flatten_parameters
from syncswitch.core.sync.precision import Precision
from syncswitch.runtime.ray.worker import Worker, WorkerSpec
from syncswitch.runtime.sim.gradients import GradientComputer
from syncswitch.workloads.data import ArrayData

from .models import NoisyNetFactory

WORKERS, BATCH, SEED = 3, 16, 4


def ray_twin(
    mnist,
    worker: int,
    sequence: int,
    batches: int | None = None,
    precision: Precision = Precision.FLOAT32,
) -> Worker:
    """The Ray worker's class as a plain object: what its actor would compute."""
    spec = WorkerSpec(
        worker=worker,
        workers=WORKERS,
        batch_size=BATCH,
        seed=SEED,
        emulation=EmulationConfig(),
        model_factory=NoisyNetFactory(),
        loss_fn=F.cross_entropy,
        shards=(slice(0, None),),
        precision=precision,
    )
    twin = Worker(spec)
    twin.data = ArrayData(mnist)
    from syncswitch.core.sync.sharding import worker_shard

    twin._shard = worker_shard(len(mnist.y_train), worker, WORKERS, SEED)
    twin._position(sequence, batches)
    return twin


def make_computer(
    mnist, workers: int = WORKERS, precision: Precision = Precision.FLOAT32
) -> GradientComputer:
    return GradientComputer(
        ArrayData(mnist),
        NoisyNetFactory(),
        F.cross_entropy,
        workers=workers,
        batch_size=BATCH,
        seed=SEED,
        emulation=EmulationConfig(),
        precision=precision,
    )


@pytest.mark.parametrize(("start", "batches"), [(0, None), (5, None), (5, 17)])
def test_each_worker_gets_its_ray_twins_gradients(mnist, start, batches) -> None:
    # (5, 17): five messages that stood for 17 batches (local rounds) before a restart.
    threads = torch.get_num_threads()
    computer = make_computer(mnist)
    twins, twin_rng = {}, {}
    for w in range(WORKERS):
        twins[w] = ray_twin(mnist, w, start, batches)
        twin_rng[w] = torch.get_rng_state()  # in its own process, nobody else draws from it
    for w in range(WORKERS):
        computer.position(w, start, new_process=True, batches=batches)
    torch.set_num_threads(threads)
    weights = flatten_parameters(NoisyNetFactory()()).numpy()
    # Interleaved, as the simulator runs them: each worker's RNG, data and BatchNorm
    # statistics must be its own however the others' steps fall between.
    for step in range(3):
        for w in (2, 0, 1):
            mine, my_loss = computer.gradient(w, weights)
            torch.set_rng_state(twin_rng[w])
            theirs, their_loss = twins[w]._gradient(weights)
            twin_rng[w] = torch.get_rng_state()
            np.testing.assert_array_equal(mine, theirs)
            assert my_loss == their_loss
        weights = weights - 0.1 * mine  # the next step computes on new weights
        del step


def test_the_data_order_resumes_after_the_batches_drawn_not_the_messages(mnist) -> None:
    computer = make_computer(mnist)
    computer.position(1, 5, new_process=True, batches=17)
    after_local = computer._data[1].streams.batches.next_indices()
    computer.position(1, 17, new_process=True)
    after_plain = computer._data[1].streams.batches.next_indices()
    computer.position(1, 5, new_process=True)
    after_messages = computer._data[1].streams.batches.next_indices()
    assert np.array_equal(after_local, after_plain)
    assert not np.array_equal(after_local, after_messages)


def test_the_batchnorm_statistics_are_kept_per_worker(mnist) -> None:
    computer = make_computer(mnist, workers=2)
    for w in range(2):
        computer.position(w, 0, new_process=True)
    weights = flatten_parameters(NoisyNetFactory()()).numpy()
    computer.gradient(0, weights)
    computer.gradient(0, weights)
    computer.gradient(1, weights)
    tracked = [int(data.buffers[-1]) for data in computer._data.values()]
    assert tracked == [2, 1]  # num_batches_tracked: each worker counts its own steps
