"""Same-machine transport on iceoryx2: loaned samples, zero-copy views, event wake-ups.

One iceoryx2 *node* per :class:`~coorp.transport.Bus`; per topic one publish-subscribe
service (payload: a slice of bytes holding one :mod:`frame <coorp.transport._frame>`) and
one event service with the same name, used to wake blocked subscribers: publishers notify
after every send, subscribers wait on a WaitSet (no busy polling).

The service carries attributes ``coorp.type`` and ``coorp.policy``; opening a topic that
another process declared with another type or queue policy fails with a clear error
instead of decoding garbage. Dead processes are detected by iceoryx2's node liveness and
their samples and ports reclaimed by :meth:`ShmNode.cleanup_dead`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import warnings
from typing import Any

from coorp._errors import ConfigurationError, InvariantError, UsageError
from coorp.transport._errors import (
    BorrowLimitError,
    MissingDependencyError,
    TopicTypeMismatchError,
)
from coorp.transport._machine._wake import (
    Waiter,
    WakeSegment,
    acquire,
    futex_supported,
    release,
    sweep_stale,
)
from coorp.transport._message import SampleOwner
from coorp.transport._options import QueuePolicy, Wake
from coorp.transport._topic import Topic

__all__ = ["ShmInlet", "ShmNode", "ShmOutlet", "iceoryx2_available"]
_noticed = False
_swept = False


def _notice(reason: str) -> None:
    """Say once per process that subscribers fall back to iceoryx2's event."""
    global _noticed
    if not _noticed:
        _noticed = True
        warnings.warn(
            f"coorp.transport: {reason}; subscribers sleep on iceoryx2's event instead "
            f"(one notification per subscriber, slower broadcasts)",
            RuntimeWarning,
            stacklevel=4,
        )


_PREFIX = "coorp/"
_INITIAL_SLICE = 1 << 16


def _iox() -> Any:
    try:
        import iceoryx2
    except ImportError:
        raise MissingDependencyError(
            "iceoryx2", "transport", "the shared-memory transport"
        ) from None
    return iceoryx2


def iceoryx2_available() -> bool:
    """Whether the iceoryx2 package can be imported."""
    try:
        _iox()
    except MissingDependencyError:
        return False
    return True


class _Services:
    __slots__ = ("event", "pubsub", "wake")

    def __init__(self, pubsub: Any, event: Any, wake: WakeSegment | None) -> None:
        self.pubsub = pubsub
        self.event = event
        #: The topic's futex wake word (``None``: iceoryx2's event only).
        self.wake = wake


class ShmNode:
    """The iceoryx2 node of one bus and the services it opened."""

    def __init__(self, name: str, wake: Wake | str = Wake.AUTO) -> None:
        wake = Wake.parse(wake)
        reason = futex_supported()
        if reason is not None:
            if wake is Wake.FUTEX:
                raise ConfigurationError(f"Bus(wake=Wake.FUTEX) is not possible here: {reason}")
            if wake is Wake.AUTO:
                _notice(reason)
        #: Publishers wake futex waiters whenever the platform allows (whatever ``wake``
        #: says), so subscribers of both kinds can share a topic.
        self.futex = reason is None
        #: Whether this node's subscribers sleep on the futex word.
        self.futex_waits = self.futex and wake is not Wake.ICEORYX2
        global _swept
        if self.futex and not _swept:
            _swept = True
            sweep_stale()  # files of crashed runs, once per process
        iox = _iox()
        self.iox = iox
        iox.set_log_level(iox.LogLevel.Error)
        try:
            builder = iox.NodeBuilder.new().name(iox.NodeName.new(name[:100]))
            # Python owns SIGINT/SIGTERM; iceoryx2 must not swallow them.
            builder = builder.signal_handling_mode(iox.SignalHandlingMode.Disabled)
            self.node = builder.create(iox.ServiceType.Ipc)
        except Exception as exc:
            raise ConfigurationError(f"cannot create an iceoryx2 node: {exc}") from exc
        self._services: dict[str, _Services] = {}

    def services(self, topic: Topic) -> _Services:
        found = self._services.get(topic.name)
        if found is None:
            found = self._services[topic.name] = self._open(topic)
        return found

    def _open(self, topic: Topic) -> _Services:
        iox = self.iox
        name = iox.ServiceName.new(_PREFIX + topic.name)
        builder = (
            self.node.service_builder(name)
            .publish_subscribe(iox.Slice[ctypes.c_uint8])
            .payload_alignment(iox.Alignment.new(64))
            .max_publishers(topic.max_publishers)
            .max_subscribers(topic.max_subscribers)
            .subscriber_max_buffer_size(topic.max_depth)
            .subscriber_max_borrowed_samples(topic.max_borrowed)
            .history_size(0)
            .enable_safe_overflow(topic.policy is QueuePolicy.KEEP_LAST)
        )
        verifier = (
            iox.AttributeVerifier.new()
            .require(iox.AttributeKey.new("coorp.type"), iox.AttributeValue.new(_tid(topic)))
            .require(
                iox.AttributeKey.new("coorp.policy"), iox.AttributeValue.new(topic.policy.value)
            )
        )
        try:
            pubsub = builder.open_or_create_with_attributes(verifier)
        except Exception as exc:
            self._explain_open_failure(topic, exc)
        try:
            event = self.node.service_builder(name).event().open_or_create()
        except Exception as exc:
            raise ConfigurationError(f"cannot open event service of {topic.name!r}: {exc}") from exc
        wake = None
        if self.futex:
            try:
                wake = acquire(topic.name)
            except OSError as exc:  # TimeoutError included
                _notice(f"no futex wake word for {topic.name!r} ({exc})")
        return _Services(pubsub, event, wake)

    def _explain_open_failure(self, topic: Topic, exc: Exception) -> None:
        iox = self.iox
        name = iox.ServiceName.new(_PREFIX + topic.name)
        try:
            existing = (
                self.node.service_builder(name).publish_subscribe(iox.Slice[ctypes.c_uint8]).open()
            )
            attrs = {a.key.to_string(): a.value.to_string() for a in existing.attributes.values}
        except Exception:
            attrs = {}
        found_type = attrs.get("coorp.type")
        if found_type is not None and found_type != _tid(topic):
            raise TopicTypeMismatchError(
                topic.name, topic.type_name, f"type id {found_type} (another process)"
            ) from None
        found_policy = attrs.get("coorp.policy")
        if found_policy is not None and found_policy != topic.policy.value:
            raise UsageError(
                f"topic {topic.name!r} was declared with policy {found_policy} by another "
                f"process; here it is {topic.policy.value}"
            ) from None
        raise ConfigurationError(
            f"cannot open shared-memory topic {topic.name!r} (its service limits differ "
            f"from another participant's, or iceoryx2 failed): {exc}"
        ) from None

    def cleanup_dead(self) -> None:
        """Reclaim ports and samples of processes that died without closing."""
        # Best effort throughout: another process may be cleaning up at the same time.
        with contextlib.suppress(Exception):
            self.node.try_cleanup_dead_nodes()  # every dead node, in every service
        if self.futex:
            sweep_stale()  # wake files whose processes are all gone
        for services in self._services.values():
            with contextlib.suppress(Exception):
                services.pubsub.try_cleanup_dead_nodes()
                services.event.try_cleanup_dead_nodes()

    def number_of_subscribers(self, topic: Topic) -> int:
        return int(self.services(topic).pubsub.dynamic_config.number_of_subscribers)

    def close(self) -> None:
        for services in self._services.values():
            if services.wake is not None:
                release(services.wake)
        self._services.clear()


def _tid(topic: Topic) -> str:
    return f"{topic.type_id:016x}"


class ShmOutlet:
    """Publisher side on one topic: loans samples and sends them, then notifies."""

    def __init__(self, node: ShmNode, topic: Topic) -> None:
        iox = node.iox
        self._iox = iox
        self._node = node
        self.topic = topic
        services = node.services(topic)
        self._pubsub = services.pubsub
        self._wake = services.wake
        try:
            self._port = (
                services.pubsub.publisher_builder()
                .initial_max_slice_len(min(_INITIAL_SLICE, topic.max_payload))
                .allocation_strategy(iox.AllocationStrategy.PowerOfTwo)
                .max_loaned_samples(2)
                .backpressure_strategy(iox.BackpressureStrategy.DiscardData)
                .create()
            )
            self._notifier = services.event.notifier_builder().create()
        except Exception as exc:
            raise ConfigurationError(
                f"cannot create a publisher on {topic.name!r} "
                f"(max_publishers={topic.max_publishers}?): {exc}"
            ) from exc

    def subscribers(self) -> int:
        return int(self._pubsub.dynamic_config.number_of_subscribers)

    def loan(self, nbytes: int) -> tuple[Any, Any]:
        """Loan an uninitialised sample of ``nbytes``; returns (sample, writable owner)."""
        try:
            sample = self._port.loan_slice_uninit(nbytes)
        except Exception:
            # A crashed subscriber may still hold chunks: reclaim them and try once more.
            self._node.cleanup_dead()
            try:
                sample = self._port.loan_slice_uninit(nbytes)
            except Exception as exc:
                raise ConfigurationError(
                    f"cannot loan {nbytes} bytes of shared memory on {self.topic.name!r}: {exc}"
                ) from exc
        owner = SampleOwner(sample.payload_ptr, nbytes, port=self._port)
        return sample, owner

    def send(self, sample: Any) -> int:
        """Send an initialised sample and wake subscribers; returns how many got it.

        Futex waiters first, all in one system call; then iceoryx2's event, which costs
        one datagram per listener but has none unless some subscriber was made with
        ``Bus(wake="iceoryx2")`` (or the futex word was unavailable to it)."""
        delivered = sample.assume_init().send()
        if self._wake is not None:
            self._wake.wake_all()
        self._notifier.notify()
        return int(delivered)

    def close(self) -> None:
        self._port = None
        self._notifier = None


class ShmInlet:
    """Subscriber side on one topic: receives samples as read-only owners."""

    def __init__(self, node: ShmNode, topic: Topic, depth: int, uid: int = 0) -> None:
        iox = node.iox
        self._iox = iox
        self.topic = topic
        services = node.services(topic)
        #: Where a blocked subscriber sleeps: the topic's futex word, or (``None``)
        #: iceoryx2's event through :attr:`listener`.
        self.waiter: Waiter | None = None
        self.listener: Any = None
        if node.futex_waits and services.wake is not None:
            self.waiter = Waiter(services.wake, uid)
        try:
            self._port = services.pubsub.subscriber_builder().buffer_size(depth).create()
            if self.waiter is None:
                self.listener = services.event.listener_builder().create()
        except Exception as exc:
            raise ConfigurationError(
                f"cannot subscribe to {topic.name!r} (max_subscribers="
                f"{topic.max_subscribers}, max_depth={topic.max_depth}?): {exc}"
            ) from exc

    def receive(self) -> tuple[Any, int, int] | None:
        """Take the next sample: (owner, address, size), or ``None`` if empty. The owner
        is a ctypes byte array over the sample (read-only by contract: take read-only
        views of it); it keeps the sample and this port alive."""
        try:
            sample = self._port.receive()
        except Exception as exc:
            if "Borrow" in str(exc) or "borrow" in str(exc):
                raise BorrowLimitError(
                    f"this subscriber of {self.topic.name!r} already holds "
                    f"{self.topic.max_borrowed} messages whose views are alive; release "
                    f"messages (drop their arrays) or raise Topic(max_borrowed=...)"
                ) from None
            raise ConfigurationError(
                f"iceoryx2 receive failed on {self.topic.name!r}: {exc}"
            ) from exc
        if sample is None:
            return None
        size = int(sample.header.number_of_elements)
        if size == 0:
            raise InvariantError("iceoryx2 delivered an empty sample")
        address = sample.payload_ptr
        return SampleOwner(address, size, sample=sample, port=self._port), address, size

    def drain_events(self) -> None:
        if self.listener is not None:
            self.listener.try_wait()

    def close(self) -> None:
        # Samples still referenced by views keep the port alive through their owner.
        self._port = None
        self.listener = None


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (used for peers on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
