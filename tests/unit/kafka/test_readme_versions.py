"""The README's table of served Kafka API versions says what ApiVersions advertises."""

from __future__ import annotations

import re
from pathlib import Path

from vdl.net.kafka.versions import SASL_ADVERTISED, SERVED_PRODUCE_MIN, ApiKey, advertised

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_lists_every_advertised_api_with_its_versions() -> None:
    text = README.read_text()
    listed = {
        int(key): (int(low), int(high))
        for key, low, high in re.findall(r"\| [A-Za-z]+ \((\d+)\) \| (\d+)\u2013(\d+)", text)
    }
    served = {int(key): versions for key, versions in advertised(sasl=True).items()}
    # Produce is advertised from v0 (clients pick the highest) but served from v3 (the
    # RecordBatch format): the README gives the versions served.
    served[ApiKey.PRODUCE] = (SERVED_PRODUCE_MIN, served[ApiKey.PRODUCE][1])
    assert listed == served
    assert set(SASL_ADVERTISED) <= set(served)
    assert all(int(ApiKey(key)) == key for key in served)
