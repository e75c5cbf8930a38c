# Front door: `make demo` runs the main job, `make test` runs every test.
# Both install the Debian packages they need when run as root (make deps)
# and otherwise print the exact install line.

BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
# seconds per fuzz target: `make fuzz FUZZ_SECONDS=3600` fuzzes for longer
FUZZ_SECONDS ?= 30
MAKEFLAGS += --no-print-directory
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=

# Debian packages: what the build and the demo need, and what the tests add
# (NumPy and pytest as oracles, venv/pip for the install test, Chromium for
# the HTML viewer, clang with libFuzzer for the fuzz targets, Open MPI for
# ring attention, cppcheck and clang-format for make lint and the format
# check).
DEB_BUILD    = build-essential cmake pkg-config libopenblas-dev libcairo2-dev \
               fonts-dejavu-core
DEB_TEST     = python3 python3-numpy python3-venv python3-pip python3-pytest \
               chromium clang libclang-rt-14-dev libomp-14-dev \
               libopenmpi-dev openmpi-bin cppcheck clang-format
DEB_PACKAGES = $(DEB_BUILD) $(DEB_TEST)

# The fuzz targets (tests/fuzz/CMakeLists.txt), e.g. npy params ...
FUZZ_TARGETS = $(shell sed -n 's/^set(ATTN_FUZZ_TARGETS \(.*\))/\1/p' tests/fuzz/CMakeLists.txt)
SAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1 \
          UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ATTN_SANITIZED=1

# Static analysis: the library, the command and the benchmark (a short list
# of checks: cppcheck's errors plus warning, performance, portability).
CPPCHECK_FLAGS = --quiet --std=c11 --enable=warning,performance,portability \
                 --inline-suppr --error-exitcode=1 -I include -I src/core \
                 -D__GNUC__ -D_POSIX_C_SOURCE=200809L
# The C sources and headers .clang-format governs.
# The C examples of README.md and docs/ (tests/test_readme_*.c, tests/dist/readme_*.c)
# stay as the pages show them, character for character: left out.
FORMAT_FILES = $(filter-out tests/test_readme_%.c tests/dist/readme_%.c, \
                 $(shell git ls-files '*.c' '*.h' 2>/dev/null || \
                   find src include tools bench tests -name '*.[ch]'))

.PHONY: all deps deps-build build test test-fast test-asan fuzz fuzz-build lint format \
        format-check format-gate demo bench install clean

all: build

# deps: everything `make test` needs; deps-build: the build and the demo.
deps: PKGS = $(DEB_PACKAGES)
deps-build: PKGS = $(DEB_BUILD)
deps deps-build:
	@missing=""; for p in $(PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else \
	    echo "missing packages; install them with:"; \
	    echo "  sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

build: deps-build
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# All tests: static analysis and the format check, the optimized build,
# then the same suite under ASan + UBSan (with the CLI argument fuzzer),
# then each libFuzzer target for FUZZ_SECONDS (clang).
test: lint format-gate test-fast test-asan fuzz

lint: deps
	cppcheck $(CPPCHECK_FLAGS) -j $(JOBS) src tools bench

# Rewrites every C file in the style of .clang-format.
format: deps
	clang-format -i $(FORMAT_FILES)

# Fails on any C file that `make format` would change.
format-check: deps
	clang-format --dry-run --Werror $(FORMAT_FILES)

# make test checks the format once the tree has been formatted: the file
# .clang-format-enforced marks that (it comes with the one commit that
# applies `make format` to the whole tree).
format-gate:
	@if [ -f .clang-format-enforced ]; then $(MAKE) format-check; \
	else echo "format check not enforced yet (no .clang-format-enforced)"; fi

test-fast: deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# RelWithDebInfo: optimized code is what ships, and -O2 warnings
# (format-truncation, ...) must not break this build either.
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTN_SANITIZE=ON $(CMAKE_ARGS) >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && $(SAN_ENV) ctest --output-on-failure -j $(JOBS)

# libFuzzer (clang 14): the library and the targets with ASan + UBSan.
fuzz-build: deps
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DATTN_FUZZ=ON $(CMAKE_ARGS) >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))

# Each target for FUZZ_SECONDS, from its seed corpus (tests/fuzz/corpus/T,
# read only) and what earlier runs found ($(FUZZ_BUILD)/corpus/T); the
# inputs become files in /dev/shm (the loaders take paths; tmpfs makes the
# writers' fsync cheap). A
# crash, a sanitizer report, a failed property, a leak, an input slower
# than 20 s or a 2 GB allocation fails; the input is left in
# $(FUZZ_BUILD)/crash-T-*. The log of each run: $(FUZZ_BUILD)/fuzz-T.log.
fuzz: fuzz-build
	@tmp=$(CURDIR)/$(FUZZ_BUILD); [ -w /dev/shm ] && tmp=/dev/shm; \
	tmp=$$tmp/attn-fuzz-$$$$; mkdir -p $$tmp; trap 'rm -rf '$$tmp EXIT; \
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	  printf 'fuzz_%s for %s s: ' $$t $(FUZZ_SECONDS); \
	  if $(SAN_ENV) OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive TMPDIR=$$tmp \
	     ./$(FUZZ_BUILD)/tests/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) \
	       -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
	       -artifact_prefix=$(FUZZ_BUILD)/crash-$$t- \
	       $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t \
	       > $(FUZZ_BUILD)/fuzz-$$t.log 2>&1; then \
	    sed -n 's/^stat::number_of_executed_units: */inputs /p' $(FUZZ_BUILD)/fuzz-$$t.log; \
	  else \
	    echo FAILED; tail -n 60 $(FUZZ_BUILD)/fuzz-$$t.log; exit 1; \
	  fi; \
	done

demo: build
	./$(BUILD)/attn demo --out demo-out

bench: build
	./$(BUILD)/attn bench

# make install PREFIX=/opt/attn installs there (default: CMake's, /usr/local)
install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix "$(PREFIX)")

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) demo-out
