"""The pretraining loop: one process, or many under torchrun, with exact resume.

A run lives in OUTPUT_DIR: ``checkpoint.pt`` (see :mod:`.checkpoint`), ``log.jsonl`` (one JSON
record per log interval, held-out evaluation and the end), and, when it ends, the exported model
``options.json`` + ``weights.hdf5`` (standard layout, with a warm start), ``vocab.txt`` and
``softmax.hdf5`` (see :mod:`.continuation`: with them, ``init_from`` continues exactly).
Running the same command again resumes from the checkpoint; the settings of the run come from
the checkpoint, except the limits and intervals (max_steps, max_time, checkpoint_every,
eval_every, log_every, eval_tokens) and the precision of the products, which the new command
may change (a resumed run may be on another machine).

Here: the loop and its set-up. Apart: how a run starts, fresh, continued or resumed
(:mod:`.start`), the run log (:mod:`.runlog`), save and restore (:mod:`.resume`), the
init-tokens objective and what a step optimises (:mod:`.lm`).
"""

import functools
import signal
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor
from tqdm import tqdm

from ..bilm import BiLM, ElmoOptions, LSTMState
from ..bilm.model.states import STATE_MODES, StateMode
from ..bilm.precision.autotune import cpu_auto_precision
from ..bilm.precision.resolved import ResolvedPrecision
from ..bilm.runtime import BiLMRuntime
from ..fileio import OPTIONS_NAME, WEIGHTS_NAME, PathLike, standard_files
from .checkpoint import CHECKPOINT_NAME, Interrupted, prepare_output_dir, seed_everything, stop_requests
from .config import TrainingConfig, build_optimizer, with_training_keys
from .continuation import SOFTMAX_NAME, VOCAB_NAME, write_continuation
from .corpus import CorpusReader, read_documents
from .distributed import Distributed, all_sum, init_distributed, shutdown
from .evaluate import heldout_perplexity
from .init_tokens import InitTokens
from .lm import BiLMLoss, Objective, data_parallel, fit_token_encoder, load_init_tokens
from .resume import Checkpointed
from .runlog import RunLog, interval_record, progress_postfix
from .start import run_start
from .stream import WindowStream
from .vocab import Vocabulary


def pretrain(
    input_path: PathLike,
    output_dir: PathLike,
    options: ElmoOptions,
    config: TrainingConfig,
    dev_path: Optional[PathLike] = None,
    init_from: Optional[Tuple[PathLike, PathLike]] = None,
    resume: bool = True,
    progress: bool = True,
    init_tokens_from: Optional[PathLike] = None,
) -> Dict[str, Any]:
    """Train a biLM on ``input_path`` and export it to ``output_dir``.

    Returns the final metrics on the main process ({} on the others of a distributed run).

    ``options`` gives the model sizes (ignored with ``init_from`` = (options file, weight file),
    which continues from a standard dump, with its softmax and vocabulary when they were exported
    beside the weight file, or when resuming). ``init_tokens_from``, a spaCy pipeline with static
    vectors, first fits a new biLM's token encoder to them (see :mod:`.init_tokens`); with
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
            env, input_path, output_dir, options, config, dev_path, init_from, resume, progress, init_tokens_from
        ).run()
    except Interrupted as stopped:
        # Its traceback would keep the trainer, and with it the process group, alive past shutdown.
        raise stopped.with_traceback(None) from None
    finally:
        shutdown(env)


class Trainer(Checkpointed):
    """One run of :func:`pretrain` on this process; saving and restoring it is :class:`.resume.Checkpointed`'s."""

    def __init__(
        self,
        env: Distributed,
        input_path: PathLike,
        output_dir: PathLike,
        options: ElmoOptions,
        config: TrainingConfig,
        dev_path: Optional[PathLike],
        init_from: Optional[Tuple[PathLike, PathLike]],
        resume: bool,
        progress: bool,
        init_tokens_from: Optional[PathLike] = None,
    ) -> None:
        if init_tokens_from is not None and init_from is not None:
            raise ValueError(
                "--init-tokens-from fits a new biLM's token encoder to static vectors, --init-from brings a trained "
                "one: give one of them"
            )
        self.env = env
        self.output_dir = output_dir = Path(output_dir)
        self.progress = progress and env.is_main
        self.log = RunLog(output_dir, env.is_main, lambda: (self.step, self.saved_step))
        if env.is_main:
            prepare_output_dir(output_dir)
        start = run_start(output_dir, resume, init_from)
        options, config = start.settings(options, config)
        if config.batch_size % env.world:
            raise ValueError(
                f"batch size {config.batch_size} must be divisible by the number of processes ({env.world})"
            )
        self.config = config
        self.reader = CorpusReader(input_path, config.lang, config.paragraphs)
        self.dev_documents = self._dev_documents(dev_path)
        self.vocab = start.vocabulary(self._build_vocab)
        seed_everything(config.seed)
        self.loss = BiLMLoss(
            self._training_bilm(start.bilm(options)), len(self.vocab), config.n_negatives, config.dropout
        )
        continued = start.continue_softmax(self.loss.softmax)
        if continued is not None and self.progress:
            tqdm.write(continued)
        self.loss.to(env.device)
        init_tokens, fitted_cosines = self._init_tokens(start.resumes, init_tokens_from, init_from)
        self.objective = Objective(self.loss, init_tokens if config.init_tokens_weight > 0 else None)
        self.model = data_parallel(self.objective) if env.enabled else self.objective
        self.optimizer = build_optimizer(config, self.objective.parameters())
        self.rows = config.batch_size // env.world
        self.stream = WindowStream(self.reader, self.vocab, self.rows, config.window, env.rank, env.world)
        self.state = self.loss.zero_state(self.rows)
        self.step = 0
        self.saved_step: Optional[int] = None
        self.tokens = 0
        self.elapsed = 0.0
        torch.manual_seed(config.seed + 1 + env.rank)  # dropout and negatives differ per process
        start.restore(self)
        self.log.start(self.step)
        if fitted_cosines:
            fit = {"vectors": str(init_tokens_from), "cosine": fitted_cosines, "weight": config.init_tokens_weight}
            self.log.write({"step": 0, "init_tokens": fit})

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
                rate = interval_tokens / max(time.perf_counter() - interval_start, 1e-9)
                total = all_sum(self.env, interval)  # the interval summed over all processes
                record = interval_record(total, self.step, self.stream.epoch, rate, self.tokens, self.elapsed)
                self.log.write(record)
                bar.set_postfix(progress_postfix(record, config.max_time, self.elapsed), refresh=False)
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
        # The mean of the two directions' mean NLL per scored target, + the distance (0 unless kept).
        loss = (sums / counts.clamp(min=1)).mean() + self.config.init_tokens_weight * distance
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.objective.parameters(), self.config.clip_norm)
        self.optimizer.step()
        self.state = LSTMState(final.hidden.detach(), final.memory.detach())  # truncated backprop through time
        has_distance = float(self.objective.init_tokens is not None)
        return sums, counts, torch.stack([distance.detach(), distance.new_tensor(has_distance)])

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
    def _evaluate(self, initial_states: Sequence[StateMode] = ("zero",)) -> Dict[str, Any]:
        """Held-out perplexity (rank 0 only); logged as an ``"eval"`` record."""
        if not self.env.is_main:
            return {}
        runtime = BiLMRuntime(self.bilm, self.bilm.settings)  # this evaluation's: its token cache goes with it
        softmax, vocab, docs = self.loss.softmax, self.vocab, self.dev_documents
        evals = {s: heldout_perplexity(runtime, softmax, vocab, docs, s, batch_size=self.rows) for s in initial_states}
        record: Dict[str, Any] = {"step": self.step, "eval": evals}
        self.log.write(record)
        return record

    # ------------------------------------------------------------------ the end
    def _finish(self) -> Dict[str, Any]:
        """Export (rank 0): warm start, standard files, vocabulary and softmax; final held-out perplexities."""
        metrics: Dict[str, Any] = {"step": self.step, "tokens": self.tokens, "elapsed": self.elapsed}
        if self.env.is_main:
            bilm = self.bilm
            bilm.options = with_training_keys(bilm.options, self.config, len(self.vocab), self.tokens)
            if self.config.warm_documents:
                bilm.warm_up(read_documents(self.reader, max_tokens=10**9, max_documents=self.config.warm_documents))
            if self.dev_documents:
                states = STATE_MODES if bilm.warm_hidden is not None else ("zero", "carry")
                metrics["eval"] = self._evaluate(states)["eval"]
            with self.log.writing(
                f"the exported {OPTIONS_NAME}, {WEIGHTS_NAME}, {VOCAB_NAME}, {SOFTMAX_NAME} and init-tokens vectors"
            ):
                bilm.to_files(*standard_files(self.output_dir))
                write_continuation(self.output_dir, self.vocab, self.loss.softmax, self.objective.init_tokens)
            self.log.write({"final": metrics})
        self.env.barrier()
        return metrics if self.env.is_main else {}

    # ------------------------------------------------------------------ set-up
    def _training_bilm(self, bilm: BiLM) -> BiLM:
        """``bilm`` set up for this run: no warm start (recomputed at export), the run's dropout, and
        its matrix products' precision, decided once, for training, by the main process (every
        process trains in the same products), and kept: held-out evaluation runs without
        gradients, in the same products."""
        bilm.warm_hidden = bilm.warm_memory = None
        bilm.dropout = self.config.dropout
        decided = None
        if self.env.is_main:
            measured = functools.partial(cpu_auto_precision, bilm.runtime, training=True)  # called on a CPU only
            decided = ResolvedPrecision.resolve(self.config.precision, self.env.device, True, measured).precision
        bilm.runtime.precision = self.env.broadcast(decided)
        if self.progress and self.config.precision == "auto":
            tqdm.write(f"precision auto: the matrix products run in {bilm.runtime.precision} here")
        return bilm

    def _init_tokens(
        self, resumes: bool, init_tokens_from: Optional[PathLike], init_from: Optional[Tuple[PathLike, PathLike]]
    ) -> Tuple[Optional[InitTokens], List[float]]:
        """The static vectors of the init-tokens objective (see :mod:`.lm`), on this process's
        device, or None; and the mean cosines of fitting a new biLM's token encoder to them, once,
        on rank 0 ([] where not fitted: a resumed or continued run, or another rank)."""
        config = self.config
        init_tokens = load_init_tokens(
            config, init_tokens_from, init_from, self.bilm.options.projection_dim, fit=not resumes
        )
        if init_tokens is None:
            return None, []
        init_tokens = init_tokens.to(self.env.device)
        fits = init_tokens_from is not None and not resumes and self.env.is_main
        return init_tokens, fit_token_encoder(self.bilm, init_tokens, config, self.progress) if fits else []

    def _build_vocab(self) -> Vocabulary:
        """Rank 0 counts the corpus (one streaming pass); every process gets the same words."""
        words: Optional[List[str]] = None
        if self.env.is_main:
            documents = tqdm(self.reader.texts(), desc="counting words", unit="doc", disable=not self.progress)
            words = Vocabulary.build(documents, self.config.vocab_size, self.config.min_count).words
        return Vocabulary(self.env.broadcast(words))

    def _dev_documents(self, dev_path: Optional[PathLike]) -> List[List[str]]:
        if dev_path is None or not self.env.is_main:
            return []
        reader = CorpusReader(dev_path, self.config.lang, self.config.paragraphs)
        documents = read_documents(reader, self.config.eval_tokens)
        if not documents:
            raise ValueError(f"the held-out corpus {dev_path} has no documents")
        return documents
