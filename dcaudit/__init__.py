"""dcaudit: does benchmark evidence decide the deployment action?

The spine lives here (cli, config, engine, catalog, spec, errors); the connectors, audits,
pipelines and reports are the sibling folders installed as ``dcaudit.connectors`` and so on.
"""

__version__ = "0.1.0"
