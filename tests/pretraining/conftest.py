import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run several times faster on one thread, most of all on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
