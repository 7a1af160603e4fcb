from .cli import app

app(prog_name="python -m spacy_elmo")
