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
