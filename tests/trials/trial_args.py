"""What every trial script takes: the binary, the test encoders, where to work, where to report."""
import argparse
from pathlib import Path


def trial_parser(doc):
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--embcache", required=True, type=Path)
    p.add_argument("--fixtures", required=True, type=Path, help="the test encoders (ctest's fixtures folder)")
    p.add_argument("--work", type=Path, help="where trials run (a new temporary folder in it; default /tmp)")
    p.add_argument("--json", type=Path, help="write the outcomes here")
    return p
