#!/usr/bin/env python3
"""Fails when the last CTest run in BUILD_DIR skipped a test, so a test cannot
quietly stop running (a GTEST_SKIP on a missing tool or file reads as a pass in
CTest's summary). The one allowed skip is a SIMD test of an instruction set this
CPU lacks (its skip message says so); those are listed, not hidden.
   check_skips.py BUILD_DIR
"""
import re
import sys

# Skip messages of the kernels' per-ISA tests when the CPU lacks the ISA.
ALLOWED = re.compile(r"this CPU does not support it|no AVX-512 on this CPU")
TEST = re.compile(r"^\d+/\d+ Test: (.*)$")


def main(build_dir):
    log = f"{build_dir}/Testing/Temporary/LastTest.log"
    with open(log, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    skipped = []  # (name, message)
    name, output = None, []
    for i, line in enumerate(lines):
        m = TEST.match(line)
        if m:
            name, output = m.group(1).split("  # ")[0], []
            continue
        if name is None:
            continue
        output.append(line)
        if line.startswith("Skip regular expression found in output"):
            msg = ""
            for j, o in enumerate(output):
                if o.endswith(": Skipped") and j + 1 < len(output):
                    msg = output[j + 1]
                    break
            skipped.append((name, msg))
            name = None
    allowed = [(n, m) for n, m in skipped if ALLOWED.search(m)]
    bad = [(n, m) for n, m in skipped if not ALLOWED.search(m)]
    for n, m in allowed:
        print(f"check_skips: {build_dir}: skipped (ISA not on this CPU): {n}: {m}")
    for n, m in bad:
        print(f"check_skips: {build_dir}: SKIPPED: {n}: {m or '(no message)'}", file=sys.stderr)
    if bad:
        print(f"check_skips: {len(bad)} test(s) skipped in {build_dir}: a skipped test is a failure here", file=sys.stderr)
        return 1
    print(f"check_skips: {build_dir}: no test skipped{' except ' + str(len(allowed)) + ' ISA test(s)' if allowed else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
