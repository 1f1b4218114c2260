#!/usr/bin/env python3
"""Counts test cases from Bazel build-event JSON files (one per bazel run).

Usage: summarize.py BEP.json [BEP.json ...] [--result NAME=EXIT_CODE ...]

For every test target it reads the target's test.xml (GoogleTest or Bazel's
own; one per shard of a sharded target, all counted) and counts test cases
passed, failed and skipped. A target that failed
without any failing case in its XML (crash, timeout, sanitizer report) counts
as one failed case; a test target that failed to build counts as one failed
case. Prints one line per run, then the plain line
`N passed, M failed[, K skipped]`, and exits 1 if anything failed.
Each --result (a check run outside Bazel, e.g. a consumer build) counts as
one case: passed when its exit code is 0.
"""
import json
import sys
import urllib.parse
import xml.etree.ElementTree as ET


def xml_counts(path):
    """(passed, failed, skipped) from a JUnit-style test.xml, or None."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif (case.find("skipped") is not None
              or case.get("result") == "skipped"
              or case.get("status") == "notrun"):
            skipped += 1
        else:
            passed += 1
    if passed + failed + skipped == 0:
        return None
    return passed, failed, skipped


def summarize(bep_path):
    test_targets = set()
    completed = {}  # label -> success
    results = {}    # label -> (status, xml path)
    with open(bep_path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            ev = json.loads(line)
            eid = ev.get("id", {})
            if "targetConfigured" in eid:
                conf = ev.get("configured", {})
                if "testSize" in conf or conf.get("targetKind", "").endswith("_test rule"):
                    test_targets.add(eid["targetConfigured"]["label"])
            elif "targetCompleted" in eid:
                label = eid["targetCompleted"]["label"]
                completed[label] = ev.get("completed", {}).get("success", False)
            elif "testResult" in eid:
                tr = eid["testResult"]
                label = tr["label"]
                res = ev.get("testResult", {})
                xml = None
                for out in res.get("testActionOutput", []):
                    if out.get("name") == "test.xml":
                        xml = urllib.parse.urlparse(out.get("uri", "")).path
                # One event per run, shard and attempt: every shard counts
                # (each holds its own cases), the last attempt of each wins.
                key = (tr.get("run", 1), tr.get("shard", 1))
                results.setdefault(label, {})[key] = (
                    res.get("status", "NO_STATUS"), xml)
    passed = failed = skipped = 0
    failed_targets = []
    for label in sorted(test_targets):
        if label not in results:
            failed += 1
            failed_targets.append(label + " (not run: build failed)")
            continue
        for key in sorted(results[label]):
            status, xml = results[label][key]
            counts = xml_counts(xml) if xml else None
            if counts is None:
                counts = (1, 0, 0) if status == "PASSED" else (0, 1, 0)
            p, fl, s = counts
            if status != "PASSED" and fl == 0:
                fl = 1
            passed, failed, skipped = passed + p, failed + fl, skipped + s
            if status != "PASSED":
                shard = "" if len(results[label]) == 1 else " run %d shard %d" % key
                failed_targets.append("%s%s (%s)" % (label, shard, status))
    return passed, failed, skipped, failed_targets


def main(argv):
    total = [0, 0, 0]
    paths, results = [], []
    args = argv[1:]
    while args:
        a = args.pop(0)
        if a == "--result" and args:
            results.append(args.pop(0))
        elif a.startswith("--result="):
            results.append(a[len("--result="):])
        else:
            paths.append(a)
    for path in paths:
        p, fl, s, bad = summarize(path)
        print("# %s: %d passed, %d failed, %d skipped" % (path, p, fl, s))
        for b in bad:
            print("#   failed: %s" % b)
        total = [total[0] + p, total[1] + fl, total[2] + s]
    for r in results:
        name, _, code = r.rpartition("=")
        ok = code.strip() == "0"
        print("# %s: %s (exit %s)" % (name, "passed" if ok else "failed", code))
        total[0 if ok else 1] += 1
    line = "%d passed, %d failed" % (total[0], total[1])
    if total[2]:
        line += ", %d skipped" % total[2]
    print(line)
    return 1 if total[1] or total[0] == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
