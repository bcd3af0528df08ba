#!/usr/bin/env bash
# Fails (exit 1, naming them) when a Catch2 binary has a test case whose name would not run as
# exactly one ctest test of that name. catch_discover_tests (Catch2 2.x) reads the names from
# --list-test-names-only into a CMake list and hands each back to the binary as its test spec,
# escaping only ',', '[' and ']'. Tried with Catch2 2.13 and CMake 3.25:
#   ;                     splits the name into two ctest tests whose specs match nothing: they pass
#   \                     is taken as an escape by the spec, so nothing matches; last in a name,
#                         it escapes CMake's list separator and swallows the next name
#   [ ]                   an unbalanced one joins the following names into one test (CMake list
#                         brackets)
#   *                     is a wildcard at either end of a spec: other tests may run under it
#   leading ~, exclude:   negate the spec: every other test of the binary runs instead
#   leading #             is quoted into the ctest name
# Run after each test binary is linked (tests/CMakeLists.txt), so such a name fails the build.
# Usage: check_test_names.sh TEST_BINARY
set -uo pipefail
binary=$1
names=$("$binary" --list-test-names-only)  # its exit status is the number of test cases
if [ -z "$names" ]; then
  echo "$binary: lists no test cases" >&2
  exit 1
fi
bad=$(grep -E '[][;\\*]|^(~|#|exclude:)' <<<"$names")
if [ -n "$bad" ]; then
  echo "$binary: these test case names would not run as one ctest test each" \
       "(no ; \\ [ ] * anywhere, nor ~ # exclude: first):" >&2
  echo "$bad" >&2
  exit 1
fi
