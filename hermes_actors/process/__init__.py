"""The standalone supervisor process (§12): ``hermes-actors run``, ``chat`` and ``send``.

:mod:`.standalone` runs a gateway with the HTTP adapter under gevent; :mod:`.console` runs
an embedded gateway for an interactive ``chat``; :mod:`.client` is the HTTP client behind
``send``; :mod:`.lock` keeps two processes off one home. Nothing here is imported by the
library itself, and :mod:`.standalone` expects ``gevent.monkey.patch_all()`` to have run.
"""
