"""Several BSSs in one simulation: contention domains, association, hand-overs, motion.

A scenario with ``[fleet]`` declares access points (a station each, a channel, a width);
every other station is a robot associated with one AP. :class:`Cells` builds one
:class:`~coorp.sim.mac.Channel` per contention domain (co-channel APs within
carrier-sense range of each other, ``coorp.scenario.contention_domains``) on the
simulation's one event loop: stations of a domain defer to each other, stations of
different domains never interact. A hand-over takes a robot off its domain (on an idle
medium: nothing of it on the air), flushes what it and its old AP had queued for each
other (as mac80211 does at disassociation), keeps it off the air for the scan and
association gap (or an 802.11r fast transition) and attaches it to its new AP's domain.
:class:`Motion` moves robots along ``[[fleet.routes]]``, updates their links to every AP
each beacon interval and hands a robot over when another AP is stronger than its own by
the hysteresis. What runs on top (a workload re-binding its flows, a policy moving the
robot between permit queues) subscribes to ``Cells.on_leave`` and ``Cells.on_join``.
"""

from coorp.sim.cells._cells import Cells, HandoverRecord
from coorp.sim.cells._motion import Motion

__all__ = ["Cells", "HandoverRecord", "Motion"]
