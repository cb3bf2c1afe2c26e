"""``python -m ctxgc recall ID --session S [--lines A-B | --pattern REGEX] [--store LOCATION]``

Prints a stored original (whole, a line range, or the lines matching a pattern), as the
``ctxgc recall`` command does: the way back to an original for an agent whose only tool is a
shell (mini-swe-agent), from the Python environment ctxgc is installed in.
"""

from __future__ import annotations

import argparse
import sys

from . import CtxgcError, Store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctxgc", description=__doc__.split("\n\n")[1])
    commands = parser.add_subparsers(dest="command", required=True)
    recall = commands.add_parser("recall", help="print a stored original")
    recall.add_argument("id", help="the recall id a trim marker names (r-…)")
    recall.add_argument("--session", required=True, help="the session the original belongs to")
    recall.add_argument("--lines", help="a 1-based line range, as 40-80")
    recall.add_argument("--pattern", help="a regular expression: the lines matching it")
    recall.add_argument(
        "--store",
        default=None,
        help="a SQLite path or redis:// URL "
        "(default: $CTXGC_STORE, else the file `ctxgc serve` uses)",
    )
    args = parser.parse_args(argv)
    from .integrations._common import store_from_env

    try:
        store: Store = store_from_env(args.store)
        sys.stdout.write(
            store.recall(args.id, lines=args.lines, pattern=args.pattern, session=args.session)
        )
    except CtxgcError as exc:
        print(f"ctxgc recall: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
