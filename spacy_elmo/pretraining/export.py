"""Putting exported files into a spaCy pipeline."""

from ..fileio import PathLike, standard_files


def export_pipeline(model_dir: PathLike, output: PathLike, lang: str = "en", state: str = "zero") -> None:
    """Save ``spacy.blank(lang)`` with an ``elmo`` component holding the biLM of ``model_dir``.

    ``model_dir`` holds ``options.json`` + ``weights.hdf5`` as :func:`pretrain` exports them; the
    weights are copied into the pipeline, which ``spacy.load(output)`` then loads alone. ``state``:
    the component's, ``"zero"`` by default (a sentence's vectors then do not depend on its batch), or
    ``"warm"``, the warm start exported with the model.
    """
    import spacy

    options_file, weight_file = standard_files(model_dir)
    nlp = spacy.blank(lang)
    model = {"options_file": str(options_file), "weight_file": str(weight_file), "state": state}
    nlp.add_pipe("elmo", config={"model": model})
    nlp.initialize()
    nlp.to_disk(output)
