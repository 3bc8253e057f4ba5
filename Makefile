.PHONY: test demo lint bench packages
test:
	bash scripts/test.sh
demo:
	bash scripts/demo.sh
lint:
	bash scripts/bootstrap.sh && .venv/bin/ruff check .
bench:
	bash scripts/bootstrap.sh && .venv/bin/python bench/precheck_wall.py
packages:
	bash packaging/build.sh
