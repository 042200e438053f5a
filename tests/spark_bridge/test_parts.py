"""The bridge's parts without Spark: the XOR acker, the Row envelope, the progress bar."""

from __future__ import annotations

import io
import pickle

from spark_bridge import ProgressBar, Row
from spark_bridge.acker import Tree, edge, edges


def test_a_tree_is_zero_exactly_when_every_edge_was_acked_once_in_any_order():
    first, n = 1_000_001, 500
    tree = Tree(first, edges(first, n), n, "f", 0, 0)
    follow_ups = [9_000_000 + k for k in range(3)]
    for d in follow_ups:  # registered before their parents' confirmations, as the bridge does
        tree.value ^= edge(d)
    acks = [first + i for i in range(n)] + follow_ups
    for d in reversed(acks[1:]):
        tree.value ^= edge(d)
        assert tree.value != 0
    tree.value ^= edge(acks[0])
    assert tree.value == 0
    tree.value ^= edge(acks[0])  # a repeated ack breaks it: the bridge applies first confirmations only
    assert tree.value != 0


def test_vectorized_edges_equal_the_scalar_definition_including_skipped_rows():
    for first, n, skip in [(1, 2_000, set()), (2**63 - 5, 100, {3, 7}), (123_456_789, 50, {0, 49})]:
        slow = 0
        for i in range(n):
            if i not in skip:
                slow ^= edge(first + i)
        assert edges(first, n, skip) == slow
    assert len({edge(d) for d in range(100_000)}) == 100_000


def test_a_row_pickles_positionally_and_builds_its_dict_from_columns():
    row = Row(7, ("/user/a/1", 5), 3, 2, ("destination", "amount"))
    again = pickle.loads(pickle.dumps(row))
    assert again == row and again.body == {"destination": "/user/a/1", "amount": 5}
    assert Row(8, {"x": 1}).body == {"x": 1}


def test_progress_bar_never_goes_backwards_and_ends_the_line():
    out = io.StringIO()
    bar = ProgressBar(1_000, out, "rows processed", width=10)
    bar.update(250)
    bar.update(100)
    bar.close(1_000)
    frames = out.getvalue().split("\r")[1:]
    assert frames[0].startswith("rows processed [##........] 250 / 1,000 (25%)")
    assert frames[1].startswith("rows processed [##........] 250 / 1,000")
    assert frames[-1].startswith("rows processed [##########] 1,000 / 1,000 (100%)") and frames[-1].endswith("\n")


def test_row_chunk_rows_and_row_applied_records_pack_as_their_plain_values():
    # RowApplied is packed from pre-marked values (pack_values_with): the same bytes as its plain fields.
    import msgpack

    from journal.serialization import _by_class, _default, deserialize, serialize
    from persistence.idempotent import AppliedBatch
    from spark_bridge.messages import RowApplied, RowChunk

    chunk = RowChunk(["/a", "/b"], [3, 4], [7, None], [(1, "x"), {"k": 2}], ("n", "s"), 2)
    assert chunk.items() == [("/a", Row(3, (1, "x"), 7, 2, ("n", "s"))), ("/b", Row(4, {"k": 2}, None, 2, ("n", "s")))]
    assert chunk.items()[0][1].body == {"n": 1, "s": "x"}
    pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
    reg = _by_class[RowApplied]
    for follow in ([], [["/user/ledger", (1, 2)], ["/user/x", RowApplied(1, None, [], 1, 1, 0)]], [("/t", 5)]):
        e = RowApplied((9, frozenset({1})), 5, follow, 3, 2, 1)
        plain = [getattr(e, name) for name in reg.field_names]
        assert pack(list(reg.values(e))) == pack(plain)
        assert deserialize(serialize(AppliedBatch(("o",), (1,), (e,)))) == AppliedBatch(("o",), (1,), (e,))


def test_follow_up_columns_round_trip_through_their_stored_runs_and_version_1_reads_back():
    # FollowUpColumns version 2 stores its columns as runs (spark_bridge/messages.py), as TableCommit does.
    import msgpack

    from journal.serialization import _OBJECT_EXT, TUPLE_MARK, _default, deserialize, marked, serialize
    from spark_bridge.messages import FollowUpColumns
    from tests.spark_bridge.sample import LedgerEntry

    n = 2_000
    demo = FollowUpColumns(41, ("/user/ledger",) * n, tuple(LedgerEntry(f"a{k % 1000}", k % 97) for k in range(n)),
                           tuple(range(10**6, 10**6 + n)), ("/system/spark-bridge",) * n, (), (), 40)
    mixed = FollowUpColumns(1, ("/a", "/b", "/a"), (LedgerEntry("x", 1), ("t", 2), "plain"), (5, -1, 9),
                            (None, "/system/spark-bridges/n1", None), ("/o", "/o"), (2**64 - 1, 3), 0)
    empty = FollowUpColumns(0, (), (), (), (), (), (), 0)
    pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
    for columns in (demo, mixed, empty):
        assert deserialize(serialize(columns)) == columns
        v1 = [columns.first, *([TUPLE_MARK, *c] for c in (columns.tos, map(marked, columns.messages), columns.rows,
                                                            columns.bridges, columns.relay_origins, columns.relay_ids)),
              columns.low]
        assert deserialize(pack([_OBJECT_EXT, "spark_bridge.FollowUpColumns", 1, *v1])) == columns
    size, v1_size = len(serialize(demo)), len(pack([_OBJECT_EXT, "spark_bridge.FollowUpColumns", 1, demo.first,
                                                    [TUPLE_MARK, *demo.tos], [TUPLE_MARK, *map(marked, demo.messages)]]))
    assert size * 3 < v1_size, f"{size / n:.1f} bytes a follow-up, version 1 {v1_size / n:.1f}"


def test_batch_stored_round_trips_with_its_paths_as_a_prefix_and_rests_and_version_2_reads_back():
    # BatchStored version 3 stores its paths as their common prefix and each path's rest (spark_bridge/messages.py).
    import msgpack

    from journal.serialization import _OBJECT_EXT, _default, deserialize, serialize
    from spark_bridge.messages import BatchStored, prefixed, unprefixed

    n = 4_000
    accounts = [str(k * 7919 % 10_000) for k in range(n)]
    paths = [f"/user/accounts/{a}" for a in accounts]
    # The demo's rows: the destination column is the paths list itself (the feed's `to` column).
    demo = BatchStored("demo", 1, 7, paths, [list(range(n)), accounts, [k % 97 + 1 for k in range(n)], paths],
                       ("txid", "account", "amount", "destination"), None, 0, [3, 9], 2, "run/12", 1.7e9)
    cases = [demo, BatchStored("f", 0, 0, [], [], None, None, 1, [], 0),
             BatchStored("f", 0, 4, ["/a/1", "/a/2"], [["/a/1", "/a/2"], ["/a/1", "/a/3"], [None, None]],
                         ("to", "almost", "nothing"), None, 3, [], 0),
             BatchStored("f", 0, 5, ["/a/1", "/a/2"], [[1, 2]], ("one",), None, 3, [], 0),
             BatchStored("f", 0, 1, ["/a/x", "/b/y", "/a/x"], [{"v": 1}, ("t", 2), "plain"], None, ["k1", 2, None],
                         5, [], 0, None, 0.0),
             BatchStored("f", 0, 2, ["/same/path"] * 3, [1, 2, 3], None, None, 8, [0], 1, "r/1", 2.5),
             BatchStored("f", 0, 3, ["", "/u/é/ü"], [1, 2], None, None, 9, [], 0)]
    pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
    for batch in cases:
        back = deserialize(serialize(batch))
        assert back == batch and type(back.paths) is list and type(back.values) is list
        v2 = [getattr(batch, name) for name in ("feed_id", "partition", "batch_no", "paths", "values", "columns",
                                                "keys", "first_id", "dead", "duplicates", "attempt", "staged_at")]
        assert deserialize(pack([_OBJECT_EXT, "spark_bridge.BatchStored", 2, *v2])) == batch
    # (written before `attempt` and `staged_at` existed: their defaults)
    assert deserialize(pack([_OBJECT_EXT, "spark_bridge.BatchStored", 2, *v2[:10]])) == BatchStored(
        "f", 0, 3, ["", "/u/é/ü"], [1, 2], None, None, 9, [], 0)
    assert prefixed(["/a/1", "/a/22"]) == ["/a/", ["1", "22"]] and unprefixed(["/a/", ["1", "22"]]) == ["/a/1", "/a/22"]
    assert prefixed(["x", None]) == ["", ["x", None]], "not all strings: stored as they are"  # type: ignore[list-item]
    v2_size = len(pack([_OBJECT_EXT, "spark_bridge.BatchStored", 2, demo.feed_id, demo.partition, demo.batch_no,
                        demo.paths, demo.values]))
    assert len(serialize(demo)) * 3 < v2_size, f"{len(serialize(demo)) / n:.1f} bytes a row, version 2 {v2_size / n:.1f}"


def test_progress_round_trips_with_its_ids_as_differences_and_version_1_reads_back():
    import msgpack

    from journal.serialization import _OBJECT_EXT, _default, deserialize, serialize
    from spark_bridge.messages import Progress

    pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
    confirmed = [*range(10**6, 10**6 + 2_000), 5, 2**63 - 1, 0]
    for progress in (Progress(confirmed, [["/o", 3, 7, 11, "/user/ledger/a1", {"amount": 1}]], [9, 4]),
                     Progress([], [], []), Progress([-3, 2**64 - 1], [], [2**63])):
        back = deserialize(serialize(progress))
        assert back == progress and type(back.confirmed) is list and type(back.abandoned) is list
        v1 = pack([_OBJECT_EXT, "spark_bridge.Progress", 1, progress.confirmed, progress.forwards, progress.abandoned])
        assert deserialize(v1) == progress
    in_order = Progress(list(range(10**6, 10**6 + 2_000)), [], [])
    v1_size = len(pack([_OBJECT_EXT, "spark_bridge.Progress", 1, in_order.confirmed, [], []]))
    assert len(serialize(in_order)) * 4 < v1_size, "about a byte an id confirmed in order, five before"


def test_a_tasks_commit_batch_holds_its_values_in_the_feeds_schema_without_importing_pandas():
    # A Spark task ends by yielding this batch; pyarrow's Python-value conversion would import pandas in every
    # new worker (0.22-0.23 s of CPU each). A fresh interpreter, so that nothing else imported it first.
    import subprocess
    import sys

    script = (
        "import sys, importlib, pyarrow as pa\n"
        "F = importlib.import_module('spark_bridge.feed')\n"
        "b = F.result_batch(3, 'run/17 \\u00fc', 2**40, 5, -1, '/system/spark-bridge')\n"
        "assert 'pandas' not in sys.modules, 'result_batch imported pandas'\n"
        "schema = pa.schema([('partition', pa.int32()), ('attempt', pa.string()), ('rows', pa.int64()),\n"
        "    ('duplicates', pa.int64()), ('dead', pa.int64()), ('bridge', pa.string())])  # feed's _RESULT_COLUMNS\n"
        "want = pa.RecordBatch.from_pydict({'partition': [3], 'attempt': ['run/17 \\u00fc'], 'rows': [2**40],\n"
        "    'duplicates': [5], 'dead': [-1], 'bridge': ['/system/spark-bridge']}, schema=schema)\n"
        "assert b.equals(want), b.to_pylist()\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
