# The two commands: `make run` starts the daemon, `make test` runs every test.
# Both first run scripts/setup, which installs what is missing (idempotent, quick when done).

BUILD       ?= build
ASAN_BUILD  ?= build-asan
FUZZ_BUILD  ?= build-fuzz
FUZZ_SECONDS ?= 30
PYTEST      ?= /usr/bin/python3 -m pytest
PYTEST_ARGS ?=
ARGS        ?=
SETUP_DONE  ?=

# runc finds CRIU on PATH: ours is in /usr/local/sbin, whatever PATH the caller has.
export PATH := /usr/local/sbin:/usr/local/bin:$(PATH)

.PHONY: all setup build run test unit integration asan fuzz fmt fmt-check clean bench

all: build

setup:
ifeq ($(SETUP_DONE),)
	@./scripts/setup
endif

$(BUILD)/build.ninja:
	meson setup $(BUILD)

build: setup $(BUILD)/build.ninja
	ninja -C $(BUILD)

# Start the daemon in the foreground (first start prints the admin token once), after a
# one-line summary of the host checks (`sandboxer doctor` prints them in full).
run: build
	@./$(BUILD)/sandboxer doctor --short || true
	./$(BUILD)/sandboxer serve $(ARGS)

test: build
	$(MAKE) --no-print-directory SETUP_DONE=1 unit integration
ifeq ($(CI),true)
	$(MAKE) --no-print-directory SETUP_DONE=1 fuzz
endif

unit: build
	meson test -C $(BUILD) --suite unit --print-errorlogs

integration: build
	SANDBOXER_BIN=$(CURDIR)/$(BUILD)/sandboxer $(PYTEST) -q -p no:cacheprovider \
	  tests/integration $(PYTEST_ARGS)

# ASan + UBSan build, with its unit and integration tests.
$(ASAN_BUILD)/build.ninja:
	meson setup $(ASAN_BUILD) -Db_sanitize=address,undefined -Db_lundef=false \
	  -Dbuildtype=debug

asan: setup $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  meson test -C $(ASAN_BUILD) --suite unit --print-errorlogs
	SANDBOXER_BIN=$(CURDIR)/$(ASAN_BUILD)/sandboxer SANDBOXER_SANITIZED=1 \
	  UBSAN_OPTIONS=print_stacktrace=1 $(PYTEST) -q -p no:cacheprovider tests/integration \
	  $(PYTEST_ARGS)

# libFuzzer targets (clang), each run for FUZZ_SECONDS on a scratch copy of its corpus.
$(FUZZ_BUILD)/build.ninja:
	CC=clang meson setup $(FUZZ_BUILD) -Dfuzz=true -Db_sanitize=address,undefined \
	  -Db_lundef=false -Dbuildtype=debug

fuzz: setup $(FUZZ_BUILD)/build.ninja
	ninja -C $(FUZZ_BUILD)
	@for t in request agent procs image proxy ws egress e2b; do \
	  work=$$(mktemp -d); cp tests/fuzz/corpus/$$t/* $$work/; \
	  echo "fuzz_$$t: $(FUZZ_SECONDS)s"; \
	  if ./$(FUZZ_BUILD)/tests/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	      -print_final_stats=1 $$work > $$work.log 2>&1; then tail -n 4 $$work.log; \
	  else tail -n 60 $$work.log; rm -rf $$work $$work.log; exit 1; fi; \
	  rm -rf $$work $$work.log; \
	done

# Benchmarks against podman and bare runc (installs podman); prints tables. Not a test.
bench: build
	BENCH_NO_BUILD=1 ./bench/run $(ARGS)

# tracked and new (not ignored) files, so that a file not yet added is formatted too
C_FILES = $(shell git ls-files --cached --others --exclude-standard '*.c' '*.h')

fmt:
	clang-format -i $(C_FILES)

fmt-check:
	clang-format --dry-run -Werror $(C_FILES)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
