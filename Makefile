# basalt — the commands a new user needs.
#   make build   install missing Debian packages, build Release into build/ (CLI: build/basalt)
#   make test    build, then run every test suite; ends with "N passed, N failed" (~50 min on 2 cores)
#   make check   the fast tier (<= ~5 min): build, layer and size checks, unit tests, ONNX conformance (Debian + newest),
#                parity with ONNX Runtime at default shapes. Run it while editing; make test before pushing.
#   make demo    build, fetch PaddleOCR v4 text detection, run it at two input sizes
#   make bench   build, then basalt vs ONNX Runtime 1.30 side by side (scripts/bench.sh; slow)
#   make fuzz    libFuzzer run (clang-14, build-fuzz/) for FUZZ_SECONDS in all (default 60)
#   make test-sanitize  ASan + UBSan build (build-fuzz/): unit, bad-input, Debian conformance, fuzz regressions, parity
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: build setup test check demo clean fuzz test-sanitize test-unit test-conformance test-parity bench

setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@ninja -C $(BUILD) -j $(JOBS)

test: build
	@bash scripts/run_tests.sh $(BUILD)

# The suites of scripts/run_tests.sh that make the fast tier (docs/testing.md).
CHECK_SUITES = models-setup layers sizes unit conformance-debian conformance-newest parity serve quantize
check: build
	@BASALT_SUITES="$(CHECK_SUITES)" PARITY_ARGS=--default-shapes bash scripts/run_tests.sh $(BUILD)

demo: build
	@bash scripts/demo.sh $(BUILD)

# basalt vs ONNX Runtime 1.30 (speed at 1 and 2 threads, memory scenarios); slow, not part of test.
# BENCH_ARGS passes options to scripts/bench_compare.py, e.g. BENCH_ARGS="--threads 2 --models resnet50".
bench: build
	@bash scripts/bench.sh $(BUILD) $(BENCH_ARGS)

FUZZ_SECONDS ?= 60
fuzz: setup
	@FUZZ_SEED=$${FUZZ_SEED:-0} bash scripts/fuzz.sh $(FUZZ_SECONDS)

test-sanitize: setup
	@bash scripts/test_sanitize.sh

clean:
	rm -rf $(BUILD)
