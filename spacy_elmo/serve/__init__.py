"""``spacy-elmo serve``: a spaCy pipeline behind HTTP (FastAPI on uvicorn, the ``serve`` extra).

- :mod:`.settings`: the service's limits and settings, plain values (no web framework);
- :mod:`.worker`: the one thread that owns the pipeline, and how queued requests form its batches;
- :mod:`.memory`: the process's resident memory, and the freed heap handed back after each batch;
- :mod:`.pipeline`: what ``PIPELINE`` names (a directory, an installed package, a published biLM),
  and a batch run inside one ``nlp.memory_zone()`` with each doc's output built inside it;
- :mod:`.app`: the FastAPI application (``GET /health``, ``POST /pipe``, OpenAPI at ``/docs``);
- :mod:`.server`: logging, uvicorn, and a clean exit on SIGTERM;
- :mod:`.ray_deployment`: the same application as replicas on Ray Serve (the ``ray-serve`` extra).

Nothing of the library imports this package, and this ``__init__`` imports nothing: the command
line reads :mod:`.settings` for its help without FastAPI installed.
"""
