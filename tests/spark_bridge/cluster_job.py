"""A driver for the standalone cluster, run as a subprocess: `python -m tests.spark_bridge.cluster_job JSON`.

JSON: {"master": "spark://...", "job": "sink" | "source" | "serve", "speculation": true (default) | false,
...job arguments}; "serve" runs the jobs a DriverServer sends (tests/spark_bridge/standalone.py) in turn.
Partition 0's first attempt is a deliberate straggler: it stalls after some rows, so that with speculation on
(low thresholds) the scheduler launches a copy on the other worker's host, or so that a test can kill its
worker. Small socket buffers to and from Python workers let rows reach the writer before the stall. Every
attempt records itself in a marker file `p{partition}-a{attempt}.json` (its working directory names its
worker). Prints `RESULT {json}` last.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[2])
SAMPLE = "tests.spark_bridge.sample"

SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    # A copy is due as soon as half the tasks finished and the straggler ran 1 s (minTaskRuntime), not after
    # 1.5 times the median task's run.
    "spark.speculation.multiplier": "0.01",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.minTaskRuntime": "1s",
    # Off: a stalled task reads no records, and the efficiency check would need a rate to compare.
    "spark.speculation.efficiency.enabled": "false",
    "spark.locality.wait": "0s",
}


def record_attempt(markers: str) -> tuple[int, int]:
    """(partition, attempt number) of the running task, written once to a marker file with its worker's dir."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition, attempt = ctx.partitionId(), ctx.attemptNumber()
    marker = os.path.join(markers, f"p{partition}-a{attempt}.json")
    if not os.path.exists(marker):
        with open(marker + ".tmp", "w") as f:
            json.dump({"cwd": os.getcwd(), "task_attempt_id": ctx.taskAttemptId(), "pid": os.getpid(),
                       "at": time.time()}, f)
        os.replace(marker + ".tmp", marker)
    return partition, attempt


def stall(markers: str, seconds: float) -> None:
    """The straggler waits (bounded) until Spark kills it, or until the speculative copy has started."""
    # The time first, and the marker whole at once (a rename): the copy waits for the marker to exist, and an
    # empty file stamped after that (open, then time.time()) once read later than the copy's own marker.
    stamp = repr(time.time())
    partial = os.path.join(markers, ".straggler-stalled.partial")
    with open(partial, "w") as f:
        f.write(stamp)
    os.replace(partial, os.path.join(markers, "straggler-stalled"))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.1)


_awaited: set[str] = set()  # per Python worker (reused across a DriverServer's jobs): a copy waits once per job


def await_straggler(markers: str, journal: str | None, timeout: float = 60.0) -> None:
    """A later attempt of partition 0 starts only once the straggler stalled and, given the bridge's `journal`,
    once some of the straggler's rows are staged there: the test then has something to discard, whatever the
    timing of the speculative launch."""
    if markers in _awaited:
        return
    deadline = time.monotonic() + timeout
    while not os.path.exists(os.path.join(markers, "straggler-stalled")) and time.monotonic() < deadline:
        time.sleep(0.05)
    if journal is not None:
        from journal import open_journal
        from spark_bridge.bridge import PERSISTENCE_ID
        from spark_bridge.messages import BatchStored

        def straggler_staged() -> bool:
            with open_journal(journal) as j:
                return any(isinstance(r.payload, BatchStored) and r.payload.partition == 0
                           for r in j.replay_messages(PERSISTENCE_ID))
        while not straggler_staged() and time.monotonic() < deadline:
            time.sleep(0.1)
    _awaited.add(markers)


_released: set[str] = set()  # per Python worker: the held partitions that saw their release file


def straggling_amount(markers: str, stall_from: int, seconds: float, journal: str | None, hold: bool = False):
    """A UDF: 1000 in partition 0's first attempt, which stalls at txid `stall_from`; 1 in its other attempts.

    With `hold`, the other partition waits (bounded) for the file `released` in `markers` before its first row:
    no task finishes before the test lets it, so speculation (quantile 0.5) launches no copy meanwhile."""
    def amount(txid):  # (no type hints: pyspark would take them for an Arrow UDF)
        partition, attempt = record_attempt(markers)
        if partition == 0 and attempt == 0:
            if txid >= stall_from:
                stall(markers, seconds)
            return 1000
        if partition == 0:
            await_straggler(markers, journal)
            return 1
        if hold and markers not in _released:
            deadline = time.monotonic() + 90
            while not os.path.exists(os.path.join(markers, "released")) and time.monotonic() < deadline:
                time.sleep(0.05)
            _released.add(markers)
        return 1000
    return amount


def sink_job(spark: Any, job: dict[str, Any]) -> dict[str, Any]:
    """df.write.format("reprise") of `rows` deposits with ack="processed"; partition 0 straggles."""
    from pyspark.sql.functions import col, udf

    from spark_bridge import register

    register(spark)
    # Small batches all along the pipeline: the straggler stages batches before it stalls.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    spark.conf.set("spark.sql.execution.python.udf.buffer.size", "1024")
    amount = udf(straggling_amount(job["markers"], job["stall_from"], job["stall_seconds"], job.get("journal"),
                                   job.get("hold", False)), "long")
    df = spark.range(0, job["rows"], numPartitions=2).selectExpr(
        f"cast(id % {job['accounts']} as int) as account", "id as txid").withColumn("amount", amount(col("txid")))
    started = time.monotonic()
    (df.write.format("reprise").mode("append").option("port", str(job["port"]))
       .option("to", "/user/accounts/a{account}").option("feed_id", job["feed_id"]).option("ack", "processed")
       .option("batch_size", str(job["batch_size"])).save())
    return {"seconds": time.monotonic() - started}


def straggling_reader(markers: str, url: str, stall_after: int, seconds: float):
    """mapPartitions: rows pass through; partition 0's first attempt, after `stall_after` rows, writes new
    tagged events to the journal (after planning: in no partition) and stalls."""
    def passing(rows):
        partition, attempt = record_attempt(markers)
        if partition == 0 and attempt > 0:
            await_straggler(markers, None)  # the late events are written before the copy reads
            with open(os.path.join(markers, f"reading-a{attempt}"), "w") as f:
                f.write(repr(time.time()))
        for n, row in enumerate(rows):
            if n == stall_after and partition == 0 and attempt == 0:
                from journal import AtomicWrite, PersistentRepr, open_journal
                from tests.spark_bridge.sample import Deposited

                with open_journal(url) as j:
                    j.write_messages([AtomicWrite([PersistentRepr(Deposited(i), i, "late", tags=frozenset({"account"}))])
                                      for i in range(1, 6)])
                stall(markers, seconds)
            yield row
    return passing


def source_job(spark: Any, job: dict[str, Any]) -> dict[str, Any]:
    """spark.read.format("reprise-journal") by tag in 2 partitions, collected; partition 0 straggles."""
    from spark_bridge import register

    register(spark)
    df = (spark.read.format("reprise-journal").option("url", job["url"]).option("imports", SAMPLE)
          .option("tag", "account").option("partitions", "2").load())
    started = time.monotonic()
    rows = df.rdd.mapPartitions(straggling_reader(job["markers"], job["url"], job["stall_after"],
                                                  job["stall_seconds"])).collect()
    return {"seconds": time.monotonic() - started,
            "rows": [[r.offset, r.persistence_id, r.sequence_nr] for r in rows]}


def main(argv: list[str]) -> None:
    """Run the job named in the JSON argument on its master; print RESULT and the result as JSON."""
    from spark_bridge import cluster_session
    from tests.spark_bridge.standalone import serve

    job = json.loads(argv[1])
    conf = SPECULATION if job.get("speculation", True) else {}
    # (killTimeout: a killed straggler's Python worker, asleep in stall(), goes at once and frees its core.)
    spark = cluster_session(job["master"], f"reprise-cluster-{job['job']}", import_paths=(ROOT,),
                            **conf, **{"spark.task.maxFailures": "2", "spark.buffer.size": "4096",
                                       "spark.python.task.killTimeout": "100ms"})
    jobs = {"sink": sink_job, "source": source_job}
    try:
        if job["job"] == "serve":  # a DriverServer: jobs one after another in this SparkContext
            serve(Path(job["inbox"]), lambda each: jobs[each["job"]](spark, each))
            return
        result = jobs[job["job"]](spark, job)
    finally:
        spark.stop()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv)
