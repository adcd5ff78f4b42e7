# The two commands of the README. Each installs what it needs first (idempotent).
.PHONY: lab test setup bench compat

lab:          ## install everything and open JupyterLab on lessons/
	bash scripts/lab.sh

test:         ## install everything and run the whole test suite
	bash scripts/test.sh

setup:        ## only install (the two commands above do this themselves)
	bash scripts/setup.sh

bench:        ## the engine benchmark (JSON + PNG into bench-results/)
	bash scripts/setup.sh && .venv/bin/python -m benchmarks

compat:       ## what the course says about vLLM, checked against vLLM's CPU build (own virtualenv)
	bash scripts/compat.sh $(COMPAT_ARGS)
