# Shortcuts for the two README commands (they need only bash and Python >= 3.11).
.PHONY: demo test clean
demo:
	bash scripts/demo.sh
test:
	bash scripts/test.sh
clean:
	rm -rf .venv build *.egg-info .pytest_cache
