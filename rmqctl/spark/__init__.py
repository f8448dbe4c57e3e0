"""spark: the commitlog as a Spark dataset. From Spark itself:

    import rmqctl.spark
    df = rmqctl.spark.read_commitlog(spark, "/data/broker-a/store", topic="Orders")   # Spark 3.5 and 4
    rmqctl.spark.register(spark)                                                      # Spark 4
    df = spark.read.format("rocketmq").load("/data/broker-a/store")
    cq = spark.read.format("rocketmq.consumequeue").load("/data/broker-a/store")
    cq = rmqctl.spark.read_consumequeue(spark, "/data/broker-a/store")                 # Spark 3.5 and 4

Nothing here imports pyspark until called."""


def register(spark) -> bool:
    """Register the "rocketmq" and "rocketmq.consumequeue" data sources with `spark` (Spark 4; False on
    Spark 3.x)."""
    from rmqctl.spark.consumequeue import register as _register_cq
    from rmqctl.spark.source import register as _register

    return _register(spark) and _register_cq(spark)


def read_commitlog(spark, *paths, **filters):
    """The messages DataFrame of one or more stores (see rmqctl.spark.api.read_commitlog)."""
    from rmqctl.spark.api import read_commitlog as _read

    return _read(spark, *paths, **filters)


def read_consumequeue(spark, *paths, **filters):
    """The consume-queue units of one or more stores (see rmqctl.spark.consumequeue.read_consumequeue)."""
    from rmqctl.spark.consumequeue import read_consumequeue as _read

    return _read(spark, *paths, **filters)
