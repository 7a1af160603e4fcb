"""Parquet shards of ``spacy-elmo embed``: one file per shard of the input, written atomically.

Columns: ``index`` (int64, the sentence's number in the input), ``text`` (its stripped text),
``tokens`` (list<string>) and ``layers``: nested lists of float32 of the shape of the kept
output, (n_layers + 1, n_tokens, width) for ``--layers all``, else (n_tokens, width). A shard
is built from several tables (one per chunk of sentences), each cut into row groups of
:data:`ROW_GROUP_ROWS` sentences, so a reader can fetch one sentence by decoding a few rows.
"""

from pathlib import Path
from typing import Iterator, List, Sequence

import numpy
import pyarrow as pa
import pyarrow.parquet as pq

from .reader import Sentence

ROW_GROUP_ROWS = 32


def schema(output_ndim: int) -> pa.Schema:
    """The shards' schema; ``layers`` nests ``output_ndim`` lists around float32."""
    layers_type: pa.DataType = pa.float32()
    for _ in range(output_ndim):
        layers_type = pa.list_(layers_type)
    return pa.schema(
        [("index", pa.int64()), ("text", pa.string()), ("tokens", pa.list_(pa.string())), ("layers", layers_type)]
    )


def nested_lists(arrays: Sequence[numpy.ndarray], ndim: int) -> pa.Array:
    """One arrow value per array: ``ndim`` levels of lists around the array's float32 values."""
    flat = [numpy.ascontiguousarray(a, dtype=numpy.float32).reshape(-1) for a in arrays]
    result: pa.Array = pa.array(numpy.concatenate(flat) if flat else numpy.zeros(0, numpy.float32), pa.float32())
    for level in reversed(range(ndim)):
        lengths = [numpy.full(int(numpy.prod(a.shape[:level])), a.shape[level], dtype=numpy.int64) for a in arrays]
        offsets = numpy.concatenate([[0], numpy.cumsum(numpy.concatenate(lengths) if lengths else [])])
        if offsets[-1] > numpy.iinfo(numpy.int32).max:
            raise ValueError("a chunk of sentences is too large for one Parquet table: lower --batch-tokens")
        result = pa.ListArray.from_arrays(pa.array(offsets.astype(numpy.int32)), result)
    return result


def arrays_of(layers: pa.Array, n_tokens: Sequence[int], tail_shape: Sequence[int]) -> List[numpy.ndarray]:
    """The inverse of :func:`nested_lists`: row ``i`` as an array of shape
    ``(*tail_shape[:-2], n_tokens[i], tail_shape[-1])`` (the token axis is the one that varies)."""
    if isinstance(layers, pa.ChunkedArray):
        layers = layers.combine_chunks()
    values = layers
    while pa.types.is_list(values.type):
        values = values.flatten()
    flat = values.to_numpy(zero_copy_only=False)
    shapes = [(*tail_shape[:-1], n, tail_shape[-1]) for n in n_tokens]
    sizes = [int(numpy.prod(shape)) for shape in shapes]
    pieces = numpy.split(flat, numpy.cumsum(sizes)[:-1]) if sizes else []
    return [piece.reshape(shape) for piece, shape in zip(pieces, shapes)]


class ShardWriter:
    """Appends chunks of sentences and their outputs to one Parquet file (a temporary path)."""

    def __init__(self, path: Path, output_ndim: int) -> None:
        self.output_ndim = output_ndim
        self._writer = pq.ParquetWriter(path, schema(output_ndim), compression="snappy", write_statistics=["index"])

    def write(self, sentences: Sequence[Sentence], outputs: Sequence[numpy.ndarray]) -> None:
        table = pa.table(
            [
                pa.array([s.index for s in sentences], pa.int64()),
                pa.array([s.text for s in sentences], pa.string()),
                pa.array([s.tokens for s in sentences], pa.list_(pa.string())),
                nested_lists(outputs, self.output_ndim),
            ],
            schema=self._writer.schema,
        )
        self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)

    def close(self) -> None:
        self._writer.close()


def iter_row_groups(path: Path, columns: Sequence[str]) -> Iterator[pa.Table]:
    """The row groups of a shard, one table at a time (bounded memory)."""
    shard = pq.ParquetFile(path)
    for group in range(shard.num_row_groups):
        yield shard.read_row_group(group, columns=list(columns))
