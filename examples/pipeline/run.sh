#!/bin/sh
# Run the example pipeline from anywhere: broker -> publisher -> Spark (availableNow) -> zeps subscribe.
cd "$(dirname "$0")/../.." || exit 1
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
PYSPARK_PYTHON="${PYSPARK_PYTHON:-$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")}" exec "$PY" -m examples.pipeline.run "$@"
