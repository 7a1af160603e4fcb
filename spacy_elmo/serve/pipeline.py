"""What ``PIPELINE`` names, how it loads, and a batch run inside one memory zone.

``PIPELINE`` is, in this order: a directory that ``nlp.to_disk`` wrote; the name of an installed
pipeline package (``spacy package``, ``en_core_web_sm``); or the name of a published biLM
(``spacy-elmo models``: the bundled ``en``, ``original`` ...), which gives a blank pipeline of the
biLM's language with ``elmo`` on that biLM (downloaded on first use, as ``nlp.initialize()`` does).

:class:`PipelineRun` runs a batch inside one ``nlp.memory_zone()``: the strings its docs add to
the vocab are dropped when the batch ends, so a long-running service's vocab does not grow with
the words it has seen. The docs live only inside the zone: each doc's output (tokens, entities,
categories, vectors) is built as plain Python values before it closes.
"""

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

import spacy
from spacy.language import Language
from spacy.tokens import Doc
from thinc.api import Model, require_gpu
from thinc.util import has_cupy_gpu, to_numpy

from ..layers import get_runtime
from ..pipeline_component import Elmo
from ..published.registry import find_model
from ..vector_hooks import VECTORS_ATTR

logger = logging.getLogger("spacy_elmo.serve")

DIRECTORY, PACKAGE, BILM = "pipeline directory", "installed pipeline package", "published biLM"


@dataclass(frozen=True)
class PipelineSource:
    """``spec`` as given, and which of the three kinds it is."""

    spec: str
    kind: str


def find_source(spec: str) -> PipelineSource:
    """What ``spec`` names; a ValueError that lists the three kinds where it names none."""
    if Path(spec).is_dir():
        if not (Path(spec) / "config.cfg").is_file():
            raise ValueError(
                f"PIPELINE {spec!r} is a directory without a config.cfg: give a directory that nlp.to_disk wrote"
            )
        return PipelineSource(spec, DIRECTORY)
    if spacy.util.is_package(spec):
        return PipelineSource(spec, PACKAGE)
    if find_model(spec) is not None:
        return PipelineSource(spec, BILM)
    raise ValueError(
        f"PIPELINE {spec!r} is neither a directory, an installed pipeline package (pip list), nor a published "
        "biLM (spacy-elmo models lists them)"
    )


def check_gpu(gpu_id: int) -> None:
    """A ValueError saying what to install where ``--gpu-id`` names a GPU that spaCy cannot use
    (-1, the CPU, always works): before the service starts, not at its first load."""
    if gpu_id >= 0 and not has_cupy_gpu:
        raise ValueError(
            f"--gpu-id {gpu_id}: spaCy finds no GPU here (it runs on one through CuPy: pip install "
            '"spacy-elmo[cuda12x]" on a machine with a CUDA GPU); leave --gpu-id out to serve from the CPU'
        )


def use_gpu(gpu_id: int) -> None:
    """thinc's ops on GPU ``gpu_id`` (nothing for -1) for the calling thread alone: thinc keeps
    its current ops per thread, so the worker's thread, which loads and runs the pipeline, calls it."""
    if gpu_id >= 0:
        require_gpu(gpu_id)


def load_pipeline(source: PipelineSource) -> Language:
    """The pipeline ``source`` names, loaded and logged (time taken; each elmo's precision)."""
    start = time.perf_counter()
    nlp = spacy.load(source.spec) if source.kind in (DIRECTORY, PACKAGE) else _bilm_pipeline(source.spec)
    message = "loaded the %s %r in %.2f s: language %s, components %s"
    logger.info(
        message, source.kind, source.spec, time.perf_counter() - start, nlp.lang, ", ".join(nlp.pipe_names) or "none"
    )
    for name, component in nlp.pipeline:
        model = getattr(component, "model", None)
        for node in model.walk() if isinstance(model, Model) else ():
            if "batcher" in node.attrs:  # the worker is the pipeline's only caller: no calls to join
                node.attrs["batcher"] = None
        if isinstance(component, Elmo):
            runtime = get_runtime(component.model)  # the pipe predicts without gradients: inference's precision
            running = runtime.resolved_precision_for(training=False).precision
            logger.info("%s: precision %r runs %s on %s", name, runtime.precision, running, runtime.model.device)
    return nlp


def _bilm_pipeline(name: str) -> Language:
    """A blank pipeline of the biLM's language (multi-language where spaCy has none) with ``elmo`` on it."""
    model = find_model(name)
    language = (model.language if model is not None else "") or "en"
    try:
        nlp = spacy.blank(language)
    except ImportError:
        logger.info("spaCy has no %r language: a multi-language (xx) pipeline for the biLM %r", language, name)
        nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"model": {"pretrained": name}})
    nlp.initialize()
    return nlp


def doc_output(doc: Doc, vectors: bool) -> Dict[str, Any]:
    """A doc as JSON values: its tokens, entities and categories, and each token's vector if asked
    (ELMo's where the pipeline has ``elmo``, else the vocab's), (n_tokens, width) as rows."""
    output: Dict[str, Any] = {
        "tokens": [token.text for token in doc],
        "ents": [
            {"start_char": ent.start_char, "end_char": ent.end_char, "label": ent.label_, "text": ent.text}
            for ent in doc.ents
        ],
        "cats": {label: float(score) for label, score in doc.cats.items()},
    }
    if vectors:
        elmo_vectors = doc._.get(VECTORS_ATTR)
        rows = to_numpy(elmo_vectors) if elmo_vectors is not None else [to_numpy(token.vector) for token in doc]
        output["vectors"] = [row.tolist() for row in rows]
    return output


class PipelineRun:
    """Runs a batch of texts through ``nlp`` inside one memory zone (a :data:`~.worker.BatchRun`);
    ``on_tokens`` is told each batch's tokens (metrics).

    Only the worker's thread may call it: zones are not safe across threads.
    """

    def __init__(self, nlp: Language, on_tokens: Callable[[int], object] = lambda tokens: None) -> None:
        self.nlp, self.on_tokens = nlp, on_tokens

    def __call__(self, texts: Sequence[str], vectors: Sequence[bool]) -> List[Dict[str, Any]]:
        with self.nlp.memory_zone():
            docs = self.nlp.pipe(texts, batch_size=max(1, len(texts)))
            outputs = [doc_output(doc, wanted) for doc, wanted in zip(docs, vectors)]
        self.on_tokens(sum(len(output["tokens"]) for output in outputs))
        return outputs


def describe_pipeline(source: PipelineSource, nlp: Language) -> Dict[str, str]:
    """What is served, for the metrics' info: the pipeline, its components, each elmo's precision
    (the setting and what runs)."""
    precisions = []
    for name, component in nlp.pipeline:
        if isinstance(component, Elmo):
            runtime = get_runtime(component.model)
            precisions.append(f"{name}={runtime.precision}:{runtime.resolved_precision_for(training=False).precision}")
    return {"pipeline": source.spec, "components": ",".join(nlp.pipe_names), "elmo_precision": ",".join(precisions)}
