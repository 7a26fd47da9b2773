# basalt — the commands a new user needs.
#   make build   install missing Debian packages, build Release into build/ (CLI: build/basalt)
#   make test    build, then run every test suite; ends with "N passed, N failed"
#   make demo    build, fetch PaddleOCR v4 text detection, run it at two input sizes
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: build setup test demo clean test-unit test-conformance test-parity

setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@ninja -C $(BUILD) -j $(JOBS)

test: build
	@bash scripts/run_tests.sh $(BUILD)

demo: build
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
