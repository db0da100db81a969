"""The ZEPS + Spark example pipeline: ``python -m examples.pipeline.run`` (see README.md here)."""
