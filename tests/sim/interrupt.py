"""A loss function that stops a run as Ctrl-C would: the interrupted runs that resume tests use."""

import torch.nn.functional as F


class InterruptAfter:
    """Raises KeyboardInterrupt on the call after `calls` gradients."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def __call__(self, logits, labels):
        self.calls -= 1
        if self.calls < 0:
            raise KeyboardInterrupt
        return F.cross_entropy(logits, labels)
