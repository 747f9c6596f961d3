"""The standalone supervisor process (§12): ``hermes-actors run``, ``chat`` and ``send``.

:mod:`.standalone` runs a gateway with the HTTP adapter under gevent; :mod:`.console` runs
an embedded gateway for an interactive ``chat``; :mod:`.client` is the HTTP client behind
``send``; :mod:`.home` finds a command's home; :mod:`.inspect` reads one without a gateway. One
gateway per home is enforced by the gateway itself (``runtime.homelock``). Nothing here is
imported by the library itself, and :mod:`.standalone` expects ``gevent.monkey.patch_all()`` to have run.
"""
