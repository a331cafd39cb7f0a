"""TensorBoard: event files under RUN_DIR/tensorboard, written by PyTorch's SummaryWriter.

Steps are samples processed and each event carries its wall time, so TensorBoard's STEP,
RELATIVE and WALL axes show the series against samples, run time and clock time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from syncswitch.errors import ConfigError
from syncswitch.files import UnsafeFileError, require_plain_directory, require_regular_if_present
from syncswitch.loggers.base import Point, RunLogger

TENSORBOARD_DIR = "tensorboard"


class TensorBoardLogger(RunLogger):
    name = "tensorboard"

    def __init__(self, run_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise ConfigError(
                "logger 'tensorboard' needs the tensorboard package: "
                "pip install 'syncswitch[tensorboard]'"
            ) from None
        self._writer_class = SummaryWriter
        self.log_dir = run_dir / TENSORBOARD_DIR
        self._writer: Any = None
        _check_log_dir(self.log_dir)

    def start(self, config: dict[str, Any], resume_samples: int | None) -> None:
        # A resumed run does again what came after its checkpoint: TensorBoard drops the
        # events at or past `purge_step` that the killed run had written.
        self._writer = self._writer_class(log_dir=str(self.log_dir), purge_step=resume_samples)
        if resume_samples is None:
            text = json.dumps(config, indent=2, default=str)
            self._writer.add_text("config", f"```\n{text}\n```", global_step=0)

    def scalars(self, points: list[Point]) -> None:
        for point in points:
            self._writer.add_scalar(
                point.name, point.value, global_step=point.samples, walltime=point.wall_time_s
            )

    def text(self, name: str, text: str, samples: int, wall_time_s: float) -> None:
        self._writer.add_text(name, text, global_step=samples, walltime=wall_time_s)

    def histogram(self, name: str, values: np.ndarray, samples: int, wall_time_s: float) -> None:
        self._writer.add_histogram(name, values, global_step=samples, walltime=wall_time_s)

    def where(self) -> str:
        return f"tensorboard --logdir {self.log_dir}"

    def close(self, status: str) -> None:
        if self._writer is not None:
            self._writer.add_text("status", status, global_step=0)
            self._writer.close()


_MAX_CHECKED_ENTRIES = 10_000


def _check_log_dir(log_dir: Path) -> None:
    """The SummaryWriter opens files by name inside it: on --resume the directory is not
    trusted, so it must be a real directory (not a link, which would send the events
    anywhere) holding no links or other non-regular files."""
    try:
        if not require_plain_directory(log_dir, "TensorBoard directory"):
            return
        for count, entry in enumerate(log_dir.iterdir()):
            if count >= _MAX_CHECKED_ENTRIES:
                raise UnsafeFileError(
                    f"{str(log_dir)!r} holds more than {_MAX_CHECKED_ENTRIES:,} entries; a run "
                    "writes a few"
                )
            require_regular_if_present(entry)
    except UnsafeFileError as error:
        raise ConfigError(f"run directory: {error}") from None
