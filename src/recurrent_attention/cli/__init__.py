"""Command lines of ``scripts/``: argument parsing and ``main``, over the package's layers.

Each script is ``sys.exit(main())`` of one module here, and tests call the same ``main``.
"""
