"""Where the biLM's memory goes: weights moved to disk once their low-precision copies serve, and
the cache of token encodings."""
