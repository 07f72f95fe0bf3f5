"""Command line: ``logscan FILE... [--level L] [--source S] [--grep TEXT] [--count]``."""

import argparse
import sys
from collections.abc import Iterator
from typing import TextIO

from logscan import filters
from logscan.records import LEVELS, Record, parse_line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logscan", description="Filter application logs.")
    parser.add_argument("files", nargs="+", help="log files, read in the order given")
    parser.add_argument("--level", choices=LEVELS, help="minimum level to show")
    parser.add_argument("--source", action="append", help="only this source (repeatable)")
    parser.add_argument("--grep", help="only messages containing TEXT (case-insensitive)")
    parser.add_argument("--count", action="store_true", help="print only the number of matches")
    parser.add_argument("--strict", action="store_true", help="fail on lines that do not parse")
    return parser


class BadLine(Exception):
    pass


def read_records(paths: list[str], strict: bool) -> Iterator[Record]:
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                record = parse_line(line)
                if record is None:
                    if strict:
                        raise BadLine(f"{path}:{number}: not a log line")
                    continue
                yield record


def main(
    argv: "list[str] | None" = None, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr
) -> int:
    args = build_parser().parse_args(argv)
    predicates = []
    if args.level:
        predicates.append(filters.min_level(args.level))
    if args.source:
        predicates.append(filters.source_is(args.source))
    if args.grep:
        predicates.append(filters.contains(args.grep))
    try:
        matches = filters.select(read_records(args.files, args.strict), predicates)
        if args.count:
            print(sum(1 for _ in matches), file=stdout)
            return 0
        for record in matches:
            print(record.format(), file=stdout)
    except BadLine as exc:
        print(f"logscan: {exc}", file=stderr)
        return 1
    except OSError as exc:
        print(f"logscan: {exc.filename}: {exc.strerror}", file=stderr)
        return 1
    return 0
