"""The AMQP channel both RabbitMQ backends share: reused while open, remade when not, confirming."""

from __future__ import annotations

import pika
import pytest
from pika.exceptions import UnroutableError

from relay.backends._amqp import close_quietly, confirm_channel
from tests.support.backends import unique
from tests.support.services import SERVICES

pytestmark = pytest.mark.rabbitmq


@pytest.fixture
def parameters() -> pika.URLParameters:
    return pika.URLParameters(SERVICES["rabbitmq"].url)


def test_an_open_channel_is_kept_and_a_closed_one_remade(parameters: pika.URLParameters) -> None:
    connection, channel = confirm_channel(None, None, parameters)
    try:
        assert confirm_channel(connection, channel, parameters) == (connection, channel)
        channel.close()
        again, fresh = confirm_channel(connection, channel, parameters)
        assert again is connection  # only the channel was closed
        assert fresh is not channel and fresh.is_open
    finally:
        close_quietly(connection)


def test_a_closed_connection_is_remade_with_a_new_channel(parameters: pika.URLParameters) -> None:
    connection, channel = confirm_channel(None, None, parameters)
    close_quietly(connection)
    close_quietly(connection)  # closing twice is no error
    again, fresh = confirm_channel(connection, channel, parameters)
    try:
        assert again is not connection and again.is_open
        assert fresh is not channel and fresh.is_open
    finally:
        close_quietly(again)


def test_the_channel_confirms_publishes(parameters: pika.URLParameters) -> None:
    connection, channel = confirm_channel(None, None, parameters)
    try:
        # Only a channel in confirm mode hears that a mandatory publish reached no queue.
        with pytest.raises(UnroutableError):
            channel.basic_publish("", unique("relay_no_such_queue"), b"x", mandatory=True)
    finally:
        close_quietly(connection)
