"""Both token encoders, bilm-tf's char CNN and ELMoForManyLangs', through the one :class:`TokenEncoder`:
the biLM's ``encode`` sorts the tokens, cuts their padding and runs them in bounded chunks, and gives
every token the vector of all its positions, in the order asked."""

from typing import List, Tuple

import numpy
import pytest
import torch

from spacy_elmo import BiLM, ElmoOptions
from spacy_elmo.bilm.model import token_encoder
from spacy_elmo.bilm.model.char_cnn import CharCNN
from spacy_elmo.bilm.model.options import ORIGINAL_SIZES
from spacy_elmo.bilm.model.token_encoder import SENTENCE_END, SENTENCE_START, TokenEncoder

from ...helpers import assert_float32_close, random_bilm
from ..helpers import write_random_model

TOKENS = [SENTENCE_START, "a", "naïve", "中文", "x" * 60, "I", "", "любовь", SENTENCE_END, "ELMo", "the", "a"]


@pytest.fixture(params=["bilm-tf", "manylangs"])
def encoder(request, tmp_path) -> TokenEncoder:
    if request.param == "bilm-tf":
        return random_bilm().token_encoder
    return BiLM.from_pretrained(str(write_random_model(tmp_path / "model"))).token_encoder


def test_encode_in_chunks_gives_each_token_the_vector_of_all_its_positions(encoder) -> None:
    ids = encoder.token_ids(TOKENS)
    words = None if ids.words is None else torch.from_numpy(ids.words)
    with torch.no_grad():
        expected = encoder(torch.from_numpy(ids.chars), words)  # every position, in the order asked
    budget = encoder.options.max_characters_per_token  # positions: one token of the longest
    chunks: List[Tuple[int, int]] = []
    encoder.register_forward_hook(lambda module, args, output: chunks.append(tuple(args[0].shape)))
    with torch.no_grad():
        found = encoder.encode(TOKENS, torch.float32, budget * encoder.bytes_per_position())
    assert sum(rows for rows, _ in chunks) == len(TOKENS) and len(chunks) >= 3
    assert all(rows * positions <= budget for rows, positions in chunks)
    assert min(positions for _, positions in chunks) < encoder.options.max_characters_per_token  # cut short
    assert_float32_close(found, expected)


def test_no_tokens_give_no_rows(encoder) -> None:
    assert encoder.encode([], torch.float32).shape == (0, encoder.options.projection_dim)


def test_a_state_dict_from_before_the_rename_loads_and_digests_name_the_old_tensors() -> None:
    import hashlib

    from spacy_elmo.bilm.formats.identity import weights_digest

    source, target = random_bilm(seed=0), random_bilm(seed=1)
    legacy = {key.replace("token_encoder.", "char_cnn.", 1): value for key, value in source.state_dict().items()}
    assert any(key.startswith("char_cnn.") for key in legacy)
    target.load_state_dict(legacy)  # strict: every key found under its new name
    for (name, mine), theirs in zip(target.state_dict().items(), source.state_dict().values()):
        assert torch.equal(mine, theirs), name
    before = hashlib.sha256()  # the digest as computed before the rename
    for name, tensor in sorted(legacy.items()):
        array = tensor.detach().cpu().contiguous()
        before.update(f"{name}:{array.dtype}:{tuple(array.shape)};".encode("utf8"))
        if array.numel():
            before.update(memoryview(array.view(-1).view(torch.uint8).numpy()))
    assert weights_digest(source) == before.hexdigest()


def test_a_gpu_encodes_1024_tokens_of_the_longest_in_one_chunk_at_the_original_size() -> None:
    """Each chunk launches a few dozen kernels, whose host cost bounds a GPU's pass: a GPU takes
    chunks of 1,024 tokens of the longest, a CPU far fewer (the logic; tests/gpu runs a device)."""
    options = ElmoOptions(**ORIGINAL_SIZES)
    per_position = CharCNN(options).bytes_per_position()
    longest = numpy.full(4096, options.max_characters_per_token)

    def first_chunk(device: torch.device) -> int:
        chunk = next(token_encoder._chunks(longest, token_encoder.chunk_bytes(device) // per_position))
        return chunk.stop - chunk.start

    assert first_chunk(torch.device("cuda", 0)) >= 1024 > 4 * first_chunk(torch.device("cpu"))
