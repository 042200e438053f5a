"""The journal as a Spark source: batch reads by tag, by id and of everything, and a restarted stream.

Journals are real SQLite files and real PostgreSQL schemas, written directly with write_messages; the
reads run in Spark's Python workers (local[2,3]), which open the journal themselves.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from journal import AtomicWrite, PersistentRepr, open_journal, register_type, unregister_type
from spark_bridge.source import JournalSourceError, event_json, parse_options

pytestmark = pytest.mark.timeout(240)

SAMPLE = "tests.spark_bridge.sample"  # registers Deposited (manifest tests.spark_bridge.Deposited)


def fresh_schema(base: str) -> Iterator[str]:
    """The URL of a new PostgreSQL schema on `base`, dropped afterwards."""
    from journal.postgres import drop_schema

    url = f"{base}{'&' if '?' in base else '?'}schema=src_{uuid.uuid4().hex[:12]}"
    yield url
    drop_schema(url)


@pytest.fixture
def pg_url(postgres_url) -> Iterator[str]:
    """A fresh PostgreSQL schema, dropped afterwards."""
    yield from fresh_schema(postgres_url)


@pytest.fixture(params=["sqlite", "postgresql"])
def journal_url(request, tmp_path) -> Iterator[str]:
    """A fresh, empty journal: a SQLite file, or a PostgreSQL schema dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/journal.db"
        return
    yield from fresh_schema(request.getfixturevalue("postgres_url"))


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


def test_an_empty_journal_reads_as_an_empty_dataframe(spark, registered, tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/empty.db"
    open_journal(url).close()
    assert load(spark, url, tag="t").count() == 0
    assert load(spark, url).count() == 0


@register_type(manifest="tests.spark_bridge.test_source.Unknown")
@dataclass(frozen=True)
class Unknown:
    """A type written here and unregistered again: the executors can never decode it."""

    n: int


def test_an_event_of_a_type_no_executor_knows_fails_naming_the_imports_option(spark, registered, tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/unknown.db"
    write(url, "p", 1, [Unknown(1)], tag="t")
    unregister_type(Unknown)
    try:
        with pytest.raises(Exception, match='option "imports"') as info:
            load(spark, url, tag="t").collect()
        assert "tests.spark_bridge.test_source.Unknown" in str(info.value)
    finally:
        register_type(Unknown, manifest="tests.spark_bridge.test_source.Unknown")


@pytest.mark.parametrize(("options", "message"), [
    ({}, 'option "url" is required'),
    ({"url": "mysql://host/db"}, 'option "url": unsupported journal URL'),
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


def test_a_stream_restarted_from_its_checkpoint_loses_and_repeats_nothing(spark, registered, journal_url,
                                                                          tmp_path) -> None:
    from tests.spark_bridge.sample import Deposited

    seen: list[tuple[int, str, int]] = []

    def collect(batch, batch_id: int) -> None:
        seen.extend((r.offset, r.persistence_id, r.sequence_nr) for r in batch.collect())

    def run() -> None:
        stream = (spark.readStream.format("reprise-journal").option("url", journal_url).option("tag", "account")
                  .option("imports", SAMPLE).option("partitions", "2").load())
        query = (stream.writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(120), "the availableNow query did not finish within 120 s"
        finally:
            query.stop()

    fill(journal_url)
    run()
    assert sorted(k[1:] for k in seen) == [(p, s) for p in ("acc-a", "acc-b", "acc-c") for s in range(1, 6)]
    write(journal_url, "acc-a", 6, [Deposited(100 + i) for i in range(4)], tag="account")
    write(journal_url, "audit", 5, ["untagged"])
    write(journal_url, "acc-d", 1, [Deposited(1)], tag="account")
    run()
    offsets = [k[0] for k in seen]
    assert len(offsets) == len(set(offsets)) == 20, f"lost or repeated events: {sorted(seen)}"
    with open_journal(journal_url) as j, j.events_by_tag("account") as q:
        assert sorted(offsets) == [e.offset for e in q]
    run()  # nothing new: nothing read again
    assert len(seen) == 20


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


def test_a_stream_needs_a_tag(spark, registered, tmp_path) -> None:
    query = (spark.readStream.format("reprise-journal").option("url", f"sqlite:///{tmp_path}/j.db").load()
             .writeStream.format("noop").start())
    try:
        with pytest.raises(Exception, match='readStream needs option "tag"'):
            query.awaitTermination(60)
    finally:
        query.stop()
