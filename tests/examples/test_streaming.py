"""examples/streaming.py at small scale: a rate stream and a file stream fed into accounts, balances exact."""

from __future__ import annotations

import itertools
import re

import pytest

from actors.system import tagged_pids
from examples import streaming
from tests.conftest import SESSION_TOKEN

pytestmark = [pytest.mark.spark, pytest.mark.multiproc, pytest.mark.timeout(180)]
_n = itertools.count(1)


@pytest.mark.parametrize("source", ["rate", "files"])
def test_stream_into_accounts_ends_with_spark_sums(spark, source, capsys):
    tag = f"{SESSION_TOKEN}-streaming-{next(_n)}-"
    assert streaming.run(spark, rows=3_000, accounts=40, rows_per_batch=1_000, source=source, tag=tag) == 0
    out = capsys.readouterr().out
    # A rate stream may read a batch more before it is stopped; only rows 0..2999 are deposits.
    read = int(re.search(r"rows read +([\d,]+)", out).group(1).replace(",", ""))
    assert read == 3_000 if source == "files" else read >= 3_000
    assert "balances checked   40, mismatches 0" in out and "dead letters       0" in out
    assert "OK: every balance equals Spark's own sum" in out
    assert tagged_pids(tag) == []
