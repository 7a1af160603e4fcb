"""Side by side with the peer a spaCy user would pick: spacy-transformers with a BERT-base-sized model.

Configurations (``--configs``, comma-separated):

- ``trf-fp32``: spacy-transformers' ``transformer`` component with a BERT-base-sized model
  (``transformers.BertConfig()`` defaults: 12 layers, hidden 768, 110 M parameters) of random
  weights, built here (nothing is downloaded): ``BertModel(config)`` saved with
  ``save_pretrained`` beside a ``BertTokenizerFast`` over a WordPiece vocab of the benchmark
  text's words and the special tokens; the component's ``name`` points at that directory.
  Its default, float32.
- ``trf-bf16``: the same pipeline with ``nlp.pipe`` under ``torch.autocast("cpu",
  dtype=torch.bfloat16)``: torch runs the products (linear layers, attention matmuls) in bf16
  and keeps reductions such as softmax and layer norm in float32.
- ``elmo-original-auto`` / ``elmo-original-fp32`` (and, when asked for, ``elmo-original-bf16`` /
  ``elmo-original-int8``): our ``elmo`` component with the biLM of the published Original size
  (``ElmoOptions(**ORIGINAL_SIZES)``, 93.6 M parameters, random weights written with ``to_files``),
  ``precision = "auto"`` / ``"fp32"`` (/ ``"bf16"`` / ``"int8"``).
- ``elmo-en``: our ``elmo`` component with the bundled English biLM (``pretrained = "en"``).

Random weights cost what trained ones do. Each pipeline is built once and saved with
``nlp.to_disk``; every round runs each configuration in a fresh subprocess (rounds interleaved,
so a slow spell of the machine hits every configuration alike, and peak memory is the
configuration's own), which ``spacy.load``s it, runs one warm-up sentence (not in the timed
set), then ``nlp.pipe`` over the docs. Printed per configuration and round: words/s of that
``nlp.pipe`` (spaCy tokens), time to first doc (from the subprocess' start, the harness's ``STARTED``: imports,
``spacy.load`` and the warm-up sentence), and memory: RSS after loading, the peak during
``nlp.pipe`` (sampled every 5 ms) and the peak of the subprocess
(its high-water mark, loading included). The pipelines are built in another
subprocess too: a child started by fork inherits its parent's ``ru_maxrss``, so the parent stays small.

The docs are real English sentences, one per doc: ``examples/word_senses.jsonl`` (480 sentences,
5,365 whitespace-separated words); ``--docs`` takes the first N (at most 480; a doc never repeats
within a run, so no cache serves a repeat).

Extra requirements (not in setup.cfg; they leave spaCy 3.8 and thinc 8.3 as they are)::

    pip install "spacy-transformers==1.4.0"   # brings transformers 4.53, tokenizers 0.21

Run from the repository root::

    python benchmarks/peer_transformers.py [--docs 480] [--rounds 3] [--threads 2] [--batch-size 64]
        [--configs trf-fp32,trf-bf16,elmo-original-auto,elmo-original-fp32,elmo-en]
        [--as-avx2]   # the kernels of an AVX2-only CPU (harness.as_avx2_cpu)
"""

import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import typer

from harness import REPO, STARTED, WORD_SENSES, RssSampler, as_avx2_cpu, isolated, machine, rss_mib, word_sense_texts

WARM_UP = "Apple is looking at buying a U.K. startup for one billion dollars."  # spaCy's first English example
CONFIGS = ["trf-fp32", "trf-bf16", "elmo-original-auto", "elmo-original-fp32", "elmo-en"]
# Also runnable, not run by default: our Original size at an explicit low precision.
EXTRA_CONFIGS = ["elmo-original-bf16", "elmo-original-int8"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0])


def build_bert(directory: Path, texts: List[str], layers: int = 12) -> str:
    """A BERT-base-sized model (``layers`` layers) of random weights and a WordPiece tokenizer over
    the texts' words; a line on it."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast
    from transformers.models.bert.tokenization_bert import BasicTokenizer

    basic = BasicTokenizer(do_lower_case=True)
    words = sorted({token for text in texts + [WARM_UP] for token in basic.tokenize(text)})
    directory.mkdir(parents=True, exist_ok=True)
    vocab_file = directory / "vocab.txt"
    vocab_file.write_text("\n".join(SPECIAL + [w for w in words if w not in SPECIAL]) + "\n", encoding="utf8")
    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=layers))
    model.save_pretrained(directory)
    BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True).save_pretrained(directory)
    n_params = sum(p.numel() for p in model.parameters())
    return (
        f"BERT-base-sized model, {layers} layers: {n_params / 1e6:.1f} M parameters, "
        f"WordPiece vocab of {len(words) + len(SPECIAL)}"
    )


def build_pipelines(configs: List[str], directory: str, threads: int) -> Dict[str, Any]:
    """Each configuration's pipeline, saved with ``nlp.to_disk`` under ``directory``: their paths, and
    what was built (``notes``).
    Run in a process of its own (:func:`~harness.isolated`): a child started by fork inherits its
    parent's ``ru_maxrss``, so the parent stays small."""
    import spacy

    from spacy_elmo import BiLM, ElmoOptions
    from spacy_elmo.bilm.model.options import ORIGINAL_SIZES

    tmp = Path(directory)
    texts = word_sense_texts(480)  # the WordPiece vocabulary: every sentence
    paths: Dict[str, Path] = {}
    notes: List[str] = []
    for config in configs:
        nlp = spacy.blank("en")
        if config.startswith("trf-"):
            if (tmp / "pipelines" / "trf").exists():  # fp32 and bf16 autocast: one pipeline
                paths[config] = tmp / "pipelines" / "trf"
                continue
            bert = tmp / "bert-base-random"
            notes.append(build_bert(bert, texts))
            nlp.add_pipe("transformer", config={"model": {"name": str(bert)}})
        else:
            if config.startswith("elmo-original-"):
                options_file, weight_file = tmp / "original" / "options.json", tmp / "original" / "weights.hdf5"
                if not weight_file.exists():
                    import torch

                    weight_file.parent.mkdir(parents=True, exist_ok=True)
                    torch.manual_seed(0)
                    BiLM(ElmoOptions(**ORIGINAL_SIZES)).to_files(options_file, weight_file)
                model = {
                    "options_file": str(options_file),
                    "weight_file": str(weight_file),
                    "precision": config.rsplit("-", 1)[1],
                }
            else:  # elmo-en
                model = {"pretrained": "en", "precision": "auto"}
            nlp.add_pipe("elmo", config={"model": model, "threads": threads})
        nlp.initialize()
        paths[config] = tmp / "pipelines" / ("trf" if config.startswith("trf-") else config)
        paths[config].parent.mkdir(parents=True, exist_ok=True)
        nlp.to_disk(paths[config])
    return {"paths": {config: str(path) for config, path in paths.items()}, "notes": notes}


def float32_outputs(module: Any, inputs: Any, output: Dict[str, Any]) -> Dict[str, Any]:
    """The transformer's outputs back in float32: NumPy (thinc's ``torch2xp``) has no bf16.

    Under autocast BERT's last hidden state comes out bf16, and spacy-transformers fails on it
    (``TypeError: Got unsupported ScalarType BFloat16``); a user must cast as this forward hook
    does. Its cost (one conversion of the output per batch) is counted in the timing.
    """
    import torch

    for key, value in output.items():
        if torch.is_tensor(value) and value.dtype == torch.bfloat16:
            output[key] = value.float()
    return output


def measure(config: str, pipeline: str, docs: int, threads: int, batch_size: int) -> Dict[str, Any]:
    """One configuration, one round, in a process of its own (:func:`~harness.isolated`): load, first
    doc, timed ``nlp.pipe``."""
    import spacy
    import torch

    torch.set_num_threads(threads)
    imported = time.perf_counter()
    texts = word_sense_texts(docs)
    nlp = spacy.load(pipeline)
    loaded = time.perf_counter()
    rss_loaded = rss_mib()
    autocast: contextlib.AbstractContextManager = contextlib.nullcontext()
    if config == "trf-bf16":
        autocast = torch.autocast("cpu", dtype=torch.bfloat16)
        for node in nlp.get_pipe("transformer").model.walk():
            for shim in node.shims:
                shim._model.register_forward_hook(float32_outputs)
    with autocast, RssSampler() as sampler:  # RSS during nlp.pipe alone (ru_maxrss also covers spacy.load)
        list(nlp.pipe([WARM_UP]))
        first = time.perf_counter()
        n_words = 0
        start = time.perf_counter()
        for doc in nlp.pipe(texts, batch_size=batch_size):
            n_words += len(doc)
        elapsed = time.perf_counter() - start
    return {
        "words": n_words,
        "seconds": elapsed,
        "words_per_s": n_words / elapsed,
        "import_s": imported - STARTED,
        "load_s": loaded - imported,
        "first_doc_s": first - STARTED,
        "rss_loaded_mb": rss_loaded,
        "pipe_peak_rss_mb": sampler.peak,
        "threads": torch.get_num_threads(),
    }


@app.command()
def main(
    docs: int = typer.Option(480, help="Sentences (docs) to run, at most 480"),
    rounds: int = typer.Option(3, help="Interleaved rounds"),
    threads: int = typer.Option(2, help="torch threads (torch.set_num_threads)"),
    batch_size: int = typer.Option(64, help="nlp.pipe batch_size"),
    configs: str = typer.Option(",".join(CONFIGS), help=f"Comma-separated, of {', '.join(CONFIGS + EXTRA_CONFIGS)}"),
    as_avx2: bool = typer.Option(False, "--as-avx2", help="The kernels of an AVX2-only CPU (harness.as_avx2_cpu)"),
) -> None:
    if as_avx2:
        as_avx2_cpu()
    chosen = [c.strip() for c in configs.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(CONFIGS + EXTRA_CONFIGS))
    if unknown:
        raise typer.BadParameter(f"unknown configurations {unknown}; choose from {', '.join(CONFIGS + EXTRA_CONFIGS)}")
    texts = word_sense_texts(docs)
    print(machine())
    print(
        f"{len(texts)} sentences from {WORD_SENSES.relative_to(REPO)}, {sum(len(t.split()) for t in texts)} "
        f"whitespace-separated words; {threads} torch threads, nlp.pipe batch_size {batch_size}",
        flush=True,
    )
    results: Dict[str, List[Dict[str, Any]]] = {c: [] for c in chosen}
    with tempfile.TemporaryDirectory() as tmp:
        built = isolated(build_pipelines, configs=chosen, directory=tmp, threads=threads)
        print("\n".join(built["notes"]), flush=True)
        paths = built["paths"]
        for round_ in range(1, rounds + 1):
            for config in chosen:
                row = isolated(
                    measure, config=config, pipeline=paths[config], docs=docs, threads=threads, batch_size=batch_size
                )
                results[config].append(row)
                print(
                    f"round {round_} {config:20s} {row['words_per_s']:8.0f} words/s ({row['words']} words in "
                    f"{row['seconds']:.2f} s)  first doc {row['first_doc_s']:.2f} s (imports "
                    f"{row['import_s']:.2f}, load {row['load_s']:.2f})  RSS loaded {row['rss_loaded_mb']:.0f} MB, "
                    f"peak in nlp.pipe {row['pipe_peak_rss_mb']:.0f} MB, peak of the process "
                    f"{row['peak_rss_mib']:.0f} MB",
                    flush=True,
                )
    print(
        "\n| configuration | words/s over rounds | peak RSS in nlp.pipe / of the process | time to first doc |\n"
        "|---|---|---|---|"
    )
    for config, rows in results.items():
        rates = [r["words_per_s"] for r in rows]
        peaks = [r["peak_rss_mib"] for r in rows]
        pipe_peaks = [r["pipe_peak_rss_mb"] for r in rows]
        firsts = [r["first_doc_s"] for r in rows]
        print(
            f"| {config} | {min(rates):,.0f}-{max(rates):,.0f} | {max(pipe_peaks):,.0f} / {max(peaks):,.0f} MB | "
            f"{min(firsts):.1f}-{max(firsts):.1f} s |"
        )
    if "elmo-original-auto" in results and "trf-bf16" in results:
        ours = statistics.median(r["words_per_s"] for r in results["elmo-original-auto"])
        peer = statistics.median(r["words_per_s"] for r in results["trf-bf16"])
        print(f"\nelmo-original-auto / trf-bf16 (median words/s): {ours / peer:.2f}x")


if __name__ == "__main__":
    app()
