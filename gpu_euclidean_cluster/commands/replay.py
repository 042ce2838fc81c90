"""Placeholder for the `replay` sub-command; replaced by its real implementation."""

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("replay", help="(not implemented yet)")
    parser.set_defaults(run=lambda args: 1)
