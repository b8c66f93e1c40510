#!/usr/bin/env python3
"""Runs every integration test module (tests/integration/test_*.py) against a build directory."""
import argparse
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser()
parser.add_argument("--build-dir", required=True)
parser.add_argument("pattern", nargs="?", default="test_*.py")
parser.add_argument("-k", dest="keyword", default=None, help="only tests whose name contains this")
args = parser.parse_args()
os.environ["RATEGATE_BUILD_DIR"] = os.path.abspath(args.build_dir)
sys.path.insert(0, here)
suite = unittest.defaultTestLoader.discover(here, pattern=args.pattern)
if args.keyword:
    def flatten(s):
        for t in s:
            if isinstance(t, unittest.TestSuite):
                yield from flatten(t)
            else:
                yield t
    suite = unittest.TestSuite(t for t in flatten(suite) if args.keyword in t.id())
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() and result.testsRun > 0 else 1)
