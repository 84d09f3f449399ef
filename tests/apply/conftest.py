"""Fixtures for the apply pipeline's tests: the dev eval set and a small sample file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DEV_SET = Path(__file__).resolve().parents[2] / "bench" / "data" / "dev.jsonl"

SHAPES_PY = '''import os
import sys


class Shape:
    """A rectangle."""

    def __init__(self, w, h):
        self.w = w
        self.h = h

    def area(self):
        return self.w * self.h

    def perimeter(self):
        return 2 * (self.w + self.h)


def main(argv):
    s = Shape(1, 2)
    print(s.area())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''

SERVER_GO = '''package server

import (
\t"fmt"
\t"net/http"
)

// Server answers requests.
type Server struct {
\tAddr string
\tName string
}

// Start listens on Addr.
func (s *Server) Start() error {
\tfmt.Println("starting", s.Name)
\treturn http.ListenAndServe(s.Addr, nil)
}

// Stop is a no-op for now.
func (s *Server) Stop() error {
\treturn nil
}
'''


@pytest.fixture(scope="session")
def dev_cases() -> list[dict]:
    if not DEV_SET.exists():
        pytest.skip(f"{DEV_SET} is missing")
    return [json.loads(line) for line in DEV_SET.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture
def shapes_py() -> str:
    return SHAPES_PY


@pytest.fixture
def server_go() -> str:
    return SERVER_GO
