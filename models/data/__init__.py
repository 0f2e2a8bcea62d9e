"""Input pipelines: ImageNet in its layouts (one module per framework, and the GPU decoders), and token windows for
the transformer (tokens.py)."""
