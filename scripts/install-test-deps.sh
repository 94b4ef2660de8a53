#!/usr/bin/env bash
# System packages the test suite needs beyond PyPI, installed only if missing:
#   chromium  - tests/check/test_render.py opens the checker's HTML page in a real
#               headless browser (Debian's package; no browser download at test time)
#   redis-tools - redis-cli and redis-benchmark, which tests/kvstore point at the
#               kv-store's Redis port (the clients users will use)
#   java      - the TLA+ model checker (tests/test_tla.py); Java 17 is expected on the
#               machine, this only reports its absence
# Idempotent and quiet; needs root (or sudo) for apt-get.
set -euo pipefail

sudo_=""
if [[ $(id -u) -ne 0 ]]; then sudo_="sudo"; fi

if ! command -v chromium >/dev/null 2>&1; then
    echo "install-test-deps: apt-get install chromium" >&2
    $sudo_ apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq chromium >/dev/null
fi
if ! command -v redis-cli >/dev/null 2>&1 || ! command -v redis-benchmark >/dev/null 2>&1; then
    echo "install-test-deps: apt-get install redis-tools" >&2
    $sudo_ apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq redis-tools >/dev/null
fi
if ! command -v java >/dev/null 2>&1; then
    echo "install-test-deps: java not found (the TLA+ tests need Java 11+; Java 17 works)" >&2
    exit 1
fi
