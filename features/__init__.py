"""Feature code: columns derived from candidates (Magpie composition features, image corruptions).

Not connectors: nothing here fetches a source. Like connectors, these modules import only the core
(``dcaudit/``); connectors and pipelines call them.
"""
