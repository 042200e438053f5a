"""The journal as a Spark source: batch reads by tag, by id and of everything, and a restarted stream.

Journals are real SQLite files and real PostgreSQL schemas, written directly with write_messages; the
reads run in Spark's Python workers (local[2,3]), which open the journal themselves.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from journal import AtomicWrite, PersistentRepr, open_journal, register_type, unregister_type
from spark_bridge.source import JournalSourceError, event_json, event_struct, parse_options
from tests.spark_bridge.journals import fresh_schema

pytestmark = pytest.mark.timeout(240)

SAMPLE = "tests.spark_bridge.sample"  # registers Deposited (manifest tests.spark_bridge.Deposited)


@pytest.fixture
def pg_url(postgres_url) -> Iterator[str]:
    """A fresh PostgreSQL schema, dropped afterwards."""
    yield from fresh_schema(postgres_url)



@pytest.fixture
def registered(spark) -> None:
    """The source registered with the session (idempotent)."""
    import spark_bridge

    spark_bridge.register(spark)


def write(url: str, pid: str, first: int, events: list[object], tag: str | None = None) -> None:
    """Store `events` of `pid` from sequence nr `first` on, one AtomicWrite each, tagged with `tag` if given."""
    tags = frozenset({tag}) if tag else frozenset()
    with open_journal(url) as j:
        results = j.write_messages([AtomicWrite([PersistentRepr(e, first + i, pid, tags=tags)])
                                    for i, e in enumerate(events)])
    assert results == [None] * len(events)


def fill(url: str) -> None:
    """Three accounts with tagged Deposited events, and an untagged audit id."""
    from tests.spark_bridge.sample import Deposited

    for n, pid in enumerate(["acc-a", "acc-b", "acc-c"]):
        write(url, pid, 1, [Deposited(10 * n + i) for i in range(1, 6)], tag="account")
    write(url, "audit", 1, [("login", n) for n in range(4)])


def load(spark, url: str, **options: str):
    """A batch read of the journal at `url`."""
    reader = spark.read.format("reprise-journal").option("url", url).option("imports", SAMPLE)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_a_tag_reads_as_a_dataframe_split_into_offset_ranges(spark, registered, journal_url) -> None:
    fill(journal_url)
    df = load(spark, journal_url, tag="account", partitions="3")
    assert df.columns == ["offset", "persistence_id", "sequence_nr", "timestamp", "tags", "event"]
    assert [f.dataType.simpleString() for f in df.schema.fields] == [
        "bigint", "string", "bigint", "bigint", "array<string>", "string"]
    parts = df.rdd.glom().collect()
    assert len(parts) == 3 and all(parts), "three non-empty offset ranges (the tagged offsets span 1..15)"
    ranges = [(min(r.offset for r in p), max(r.offset for r in p)) for p in parts]
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:], strict=False)), f"overlapping ranges {ranges}"
    rows = sorted((r for p in parts for r in p), key=lambda r: r.offset)
    assert len(rows) == 15 and len({r.offset for r in rows}) == 15
    assert {r.persistence_id for r in rows} == {"acc-a", "acc-b", "acc-c"}
    assert all(r.tags == ["account"] and r.timestamp > 0 for r in rows)
    b3 = next(r for r in rows if r.persistence_id == "acc-b" and r.sequence_nr == 3)
    assert json.loads(b3.event) == {"@type": "tests.spark_bridge.Deposited", "amount": 13}
    assert spark.createDataFrame(rows).agg({"offset": "max"}).first()[0] == rows[-1].offset


def test_without_a_tag_every_event_and_with_an_id_only_its_events(spark, registered, journal_url) -> None:
    fill(journal_url)
    everything = load(spark, journal_url).collect()
    assert len(everything) == 19 and len({r.offset for r in everything}) == 19
    audit = sorted((r for r in everything if r.persistence_id == "audit"), key=lambda r: r.sequence_nr)
    assert [json.loads(r.event) for r in audit] == [["login", n] for n in range(4)]
    assert all(r.tags == [] for r in audit)

    one = load(spark, journal_url, persistence_id="acc-c", partitions="2")
    assert one.rdd.getNumPartitions() == 2
    got = sorted((r.sequence_nr, json.loads(r.event)["amount"]) for r in one.collect())
    assert got == [(i, 20 + i) for i in range(1, 6)]
    assert load(spark, journal_url, tag="no-such-tag").count() == 0
    assert load(spark, journal_url, persistence_id="nobody").count() == 0


@pytest.mark.parametrize("option", ["tag", "persistence_id", "gap_timeout"])
def test_an_empty_filter_option_is_refused_instead_of_reading_every_event(spark, registered, tmp_path,
                                                                         option: str) -> None:
    # .option("tag", name) with name "" was taken as no tag at all: the read gave every event of every id.
    url = f"sqlite:///{tmp_path}/j.db"
    fill(url)
    with pytest.raises(Exception, match=f'option "{option}" must not be empty'):
        load(spark, url, **{option: ""}).collect()


def test_an_empty_journal_reads_as_an_empty_dataframe(spark, registered, tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/empty.db"
    open_journal(url).close()
    assert load(spark, url, tag="t").count() == 0
    assert load(spark, url).count() == 0


def test_an_event_of_a_type_no_executor_knows_fails_naming_the_imports_option(spark, registered, tmp_path) -> None:
    @dataclass(frozen=True)
    class Unknown:
        """Registered only here, for the write, and unregistered again: no executor ever registers it (a module
        that registered it at import would, once a worker imported it), and its manifest names no importable
        module (a default-form one would be imported on demand, see journal.serialization)."""

        n: int

    register_type(Unknown, manifest="nowhere.test_source.Unknown")
    url = f"sqlite:///{tmp_path}/unknown.db"
    write(url, "p", 1, [Unknown(1)], tag="t")
    unregister_type(Unknown)
    try:
        with pytest.raises(Exception, match='option "imports"') as info:
            load(spark, url, tag="t").collect()
        assert "nowhere.test_source.Unknown" in str(info.value)
    finally:
        unregister_type("nowhere.test_source.Unknown")


@pytest.mark.parametrize(("options", "message"), [
    ({}, 'option "url" is required'),
    ({"url": "mysql://host/db"}, 'option "url": unsupported journal URL'),
    ({"url": "bank.db"}, 'option "url": \'bank.db\' is a file path, not a journal URL: .* give sqlite://bank.db '),
    ({"url": "memory://x"}, 'option "url".*memory://'),
    ({"url": "sqlite:///x.db", "partitions": "0"}, 'option "partitions" must be an integer >= 1'),
    ({"url": "sqlite:///x.db", "partitions": "many"}, 'option "partitions" must be an integer >= 1'),
    ({"url": "sqlite:///x.db", "tag": "t", "persistence_id": "p"}, '"tag" and "persistence_id" exclude'),
    ({"url": "sqlite:///x.db", "gap_timeout": "-1"}, 'option "gap_timeout"'),
])
def test_bad_options_are_refused_naming_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(JournalSourceError, match=message):
        parse_options(options)


def test_a_bad_option_fails_the_spark_read_with_the_same_message(spark, registered) -> None:
    with pytest.raises(Exception, match='option "partitions" must be an integer >= 1'):
        spark.read.format("reprise-journal").option("url", "sqlite:///x.db").option("partitions", "0").load()
    with pytest.raises(Exception, match='option "url" is required'):
        spark.read.format("reprise-journal").load()


def test_event_json_shapes() -> None:
    from tests.spark_bridge.sample import Deposited

    event = {"d": Deposited(3), "t": (1, "x"), "s": frozenset({3, 1}), "b": b"\x00\x01", 7: None, "f": 1.5}
    assert json.loads(event_json(event)) == {
        "d": {"@type": "tests.spark_bridge.Deposited", "amount": 3}, "t": [1, "x"], "s": [1, 3],
        "b": "AAE=", "7": None, "f": 1.5}


def run_stream(spark, url: str, checkpoint: str, seen: list[tuple[int, str, int]], **options: str) -> None:
    """One availableNow run of a stream of the journal at `url` from `checkpoint`, collecting (offset, pid, seq)."""
    def collect(batch, batch_id: int) -> None:
        seen.extend((r.offset, r.persistence_id, r.sequence_nr) for r in batch.collect())

    reader = (spark.readStream.format("reprise-journal").option("url", url).option("imports", SAMPLE)
              .option("partitions", "2"))
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load().writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120), "the availableNow query did not finish within 120 s"
    finally:
        query.stop()


@pytest.mark.parametrize("stream", ["tag", "all events", "persistence_id"])
def test_a_stream_restarted_from_its_checkpoint_loses_and_repeats_nothing(spark, registered, journal_url,
                                                                          tmp_path, stream: str) -> None:
    from tests.spark_bridge.sample import Deposited

    options = {"tag": {"tag": "account"}, "all events": {}, "persistence_id": {"persistence_id": "acc-a"}}[stream]
    seen: list[tuple[int, str, int]] = []
    checkpoint = str(tmp_path / "ckpt")

    def expected() -> list[tuple[int, str, int]]:
        with open_journal(journal_url) as j:
            query = (j.events_by_tag("account") if stream == "tag" else j.all_events() if stream == "all events"
                     else j.events_by_persistence_id("acc-a"))
            with query:
                return [(e.offset, e.persistence_id, e.sequence_nr) for e in query]

    fill(journal_url)
    run_stream(spark, journal_url, checkpoint, seen, **options)
    assert sorted(seen) == expected() and seen
    write(journal_url, "acc-a", 6, [Deposited(100 + i) for i in range(4)], tag="account")
    write(journal_url, "audit", 5, ["untagged"])
    write(journal_url, "acc-d", 1, [Deposited(1)], tag="account")
    run_stream(spark, journal_url, checkpoint, seen, **options)
    assert len(seen) == len(set(seen)), f"repeated events: {sorted(seen)}"
    assert sorted(seen) == expected(), "lost events"
    assert len(seen) == {"tag": 20, "all events": 25, "persistence_id": 9}[stream]
    run_stream(spark, journal_url, checkpoint, seen, **options)  # nothing new: nothing read again
    assert len(seen) == len(set(seen))


def test_a_checkpoint_of_another_kind_of_stream_is_refused(spark, registered, tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/j.db"
    write(url, "p", 1, [1, 2])
    seen: list[tuple[int, str, int]] = []
    run_stream(spark, url, str(tmp_path / "ckpt"), seen)
    with pytest.raises(Exception, match="belongs to a query with other options"):
        run_stream(spark, url, str(tmp_path / "ckpt"), seen, persistence_id="p")


@pytest.mark.postgres
def test_a_micro_batch_waits_for_a_smaller_offset_still_in_flight_on_postgres(spark, registered, pg_url,
                                                                              tmp_path) -> None:
    url = pg_url
    import psycopg

    from journal.api import now_millis
    from journal.records import encode_writes

    # Opened (and its schema created) before the write is held: opening a PostgreSQL journal runs
    # CREATE INDEX IF NOT EXISTS, which waits for every open write transaction on the journal table.
    # So here the executors' own opens wait for the held write too: this test checks the outcome
    # (nothing skipped, nothing overtaken), not which wait gave it.
    j = open_journal(url)
    schema = url.rsplit("schema=", 1)[1]
    batch, _ = encode_writes([AtomicWrite([PersistentRepr("early", 1, "early", tags=frozenset({"t"}))])],
                             now_millis())
    held = psycopg.connect(url.rsplit("?", 1)[0])  # not autocommit: its INSERT draws an offset and stays open
    try:
        ((early,),) = held.execute(
            f"INSERT INTO {schema}.journal (persistence_id, sequence_nr, record, checksum) "
            f"VALUES (%s, %s, %s, %s) RETURNING ordering", batch.rows[0]).fetchall()
        held.execute(f"INSERT INTO {schema}.tags (tag, ordering) VALUES (%s, %s)", ("t", early))
        late = j.write_messages([AtomicWrite([PersistentRepr("late", 1, "late", tags=frozenset({"t"}))])])
        assert late == [None]  # committed now, with a greater offset
        seen: list[tuple[int, str]] = []
        stream = (spark.readStream.format("reprise-journal").option("url", url).option("tag", "t")
                  .option("gap_timeout", "60").load())
        query = (stream.writeStream
                 .foreachBatch(lambda df, _: seen.extend((r.offset, r.event) for r in df.collect()))
                 .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
        try:
            # A negative is shown over a window: while the early write is open, no micro-batch may
            # hand out the later event (the next one would start after it and skip the early one).
            assert not query.awaitTermination(3)
            assert seen == []
            held.commit()
            assert query.awaitTermination(120), "the query did not finish once the early write committed"
        finally:
            query.stop()
    finally:
        held.close()
        j.close()
    assert [o for o, _ in seen] == sorted(o for o, _ in seen) and len(seen) == 2
    assert seen[0] == (early, '"early"') and seen[1][1] == '"late"'


# --- a user schema: columns picked, the event decoded to a struct ----------------------------------


def test_a_schema_with_an_event_struct_decodes_each_event_by_field_name(spark, registered, journal_url) -> None:
    from tests.spark_bridge.sample import Deposited

    write(journal_url, "acc-a", 1, [Deposited(7), Deposited(8)], tag="t")
    df = (spark.read.format("reprise-journal").schema("sequence_nr long, event struct<amount:long>, offset long")
          .option("url", journal_url).option("tag", "t").option("imports", SAMPLE).load())
    assert df.columns == ["sequence_nr", "event", "offset"]
    rows = sorted(df.collect())
    assert [(r.sequence_nr, r.event.amount) for r in rows] == [(1, 7), (2, 8)]
    assert df.selectExpr("sum(event.amount)").first()[0] == 15

    # Dicts, nested structs, arrays from tuples and sets, and maps; fields the struct leaves out are dropped.
    write(journal_url, "orders", 1, [{"id": "o-1", "lines": ({"sku": "x", "qty": 2},), "seen": frozenset({3, 1}),
                                      "prices": {"x": 1.5}, "note": None, "extra": b"\x00"}])
    schema = ("persistence_id string, event struct<id:string, lines:array<struct<sku:string, qty:int>>, "
              "seen:array<long>, prices:map<string,double>, note:string>")
    (order,) = (spark.read.format("reprise-journal").schema(schema).option("url", journal_url)
                .option("persistence_id", "orders").load().collect())
    assert order.event.asDict(recursive=True) == {"id": "o-1", "lines": [{"sku": "x", "qty": 2}], "seen": [1, 3],
                                                  "prices": {"x": 1.5}, "note": None}


def test_an_event_struct_of_every_arrow_type_reads_as_written_and_goes_to_spark_as_arrow_batches(
        spark, registered, tmp_path) -> None:
    from pyspark.sql.types import StructType

    from spark_bridge.source import JournalDataSource

    url = f"sqlite:///{tmp_path}/j.db"
    event = {"f": 1.5, "d": -2.25, "b": b"\x00\xff", "t": -128, "s": 32767, "i": 7, "ok": True, "text": "é",
             "m": {"k": [1, 2]}, "n": None, "rows": [{"x": 1}, {"x": None}]}
    write(url, "kinds", 1, [event])
    schema = ("sequence_nr long, tags array<string>, event struct<f:float, d:double, b:binary, t:tinyint, "
              "s:smallint, i:int, ok:boolean, text:string, m:map<string,array<int>>, n:long, "
              "rows:array<struct<x:long>>>, persistence_id string")
    (row,) = spark.read.format("reprise-journal").schema(schema).option("url", url).load().collect()
    assert (row.sequence_nr, row.tags, row.persistence_id) == (1, [], "kinds")
    assert row.event.asDict(recursive=True) == {**event, "b": bytearray(b"\x00\xff")}

    # The reader hands Spark Arrow record batches (no per-row conversion in its worker).
    reader = JournalDataSource({"url": url}).reader(StructType.fromDDL(schema))
    (batch,) = [b for p in reader.partitions() for b in reader.read(p)]
    assert type(batch).__name__ == "RecordBatch" and batch.num_rows == 1


def test_an_event_struct_with_a_timestamp_and_a_date_reads_as_written(spark, registered, tmp_path) -> None:
    """Rows, not Arrow batches: Spark converts timestamps and dates by its session's rules."""
    import datetime

    from pyspark.sql.types import StructType

    from spark_bridge.source import JournalDataSource
    from tests.spark_bridge.sample import Stamped

    url = f"sqlite:///{tmp_path}/j.db"
    stamped = Stamped(datetime.datetime(2026, 11, 30, 21, 30, 5, 123456), datetime.date(2026, 12, 1))
    write(url, "stamps", 1, [stamped])
    schema = "event struct<at:timestamp, day:date>"
    (row,) = (spark.read.format("reprise-journal").schema(schema).option("url", url).option("imports", SAMPLE)
              .load().collect())
    assert (row.event.at, row.event.day) == (stamped.at, stamped.day)
    reader = JournalDataSource({"url": url, "imports": SAMPLE}).reader(StructType.fromDDL(schema))
    assert [tuple(r) for p in reader.partitions() for r in reader.read(p)] == [((stamped.at, stamped.day),)]


def test_a_datetime_read_as_a_date_fails_instead_of_dropping_its_time(spark, registered, tmp_path) -> None:
    # A datetime is a date to isinstance: a date field took it, and Spark kept its day, silently dropping the time.
    import datetime

    from tests.spark_bridge.sample import Stamped

    url = f"sqlite:///{tmp_path}/j.db"
    write(url, "stamps", 1, [Stamped(datetime.datetime(2026, 11, 30, 23, 30), datetime.date(2026, 12, 1))])
    df = (spark.read.format("reprise-journal").schema("event struct<at:date, day:date>").option("url", url)
          .option("imports", SAMPLE).load())
    with pytest.raises(Exception, match=re.escape("event field 'at': the schema says date, the event has datetime")):
        df.collect()


@pytest.mark.parametrize(("struct", "message"), [
    ("struct<amount:string>", "event field 'amount': the schema says string, the event has int 7"),
    ("struct<amount:long, memo:string>", "event field 'memo': tests.spark_bridge.Deposited has no field 'memo'"),
    ("struct<amount:tinyint>", "event field 'amount': 300 does not fit the schema's tinyint"),
])
def test_an_event_that_does_not_fit_the_struct_fails_naming_field_and_types(spark, registered, tmp_path,
                                                                            struct: str, message: str) -> None:
    from tests.spark_bridge.sample import Deposited

    url = f"sqlite:///{tmp_path}/j.db"
    write(url, "acc", 1, [Deposited(7) if "tinyint" not in struct else Deposited(300)])
    df = (spark.read.format("reprise-journal").schema(f"event {struct}").option("url", url)
          .option("imports", SAMPLE).load())
    with pytest.raises(Exception, match=re.escape(message)) as info:
        df.collect()
    assert "persistence id 'acc', sequence nr 1" in str(info.value) and "read the event as JSON" in str(info.value)


def test_a_number_beyond_the_schemas_float_fails_instead_of_reading_as_infinity(spark, registered, tmp_path) -> None:
    # Arrow turned 1e39 into a float32 infinity: the column read inf where the event held a finite number.
    url = f"sqlite:///{tmp_path}/j.db"
    write(url, "big", 1, [{"x": 1.5, "y": -1e39}])
    df = spark.read.format("reprise-journal").schema("event struct<x:float, y:float>").option("url", url).load()
    with pytest.raises(Exception, match=re.escape("event field 'y': -1e+39 does not fit the schema's float")):
        df.collect()
    assert event_struct({"x": 3.4e38, "y": float("-inf")}, "x float, y float") == (3.4e38, float("-inf"))
    (row,) = spark.read.format("reprise-journal").schema("event struct<x:float, y:double>").option("url", url).load(
        ).collect()
    assert (row.event.x, row.event.y) == (1.5, -1e39)


def test_an_event_whose_dict_keys_collide_as_json_text_fails_instead_of_losing_one(spark, registered,
                                                                                    tmp_path) -> None:
    # {1: ..., "1": ...}: both keys are "1" in JSON; the event column kept one value and dropped the other.
    url = f"sqlite:///{tmp_path}/j.db"
    write(url, "keys", 1, [{"n": {1: "int one", "1": "str one"}}])
    with pytest.raises(Exception, match=re.escape("keys 1 and '1' are both \"1\" in JSON")) as info:
        load(spark, url).collect()
    assert "persistence id 'keys', sequence nr 1" in str(info.value)
    assert event_json({1: "a", (1, 2): "b", None: "c"}) == '{"1":"a","[1, 2]":"b","null":"c"}'


@pytest.mark.parametrize(("schema", "message"), [
    ("offset string", "schema column 'offset' is string, it must be bigint"),
    ("offset long, amount long", "schema column 'amount' is unknown: the columns are offset, persistence_id"),
    ("event int", "schema column 'event' is int: give string (JSON) or a struct"),
    ("event struct<at:interval day>", "event field 'at' is interval day: not supported"),
])
def test_a_schema_that_cannot_be_read_is_refused_before_any_task_runs(spark, registered, tmp_path,
                                                                       schema: str, message: str) -> None:
    with pytest.raises(Exception, match=re.escape(message)):
        (spark.read.format("reprise-journal").schema(schema).option("url", f"sqlite:///{tmp_path}/j.db").load()
         .collect())


def test_event_struct_is_the_decoding_the_source_applies(spark) -> None:  # (Spark parses the DDL strings)
    from tests.spark_bridge.sample import Deposited

    assert event_struct(Deposited(3), "amount long") == (3,)
    assert event_struct({"a": [{"n": 1, "s": "x"}], "b": None}, "a array<struct<n:int, s:string>>, b double") == (
        [(1, "x")], None)
    with pytest.raises(JournalSourceError, match="event field 'a\\[\\].n': the schema says int, the event has str"):
        event_struct({"a": [{"n": "1", "s": "x"}]}, "a array<struct<n:int, s:string>>")
    with pytest.raises(JournalSourceError, match="the schema says struct<n:int>, the event has tuple"):
        event_struct({"a": [(1,)]}, "a array<struct<n:int>>")  # a struct's fields are taken by name only
    with pytest.raises(JournalSourceError, match="event field 'event': the schema says struct<amount:bigint>, "
                                                 "the event has str 'login'"):
        event_struct("login", "amount long")


# --- task attempts: a retried or a second, later attempt reads the same rows -------------------------


def fail_partition_0_first_attempt(marker: str):
    """A mapPartitions function passing rows through that raises in partition 0's first attempt after 2 rows."""
    def passing(rows):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        for n, row in enumerate(rows):
            if n == 2 and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
                open(marker, "w").close()
                raise RuntimeError("injected failure in partition 0's first attempt, after 2 rows")
            yield row
    return passing


@pytest.mark.parametrize("by", ["tag", "all events", "persistence_id"])
def test_a_failed_task_attempt_is_retried_and_its_rows_arrive_once(spark, registered, journal_url, tmp_path,
                                                                   by: str) -> None:
    fill(journal_url)
    write(journal_url, "acc-a", 6, list(range(6, 13)), tag="account")
    options = {"tag": {"tag": "account"}, "all events": {}, "persistence_id": {"persistence_id": "acc-a"}}[by]
    df = load(spark, journal_url, partitions="2", **options)
    marker = str(tmp_path / "failed-once")
    rows = df.rdd.mapPartitions(fail_partition_0_first_attempt(marker)).collect()
    assert os.path.exists(marker), "partition 0's first attempt did not fail: no retry was tested"
    keys = [(r.offset, r.persistence_id, r.sequence_nr) for r in rows]
    assert len(keys) == len(set(keys)) == {"tag": 22, "all events": 26, "persistence_id": 12}[by]
    with open_journal(journal_url) as j:
        assert sorted(keys) == [(e.offset, e.persistence_id, e.sequence_nr) for e in j.all_events()
                                if (by != "tag" or "account" in e.tags)
                                and (by != "persistence_id" or e.persistence_id == "acc-a")]


def read_attempt(reader):
    """A Spark task reading the (attempt, partition) pairs it is given, as an extra attempt of each would."""
    def read(pairs):
        for attempt, index, partition in pairs:
            yield attempt, index, [row for batch in reader.read(partition) for row in rows_of(batch)]
    return read


def rows_of(batch) -> list[tuple]:
    """The rows of what a reader yields: an Arrow record batch (as Spark takes it), or a row."""
    import pyarrow as pa

    if isinstance(batch, pa.RecordBatch):
        return list(zip(*(column.to_pylist() for column in batch.columns), strict=True))
    return [tuple(batch)]


@pytest.mark.parametrize("by", ["tag", "all events", "persistence_id"])
def test_every_attempt_of_a_planned_partition_reads_the_same_rows_while_events_are_written(
        spark, registered, journal_url, by: str) -> None:
    """What a speculative or retried attempt reads: planned once, read twice in executors, in two jobs with
    writes before and while they run (local mode runs no speculative tasks itself: the reads are invoked
    here as Spark would invoke them, in its Python workers)."""
    from pyspark.sql.types import StructType

    from spark_bridge.source import SCHEMA, JournalDataSource
    from tests.spark_bridge.sample import Deposited

    fill(journal_url)
    options = {"tag": {"tag": "account"}, "all events": {}, "persistence_id": {"persistence_id": "acc-b"}}[by]
    source = JournalDataSource({"url": journal_url, "imports": SAMPLE, "partitions": "3", **options})
    reader = source.reader(StructType.fromDDL(SCHEMA))
    parts = reader.partitions()
    assert len(parts) == 3
    write(journal_url, "acc-b", 6, [Deposited(6)], tag="account")  # after planning: in no partition
    tasks = [(attempt, i, p) for attempt in (0, 1) for i, p in enumerate(parts)]
    first = spark.sparkContext.parallelize(tasks[:3], 3).mapPartitions(read_attempt(reader)).collect()
    writer = threading.Thread(target=lambda: [write(journal_url, "acc-e", n, [Deposited(n)], tag="account")
                                              for n in range(1, 6)])
    writer.start()
    try:
        second = spark.sparkContext.parallelize(tasks[3:], 3).mapPartitions(read_attempt(reader)).collect()
    finally:
        writer.join(60)
    assert {i: rows for _, i, rows in first} == {i: rows for _, i, rows in second}
    keys = sorted((r[0], r[1], r[2]) for _, _, rows in first for r in rows)
    assert len(keys) == len(set(keys)) == {"tag": 15, "all events": 19, "persistence_id": 5}[by]
    assert all(seq <= 5 and pid != "acc-e" for _, pid, seq in keys)


def test_the_readme_block_reading_the_journal_runs_as_written(spark, tmp_path, monkeypatch) -> None:
    """Run in this process: its local_session() is the test session's (getOrCreate), so no second JVM."""
    import tempfile
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S)
                if b.startswith("# reading_the_journal.py")]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the block's temporary directories
    exec(compile(block, "README.md (reading_the_journal.py)", "exec"), {"__name__": "reading_the_journal"})


def test_a_micro_batch_whose_task_fails_its_first_attempt_delivers_each_event_once(spark, registered, journal_url,
                                                                                   tmp_path) -> None:
    from tests.spark_bridge.sample import Deposited

    marker = str(tmp_path / "failed-once")
    seen: list[tuple[int, str, int]] = []

    def collect(batch, batch_id: int) -> None:
        rows = batch.rdd.mapPartitions(fail_partition_0_first_attempt(marker)).collect()
        seen.extend((r.offset, r.persistence_id, r.sequence_nr) for r in rows)

    def run() -> None:
        query = (spark.readStream.format("reprise-journal").option("url", journal_url).option("imports", SAMPLE)
                 .option("partitions", "2").load().writeStream.foreachBatch(collect)
                 .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(120), "the availableNow query did not finish within 120 s"
        finally:
            query.stop()

    fill(journal_url)
    run()
    write(journal_url, "acc-b", 6, [Deposited(n) for n in range(6, 12)], tag="account")
    run()
    assert os.path.exists(marker), "no task attempt failed: no retry was tested"
    with open_journal(journal_url) as j:
        assert sorted(seen) == [(e.offset, e.persistence_id, e.sequence_nr) for e in j.all_events()]
    assert len(seen) == 25
