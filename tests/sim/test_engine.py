from syncswitch.core.cluster.fifo import FifoQueue
from syncswitch.runtime.sim.engine import EventQueue


def test_events_run_in_time_order_and_ties_in_the_order_made() -> None:
    queue = EventQueue()
    seen: list[tuple[float, str]] = []
    for time_s, name in [(2.0, "c"), (1.0, "a"), (1.0, "b"), (0.5, "first")]:
        queue.at(time_s, lambda n=name: seen.append((queue.now_s, n)))
    while queue.run_next():
        pass
    assert seen == [(0.5, "first"), (1.0, "a"), (1.0, "b"), (2.0, "c")]


def test_an_event_is_never_scheduled_in_the_past() -> None:
    queue = EventQueue()
    queue.at(1.0, lambda: queue.at(0.2, lambda: None))
    queue.run_next()
    queue.run_next()
    assert queue.now_s == 1.0


def test_a_fifo_queue_serves_one_job_after_another() -> None:
    link = FifoQueue()
    assert link.serve(0.0, 1.0) == 1.0
    assert link.serve(0.5, 1.0) == 2.0  # waits for the first
    assert link.serve(5.0, 1.0) == 6.0  # idle in between
    assert link.busy_s == 3.0
