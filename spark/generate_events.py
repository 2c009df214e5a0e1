"""Produce realistic shop events into a VDL topic, for the Spark pipeline (spark/pipeline.py).

    python spark/generate_events.py --bootstrap 127.0.0.1:9092 --events 20000 --rate 5000

Each event is one JSON object keyed by its user id (so a user's events stay in order in one
partition), e.g.

    {"event_id": "4f1c...", "user_id": "u0042", "type": "add_to_cart", "product": "p017",
     "category": "books", "price": 12.5, "quantity": 2, "event_time": 1763771000123}

``event_time`` is when the event happened on the user's device, in epoch milliseconds. Event
time is simulated: the events are spread evenly over the ``--minutes`` before the generator
started (event i happens ``i * minutes / events`` after the first), however fast they are
produced, so that a run of a few seconds spans enough one-minute windows for the pipeline's
watermark to close some. Devices report late: a fraction of events carry a time up to
``--max-lateness-s`` before that, which is what the pipeline's watermark is for. Sessions follow
a simple funnel (views, some carts, fewer purchases). A fixed ``--seed`` and ``--start-ms``
give the same events every time.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

CATEGORIES = ("books", "music", "garden", "kitchen", "toys", "sports")
PRODUCTS = {
    f"p{i:03d}": (CATEGORIES[i % len(CATEGORIES)], round(3 + (i * 7.31) % 97, 2))
    for i in range(120)
}
# Funnel: after a view, how likely the next step is a cart, then a purchase.
P_CART, P_PURCHASE, P_SEARCH = 0.25, 0.35, 0.15


def events(
    count: int,
    users: int,
    seed: int,
    late_fraction: float,
    max_lateness_ms: int,
    start_ms: int,
    span_ms: int,
) -> Iterator[dict[str, Any]]:
    """``count`` events; event i happens at ``start_ms + i * span_ms // count`` on the simulated
    clock, minus its lateness (up to 500 ms, or up to ``max_lateness_ms`` for late ones)."""
    rng = random.Random(seed)
    carts: dict[str, list[str]] = {}
    for i in range(count):
        user = f"u{rng.randrange(users):04d}"
        now_ms = start_ms + i * span_ms // count
        event_time = now_ms - (
            rng.randrange(max_lateness_ms) if rng.random() < late_fraction else rng.randrange(500)
        )
        cart = carts.setdefault(user, [])
        roll = rng.random()
        if cart and roll < P_PURCHASE * P_CART * 2:
            product = cart.pop()
            kind, quantity = "purchase", rng.randint(1, 3)
        elif roll < P_CART:
            product = rng.choice(list(PRODUCTS))
            cart.append(product)
            kind, quantity = "add_to_cart", rng.randint(1, 3)
        elif roll < P_CART + P_SEARCH:
            product, kind, quantity = "", "search", 0
        else:
            product, kind, quantity = rng.choice(list(PRODUCTS)), "page_view", 0
        category, price = PRODUCTS.get(product, ("", 0.0))
        yield {
            "event_id": str(uuid.UUID(int=rng.getrandbits(128))),
            "user_id": user,
            "type": kind,
            "product": product or None,
            "category": category or None,
            "price": price if product else None,
            "quantity": quantity,
            "event_time": event_time,
        }


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    )[topic]
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def generate(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    partitions: int = 2,
    users: int = 200,
    seed: int = 7,
    rate: float = 0.0,
    late_fraction: float = 0.1,
    max_lateness_s: float = 90.0,
    minutes: float = 10.0,
    start_ms: int | None = None,
) -> int:
    """Produce ``count`` events (idempotent, acks=all); returns how many were acknowledged.

    Event time spans ``minutes`` from ``start_ms`` (default: that long before now)."""
    span_ms = int(minutes * 60_000)
    if start_ms is None:
        start_ms = int(time.time() * 1000) - span_ms
    ensure_topic(bootstrap, topic, partitions)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "partitioner": "murmur2_random",
        }
    )
    failures: list[str] = []
    acked = 0

    def delivered(error: KafkaError | None, _message: Any) -> None:
        nonlocal acked
        if error is not None:
            failures.append(error.str())
        else:
            acked += 1

    started = time.monotonic()
    for i, event in enumerate(
        events(count, users, seed, late_fraction, int(max_lateness_s * 1000), start_ms, span_ms)
    ):
        if rate > 0:
            # Pace against the start, not per event, so a slow poll does not lower the rate.
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        while True:
            try:
                producer.produce(
                    topic,
                    key=event["user_id"].encode(),
                    value=json.dumps(event).encode(),
                    on_delivery=delivered,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("some events were not acknowledged within 60 s")
    if failures:
        raise RuntimeError(f"{len(failures)} events failed: {failures[0]}")
    return acked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="VDL node address(es)")
    parser.add_argument("--topic", default="events")
    parser.add_argument("--events", type=int, default=10_000, help="how many to produce")
    parser.add_argument("--partitions", type=int, default=2, help="if the topic is created")
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--rate", type=float, default=0.0, help="events/s; 0 = as fast as possible")
    parser.add_argument("--late-fraction", type=float, default=0.1)
    parser.add_argument("--max-lateness-s", type=float, default=90.0)
    parser.add_argument(
        "--minutes",
        type=float,
        default=10.0,
        help="simulated event time the events span (default 10: closes windows downstream)",
    )
    parser.add_argument(
        "--start-ms",
        type=int,
        default=None,
        help="event time of the first event, epoch ms (default: --minutes before now)",
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    span_ms = int(args.minutes * 60_000)
    start_ms = args.start_ms if args.start_ms is not None else int(time.time() * 1000) - span_ms
    started = time.monotonic()
    acked = generate(
        args.bootstrap,
        args.topic,
        args.events,
        partitions=args.partitions,
        users=args.users,
        seed=args.seed,
        rate=args.rate,
        late_fraction=args.late_fraction,
        max_lateness_s=args.max_lateness_s,
        minutes=args.minutes,
        start_ms=start_ms,
    )
    elapsed = time.monotonic() - started
    first, last = (
        datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        for ms in (start_ms, start_ms + span_ms)
    )
    print(
        f"produced {acked} events into {args.topic!r} in {elapsed:.1f} s, "
        f"event time {first} to {last} UTC",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
