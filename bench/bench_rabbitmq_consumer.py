"""Benchmark RabbitMQ consumer mode against the same task on the same broker without Relay.

Usage: ``python bench/bench_rabbitmq_consumer.py [-n N] [--url AMQP_URL]``.

One run at a time, end to end (published, delivered, executed, acknowledged), so the figure is
the latency each run pays:

* **raw**: pika alone. A confirmed, persistent publish to a quorum queue (single active consumer,
  the same arguments as a Relay run queue); a consumer on another connection with a prefetch of 1
  calls the task and acks.
* **relay**: what a beat and a worker do in consumer mode. Win the run's gate queue (declare it,
  a confirmed publish), publish the run to its job's run queue (confirmed), and Relay's
  consumers deliver it through the core's runner (token and attempt from the delivery), call
  the task and ack.

Prints seconds per run for each and the ratio relay / raw (above 1: Relay is slower). Every
queue it declares has a unique prefix and is deleted at the end.
"""

from __future__ import annotations

import argparse
import secrets
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pika

from relay.backends import open_backend
from relay.backends.rabbitmq_consumer import RabbitMQConsumerBackend
from relay.consumer_mode.consumers import ConsumerDispatcher
from relay.jobs import make_job
from relay.runs import Run, run_id

UTC = timezone.utc
JOB = "bench"


def raw(url: str, queue: str, arguments: dict[str, Any], n: int) -> float:
    """Seconds per run with pika alone."""
    done = threading.Event()
    ready = threading.Event()
    stop = threading.Event()

    def consume() -> None:
        connection = pika.BlockingConnection(pika.URLParameters(url))
        channel = connection.channel()
        channel.basic_qos(prefetch_count=1)

        def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
            task()
            ch.basic_ack(method.delivery_tag)
            done.set()

        channel.basic_consume(queue, on_message)
        ready.set()
        while not stop.is_set():
            connection.process_data_events(time_limit=0.05)
        connection.close()

    publisher = pika.BlockingConnection(pika.URLParameters(url))
    channel = publisher.channel()
    channel.queue_declare(queue, durable=True, arguments=arguments)
    channel.confirm_delivery()
    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    ready.wait(30)
    properties = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
    start = time.perf_counter()
    for i in range(n):
        done.clear()
        channel.basic_publish("", queue, f"run {i}".encode(), properties, mandatory=True)
        done.wait(30)
    elapsed = time.perf_counter() - start
    stop.set()
    thread.join(10)
    channel.queue_delete(queue)
    publisher.close()
    return elapsed / n


def relay(url: str, n: int, gates: list[str]) -> tuple[float, float, float]:
    """Seconds per run in consumer mode, of which winning the gate and publishing the run (the
    window a beat's crash loses the run in); the gate queues it creates go to ``gates``."""
    backend = open_backend(url)
    assert isinstance(backend, RabbitMQConsumerBackend)
    done = threading.Event()

    def handler(run: Run) -> None:
        task()
        done.set()

    job = make_job(backend, name=JOB, every=1, handler=handler)
    ConsumerDispatcher(backend).serve([job], "bench")
    assert backend.wait_subscribed(30)
    first = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=n + 10)
    claiming = publishing = 0.0
    start = time.perf_counter()
    for i in range(n):
        slot = first + timedelta(seconds=i)
        done.clear()
        began = time.perf_counter()
        assert backend.claim(JOB, slot)
        won = time.perf_counter()
        backend.publish(Run(run_id(JOB, slot), JOB, slot, 1, 0, "bench"), None, 3)
        claiming, publishing = claiming + won - began, publishing + time.perf_counter() - won
        done.wait(30)
        gates.append(backend.gate.gates.queue(JOB, slot))
    elapsed = time.perf_counter() - start
    backend.close()
    return elapsed / n, claiming / n, publishing / n


def task() -> None:
    """The task both sides run: nothing, so the figures are the machinery's."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=300, help="runs per side (default 300)")
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    args = parser.parse_args()
    prefix = f"relay_bench_{secrets.token_hex(4)}"
    url = f"{args.url}?mode=consumer&prefix={prefix}&retention=600"
    probe = open_backend(url)
    assert isinstance(probe, RabbitMQConsumerBackend)
    arguments = probe.queues.arguments("raw")
    probe.close()
    gates: list[str] = []
    try:
        raw_s = raw(args.url, f"{prefix}.raw", arguments, args.n)
        relay_s, claim_s, publish_s = relay(url, args.n, gates)
    finally:
        connection = pika.BlockingConnection(pika.URLParameters(args.url))
        channel = connection.channel()
        for name in (f"{prefix}.run.{JOB}", f"{prefix}.dead.{JOB}", *gates):
            channel.queue_delete(name)
        connection.close()
    print(f"RabbitMQ consumer mode, {args.n} runs one at a time, end to end")
    print(f"  raw pika (publish, consume, ack)   {raw_s * 1e3:8.2f} ms/run")
    print(f"  relay (gate, publish, run, ack)    {relay_s * 1e3:8.2f} ms/run")
    print(f"    of which: win the gate           {claim_s * 1e3:8.2f} ms/run")
    print(f"    of which: publish the run        {publish_s * 1e3:8.2f} ms/run (lost-run window)")
    print(f"  ratio relay / raw                  {relay_s / raw_s:8.2f}")


if __name__ == "__main__":
    main()
