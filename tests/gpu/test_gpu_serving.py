"""``spacy-elmo serve --gpu-id 0``: the real server, its pipeline on the GPU, called by concurrent
clients, answers as the same pipeline does on the CPU."""

from concurrent.futures import ThreadPoolExecutor

import numpy
import pytest
from thinc.api import use_ops

from ..helpers import assert_float32_close, build_ner_textcat
from ..serve.helpers import TEXTS, expected_docs, start_server, stop

pytestmark = pytest.mark.gpu


def test_a_service_on_the_gpu_answers_as_its_pipeline_on_the_cpu(bilm_files, tmp_path) -> None:
    with use_ops("numpy"):
        build_ner_textcat(bilm_files, precision="fp32").to_disk(tmp_path / "pipeline")  # auto: bf16 on a GPU
        expected = expected_docs(tmp_path / "pipeline", TEXTS)
    server = start_server(tmp_path / "pipeline", tmp_path / "log", "--gpu-id", "0")
    try:
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda text: server.post({"texts": [text], "vectors": True}), TEXTS * 4))
    finally:
        stop(server)
    assert [a.status_code for a in answers] == [200] * len(answers), server.output()
    loaded = [line for line in server.output().splitlines() if "elmo: precision" in line]
    assert len(loaded) == 1 and "elmo: precision 'fp32' runs fp32 on cuda:0" in loaded[0], loaded
    for answer, want in zip(answers, expected * 4):
        doc = answer.json()["docs"][0]
        assert doc["tokens"] == want["tokens"]
        # Another device's kernels: scores differ by ~1e-6, enough to break a near tie between entities.
        assert all(abs(doc["cats"][label] - score) < 1e-4 for label, score in want["cats"].items())
        assert_float32_close(numpy.array(doc["vectors"]).reshape(want["vectors"].shape), want["vectors"], rtol=1e-4)
