"""The pretraining loop: one process, or many under torchrun, with exact resume.

A run lives in OUTPUT_DIR: ``checkpoint.pt`` (see :mod:`.checkpoint`), ``log.jsonl`` (one JSON
record per log interval, held-out evaluation and the end), and, when it ends, the exported model
``options.json`` + ``weights.hdf5`` (standard layout, with a warm start), ``vocab.txt`` and
``softmax.hdf5`` (see :mod:`.continuation`: with them, ``init_from`` continues exactly).
Running the same command again resumes from the checkpoint; the settings of the run come from
the checkpoint, except the limits and intervals (max_steps, max_time, checkpoint_every,
eval_every, log_every, eval_tokens) and the precision of the products, which the new command
may change (a resumed run may be on another machine).
"""

import contextlib
import inspect
import json
import math
import random
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy
import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ..bilm import BiLM, ElmoOptions
from ..bilm.model import STATE_MODES
from ..fileio import PathLike
from ..bilm.lstm import LSTMState
from ..bilm.precision import training_precision
from .checkpoint import (
    CHECKPOINT_NAME,
    Interrupted,
    OutputError,
    load_checkpoint,
    prepare_output_dir,
    rng_state,
    save_checkpoint,
    set_rng_state,
    stop_requests,
)
from .config import TrainingConfig, training_keys
from .continuation import (
    SOFTMAX_NAME,
    VOCAB_NAME,
    find_continuation,
    load_softmax,
    read_kept_vectors,
    write_continuation,
)
from .corpus import CorpusReader, read_documents
from .distributed import Distributed, all_sum, init_distributed, shutdown
from .evaluate import heldout_perplexity
from .lm import BiLMLoss, detach, mean_loss
from .mimic import VectorMimic, load_static_vectors, mimic_vectors
from .stream import WindowBatch, WindowStream
from .vocab import Vocabulary

LOG_NAME = "log.jsonl"
# What a resumed run takes from the new command rather than from the checkpoint.
RESUME_OVERRIDES = ("max_steps", "max_time", "checkpoint_every", "eval_every", "log_every", "eval_tokens", "precision")


def pretrain(
    input_path: PathLike,
    output_dir: PathLike,
    options: ElmoOptions,
    config: TrainingConfig,
    dev_path: Optional[PathLike] = None,
    init_from: Optional[Tuple[PathLike, PathLike]] = None,
    resume: bool = True,
    progress: bool = True,
    init_tokens: Optional[PathLike] = None,
) -> Dict[str, Any]:
    """Train a biLM on ``input_path`` and export it to ``output_dir``.

    Returns the final metrics on the main process ({} on the others of a distributed run).

    ``options`` gives the model sizes (ignored with ``init_from`` = (options file, weight file),
    which continues from a standard dump, with its softmax and vocabulary when they were exported
    beside the weight file, or when resuming). ``init_tokens``, a spaCy pipeline with static
    vectors, first fits a new biLM's token encoder to them (see :mod:`.mimic`); with
    ``config.init_tokens_weight`` > 0 the distance to them stays a second loss throughout (a
    resumed run then needs them again; a run continued with ``init_from`` keeps the vectors
    exported with it). Joins a process group when launched by torchrun (see
    :mod:`.distributed`).
    """
    if config.max_steps is None and config.max_time is None:
        raise ValueError("give a limit: max_steps and/or max_time")
    env = init_distributed()
    try:
        return Trainer(
            env, Path(input_path), Path(output_dir), options, config, dev_path, init_from, resume, progress, init_tokens
        ).run()
    finally:
        shutdown(env)


class Trainer:
    """One run of :func:`pretrain` on this process."""

    def __init__(
        self,
        env: Distributed,
        input_path: Path,
        output_dir: Path,
        options: ElmoOptions,
        config: TrainingConfig,
        dev_path: Optional[PathLike],
        init_from: Optional[Tuple[PathLike, PathLike]],
        resume: bool,
        progress: bool,
        init_tokens: Optional[PathLike] = None,
    ) -> None:
        if init_tokens is not None and init_from is not None:
            raise ValueError("init_tokens fits a new biLM's token encoder, init_from brings a trained one: give one of them")
        self.env = env
        self.output_dir = output_dir
        self.progress = progress and env.is_main
        if env.is_main:
            prepare_output_dir(output_dir)
        checkpoint_path = output_dir / CHECKPOINT_NAME
        checkpoint = load_checkpoint(checkpoint_path) if resume and checkpoint_path.exists() else None
        if checkpoint is not None:
            overrides = {name: getattr(config, name) for name in RESUME_OVERRIDES}
            config = TrainingConfig(**{**checkpoint["config"], **overrides})
            options = ElmoOptions.from_dict(checkpoint["options"])
        if config.batch_size % env.world:
            raise ValueError(
                f"batch size {config.batch_size} must be divisible by the number of processes ({env.world})"
            )
        self.config = config
        self.reader = CorpusReader(input_path, config.lang, config.paragraphs)
        self.dev_documents = self._dev_documents(dev_path)
        continuation = find_continuation(init_from[1]) if init_from and checkpoint is None else None
        if checkpoint:
            self.vocab = Vocabulary(checkpoint["vocab"])
        else:
            self.vocab = continuation.vocab if continuation else self._build_vocab()
        _seed_everything(config.seed)
        bilm = BiLM.from_files(*init_from) if init_from and checkpoint is None else BiLM(options)
        bilm.warm_hidden = bilm.warm_memory = None  # a warm start is recomputed at export
        bilm.dropout = config.dropout
        # Training keeps its own decision, the hardware rule: the inference one is measured at other
        # shapes without a backward pass, and may be int8, which has no gradient.
        bilm.precision = training_precision(config.precision, env.device)
        self.loss = BiLMLoss(bilm, len(self.vocab), config.n_negatives, config.dropout)
        if continuation is not None:
            load_softmax(self.loss.softmax, continuation)
            if self.progress:
                tqdm.write(f"Continuing with the softmax and vocabulary exported beside {init_from[1]}")
        self.loss.to(env.device)
        mimic = self._vector_mimic(init_tokens, init_from, fit=checkpoint is None)
        fits = init_tokens is not None and checkpoint is None and env.is_main  # a new biLM's encoder, once
        mimicked = self._mimic(mimic) if fits and mimic is not None else []
        self.objective = Objective(self.loss, mimic if config.init_tokens_weight > 0 else None)
        self.model = data_parallel(self.objective) if env.enabled else self.objective
        self.optimizer = _optimizer(config, self.objective.parameters())
        self.rows = config.batch_size // env.world
        self.stream = WindowStream(self.reader, self.vocab, self.rows, config.window, env.rank, env.world)
        self.state = self.loss.zero_state(self.rows)
        self.step = 0
        self.saved_step: Optional[int] = None
        self.tokens = 0
        self.elapsed = 0.0
        torch.manual_seed(config.seed + 1 + env.rank)  # dropout and negatives differ per process
        if checkpoint is not None:
            self._restore(checkpoint)
        if env.is_main:
            with self._writing(LOG_NAME):
                _truncate_log(output_dir / LOG_NAME, self.step)
            if mimicked:
                fit = {"vectors": str(init_tokens), "cosine": mimicked, "weight": config.init_tokens_weight}
                self._write_log({"step": 0, "mimic": fit})

    def _vector_mimic(
        self, init_tokens: Optional[PathLike], init_from: Optional[Tuple[PathLike, PathLike]], fit: bool
    ) -> Optional[VectorMimic]:
        """The distance to the static vectors, when this run fits or keeps it; on the run's device.

        A run continued from an export (``init_from``) keeps the vectors and head exported with it.
        """
        keep = self.config.init_tokens_weight > 0
        if keep and init_from is not None:
            return read_kept_vectors(init_from[1], self.bilm.options.projection_dim).to(self.env.device)
        if keep and init_tokens is None:
            raise ValueError(
                f"init_tokens_weight {self.config.init_tokens_weight} keeps the token encoder near static vectors: "
                "give them (--init-tokens-from), also to resume the run"
            )
        if init_tokens is None or not (fit or keep):
            return None
        words, vectors = load_static_vectors(init_tokens)
        return VectorMimic(words, vectors, self.bilm.options.projection_dim).to(self.env.device)

    def _mimic(self, mimic: VectorMimic) -> List[float]:
        """Fit the new biLM's token encoder to static vectors (rank 0; DDP then copies it to all).

        Returns the mean cosine after each epoch.
        """
        bar = tqdm(
            total=self.config.init_tokens_epochs,
            desc=f"token encoder <- {len(mimic.words)} vectors",
            disable=not self.progress,
        )
        cosines: List[float] = []

        def record(epoch: int, cosine: float) -> None:
            cosines.append(round(cosine, 5))
            bar.set_postfix(cosine=f"{cosine:.3f}")
            bar.update()

        mimic_vectors(self.bilm, mimic, self.config.init_tokens_epochs, self.config.seed, record)
        bar.close()
        return cosines

    @property
    def bilm(self) -> BiLM:
        return self.loss.bilm

    # ------------------------------------------------------------------ the loop
    def run(self) -> Dict[str, Any]:
        """Train to the limits, save, export. SIGINT / SIGTERM end the step, save and raise :class:`Interrupted`."""
        with stop_requests() as stop:
            self._loop(stop)
        received = [number for numbers in self.env.gather(stop[:1]) for number in numbers]  # all ranks agree
        if received:
            raise self._interrupted(received[0])
        return self._finish()

    def _loop(self, stop: List[int]) -> None:
        """Steps until a limit or a stop request (``stop`` not empty on any process), then a checkpoint."""
        config = self.config
        bar = tqdm(
            total=config.max_steps, initial=self.step, disable=not self.progress, unit="step", dynamic_ncols=True
        )
        interval = torch.zeros(6, dtype=torch.float64)  # NLL sums and counts, both directions; distance sum, steps
        interval_start, interval_tokens = time.perf_counter(), 0
        last_checkpoint = self.step
        while not self._should_stop(bool(stop)):
            started = time.perf_counter()
            sums, counts, distance = self._train_step()
            self.step += 1
            step_tokens = config.batch_size * config.window
            self.tokens += step_tokens
            interval_tokens += step_tokens
            interval += torch.cat([sums.detach().double().cpu(), counts.double().cpu(), distance.double().cpu()])
            self.elapsed += time.perf_counter() - started
            bar.update(1)
            if self.step % config.log_every == 0:
                record = self._log_interval(interval, interval_tokens, time.perf_counter() - interval_start)
                bar.set_postfix(self._postfix(record), refresh=False)
                interval.zero_()
                interval_start, interval_tokens = time.perf_counter(), 0
            if self.step % config.eval_every == 0 and self.dev_documents:
                self._evaluate()
            if self.step % config.checkpoint_every == 0:
                self.save()
                last_checkpoint = self.step
        bar.close()
        if last_checkpoint != self.step:
            self.save()

    def _train_step(self) -> Tuple[Tensor, Tensor, Tensor]:
        """One update. Returns the NLL sums (2,), scored counts (2,) and [distance, 1] (2,) or zeros."""
        batch = self.stream.next_batch()
        self.model.train()
        sums, counts, final, distance = self.model(batch, self.state)
        loss = mean_loss(sums, counts) + self.config.init_tokens_weight * distance  # distance 0 unless kept
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.objective.parameters(), self.config.clip_norm)
        self.optimizer.step()
        self.state = detach(final)
        kept = float(self.objective.mimic is not None)
        return sums, counts, torch.stack([distance.detach(), distance.new_tensor(kept)])

    def _should_stop(self, requested: bool) -> bool:
        """A limit is reached or a stop was ``requested``, on any process: all stop at the same step."""
        config = self.config
        done = (config.max_steps is not None and self.step >= config.max_steps) or (
            config.max_time is not None and self.elapsed >= config.max_time
        )
        return self.env.any(done or requested)

    def _interrupted(self, number: int) -> Interrupted:
        """The error that ends a run stopped by signal ``number``; on rank 0 it says what to run next."""
        if not self.env.is_main:
            return Interrupted(number)
        name = signal.Signals(number).name
        if self.saved_step is None:
            return Interrupted(number, f"Stopped by {name} before the first step: there is nothing to resume.")
        return Interrupted(
            number,
            f"Stopped by {name} at step {self.step}; checkpoint saved to {self.output_dir / CHECKPOINT_NAME}. "
            f"Run the same command again to continue from step {self.step} (--no-resume starts over).",
        )

    # ------------------------------------------------------------------ reporting
    def _log_interval(self, interval: torch.Tensor, tokens: int, seconds: float) -> Dict[str, Any]:
        total = all_sum(self.env, interval)
        nll = total[:2] / total[2:4].clamp(min=1)
        record = {
            "step": self.step,
            "epoch": self.stream.epoch,
            "loss": float(nll.mean()),
            "ppl": math.exp(float(nll.mean())),
            "ppl_forward": math.exp(float(nll[0])),
            "ppl_backward": math.exp(float(nll[1])),
            "tokens_per_s": tokens / max(seconds, 1e-9),
            "tokens": self.tokens,
            "elapsed": self.elapsed,
        }
        if total[5] > 0:
            record["vectors_cosine"] = 1.0 - float(total[4] / total[5])
        self._write_log(record)
        return record

    def _postfix(self, record: Dict[str, Any]) -> Dict[str, str]:
        postfix = {"tok/s": f"{record['tokens_per_s']:.0f}", "ppl": f"{record['ppl']:.1f}"}
        if self.config.max_time is not None:
            postfix["time left"] = _duration(max(self.config.max_time - self.elapsed, 0.0))
        return postfix

    def _evaluate(self, initial_states: Sequence[str] = ("zero",)) -> Dict[str, Any]:
        """Held-out perplexity (rank 0 only); logged as an ``"eval"`` record."""
        if not self.env.is_main:
            return {}
        record: Dict[str, Any] = {"step": self.step, "eval": {}}
        for initial in initial_states:
            record["eval"][initial] = heldout_perplexity(
                self.bilm, self.loss.softmax, self.vocab, self.dev_documents, initial, batch_size=self.rows
            )
        self._write_log(record)
        return record

    def _write_log(self, record: Dict[str, Any]) -> None:
        if self.env.is_main:
            with self._writing(LOG_NAME), (self.output_dir / LOG_NAME).open("a", encoding="utf8") as f:
                f.write(json.dumps(record) + "\n")

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """Turn a failed write (full disk, permissions) into an error that says what survived."""
        try:
            yield
        except OSError as err:
            if self.saved_step is None:
                survived = "No checkpoint had been written yet."
            else:
                survived = f"The checkpoint of step {self.saved_step} ({self.output_dir / CHECKPOINT_NAME}) is intact."
            raise OutputError(
                f"cannot write {what} in {self.output_dir} at step {self.step}: {err.strerror or err}. {survived} "
                "Free some space (or fix the permissions) and run the same command again to continue from it."
            ) from err

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> None:
        """Every process contributes its data position, LSTM state and RNG; rank 0 writes."""
        per_process = self.env.gather(
            {
                "data": self.stream.state_dict(),
                "lstm_state": [self.state.hidden.cpu(), self.state.memory.cpu()],
                "rng": rng_state(),
            }
        )
        if not self.env.is_main:
            return
        with self._writing(CHECKPOINT_NAME):
            self._save_checkpoint(per_process)
        self.saved_step = self.step

    def _save_checkpoint(self, per_process: List[Dict[str, Any]]) -> None:
        save_checkpoint(
            self.output_dir / CHECKPOINT_NAME,
            {
                "step": self.step,
                "tokens": self.tokens,
                "elapsed": self.elapsed,
                "world": self.env.world,
                "config": self.config.to_dict(),
                "options": self.bilm.options.to_dict(),
                "vocab": self.vocab.to_list(),
                "bilm": self.bilm.state_dict(),
                "softmax": self.loss.softmax.state_dict(),
                "vectors_head": self.objective.mimic.head.state_dict() if self.objective.mimic is not None else None,
                "kept_vectors": self._kept_vectors(),
                "optimizer": self.optimizer.state_dict(),
                "processes": per_process,
            },
        )

    def _kept_vectors(self) -> Optional[Dict[str, Any]]:
        """The kept static vectors, for ``spacy-elmo export`` of a checkpoint; None when none are kept."""
        mimic = self.objective.mimic
        return None if mimic is None else {"words": mimic.words, "vectors": torch.from_numpy(mimic.vectors)}

    def _restore(self, checkpoint: Dict[str, Any]) -> None:
        if checkpoint["world"] != self.env.world:
            raise ValueError(
                f"the checkpoint was written by {checkpoint['world']} process(es), this run has "
                f"{self.env.world}: resume with the same number of processes"
            )
        self.bilm.load_state_dict(checkpoint["bilm"])
        self.loss.softmax.load_state_dict(checkpoint["softmax"])
        if self.objective.mimic is not None:
            self.objective.mimic.head.load_state_dict(checkpoint["vectors_head"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        mine = checkpoint["processes"][self.env.rank]
        self.stream.load_state_dict(mine["data"])
        hidden, memory = mine["lstm_state"]
        self.state = LSTMState(hidden.to(self.env.device), memory.to(self.env.device))
        set_rng_state(mine["rng"])
        self.step = self.saved_step = int(checkpoint["step"])
        self.tokens = int(checkpoint["tokens"])
        self.elapsed = float(checkpoint["elapsed"])

    # ------------------------------------------------------------------ the end
    def _finish(self) -> Dict[str, Any]:
        """Export (rank 0): warm start, standard files, vocabulary and softmax; final held-out perplexities."""
        metrics: Dict[str, Any] = {"step": self.step, "tokens": self.tokens, "elapsed": self.elapsed}
        if self.env.is_main:
            bilm = self.bilm
            bilm.options = _with_training_keys(bilm.options, self.config, len(self.vocab), self.tokens)
            if self.config.warm_documents:
                bilm.warm_up(read_documents(self.reader, max_tokens=10**9, max_documents=self.config.warm_documents))
            if self.dev_documents:
                states = STATE_MODES if bilm.warm_hidden is not None else ("zero", "carry")
                metrics["eval"] = self._evaluate(states)["eval"]
            with self._writing(f"the exported options.json, weights.hdf5, {VOCAB_NAME}, {SOFTMAX_NAME} and kept vectors"):
                bilm.to_files(self.output_dir / "options.json", self.output_dir / "weights.hdf5")
                write_continuation(self.output_dir, self.vocab, self.loss.softmax, self.objective.mimic)
            self._write_log({"final": metrics})
        self.env.barrier()
        return metrics if self.env.is_main else {}

    # ------------------------------------------------------------------ set-up
    def _build_vocab(self) -> Vocabulary:
        """Rank 0 counts the corpus (one streaming pass); every process gets the same words."""
        words: Optional[List[str]] = None
        if self.env.is_main:
            documents = tqdm(self.reader.texts(), desc="counting words", unit="doc", disable=not self.progress)
            words = Vocabulary.build(documents, self.config.vocab_size, self.config.min_count).to_list()
        return Vocabulary(self.env.broadcast(words))

    def _dev_documents(self, dev_path: Optional[PathLike]) -> List[List[str]]:
        if dev_path is None or not self.env.is_main:
            return []
        documents = read_documents(
            CorpusReader(dev_path, self.config.lang, self.config.paragraphs), self.config.eval_tokens
        )
        if not documents:
            raise ValueError(f"the held-out corpus {dev_path} has no documents")
        return documents


class Objective(nn.Module):
    """What a step optimises (and DistributedDataParallel wraps): the LM losses and, when ``mimic``
    is given, the distance of layer 0 to static vectors over ``BATCH_WORDS`` sampled words."""

    def __init__(self, loss: BiLMLoss, mimic: Optional[VectorMimic]) -> None:
        super().__init__()
        self.loss = loss
        self.mimic = mimic

    def forward(self, batch: WindowBatch, state: LSTMState) -> Tuple[Tensor, Tensor, LSTMState, Tensor]:
        """:class:`BiLMLoss`'s NLL sums (2,), counts (2,) and final state, then the distance (a scalar; 0 without ``mimic``)."""
        sums, counts, final = self.loss(batch, state)
        if self.mimic is None:
            return sums, counts, final, sums.new_zeros(())
        return sums, counts, final, self.mimic(self.loss.bilm, self.mimic.sample())


def data_parallel(objective: nn.Module) -> DistributedDataParallel:
    """``objective`` under DistributedDataParallel, without broadcasting its buffers at every step.

    No buffer changes in training: the LSTMs' forget biases and the mimic's targets (the static
    vectors, (n_words, width)) are constants, and a run drops the biLM's warm states (they are
    recomputed at export). DDP's default would broadcast them all from rank 0 before every forward
    pass. torch >= 2.13 names the switch ``forward_sync_buffers`` and still syncs buffers once at
    construction; older versions name it ``broadcast_buffers``, which skips that sync too: harmless,
    as every process builds the same constants from the same configuration and files.
    """
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        return DistributedDataParallel(objective, forward_sync_buffers=False)
    return DistributedDataParallel(objective, broadcast_buffers=False)


def _optimizer(config: TrainingConfig, parameters) -> torch.optim.Optimizer:
    if config.optimizer == "adagrad":
        # bilm-tf: Adagrad with initial accumulator 1.0
        return torch.optim.Adagrad(parameters, lr=config.learning_rate, initial_accumulator_value=1.0)
    return torch.optim.Adam(parameters, lr=config.learning_rate)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def _with_training_keys(options: ElmoOptions, config: TrainingConfig, vocab_size: int, tokens: int) -> ElmoOptions:
    return replace(options, training={**options.training, **training_keys(config, vocab_size, tokens)})


def _truncate_log(path: Path, step: int) -> None:
    """On resume, drop records the killed run wrote after its last checkpoint."""
    if not path.exists():
        return
    kept = [line for line in path.read_text(encoding="utf8").splitlines() if _record_step(line) <= step]
    path.write_text("".join(line + "\n" for line in kept), encoding="utf8")


def _record_step(line: str) -> float:
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return math.inf  # a line cut by the kill
    return float(record.get("step", record.get("final", {}).get("step", math.inf)))


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"
