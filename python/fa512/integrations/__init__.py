"""fa512 inside other frameworks. Each submodule needs its framework installed and is imported
explicitly; ``import fa512`` imports none of them.

- `fa512.integrations.transformers`: ``attn_implementation="fa512"`` for Hugging Face
  transformers (Gemma-4's head_dim-512 layers on fa512, every other layer on transformers' sdpa);
  ``pip install "fa512[transformers]"``.
"""
