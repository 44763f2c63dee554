"""Zero-copy publish/subscribe for Coorp: in-process, same machine, network.

One API whatever the peer's location::

    from coorp.transport import Bus, Topic, QueuePolicy
    frames = Topic(name="camera/front", type=np.ndarray, max_payload=16 << 20)
    with Bus("robot") as bus:
        pub = bus.publisher(frames)
        with pub.loan_array((480, 640, 3), np.uint8) as loan:   # fill shared memory
            camera.read_into(loan.array)
        sub = bus.subscriber(frames, depth=2, deadline=0.033, on_deadline_miss=print)
        with sub.receive(timeout=1.0) as msg:                   # read-only numpy view
            use(msg.value)

See ``docs/transport.md`` for lifetimes, policies and the benchmark.
"""

from coorp.transport._bus import Bus
from coorp.transport._codec import OOB_THRESHOLD
from coorp.transport._deadline import DeadlineMiss, DeadlineMonitor
from coorp.transport._errors import (
    BorrowLimitError,
    DeliveryTimeoutError,
    MalformedFrameError,
    MissingDependencyError,
    PayloadTooLargeError,
    TopicTypeMismatchError,
    TransportClosedError,
    UnsupportedPayloadError,
)
from coorp.transport._machine import iceoryx2_available
from coorp.transport._message import Message
from coorp.transport._network import FrameSink, NetworkTransport
from coorp.transport._options import DeadlineMissKind, QueuePolicy, Reach, Wake
from coorp.transport._publisher import Loan, Publisher, PublisherStats
from coorp.transport._subscriber import Subscriber, SubscriberStats
from coorp.transport._tcp import TcpTransport
from coorp.transport._topic import Topic

__all__ = [
    "OOB_THRESHOLD",
    "BorrowLimitError",
    "Bus",
    "DeadlineMiss",
    "DeadlineMissKind",
    "DeadlineMonitor",
    "DeliveryTimeoutError",
    "FrameSink",
    "Loan",
    "MalformedFrameError",
    "Message",
    "MissingDependencyError",
    "NetworkTransport",
    "PayloadTooLargeError",
    "Publisher",
    "PublisherStats",
    "QueuePolicy",
    "Reach",
    "Subscriber",
    "SubscriberStats",
    "TcpTransport",
    "Topic",
    "TopicTypeMismatchError",
    "TransportClosedError",
    "UnsupportedPayloadError",
    "Wake",
    "iceoryx2_available",
]
