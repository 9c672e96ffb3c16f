"""Print subunit2csv's rows as one line per test: test / result."""

import csv
import sys

RESULT = {"success": "pass", "fail": "fail", "skip": "skip"}


def main() -> int:
    rows = [r for r in csv.DictReader(sys.stdin) if r["status"] in RESULT]
    names = [
        r["test"].split(".")[-2] + "." + r["test"].split(".")[-1] for r in rows
    ]
    width = max((len(n) for n in names), default=4)
    print(f"{'test':<{width}}  result")
    for name, row in zip(names, rows, strict=True):
        print(f"{name:<{width}}  {RESULT[row['status']]}")
    passed = sum(r["status"] == "success" for r in rows)
    failed = sum(r["status"] == "fail" for r in rows)
    print(f"{passed} passed, {failed} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
