"""A first look at spacy-elmo's biLM, on the real bilm-tf weights of AllenNLP's test fixture.

1. Loads standard ELMo files (options.json + weights.hdf5).
2. Reproduces the outputs TensorFlow's bilm-tf computed for those weights.
3. Shows what ELMo adds: layer 0 is the same for a word in any sentence, layers 1-2 depend on
   the sentence around it.

Run it with ``make parity``.
"""

import json
from pathlib import Path

import h5py
import numpy

from spacy_elmo import BiLM

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "allennlp_elmo"


def tensorflow_parity() -> float:
    """Largest difference to bilm-tf's outputs over the fixture's 30 sentences."""
    model = BiLM.from_files(FIXTURE / "options.json", FIXTURE / "lm_weights.hdf5", state="carry")
    sentences = json.loads((FIXTURE / "sentences.json").read_text())
    worst = 0.0
    for i in range(len(sentences[0])):
        batch = [sentences[k][i].split() for k in range(len(sentences))]
        for k, layers in enumerate(model.embed_sentences(batch)):
            with h5py.File(FIXTURE / f"lm_embeddings_{k}.hdf5", "r") as f:
                expected = f[str(i)][...]
            n = len(batch[k])
            top = numpy.concatenate([expected[0, :n], expected[1, :n]], axis=-1)
            worst = max(worst, float(numpy.abs(layers[2] - top).max()))
    return worst


def cosine(a: numpy.ndarray, b: numpy.ndarray) -> float:
    return float(a @ b / (numpy.linalg.norm(a) * numpy.linalg.norm(b)))


def main() -> None:
    model = BiLM.from_files(FIXTURE / "options.json", FIXTURE / "lm_weights.hdf5")
    opts = model.options
    print(f"biLM: {opts.n_layers} LSTM layers of {opts.lstm_dim} cells projected to {opts.projection_dim}, "
          f"char CNN of {opts.n_filters} filters; output {model.n_output_layers} layers x {model.output_dim}")
    print(f"parity with TensorFlow (bilm-tf) outputs: max |difference| = {tensorflow_parity():.2e}")

    first = "I deposited the cheque at the bank on Monday .".split()
    second = "We had a picnic on the bank of the river .".split()
    layers_1, layers_2 = model.embed_sentences([first, second])
    bank_1, bank_2 = layers_1[:, first.index("bank")], layers_2[:, second.index("bank")]
    print(f"\n'bank' in: {' '.join(first)!r}\n      and: {' '.join(second)!r}")
    for layer in range(model.n_output_layers):
        kind = "context-free" if layer == 0 else "contextual"
        print(f"  layer {layer} ({kind:12}) cosine similarity of the two 'bank' vectors: "
              f"{cosine(bank_1[layer], bank_2[layer]):.3f}")
    print("\n(The fixture's model is tiny and barely trained: see README for real models.)")


if __name__ == "__main__":
    main()
