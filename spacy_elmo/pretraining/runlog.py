"""The run log, ``OUTPUT_DIR/log.jsonl``: one JSON record per log interval, held-out evaluation and the end.

The loop says when to log; this module says what a record holds and how a failed write is explained."""

import contextlib
import json
import math
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from torch import Tensor

from ..fileio import OutputError
from .checkpoint import CHECKPOINT_NAME

LOG_NAME = "log.jsonl"


class RunLog:
    """Appends records to ``output_dir/log.jsonl`` on the main process; a no-op elsewhere.

    ``position`` gives the run's step and its last saved step (None before the first checkpoint),
    asked only when a write fails, so that the message says what survived without a copy of the count.
    """

    def __init__(self, output_dir: Path, is_main: bool, position: Callable[[], Tuple[int, Optional[int]]]) -> None:
        self.output_dir = output_dir
        self.is_main = is_main
        self.position = position

    def start(self, step: int) -> None:
        """On resume, drop the records a killed run wrote after its last checkpoint (``step``)."""
        path = self.output_dir / LOG_NAME
        if self.is_main and path.exists():
            with self.writing(LOG_NAME):
                kept = [line for line in path.read_text(encoding="utf8").splitlines() if _record_step(line) <= step]
                path.write_text("".join(line + "\n" for line in kept), encoding="utf8")

    def write(self, record: Dict[str, Any]) -> None:
        if self.is_main:
            with self.writing(LOG_NAME), (self.output_dir / LOG_NAME).open("a", encoding="utf8") as f:
                f.write(json.dumps(record) + "\n")

    @contextlib.contextmanager
    def writing(self, what: str) -> Iterator[None]:
        """Turn a failed write (full disk, permissions) into an error that says what survived."""
        try:
            yield
        except OSError as err:
            step, saved_step = self.position()
            if saved_step is None:
                survived = "No checkpoint had been written yet."
            else:
                survived = f"The checkpoint of step {saved_step} ({self.output_dir / CHECKPOINT_NAME}) is intact."
            raise OutputError(
                f"cannot write {what} in {self.output_dir} at step {step}: {err.strerror or err}. {survived} "
                "Free some space (or fix the permissions) and run the same command again to continue from it."
            ) from err


def interval_record(
    total: Tensor, step: int, epoch: int, tokens_per_s: float, tokens: int, elapsed: float
) -> Dict[str, Any]:
    """The record of one log interval from ``total``, the interval's sums over all processes: NLL sums
    and counts of both directions, then the distance to kept vectors and the steps that had it."""
    nll = total[:2] / total[2:4].clamp(min=1)
    record = {
        "step": step,
        "epoch": epoch,
        "loss": float(nll.mean()),
        "ppl": math.exp(float(nll.mean())),
        "ppl_forward": math.exp(float(nll[0])),
        "ppl_backward": math.exp(float(nll[1])),
        "tokens_per_s": tokens_per_s,
        "tokens": tokens,
        "elapsed": elapsed,
    }
    if total[5] > 0:
        record["vectors_cosine"] = 1.0 - float(total[4] / total[5])
    return record


def progress_postfix(record: Dict[str, Any], max_time: Optional[float], elapsed: float) -> Dict[str, str]:
    """What the progress bar shows beside the step count."""
    postfix = {"tok/s": f"{record['tokens_per_s']:.0f}", "ppl": f"{record['ppl']:.1f}"}
    if max_time is not None:
        minutes, seconds = divmod(int(max(max_time - elapsed, 0.0)), 60)
        postfix["time left"] = f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"
    return postfix


def _record_step(line: str) -> float:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return math.inf  # a line cut by the kill
    return float(record.get("step", record.get("final", {}).get("step", math.inf)))
