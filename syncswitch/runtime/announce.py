"""What a run says on the terminal before it starts, about what its model will cost: the
memory its processes hold (control/memory.py) and delay compensation's copies."""

from __future__ import annotations

from syncswitch.config.limits import MAX_HANDED_OUT_BYTES_PER_SHARD
from syncswitch.control.memory import MemoryEstimate, estimate_memory
from syncswitch.control.plan import RunPlan
from syncswitch.core.sync.staleness import handed_out_bytes
from syncswitch.errors import ConfigError
from syncswitch.runtime.dataplane.shared import shared_memory_wanted
from syncswitch.terminal import project_console


def announce_memory(plan: RunPlan, parameters: int) -> MemoryEstimate:
    """What the run's processes will hold for the model (control/memory.py), said on the
    terminal at start-up and kept for summary.json."""
    shared = shared_memory_wanted()  # a simulated run's estimate is of the Ray run
    memory = estimate_memory(plan, parameters, shared_memory=shared)
    if plan.job.progress:
        project_console().print(f"syncswitch: {memory.describe()}", markup=False)
    return memory


def announce_staleness_rules(plan: RunPlan, parameters: int) -> None:
    """Say the staleness rules in force (stderr, one line) and what delay compensation's
    copies of the weights may cost; refuse it when one shard's would pass the limit."""
    rules = plan.sync.staleness
    if not rules.enabled:
        return
    line = f"syncswitch: ASP/SSP updates: {rules.describe()}"
    if rules.delay_compensation > 0:
        worst = handed_out_bytes(plan.workers, parameters)
        servers = plan.job.servers
        per_shard = -(-worst // servers)
        if per_shard > MAX_HANDED_OUT_BYTES_PER_SHARD:
            raise ConfigError(
                f"delay_compensation = {rules.delay_compensation:g} keeps up to {plan.workers} "
                f"workers x {parameters:,} parameters x 4 bytes = {worst / 2**30:.1f} GiB of "
                f"weights over {servers} server(s); at most "
                f"{MAX_HANDED_OUT_BYTES_PER_SHARD / 2**30:g} GiB per server: use more --servers "
                "or fewer --workers, or drop it"
            )
        line += (
            f"; the servers keep each worker's weights: up to {plan.workers} x {parameters:,} "
            f"parameters x 4 bytes = {worst / 2**20:.2f} MiB"
        )
    project_console().print(line, markup=False)  # the terminal, also while libraries' goes to a log
