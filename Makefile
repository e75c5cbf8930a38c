# Front door: `make demo` runs the main job, `make test` runs every test.
# Both install the Debian packages they need when run as root (make deps)
# and otherwise print the exact install line.

BUILD      ?= build
ASAN_BUILD ?= build-asan
MAKEFLAGS += --no-print-directory
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=

# Debian packages: what the build and the demo need, and what the tests add
# (NumPy and pytest as oracles, venv/pip for the install test, Chromium for
# the HTML viewer, cppcheck and clang-format for make lint and the format
# check).
DEB_BUILD    = build-essential cmake pkg-config libopenblas-dev libcairo2-dev \
               fonts-dejavu-core
DEB_TEST     = python3 python3-numpy python3-venv python3-pip python3-pytest \
               chromium cppcheck clang-format
DEB_PACKAGES = $(DEB_BUILD) $(DEB_TEST)

# Static analysis: the library, the command and the benchmark (a short list
# of checks: cppcheck's errors plus warning, performance, portability).
CPPCHECK_FLAGS = --quiet --std=c11 --enable=warning,performance,portability \
                 --inline-suppr --error-exitcode=1 -I include -I src/core \
                 -D__GNUC__ -D_POSIX_C_SOURCE=200809L
# The C sources and headers .clang-format governs.
# The README's C examples (tests/test_readme_*.c) stay as the README shows
# them, character for character, so they are left out.
FORMAT_FILES = $(filter-out tests/test_readme_%.c, \
                 $(shell git ls-files '*.c' '*.h' 2>/dev/null || \
                   find src include tools bench tests -name '*.[ch]'))

.PHONY: all deps deps-build build test test-fast test-asan lint format \
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
# then the same suite under ASan + UBSan.
test: lint format-gate test-fast test-asan

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

test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DATTN_SANITIZE=ON $(CMAKE_ARGS) >/dev/null
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ATTN_SANITIZED=1 \
	  ctest --output-on-failure -j $(JOBS)

demo: build
	./$(BUILD)/attn demo --out demo-out

bench: build
	./$(BUILD)/attn bench

# make install PREFIX=/opt/attn installs there (default: CMake's, /usr/local)
install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix "$(PREFIX)")

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) demo-out
