"""The metrics endpoint scraped around Spark feeds: the bridge counts the rows it took in, delivered and has unconfirmed."""

from __future__ import annotations

import threading

import pytest

from actors.system import free_port
from spark_bridge import feed, start_bridge
from spark_bridge.bridge import BRIDGE_PATH
from tests.actors.test_metrics import sample, scrape
from tests.spark_bridge.sample import Account, Deaf
from tests.spark_bridge.test_feed import deposits, expected_sums, settled, sums
from tests.waiting import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]

ROWS = 3_000


def test_scrapes_during_a_feed_count_its_rows(spark, make_system, tmp_path):
    port = free_port()
    system = make_system("multiproc", metrics_port=port, journal=f"sqlite:///{tmp_path}/journal.db",
                         snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Account, path="/user/accounts", entities=True)
    system.spawn(Deaf, path="/user/deaf", entities=True)
    start_bridge(system)
    df = deposits(spark, ROWS, accounts=50).cache()
    expected = expected_sums(df)
    rows_seen: list[float] = []
    done = threading.Event()

    def scrape_meanwhile() -> None:
        while not done.wait(0.2):
            rows = sample(scrape(port), "reprise_deliveries_total", host=BRIDGE_PATH)
            if rows is not None:  # (absent when the bridge was too busy to answer the status in time)
                rows_seen.append(rows)

    scraper = threading.Thread(target=scrape_meanwhile, daemon=True)
    scraper.start()
    try:
        result = feed(df, system=system.admin_port, to="destination", feed_id="metrics", timeout=120.0)
    finally:
        done.set()
        scraper.join(15)
    assert result.rows == ROWS
    assert sums(settled(system, expected)) == expected
    assert rows_seen == sorted(rows_seen)  # a counter: it only grows (how many scrapes answered depends on load)
    final = scrape(port)
    assert sample(final, "reprise_deliveries_total", host=BRIDGE_PATH) == ROWS
    assert sample(final, "reprise_actor_stat", host=BRIDGE_PATH, stat="feed_rows") == ROWS  # rows taken in
    assert sample(final, "reprise_host_messages_in_total", host="/user/accounts") >= ROWS
    assert (sample(final, "reprise_journal_write_seconds_count", host=BRIDGE_PATH) or 0) >= 1

    # A feed still delivering: destinations that never confirm keep its rows unconfirmed at the bridge, so the
    # scrapes taken while it lasts are deterministic (no race with a fast feed on an idle machine).
    feed(df, system=system.admin_port, to="/user/deaf/{account}", feed_id="unconfirmed", ack="persisted")

    def delivering():
        got = scrape(port)
        unconfirmed = sample(got, "reprise_unconfirmed_deliveries", host=BRIDGE_PATH)
        return got if unconfirmed == ROWS else None

    during = wait_for(delivering, timeout=60, interval=0.3)
    assert sample(during, "reprise_actor_stat", host=BRIDGE_PATH, stat="feed_rows") == 2 * ROWS
    assert sample(during, "reprise_deliveries_total", host=BRIDGE_PATH) >= 2 * ROWS
