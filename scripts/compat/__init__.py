"""`make compat`: the course's claims about vLLM, checked against an installed vLLM.

Not part of minillm and not part of `make test`: it needs vLLM's CPU build in a
virtualenv of its own (`scripts/compat.sh` makes one). See `__main__.py`.
"""
