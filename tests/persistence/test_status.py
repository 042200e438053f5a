"""`System.status()` counts the deliveries an AtLeastOnceDelivery actor has not seen confirmed."""

from __future__ import annotations

from tests.persistence.fixtures import Produce, Producer
from tests.waiting import wait_for


def unconfirmed(system, path):
    return system.status().hosts[path].counters.get("unconfirmed")


def test_status_reports_unconfirmed_deliveries(psystem):
    psystem.spawn(Producer, path="/user/producer")
    psystem.tell("/user/producer", Produce(5, "/user/nobody-serves-this"))

    wait_for(lambda: unconfirmed(psystem, "/user/producer") == 5, 30)
    assert psystem.status().hosts["/user/producer"].alive == 1
