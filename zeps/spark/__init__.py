"""ZEPS for Apache Spark: the PySpark (>= 4.0) Python Data Source ``"zeps"``.

::

    from zeps.spark import register
    register(spark)                                   # or spark.dataSource.register(ZepsDataSource)

    df = (spark.read.format("zeps")
          .option("path", "/var/lib/zeps")            # a journal data directory ...
          # .option("endpoint", "tcp://broker:7470")  # ... or a running broker
          .option("stream", "orders")
          .option("pattern", "eu.")                   # key prefix, or ~regex
          .load())
    # columns: stream string, sequence bigint, key string, body binary, timestamp timestamp

    (df.select("key", "body").write.format("zeps")
       .option("endpoint", "tcp://broker:7470").option("stream", "copy").mode("append").save())

Options (case-insensitive): path, endpoint, stream, pattern, startingSequence, endingSequence,
startingTime, endingTime, maxRecordsPerTrigger, bodyFormat (binary|utf8|json|msgpack),
bodySchema, verifyCrc, maxRecordsPerPartition, timeout. See docs/spark.md.
"""
from .options import OPTION_NAMES, ZepsSparkError
from .source import (ZepsBatchReader, ZepsDataSource, ZepsFilteringBatchReader, ZepsStreamReader,
                     ZepsStreamWriter, ZepsWriter, base_schema)

__all__ = ["ZepsDataSource", "ZepsSparkError", "register", "OPTION_NAMES", "base_schema",
           "ZepsBatchReader", "ZepsFilteringBatchReader", "ZepsStreamReader", "ZepsWriter",
           "ZepsStreamWriter"]


def register(spark, *, filter_pushdown: bool = False) -> None:
    """Register the ``zeps`` data source in ``spark``.

    ``filter_pushdown=True`` also sets ``spark.sql.python.filterPushdown.enabled=true`` for the
    session, so that ``sequence`` comparisons and ``key`` equality / IN / prefix filters are
    pushed into the reader. It is off by default because PySpark 4.3 reuses the planning of a
    pushed-down query for a later *unfiltered* query on the same DataFrame object
    (``df.filter("x = 3").count(); df.count()`` then counts only x = 3, with any Python data
    source; see docs/spark.md). With it on, build a fresh DataFrame per query.

    On a local master, the data source's Python workers run this interpreter unless
    ``PYSPARK_PYTHON`` names another, which must then be able to import zeps: if it cannot,
    this raises :class:`ZepsSparkError` saying what to set (``zeps.spark.workers``)."""
    import os

    from .workers import PYSPARK_DEFAULT, worker_python
    try:
        sc = spark.sparkContext            # absent from a Spark Connect session
    except Exception:
        sc = None
    if sc is None or not hasattr(sc, "pythonExec"):
        spark.dataSource.register(ZepsDataSource)
    else:
        configured = sc.pythonExec
        exe = worker_python(configured, sc.master, env_set=(
            configured != PYSPARK_DEFAULT or os.environ.get("PYSPARK_PYTHON") == PYSPARK_DEFAULT))
        sc.pythonExec = exe                # PySpark reads it when it wraps the data source
        try:
            spark.dataSource.register(ZepsDataSource)
        finally:
            sc.pythonExec = configured
    if filter_pushdown:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
