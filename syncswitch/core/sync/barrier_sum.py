"""A barrier's round summed as its messages arrive, in worker order.

Before issue 34 the barrier held every message of a round and, when the round was complete,
sorted them by worker, scaled each by b_i / B, stacked the rows and summed them (torch's
`sum(dim=0)`, whose order over the rows is its own: pairwise in blocks). That order did not
depend on arrival, which kept BSP bit-for-bit reproducible and the simulator equal to Ray.

Now each message is folded into one float32 buffer when it arrives, acc += b_i g_i, and the
round's mean is acc / B. Floating-point addition is not associative, so the order is fixed
here as it was there: worker order. A message that arrives before a lower-numbered worker the
round may still hear from is held (a reference, not a copy) until that worker's is folded;
workers the barrier no longer waits for and that sent nothing are skipped. The sum therefore
does not depend on arrival order (BSP stays reproducible, and the simulator still equals Ray),
but its bits differ from the old stack-and-sum's (a few float32 ulps of the mean). A worker
readmitted mid-round after higher-numbered ones were folded is folded when it arrives: the
same order on every replay of the same events.

A folded message's values are let go (its `Gradient` stays at the barrier for the records and
the ledger), except on a round the online-timing statistics measure, whose rows they read
(`keep_rows`); a lone message is not folded until a second one joins it, so a round of one
is that message's own values, as before.
"""

from __future__ import annotations

import torch

from syncswitch.core.sync.records import Gradient

_LET_GO = torch.empty(0)  # the values of a folded message: summed, no longer held


class BarrierSum:
    def __init__(self) -> None:
        self._sum: torch.Tensor | None = None  # sum of b_i g_i over `folded`
        self.folded: list[Gradient] = []  # in the order they were summed
        self._first: Gradient | None = None  # a lone message, not yet scaled into the sum

    def add(self, pending: list[Gradient], candidates: set[int], *, keep_rows: bool) -> None:
        """A message has joined the barrier (`pending`, which holds it): fold every held
        message that is next in worker order among `candidates` (the workers the round may
        still hear from: those it waits for and those already in). `keep_rows`: keep the
        folded messages' values (the statistics read them when the round completes)."""
        self._forget_if_stale(pending)
        self._fold_ready(pending, candidates, keep_rows=keep_rows)

    def finish(
        self, pending: list[Gradient], *, keep_rows: bool
    ) -> tuple[list[Gradient], torch.Tensor, int]:
        """The complete round: every message folded (the rest in worker order), their order,
        the sample-weighted mean and its samples. The sum is reset for the next round."""
        self._forget_if_stale(pending)
        self._fold_ready(pending, set(), keep_rows=keep_rows)
        gradients = self.folded
        total = sum(g.samples for g in gradients)
        if len(gradients) == 1:
            mean = gradients[0].values
        else:
            assert self._sum is not None
            mean = self._sum.div_(total)
        self.reset()
        return gradients, mean, total

    def _fold_ready(
        self, pending: list[Gradient], candidates: set[int], *, keep_rows: bool
    ) -> None:
        folded_ids = {id(g) for g in self.folded}
        folded_workers = {g.worker for g in self.folded}
        held = {g.worker: g for g in pending if id(g) not in folded_ids}
        for worker in sorted(candidates | held.keys()):
            if worker in folded_workers:
                continue
            gradient = held.get(worker)
            if gradient is None:
                return  # a lower-numbered worker may still send: wait for it
            self._fold(gradient, keep_rows=keep_rows)

    def cut_short(self, caught: list[Gradient]) -> tuple[list[Gradient], torch.Tensor | None]:
        """A switch took every message of the round (`caught`) off the barrier: those whose
        values were let go and the sum of b_i g_i over them (None if there are none: every
        message still holds its values). The sum is reset."""
        let_go = [g for g in caught if g.values is _LET_GO]
        summed = self._sum if let_go else None
        assert not let_go or (summed is not None and len(let_go) == len(self.folded))
        self.reset()
        return let_go, summed

    def reset(self) -> None:
        self._sum, self.folded, self._first = None, [], None

    # -- internals --------------------------------------------------------------------------

    def _fold(self, gradient: Gradient, *, keep_rows: bool) -> None:
        self.folded.append(gradient)
        if self._first is None and self._sum is None:
            self._first = gradient  # a round of one stays its own values
            return
        if self._sum is None:
            first = self._first
            assert first is not None
            # In the messages' dtype (float32 from every runtime; a test may send float64).
            self._sum = first.values * float(first.samples)
            self._let_go(first, keep_rows)
            self._first = None
        self._sum.add_(gradient.values, alpha=float(gradient.samples))
        self._let_go(gradient, keep_rows)

    @staticmethod
    def _let_go(gradient: Gradient, keep_rows: bool) -> None:
        if not keep_rows:
            gradient.values = _LET_GO

    def _forget_if_stale(self, pending: list[Gradient]) -> None:
        """A sum of messages no longer at the barrier (a rollback or the end dropped them)
        belongs to no round: start afresh."""
        if self.folded and not any(g is self.folded[0] for g in pending):
            self.reset()
