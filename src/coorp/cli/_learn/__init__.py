"""``coorp learn``: the command (:mod:`._command`) and the three places it runs — the
simulated channel (:mod:`._channel`), real sockets or a real team (:mod:`._real`) —
with the reward figure they share (:mod:`._plot`)."""

from coorp.cli._learn._command import register

__all__ = ["register"]
