"""The real runtime's commands: the daemons and what sends through them
(:mod:`._daemons`: ``leader``, ``agent``, ``keys``, ``send``; the agent's LS generator
and control socket in :mod:`._agent_tools`) and watching a team (:mod:`._watch`:
``top``, ``doctor``). Each module registers its own commands (``coorp.cli._lazy``)."""
