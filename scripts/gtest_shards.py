#!/usr/bin/env python3
"""Splits the tests `ctest --show-only=json-v1` lists (stdin) between processes.

The tests of one GoogleTest binary (BINARY, matched by file name) are dealt into SHARDS groups of
about equal time, longest first, by the times of COSTS (a CTestCostData.txt; a test it does not
know counts as one second). Each group is written to OUT/shard-K.filter as one --gtest_filter
value, and the environment ctest gives those tests to OUT/env (NAME=VALUE lines); the other tests
(other commands: MPI jobs, scripts) to OUT/others as one ctest -R expression of exact names.

scripts/sanitize.sh runs each group as one process: under AddressSanitizer a test process takes
0.3 s to start, which the suite paid once per test (run with: ctest ... | gtest_shards.py BINARY
SHARDS COSTS OUT).
"""
import json
import os
import re
import sys


def main():
    binary, shards, costs_path, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    listing = json.load(sys.stdin)
    costs = {}
    if os.path.exists(costs_path):
        with open(costs_path) as f:
            for line in f:
                parts = line.rsplit(" ", 2)
                if len(parts) == 3:
                    try:
                        costs[parts[0]] = float(parts[2])
                    except ValueError:
                        pass
    groups = [[] for _ in range(shards)]
    totals = [0.0] * shards
    env, others, tests = None, [], []
    for t in listing["tests"]:
        command = t.get("command") or []
        filters = [a for a in command[1:] if a.startswith("--gtest_filter=")]
        if command and os.path.basename(command[0]) == binary and len(filters) == 1:
            tests.append((costs.get(t["name"], 1.0), filters[0][len("--gtest_filter="):]))
            for p in t.get("properties", []):
                if p["name"] == "ENVIRONMENT" and env is None:
                    env = p["value"]
        else:
            others.append(t["name"])
    for cost, name in sorted(tests, reverse=True):
        k = totals.index(min(totals))
        groups[k].append(name)
        totals[k] += cost
    os.makedirs(out, exist_ok=True)
    for k, group in enumerate(groups):
        with open(os.path.join(out, f"shard-{k}.filter"), "w") as f:
            f.write(":".join(group))
    with open(os.path.join(out, "env"), "w") as f:
        f.write("\n".join(env or []) + "\n")
    with open(os.path.join(out, "others"), "w") as f:
        f.write("^(" + "|".join(re.escape(n) for n in others) + ")$" if others else "")
    print(f"{len(tests)} tests of {binary} in {shards} processes "
          f"(~{', '.join(f'{t:.0f}' for t in totals)} s of release time each), "
          f"{len(others)} others by ctest")


if __name__ == "__main__":
    main()
