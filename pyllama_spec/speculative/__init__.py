"""The speculative-decoding layer: sampling and verification math, statistics, stage timing,
drafters, and the loop that ties them together. It speaks tokens, positions and numpy
arrays, and reaches llama.cpp only through :class:`~pyllama_spec.Context`."""
