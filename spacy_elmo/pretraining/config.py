"""Training settings and the named presets.

Batch size is GLOBAL: ``batch_size`` rows (streams) in all, split evenly over the processes
of a distributed run, so one command means the same training (same rows per step, steps,
learning rate) on one process or many; more processes only make each step faster.
"""

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Dict, Iterable, Optional

import torch
from torch import nn

from ..bilm import ElmoOptions
from ..bilm.precision.kinds import PRODUCT_PRECISIONS, listed, product_precision
from ..bilm.precision.resolved import Precision, check_precision
from ..option_fields import setting

# The precisions a biLM can be pretrained in: those whose products have a gradient.
TRAINABLE = tuple(name for name, kind in PRODUCT_PRECISIONS.items() if kind.trains)


@dataclass(frozen=True)
class TrainingConfig:
    """Everything a pretraining run needs besides the model sizes; see ``spacy-elmo pretrain --help``."""

    lang: str = setting("en", "Language of the spaCy tokenizer")
    paragraphs: bool = setting(
        False, "Plain text: a document per blank-line paragraph, or per line", flag="--paragraphs/--lines"
    )
    max_steps: Optional[int] = setting(None, "Stop after this many steps", unset="no limit")
    max_time: Optional[float] = setting(  # seconds
        None, "Stop after this much training time: seconds, or e.g. 90m, 2h", unset="no limit"
    )
    batch_size: int = setting(64, "Rows (streams) per step in all, split over processes")
    window: int = setting(20, "Tokens per row per step (truncated back-propagation length)")
    vocab_size: int = setting(50_000, "Output vocabulary size, markers included")
    min_count: int = setting(1, "Minimum count of a word in the vocabulary")
    n_negatives: int = setting(0, "Sampled-softmax negatives per step; 0 for the full softmax", flag="--negatives")
    optimizer: str = setting("adagrad", "adagrad (the paper's) or adam")
    learning_rate: float = setting(0.2, "Learning rate", flag="--lr")
    clip_norm: float = setting(10.0, "Gradient norm clipping", flag="--clip")
    dropout: float = setting(0.1, "Dropout between LSTM layers and before the softmax")
    checkpoint_every: int = setting(500, "Steps between checkpoints")
    eval_every: int = setting(500, "Steps between held-out evaluations")
    log_every: int = setting(10, "Steps between log records")
    eval_tokens: int = setting(20_000, "Held-out tokens to evaluate (the first ones of --dev)")
    warm_documents: int = setting(20, "Training documents read for the exported warm start; 0 for none")
    seed: int = setting(0, "Random seed")
    precision: Precision = setting(  # of the matrix products; see spacy_elmo.bilm.precision.resolved
        "auto",
        f"Matrix products in {', '.join(TRAINABLE)}, or auto: bf16 where the CPU (AMX) or GPU multiplies it "
        "faster than fp32; weights, optimizer and loss stay fp32",
    )
    init_tokens_epochs: int = setting(20, "Passes over the static vectors of --init-tokens-from")
    init_tokens_weight: float = setting(
        0.0,
        "Keep the distance to the vectors of --init-tokens-from as a second loss of this weight while the LM "
        "trains, so that it does not wash their knowledge out (0: none); resuming needs the same "
        "--init-tokens-from, and --init-from an export of such a run keeps the vectors exported with it",
    )

    def __post_init__(self) -> None:
        positive = "batch_size window checkpoint_every eval_every log_every eval_tokens init_tokens_epochs max_steps"
        for name in positive.split():
            if (value := getattr(self, name)) is not None and value < 1:  # max_steps None: no limit
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.learning_rate <= 0 or self.clip_norm <= 0:
            raise ValueError("learning_rate and clip_norm must be positive")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.n_negatives < 0 or self.min_count < 1 or self.warm_documents < 0:
            raise ValueError("n_negatives and warm_documents must be >= 0, min_count >= 1")
        if self.init_tokens_weight < 0:
            raise ValueError(f"init_tokens_weight must be >= 0, got {self.init_tokens_weight}")
        if self.max_time is not None and self.max_time <= 0:
            raise ValueError(f"max_time must be positive, got {self.max_time}")
        check_precision(self.precision)
        if self.precision != "auto" and not product_precision(self.precision).trains:
            raise ValueError(
                f"precision {self.precision} is for inference only: its products have no gradient, so a biLM cannot "
                f"be pretrained in it. Use auto, {listed(TRAINABLE)} (and {self.precision} to run the exported biLM)"
            )

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def updated(self, **overrides: Any) -> "TrainingConfig":
        """A copy with the given fields changed; ``None`` values leave a field as it is,
        except for max_steps / max_time, which are None when unbounded."""
        if unknown := set(overrides) - {f.name for f in fields(self)}:
            raise ValueError(f"unknown training setting(s): {sorted(unknown)}")
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


OPTIMIZERS = ("adagrad", "adam")


@dataclass(frozen=True)
class Preset:
    options: ElmoOptions
    training: TrainingConfig
    description: str


def _published(lstm_dim: int, projection_dim: int, n_highway: int) -> ElmoOptions:
    """A published size: ElmoOptions' defaults are the published char CNN and 2 LSTM layers."""
    return ElmoOptions(lstm_dim=lstm_dim, projection_dim=projection_dim, n_highway=n_highway)


# bilm-tf's published training: batch 128 per GPU x 3 GPUs, 20-token windows, 8192 negatives,
# Adagrad 0.2, dropout 0.1, clip 10.
_PUBLISHED_TRAINING = TrainingConfig(batch_size=384, window=20, vocab_size=800_000, n_negatives=8192)

# The CPU presets' training. Adam, not the paper's Adagrad: on a few million tokens it reaches a
# low held-out perplexity in far fewer steps (docs/pretraining.md, "Presets").
_CPU_TRAINING = TrainingConfig(
    batch_size=64, window=20, vocab_size=50_000, min_count=2, n_negatives=2048, optimizer="adam", learning_rate=0.002
)

PRESETS: Dict[str, Preset] = {
    "tiny": Preset(
        ElmoOptions(
            lstm_dim=24,
            projection_dim=8,
            char_embedding_dim=4,
            filters=((1, 4), (2, 8), (3, 8)),
            max_characters_per_token=20,
        ),
        TrainingConfig(
            batch_size=4,
            window=8,
            vocab_size=500,
            optimizer="adam",
            learning_rate=0.01,
            dropout=0.0,
            checkpoint_every=20,
            eval_every=20,
            log_every=5,
            eval_tokens=2_000,
            warm_documents=5,
        ),
        "a few thousand parameters, for tests (Adam: learns in a few dozen steps)",
    ),
    "small": Preset(
        ElmoOptions(lstm_dim=512, projection_dim=64, filters=((1, 32), (2, 32), (3, 64), (4, 128), (5, 128))),
        _CPU_TRAINING,
        "sized for training on a CPU",
    ),
    # The published Small sizes (ElmoOptions' defaults), a char CNN of 1,024 filters (not 2,048), trained as `small`.
    "base": Preset(
        ElmoOptions(filters=((1, 32), (2, 64), (3, 128), (4, 256), (5, 256), (6, 288))),
        _CPU_TRAINING,
        "twice small's token vector, for a CPU budget",
    ),
    "elmo-small": Preset(_published(1024, 128, 1), _PUBLISHED_TRAINING, "the published Small sizes"),
    "elmo-medium": Preset(_published(2048, 256, 1), _PUBLISHED_TRAINING, "the published Medium sizes"),
    "elmo-original": Preset(_published(4096, 512, 2), _PUBLISHED_TRAINING, "the published Original sizes"),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def with_training_keys(
    options: ElmoOptions, config: TrainingConfig, vocab_size: int, n_train_tokens: int
) -> ElmoOptions:
    """``options`` plus the bilm-tf training keys of ``options.json`` describing this run."""
    keys = {
        "bidirectional": True,
        "dropout": config.dropout,
        "all_clip_norm_val": config.clip_norm,
        "n_train_tokens": n_train_tokens,
        "batch_size": config.batch_size,
        "n_tokens_vocab": vocab_size,
        "unroll_steps": config.window,
        "n_negative_samples_batch": config.n_negatives,
    }
    return replace(options, training={**options.training, **keys})


def build_optimizer(config: TrainingConfig, parameters: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """The optimizer ``config`` names; Adagrad as bilm-tf sets it up (initial accumulator 1.0)."""
    if config.optimizer == "adagrad":
        return torch.optim.Adagrad(parameters, lr=config.learning_rate, initial_accumulator_value=1.0)
    return torch.optim.Adam(parameters, lr=config.learning_rate)
