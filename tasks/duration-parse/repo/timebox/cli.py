"""Command line: ``timebox add DURATION...`` and ``timebox seconds DURATION``."""

import argparse
import sys

from timebox.duration import parse_duration
from timebox.fmt import format_duration


def _duration(text: str) -> int:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="timebox", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser("add", help="add durations and print the total")
    add.add_argument("durations", nargs="+", type=_duration)
    secs = sub.add_parser("seconds", help="print a duration in seconds")
    secs.add_argument("duration", type=_duration)
    return parser


def main(argv: "list[str] | None" = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "add":
        print(format_duration(sum(args.durations)))
    else:
        print(args.duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
